"""Range rules: values that may leave the engine's fp16 envelope, from the range analysis.

They read ``ctx.ranges`` (``anekit.hw.ranges``) and stay silent without one, so the checker
that runs before every compile is unchanged. A static bound is a warning (a bound, not an
observed value); an observed one (calibration) is an error. Sources: docs/numerics.md rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from anekit.fp16 import FP16_MAX, SMALLEST_NORMAL
from anekit.hw.kinds import Severity
from anekit.hw.ranges import Ranges
from anekit.hw.rules.base import Context, Finding
from anekit.mil.ops.ranges import Interval, magnitude
from anekit.mil.ops.registry import received
from anekit.mil.program import Operation

N1 = "docs/numerics.md N1 (matmul output above 32752 becomes inf; conv/einsum assumed)"
N7 = "docs/numerics.md N7 (width-offset slice clamps |x| above 4094 to inf before A16)"
N22 = "docs/numerics.md N22 (fp16 indices are exact only below 2048; ANEForge op-quirks.md)"
EXACT_INDEX_LIMIT = 2048  # fp16 integers are exact through 2048
N12 = "docs/numerics.md N12 (subnormals flushed to zero)"
FP16 = "IEEE 754 binary16: the largest finite value is 65504"


def _says(ranges: Ranges, interval: Interval) -> tuple[str, Severity | None]:
    """How a finding names its bound, and its severity (None: the rule's own, a warning)."""
    lo, hi = interval
    if ranges.observed:
        return f"observed [{lo:.6g}, {hi:.6g}]", Severity.ERROR
    return f"bound [{lo:.6g}, {hi:.6g}], not observed", None


def _output_bounds(ctx: Context) -> Iterator[tuple[Operation, Interval]]:
    """Every runtime op whose first output has a bound."""
    if ctx.ranges is None:
        return
    for op in ctx.runtime_ops():
        if op.outputs and op.outputs[0].type.dtype.is_float:
            interval = ctx.ranges.bound(op.outputs[0])
            if interval is not None:
                yield op, interval


def fp16_saturation(ctx: Context) -> Iterator[Finding]:
    for op, interval in _output_bounds(ctx):
        kind = op.opdef.numerics.saturates if op.opdef.numerics else None
        limit = ctx.numerics.saturation(kind) if kind in ("matmul", "conv") else None
        if limit is None or magnitude(interval) <= limit:
            continue
        said, severity = _says(ctx.ranges, interval)
        assumed = (
            " (assumed for this op: only matmul/linear were observed)" if kind == "conv" else ""
        )
        yield Finding(
            f"{op.op_type} output {op.name!r} may exceed the {ctx.numerics.family} saturation "
            f"{limit:g}{assumed}: {said}; values above it become inf",
            op,
            severity=severity,
        )


def fp16_overflow(ctx: Context) -> Iterator[Finding]:
    for op, interval in _output_bounds(ctx):
        if magnitude(interval) > FP16_MAX:
            said, severity = _says(ctx.ranges, interval)
            yield Finding(
                f"{op.op_type} output {op.name!r} may exceed fp16's {FP16_MAX:g}: {said}",
                op,
                severity=severity,
            )


def slice_clamp(ctx: Context) -> Iterator[Finding]:
    clamp = ctx.numerics.slice_clamp
    for op, interval in _output_bounds(ctx):
        numerics = op.opdef.numerics
        if clamp is None or numerics is None or numerics.reads != "slice_clamp":
            continue
        if magnitude(interval) <= clamp or not _clamps(ctx, op, magnitude(interval)):
            continue
        said, severity = _says(ctx.ranges, interval)
        yield Finding(
            f"{op.op_type} {op.name!r} starts past 0 on the width axis and its values may exceed "
            f"the {ctx.numerics.family} clamp {clamp:g}: {said}; values above it become inf",
            op,
            severity=severity,
        )


def _clamps(ctx: Context, op: Operation, worst: float) -> bool:
    """Whether the op's own N7 hook clamps a value of ``worst`` for these arguments."""
    args = {}
    for name, value in op.arguments():
        if isinstance(value, tuple):
            continue
        if value.const is not None:
            args[name] = received(value.const)
        elif value.type.is_static:
            args[name] = np.broadcast_to(np.float32(0), value.type.shape)  # shape only, no memory
    _, clamped = op.opdef.numerics.hook(ctx.numerics, args, np.full(1, worst, np.float32))
    return clamped > 0


def index_precision(ctx: Context) -> Iterator[Finding]:
    """Needs no ranges: an index over an axis longer than 2048 is not exact in fp16."""
    for op in ctx.runtime_ops():
        length = op.opdef.index_range(op.args())
        if length is not None and length > EXACT_INDEX_LIMIT:
            yield Finding(
                f"{op.op_type} {op.name!r} gives indices along an axis of {length} elements; the "
                f"engine holds them in fp16, exact only through {EXACT_INDEX_LIMIT}",
                op,
            )


def subnormal_flush(ctx: Context) -> Iterator[Finding]:
    if ctx.ranges is None or not ctx.numerics.flush_subnormals:
        return
    for op in ctx.runtime_ops():
        for operand in sorted(op.opdef.flush_sensitive):
            value = getattr(op.args(), operand)
            interval = None if value is None else ctx.ranges.bound(value)
            if interval is None or _smallest_magnitude(interval) >= SMALLEST_NORMAL:
                continue
            said, _ = _says(ctx.ranges, interval)
            yield Finding(
                f"{op.op_type} {op.name!r}: its {operand} may fall below 2^-14 and be flushed to 0 "
                f"before it is divided by, logged or rsqrt'ed ({said}); a norm's epsilon under "
                f"2^-14 (1e-5, 1e-6) is flushed too",
                op,
            )


def _smallest_magnitude(interval: Interval) -> float:
    lo, hi = interval
    return 0.0 if lo <= 0.0 <= hi else min(abs(lo), abs(hi))
