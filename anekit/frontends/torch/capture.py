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

import inspect
import warnings
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


def as_kwargs(module: torch.nn.Module, kwargs: Any) -> dict[str, Any]:
    """Keyword inputs as a dict in ``forward()``'s parameter order (the program's input order)."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ConversionError(f"kwargs: expected a dict of names, found {type(kwargs).__name__}")
    try:
        order = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):  # a forward without a signature: keep the caller's order
        order = []
    rank = {name: i for i, name in enumerate(order)}
    return dict(sorted(kwargs.items(), key=lambda kv: rank.get(kv[0], len(order))))


def without_cache(module: torch.nn.Module, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The keyword inputs with ``use_cache=False``, for a model whose export failed on a cache
    object in its outputs (``torch.export`` cannot return a ``DynamicCache``); None when the
    caller chose ``use_cache`` or the model takes no such argument."""
    if "use_cache" in kwargs:
        return None
    try:
        accepts = "use_cache" in inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        accepts = False
    if not accepts:
        return None
    warnings.warn(
        f"{type(module).__name__}: converted without its KV cache (use_cache=False): "
        "torch.export cannot return the cache object; pass use_cache explicitly to choose",
        stacklevel=3,
    )
    return {**kwargs, "use_cache": False}


def capture(
    module: torch.nn.Module,
    example_inputs: Any,
    kwargs: dict[str, Any] | None = None,
    *,
    dynamic: Any = None,
) -> torch.export.ExportedProgram:
    """Export ``module`` in eval mode on ``example_inputs`` and decompose it for the lowering table.

    Args:
        module (torch.nn.Module): the model; it is switched to eval mode, as for inference.
        example_inputs (tensor or tuple): the positional arguments of ``forward()``.
        kwargs (dict): its keyword arguments (tensors become named inputs). Default: None.
        dynamic: passed to ``torch.export.export`` as ``dynamic_shapes``. Default: None
            (every dimension static, as the ANE needs).
    """
    return decompose(export(module, as_tuple(example_inputs), as_kwargs(module, kwargs), dynamic))


def export(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic: Any = None
) -> torch.export.ExportedProgram:
    """``torch.export.export`` in eval mode; a ConversionError says why it failed."""
    if not isinstance(module, torch.nn.Module):
        raise ConversionError(f"expected a torch.nn.Module, found {type(module).__name__}")
    try:
        return torch.export.export(
            module.eval(), args, kwargs, dynamic_shapes=dynamic, strict=False
        )
    except Exception as e:  # torch raises many kinds; the user needs to know export failed
        hint = ""
        if "Cache" in str(e):
            hint = " (a cache object in the outputs: pass use_cache=False in kwargs)"
        raise ConversionError(
            f"torch.export.export failed on {type(module).__name__}{hint}: {type(e).__name__}: {e}"
        ) from e


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
