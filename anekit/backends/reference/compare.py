"""``anekit.diff``: where two numerics profiles first disagree, op by op.

Both kernels run in lockstep, one op at a time (:meth:`ReferenceKernel.taps`), so only
the two evaluations' own buffers are held, whatever the program's size. Each op's
outputs are compared as they are produced; the report lists, in program order, every op
whose outputs differ beyond the tolerance, and ``.first`` is the one to look at: the
debug method peers use by hand on the engine (tap each stage, compare against the same
program on the CPU; ANE_NUMERICS.md 1b).

``b="ane"`` compares the engine itself with the golden model: the engine cannot be tapped
while it runs, so the program is compiled again with groups of its intermediate values as
outputs (:mod:`anekit.backends.ane.tapped`) and each value is compared, in program order,
with the golden model's under the device chip's profile. It needs a Mac with the ANE
backend; elsewhere it raises :class:`~anekit.errors.BackendUnavailable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.backends.reference.kernel import ReferenceKernel
from anekit.errors import BackendUnavailable, UsageError
from anekit.mil.program import Program

TOLERANCE = 1e-2  # of the output's largest finite magnitude (a few fp16 steps of it)
ENGINE = "ane"  # b="ane": the Neural Engine itself, tapped by recompiling


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
    compiles: int = 0  # engine programs compiled to tap the engine (b="ane"), else 0

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
            "compiles": self.compiles,
            "first": None if self.first is None else self.first.__dict__,
            "rows": [r.__dict__ for r in self.rows],
        }


def diff(
    program: Program,
    inputs: dict[str, Any],
    a: str | None = None,
    b: str | None = None,
    *,
    tolerance: float = TOLERANCE,
    chip: Any = None,
    per_program: int | None = None,
    framework: Any = None,
) -> DiffReport:
    """Run ``program`` on two sides and compare every op's outputs, in program order.

    Args:
        program: a verified program with its weights.
        inputs: input name -> array.
        a: the golden model's numerics profile (``"ideal"``, a chip, a family, a profile
            file, ``"m4:precise"``). Default: "ideal", or the device chip's profile when
            ``b`` is "ane".
        b: a second profile (default: the default chip's), both run on the reference
            backend with every op tapped; or ``"ane"``: the Neural Engine itself, each value
            tapped by compiling the program with it as an output (a Mac only).
        tolerance: the relative error (of each output's largest finite magnitude on side
            ``a``) above which an op differs.
        chip: with ``b="ane"``: the device's chip (default: the host's).
        per_program: with ``b="ane"``: values tapped per compiled program (default 16).
        framework: with ``b="ane"``: the Objective-C seam (tests pass a stand-in).
    """
    from anekit.backends.reference import compile as reference_compile

    if not 0 <= tolerance:
        raise UsageError(f"diff: tolerance must be >= 0, found {tolerance}")
    if b is not None and str(b).strip().lower() == ENGINE:
        return _diff_engine(program, inputs, a, tolerance, chip, per_program, framework)
    if chip is not None or per_program is not None or framework is not None:
        raise UsageError("diff: chip=, per_program= and framework= go with b='ane' only")
    a = "ideal" if a is None else a
    with reference_compile(program, numerics=a) as ka, reference_compile(program, numerics=b) as kb:
        rows, ops = _compare(ka, kb, inputs, tolerance)
        return DiffReport(ka.numerics, kb.numerics, tolerance, ops, tuple(rows))


def _diff_engine(
    program: Program,
    inputs: dict[str, Any],
    a: str | None,
    tolerance: float,
    chip: Any,
    per_program: int | None,
    framework: Any,
) -> DiffReport:
    """The golden model (profile ``a``) against the engine, value by value in program order."""
    from anekit.backends import ane
    from anekit.backends.ane import tapped
    from anekit.backends.ane.dialect import resolve_chip
    from anekit.backends.reference import compile as reference_compile

    per_program = tapped.PER_PROGRAM if per_program is None else per_program
    if per_program < 1:
        raise UsageError(f"diff: per_program must be >= 1, found {per_program}")
    if framework is None:
        ok, reason = ane.available()
        if not ok:
            raise BackendUnavailable(
                f"diff --b ane compares the Neural Engine with the golden model, but the ANE "
                f"backend is unavailable here: {reason}; compare numerics profiles instead "
                "(b='m4', b='m4:precise')",
                backend=ENGINE,
            )
    device = resolve_chip(chip)
    golden = device.name if a is None else a
    engine = tapped.engine_groups(
        program, inputs, per_program=per_program, framework=framework, chip=device
    )
    tapped_names = {v.name for v in tapped.tapped_values(program)}
    rows, ops, compiles, group = [], 0, 0, {}
    with reference_compile(program, numerics=golden) as ka:
        for op, values_a in ka.taps(inputs):
            ops += 1
            for name, va in values_a.items():
                if name not in tapped_names:
                    continue
                while name not in group:  # the groups come in program order, as the taps
                    group = next(engine)
                    compiles += 1
                vb = np.asarray(group.pop(name), np.float32)
                row = _differs(np.asarray(va), vb, tolerance)
                if row is not None:
                    rows.append(DiffRow(name, op.op_type, op.line, *row))
        which = f"{ENGINE} ({device.name})"
        return DiffReport(ka.numerics, which, tolerance, ops, tuple(rows), compiles)


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
