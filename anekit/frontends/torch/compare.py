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
from anekit.frontends.torch.pytree import named_tensors
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
) -> Fidelity:
    """Run ``module`` (PyTorch, fp32) and ``program`` on the same inputs; report per output."""
    want = torch_outputs(module, example_inputs, kwargs)
    inputs = program_inputs(program, example_inputs, kwargs)
    return compare_arrays(program, inputs, want, backend)


def compare_arrays(
    program: Program, inputs: dict[str, np.ndarray], want: dict[str, np.ndarray], backend: str
) -> Fidelity:
    """The report for known PyTorch outputs ``want`` (by output name)."""
    outputs = program.main.outputs
    missing = [v.name for v in outputs if v.name not in want]
    if missing:
        raise ConversionError(
            f"the program's output {missing[0]!r} is not among PyTorch's outputs "
            f"({', '.join(want)})",
            output=missing[0],
        )
    with backends.compile(program, backend=backend) as kernel:
        got = kernel(**inputs)
        used = kernel.backend
    rows = tuple(_metrics(v.name, np.asarray(got[v.name]), want[v.name]) for v in outputs)
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
