"""Capture a PyTorch module as an ATen graph: ``torch.export`` plus a decomposition table.

The table is PyTorch's default one minus every op the lowering table handles
directly (``linear``, ``layer_norm``, ``softmax``, ``gelu``, ``silu``,
``scaled_dot_product_attention``, batch norm, ...), so those composites reach the
converter whole instead of as dozens of primitive ops. When the exported graph already
has a lowering for every node that depends on an input, and mutates nothing, the
decomposition would change nothing the converter sees, and is skipped: it is the
slowest step of a conversion (about 1.6 s of 2.5 s for BERT-base).
"""

from __future__ import annotations

from typing import Any

import torch

from anekit.errors import ConversionError
from anekit.frontends.torch.lower import unsupported_nodes
from anekit.frontends.torch.lowerings import LOWERINGS


def as_tuple(example_inputs: Any) -> tuple[Any, ...]:
    """The example inputs as the tuple ``torch.export`` takes (one tensor is wrapped)."""
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    raise ConversionError(
        "example_inputs: expected a tensor or a tuple of tensors, "
        f"found {type(example_inputs).__name__}"
    )


def capture(
    module: torch.nn.Module, example_inputs: Any, *, dynamic: Any = None
) -> torch.export.ExportedProgram:
    """Export ``module`` in eval mode on ``example_inputs`` and decompose it for the lowering table.

    Args:
        module (torch.nn.Module): the model; it is switched to eval mode, as for inference.
        example_inputs (tensor or tuple): the positional arguments of ``forward()``.
        dynamic: passed to ``torch.export.export`` as ``dynamic_shapes``. Default: None
            (every dimension static, as the ANE needs).
    """
    if not isinstance(module, torch.nn.Module):
        raise ConversionError(f"expected a torch.nn.Module, found {type(module).__name__}")
    args = as_tuple(example_inputs)
    try:
        exported = torch.export.export(module.eval(), args, dynamic_shapes=dynamic, strict=False)
    except Exception as e:  # torch raises many kinds; the user needs to know export failed
        raise ConversionError(
            f"torch.export.export failed on {type(module).__name__}: {type(e).__name__}: {e}"
        ) from e
    return decompose(exported)


def decompose(exported: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Run PyTorch's default decompositions, keeping the composite ops that have a lowering."""
    if not _mutates(exported) and not unsupported_nodes(exported):
        return exported
    table = torch.export.default_decompositions()
    for op in LOWERINGS:
        if op in table:
            del table[op]
    return exported.run_decompositions(table)


def _mutates(exported: torch.export.ExportedProgram) -> bool:
    """Whether any node calls an op that writes into one of its arguments."""
    for node in exported.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and schema.is_mutable:
            return True
    return False
