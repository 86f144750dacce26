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
from anekit.mil import Program


def torch_outputs(module: torch.nn.Module, example_inputs: Any) -> list[np.ndarray]:
    """The module's outputs on the inputs, flattened as ``torch.export`` flattens them."""
    try:
        module.eval()
    except NotImplementedError:  # the module of an ExportedProgram is fixed in its mode
        pass
    with torch.no_grad():
        result = module(*as_tuple(example_inputs))
    flat = torch.utils._pytree.tree_leaves(result)
    return [t.detach().cpu().to(torch.float32).numpy() for t in flat if isinstance(t, torch.Tensor)]


def program_inputs(program: Program, example_inputs: Any) -> dict[str, np.ndarray]:
    """The example tensors as the program's inputs, in order (int64 ids to int32)."""
    tensors = [t for t in torch.utils._pytree.tree_leaves(as_tuple(example_inputs))]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    inputs = program.main.inputs
    if len(tensors) != len(inputs):
        raise ConversionError(
            f"the program has {len(inputs)} inputs ({', '.join(v.name for v in inputs)}), "
            f"the example has {len(tensors)} tensors"
        )
    result = {}
    for v, t in zip(inputs, tensors):
        arr = t.detach().cpu()
        arr = arr.to(torch.int64) if not arr.dtype.is_floating_point else arr.to(torch.float32)
        result[v.name] = arr.numpy().astype(v.dtype.numpy)
    return result


def compare(
    module: torch.nn.Module,
    example_inputs: Any,
    program: Program,
    *,
    backend: str = "reference",
) -> Fidelity:
    """Run ``module`` (PyTorch, fp32) and ``program`` on ``example_inputs``; report per output."""
    want = torch_outputs(module, example_inputs)
    return compare_arrays(program, program_inputs(program, example_inputs), want, backend)
