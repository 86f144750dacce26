"""The fidelity report: a converted program's outputs against the source framework's.

For each output: relative error ``||mil - ref|| / ||ref||`` (L2 over the whole tensor),
the largest absolute difference and the cosine similarity. The reference runs in fp32
(PyTorch for ``from_torch``, onnxruntime for ``from_onnx``); the program runs on a
backend (the reference backend by default, which models the ANE's fp16 storage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit import backends
from anekit.errors import ConversionError
from anekit.mil import Program

# from_torch(verify=True) fails above this relative error (fp16 storage keeps ~1e-3)
TOLERANCE = 2e-2


@dataclass(frozen=True)
class OutputFidelity:
    """How closely one program output matches the reference framework's."""

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
    reference: str = "PyTorch fp32"  # what the program was compared with
    events: Any = None  # the golden model's cliff events of the run (``Kernel.events``)

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
        return "\n".join([f"fidelity vs {self.reference} ({self.backend} backend)", head] + [
            o.row() for o in self.outputs
        ])  # fmt: skip


def _metrics(name: str, got: np.ndarray, want: np.ndarray) -> OutputFidelity:
    if got.shape != want.shape:
        raise ConversionError(
            f"output {name!r}: the program gives shape {list(got.shape)}, the reference "
            f"{list(want.shape)}",
            output=name,
        )
    a, b = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
    diff = a - b
    ref = float(np.linalg.norm(b))
    err = float(np.linalg.norm(diff))
    rel = err / ref if ref > 0 else (0.0 if err == 0 else float("inf"))
    if not np.isfinite(a).all() and np.isfinite(b).all():
        rel = float("inf")  # inf or NaN where the reference has numbers: never within tolerance
    norms = float(np.linalg.norm(a)) * ref
    cosine = float(a @ b / norms) if norms > 0 else float(np.array_equal(a, b))
    max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    return OutputFidelity(name, tuple(want.shape), rel, max_abs, cosine)


def compare_arrays(
    program: Program,
    inputs: dict[str, np.ndarray],
    want: list[np.ndarray],
    backend: str,
    reference: str = "PyTorch fp32",
    numerics: Any = None,
) -> Fidelity:
    """The report for known reference outputs ``want`` (in the program's output order).

    ``numerics``: the reference backend's profile (the chip converted for; default: its own).
    """
    outputs = program.main.outputs
    if len(want) != len(outputs):
        raise ConversionError(
            f"the program has {len(outputs)} outputs, {reference} gives {len(want)} tensors"
        )
    options = {} if numerics is None else {"numerics": numerics}
    with backends.compile(program, backend=backend, **options) as kernel:
        got = kernel(**inputs)
        used, events = kernel.backend, kernel.events
    rows = tuple(_metrics(v.name, np.asarray(got[v.name]), w) for v, w in zip(outputs, want))
    return Fidelity(rows, used, reference, events)


def verify(fidelity: Fidelity, tolerance: float = TOLERANCE) -> None:
    """Raise ConversionError naming the first output whose relative error exceeds tolerance."""
    for o in fidelity.outputs:
        if not o.rel_error <= tolerance:
            raise ConversionError(
                f"output {o.name!r} differs from {fidelity.reference}: relative error {o.rel_error:.3g} > "
                f"{tolerance:g} (max abs error {o.max_abs_error:.3g}, cosine {o.cosine:.6f}) "
                f"on the {fidelity.backend} backend\n{fidelity}",
                output=o.name,
            )
