"""``anekit.diff``: where two numerics profiles first disagree, op by op.

Both kernels run in lockstep, one op at a time (:meth:`ReferenceKernel.taps`), so only
the two evaluations' own buffers are held, whatever the program's size. Each op's
outputs are compared as they are produced; the report lists, in program order, every op
whose outputs differ beyond the tolerance, and ``.first`` is the one to look at: the
debug method peers use by hand on the engine (tap each stage, compare against the same
program on the CPU; ANE_NUMERICS.md 1b).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.backends.reference.kernel import ReferenceKernel
from anekit.errors import UsageError
from anekit.mil.program import Program

TOLERANCE = 1e-2  # of the output's largest finite magnitude (a few fp16 steps of it)


@dataclass(frozen=True)
class DiffRow:
    """One op whose outputs differ between the two sides beyond the tolerance."""

    name: str  # the output's value name
    op_type: str
    line: int | None  # MIL source line
    max_error: float  # largest |a - b| over finite pairs, relative to max |a| (finite)
    nonfinite: bool  # a non-finite value on one side where the other has another value

    def describe(self) -> str:
        where = f" (MIL line {self.line})" if self.line else ""
        extra = ", non-finite values differ" if self.nonfinite else ""
        return f"op {self.op_type!r} {self.name!r}{where}: max error {self.max_error:.3g}{extra}"


@dataclass(frozen=True)
class DiffReport:
    """Every output that differs beyond ``tolerance``, in program order."""

    a: str
    b: str
    tolerance: float
    ops: int  # ops compared
    rows: tuple[DiffRow, ...]

    @property
    def first(self) -> DiffRow | None:
        """The first op (program order) whose outputs differ, or None."""
        return self.rows[0] if self.rows else None

    def summary(self) -> str:
        if not self.rows:
            return f"{self.a} and {self.b} agree within {self.tolerance:g} on all {self.ops} ops"
        return (
            f"{len(self.rows)} of {self.ops} ops differ beyond {self.tolerance:g} between "
            f"{self.a} and {self.b}; first: {self.first.describe()}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "tolerance": self.tolerance,
            "ops": self.ops,
            "first": None if self.first is None else self.first.__dict__,
            "rows": [r.__dict__ for r in self.rows],
        }


def diff(
    program: Program,
    inputs: dict[str, Any],
    a: str = "ideal",
    b: str | None = None,
    *,
    tolerance: float = TOLERANCE,
) -> DiffReport:
    """Run ``program`` under numerics profiles ``a`` and ``b`` and compare every op's outputs.

    Args:
        program: a verified program with its weights.
        inputs: input name -> array.
        a, b: numerics profiles (``"ideal"``, a chip, a family, a profile file); ``b``
            defaults to the default chip's. Both run on the reference backend: the engine
            itself cannot be tapped op by op.
        tolerance: the relative error (of each output's largest finite magnitude on side
            ``a``) above which an op differs.
    """
    from anekit.backends.reference import compile as reference_compile

    if not 0 <= tolerance:
        raise UsageError(f"diff: tolerance must be >= 0, found {tolerance}")
    with reference_compile(program, numerics=a) as ka, reference_compile(program, numerics=b) as kb:
        rows, ops = _compare(ka, kb, inputs, tolerance)
        return DiffReport(ka.numerics, kb.numerics, tolerance, ops, tuple(rows))


def _compare(
    ka: ReferenceKernel, kb: ReferenceKernel, inputs: dict[str, Any], tolerance: float
) -> tuple[list[DiffRow], int]:
    rows, ops = [], 0
    for (op, values_a), (_, values_b) in zip(ka.taps(inputs), kb.taps(inputs), strict=True):
        ops += 1
        for name, va in values_a.items():
            row = _differs(np.asarray(va), np.asarray(values_b[name]), tolerance)
            if row is not None:
                error, nonfinite = row
                rows.append(DiffRow(name, op.op_type, op.line, error, nonfinite))
    return rows, ops


def _differs(a: np.ndarray, b: np.ndarray, tolerance: float) -> tuple[float, bool] | None:
    """(relative error, non-finite mismatch) if ``a`` and ``b`` differ beyond ``tolerance``."""
    if a.dtype.kind not in "fc":
        return None if np.array_equal(a, b) else (float("inf"), False)
    fa, fb = np.isfinite(a), np.isfinite(b)
    same_special = (a == b) | (np.isnan(a) & np.isnan(b))
    nonfinite = bool(np.any((~fa | ~fb) & ~same_special))
    both = fa & fb
    scale = float(np.max(np.abs(a[fa]), initial=0.0)) or 1.0
    error = float(np.max(np.abs(a[both] - b[both]), initial=0.0)) / scale
    return (error, nonfinite) if nonfinite or error > tolerance else None
