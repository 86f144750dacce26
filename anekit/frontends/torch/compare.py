"""The fidelity report: run the PyTorch module and the MIL program on the same inputs, compare.

For each output: relative error ``||mil - torch|| / ||torch||`` (L2 over the whole
tensor), the largest absolute difference and the cosine similarity. PyTorch runs in
fp32 (the reference); the program runs on a backend (the reference backend by default,
which models the ANE's fp16 storage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from anekit import backends
from anekit.errors import ConversionError
from anekit.frontends.torch.capture import as_tuple
from anekit.mil import Program

# from_torch(verify=True) fails above this relative error (fp16 storage keeps ~1e-3)
TOLERANCE = 2e-2


@dataclass(frozen=True)
class OutputFidelity:
    """How closely one program output matches PyTorch's."""

    name: str
    shape: tuple[int, ...]
    rel_error: float
    max_abs_error: float
    cosine: float

    def row(self) -> str:
        return (
            f"{self.name:<24} {str(list(self.shape)):<20} {self.rel_error:>10.2e} "
            f"{self.max_abs_error:>12.3e} {self.cosine:>9.6f}"
        )


@dataclass(frozen=True)
class Fidelity:
    """The fidelity report of every output (``str()`` prints it as a table)."""

    outputs: tuple[OutputFidelity, ...]
    backend: str

    @property
    def worst(self) -> OutputFidelity:
        return max(self.outputs, key=lambda o: o.rel_error)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "outputs": [
                {
                    "name": o.name,
                    "shape": list(o.shape),
                    "rel_error": o.rel_error,
                    "max_abs_error": o.max_abs_error,
                    "cosine": o.cosine,
                }
                for o in self.outputs
            ],
        }

    def __str__(self) -> str:
        head = f"{'output':<24} {'shape':<20} {'rel error':>10} {'max abs err':>12} {'cosine':>9}"
        return "\n".join([f"fidelity vs PyTorch fp32 ({self.backend} backend)", head] + [
            o.row() for o in self.outputs
        ])  # fmt: skip


def _metrics(name: str, got: np.ndarray, want: np.ndarray) -> OutputFidelity:
    if got.shape != want.shape:
        raise ConversionError(
            f"output {name!r}: the program gives shape {list(got.shape)}, PyTorch "
            f"{list(want.shape)}",
            output=name,
        )
    a, b = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    diff = a - b
    ref = float(np.linalg.norm(b))
    err = float(np.linalg.norm(diff))
    rel = err / ref if ref > 0 else (0.0 if err == 0 else float("inf"))
    if not np.isfinite(a).all() and np.isfinite(b).all():
        rel = float("inf")  # inf or NaN where PyTorch has numbers: never within tolerance
    norms = float(np.linalg.norm(a)) * ref
    cosine = float(a @ b / norms) if norms > 0 else float(np.array_equal(a, b))
    max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    return OutputFidelity(name, tuple(want.shape), rel, max_abs, cosine)


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


def compare_arrays(
    program: Program, inputs: dict[str, np.ndarray], want: list[np.ndarray], backend: str
) -> Fidelity:
    """The report for known PyTorch outputs ``want`` (in the program's output order)."""
    outputs = program.main.outputs
    if len(want) != len(outputs):
        raise ConversionError(
            f"the program has {len(outputs)} outputs, PyTorch gives {len(want)} tensors"
        )
    with backends.compile(program, backend=backend) as kernel:
        got = kernel(**inputs)
        used = kernel.backend
    rows = tuple(_metrics(v.name, np.asarray(got[v.name]), w) for v, w in zip(outputs, want))
    return Fidelity(rows, used)


def verify(fidelity: Fidelity, tolerance: float = TOLERANCE) -> None:
    """Raise ConversionError naming the first output whose relative error exceeds tolerance."""
    for o in fidelity.outputs:
        if not o.rel_error <= tolerance:
            raise ConversionError(
                f"output {o.name!r} differs from PyTorch: relative error {o.rel_error:.3g} > "
                f"{tolerance:g} (max abs error {o.max_abs_error:.3g}, cosine {o.cosine:.6f}) "
                f"on the {fidelity.backend} backend\n{fidelity}",
                output=o.name,
            )
