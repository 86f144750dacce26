"""Range analysis for the checker: a bound on every value of a program, from input ranges.

Static bounds come from each op's transfer function in the registry (``OpDef.ranges``),
run in program order from the caller's input ranges; constants are bounded by their own
values, and an op that declares none is unbounded. Observed ranges (calibration: the
golden model run on sample inputs) replace the static ones where a value was seen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from anekit.errors import UsageError
from anekit.mil.ops.ranges import Interval, const_bound
from anekit.mil.program import Function, Value


@dataclass
class Ranges:
    """Bounds per value name; ``observed`` says they come from running the golden model."""

    by_name: dict[str, Interval | None] = field(default_factory=dict)
    observed: bool = False

    def bound(self, value: Value) -> Interval | None:
        """The value's interval (a constant's own values), or None where unbounded."""
        if value.const is not None:
            return const_bound(value.const)
        return self.by_name.get(value.name)


def checked_interval(name: str, interval: Iterable[float]) -> Interval:
    """``(lo, hi)`` as two finite floats with lo <= hi; UsageError names the input otherwise."""
    lo, hi = (float(v) for v in interval)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise UsageError(f"input range for {name!r}: expected finite lo <= hi, found ({lo}, {hi})")
    return (lo, hi)


def propagate(fn: Function, input_ranges: Mapping[str, Iterable[float]]) -> Ranges:
    """Static bounds of every value of ``fn`` given bounds on (some of) its inputs."""
    names = {v.name for v in fn.inputs}
    unknown = sorted(set(input_ranges) - names)
    if unknown:
        raise UsageError(
            f"input ranges name {unknown}, which are not inputs; the inputs are {sorted(names)}"
        )
    ranges = Ranges({k: checked_interval(k, v) for k, v in input_ranges.items()})
    for op in fn.ops:
        transfer = op.opdef.ranges
        first = op.outputs[0] if op.outputs else None
        if first is None or first.const is not None:
            continue
        ranges.by_name[first.name] = None if transfer is None else transfer(op.args(), ranges.bound)
    return ranges


def observed(samples: Iterable[Iterable[tuple[str, np.ndarray]]]) -> Ranges:
    """Ranges seen over every sample; each sample yields (value name, array) pairs as the golden
    model produces them (``ReferenceKernel.taps``: read each array before taking the next)."""
    ranges = Ranges(observed=True)
    for sample in samples:
        for name, array in sample:
            _widen(ranges.by_name, name, np.asarray(array))
    return ranges


def _widen(seen: dict[str, Interval | None], name: str, value: np.ndarray) -> None:
    if value.dtype.kind != "f" or value.size == 0:
        return
    if not np.all(np.isfinite(value)):  # a non-finite value: beyond any bound
        seen[name] = (-math.inf, math.inf)
        return
    lo, hi = float(value.min()), float(value.max())
    old = seen.get(name)
    seen[name] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
