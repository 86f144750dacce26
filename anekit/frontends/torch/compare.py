"""The fidelity report: run the PyTorch module and the MIL program on the same inputs, compare.

For each output: relative error ``||mil - torch|| / ||torch||`` (L2 over the whole
tensor), the largest absolute difference and the cosine similarity. PyTorch runs in
fp32 (the reference); the program runs on a backend (the reference backend by default,
which models the ANE's fp16 storage).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from anekit.errors import ConversionError
from anekit.frontends.fidelity import Fidelity, compare_arrays
from anekit.frontends.torch.capture import as_tuple
from anekit.frontends.torch.pytree import named_tensors
from anekit.mil import Program


def torch_outputs(
    module: Any, example_inputs: Any, kwargs: dict[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """The module's output tensors (fp32) by their names in the converted program."""
    try:
        module.eval()
    except NotImplementedError:  # the module of an ExportedProgram is fixed in its mode
        pass
    with torch.no_grad():
        result = module(*as_tuple(example_inputs), **(kwargs or {}))
    return {
        name: t.detach().cpu().to(torch.float32).numpy()
        for name, t in named_tensors(result).items()
    }


def program_inputs(
    program: Program, example_inputs: Any, kwargs: dict[str, Any] | None = None
) -> dict[str, np.ndarray]:
    """The example tensors as the program's inputs (int64 ids to int32): keyword tensors by
    name, positional ones in order for the inputs left."""
    named = {k: t for k, t in (kwargs or {}).items() if isinstance(t, torch.Tensor)}
    leaves = torch.utils._pytree.tree_leaves(as_tuple(example_inputs))
    positional = iter([t for t in leaves if isinstance(t, torch.Tensor)])
    inputs = program.main.inputs
    given = len(named) + len([t for t in leaves if isinstance(t, torch.Tensor)])
    if given != len(inputs):
        raise ConversionError(
            f"the program has {len(inputs)} inputs ({', '.join(v.name for v in inputs)}), "
            f"the example has {given} tensors"
        )
    result = {}
    for v in inputs:
        t = named.get(v.name)
        if t is None:
            t = next(positional, None)
        if t is None:
            raise ConversionError(f"input {v.name!r}: no example tensor for it")
        arr = t.detach().cpu()
        arr = arr.to(torch.int64) if not arr.dtype.is_floating_point else arr.to(torch.float32)
        result[v.name] = arr.numpy().astype(v.dtype.numpy)
    return result


def compare(
    module: torch.nn.Module,
    example_inputs: Any,
    program: Program,
    *,
    kwargs: dict[str, Any] | None = None,
    backend: str = "reference",
    numerics: Any = None,
) -> Fidelity:
    """Run ``module`` (PyTorch, fp32) and ``program`` on the same inputs; report per output
    (``numerics``: the reference backend's profile; default: its own)."""
    want = in_program_order(program, torch_outputs(module, example_inputs, kwargs))
    inputs = program_inputs(program, example_inputs, kwargs)
    return compare_arrays(program, inputs, want, backend, numerics=numerics)


def in_program_order(program: Program, want: dict[str, np.ndarray]) -> list[np.ndarray]:
    """PyTorch's outputs by name, in the order of the program's outputs (which may keep some)."""
    missing = [v.name for v in program.main.outputs if v.name not in want]
    if missing:
        raise ConversionError(
            f"the program's output {missing[0]!r} is not among PyTorch's outputs "
            f"({', '.join(want)})",
            output=missing[0],
        )
    return [want[v.name] for v in program.main.outputs]
