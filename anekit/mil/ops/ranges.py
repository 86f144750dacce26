"""Range transfer functions: how an op maps bounds on its inputs to a bound on its output.

An op declares one in the registry (``OpDef.ranges``); the checker's range analysis
(``anekit.hw.ranges``) runs them in program order. A transfer function receives the op's
:class:`~anekit.mil.ops.registry.Args` and ``bound(value) -> Interval | None`` (constants
are bounded by their own values) and returns the first output's interval, or None where
nothing is known (unbounded). Intervals are closed, ``(lo, hi)`` with ``lo <= hi``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

Interval = tuple[float, float]
Bound = Callable[[Any], "Interval | None"]
RangeFn = Callable[[Any, Bound], "Interval | None"]


def magnitude(interval: Interval) -> float:
    """The largest |v| the interval holds."""
    return max(abs(interval[0]), abs(interval[1]))


def _finite(lo: float, hi: float) -> Interval | None:
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def monotone(fn: Callable[[float], float], *, increasing: bool = True) -> RangeFn:
    """A monotone elementwise function of ``x``: the bound maps through its end points."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        x = bound(a.x)
        if x is None:
            return None
        with np.errstate(all="ignore"):
            lo, hi = (float(fn(x[0])), float(fn(x[1])))
        return _finite(*((lo, hi) if increasing else (hi, lo)))

    return transfer


def bounded(lo: float, hi: float) -> RangeFn:
    """An output inside fixed bounds whatever the input (sigmoid, tanh, softmax)."""
    return lambda a, bound: (lo, hi)


def passes(name: str = "x") -> RangeFn:
    """An op whose output elements are elements of input ``name`` (movement, max/min reductions)."""
    return lambda a, bound: bound(getattr(a, name))


def scaled_by_count(a: Any, bound: Bound) -> Interval | None:
    """A sum over ``axes``: the input bound times the number of summed elements."""
    x = bound(a.x)
    shape = a.x.type.shape
    axes = a.const("axes")
    if x is None or not all(isinstance(d, int) for d in shape):
        return None
    picked = range(len(shape)) if axes is None else (int(v) for v in np.ravel(axes))
    count = math.prod(shape[i] for i in picked)
    return (min(x[0] * count, 0.0), max(x[1] * count, 0.0))


def _corners(x: Interval, y: Interval, fn: Callable[[float, float], float]) -> Interval | None:
    values = [fn(p, q) for p in x for q in y]
    return _finite(min(values), max(values))


def _divide(x: Interval, y: Interval) -> Interval | None:
    if y[0] <= 0.0 <= y[1]:
        return None  # a divisor that may be 0: unbounded
    return _corners(x, y, lambda p, q: p / q)


BINARY: dict[str, Callable[[Interval, Interval], Interval | None]] = {
    "add": lambda x, y: _finite(x[0] + y[0], x[1] + y[1]),
    "sub": lambda x, y: _finite(x[0] - y[1], x[1] - y[0]),
    "mul": lambda x, y: _corners(x, y, lambda p, q: p * q),
    "div": _divide,
    "max": lambda x, y: (max(x[0], y[0]), max(x[1], y[1])),
    "min": lambda x, y: (min(x[0], y[0]), min(x[1], y[1])),
}


def _square(x: Interval) -> Interval | None:
    low = 0.0 if x[0] <= 0.0 <= x[1] else min(x[0] ** 2, x[1] ** 2)
    return _finite(low, max(x[0] ** 2, x[1] ** 2))


# one operand given twice: x * x is a square (never negative), x - x is 0
SELF: dict[str, Callable[[Interval], Interval | None]] = {
    "mul": _square,
    "sub": lambda x: (0.0, 0.0),
}


def interval_binary(kind: str) -> RangeFn:
    """Interval arithmetic on ``x`` and ``y`` (``kind`` a key of :data:`BINARY`)."""
    combine = BINARY[kind]

    def transfer(a: Any, bound: Bound) -> Interval | None:
        x, y = bound(a.x), bound(a.y)
        if x is None or y is None:
            return None
        return SELF[kind](x) if a.x is a.y and kind in SELF else combine(x, y)

    return transfer


def contraction(
    activation: str,
    weight: str,
    summed_axes: Callable[[Any], int | tuple[int, ...]],
    bias: str | None = None,
) -> RangeFn:
    """A multiply-accumulate: |out| <= max|x| * max over outputs of sum |w| along the summed
    axes (+ max |bias|). A weight that is not a constant counts as K * max|w|."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        x, w = bound(getattr(a, activation)), bound(getattr(a, weight))
        if x is None or w is None:
            return None
        w_value = getattr(a, weight)
        axes = summed_axes(a)
        if w_value.const is not None:
            sums = np.sum(np.abs(np.asarray(w_value.const, np.float64)), axis=axes)
            gain = float(np.max(sums)) if sums.size else 0.0
        else:
            shape = w_value.type.shape
            count = math.prod(shape[i] for i in np.atleast_1d(axes))
            gain = magnitude(w) * count if isinstance(count, int) else math.inf
        total = magnitude(x) * gain
        b = None if bias is None else getattr(a, bias)
        if b is not None:
            b_bound = bound(b)
            if b_bound is None:
                return None
            total += magnitude(b_bound)
        return _finite(-total, total)

    return transfer


def standardized(count: Callable[[Any], Any]) -> RangeFn:
    """A normalisation over ``count(args)`` elements, then gamma and beta: a standardized value
    is at most sqrt(N - 1) in magnitude (population variance), whatever the input."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        n = count(a)
        if not isinstance(n, int):
            return None
        scale, shift = 1.0, 0.0
        for name, default in (("gamma", 1.0), ("beta", 0.0)):
            value = getattr(a, name)
            interval = (default, default) if value is None else bound(value)
            if interval is None:
                return None
            if name == "gamma":
                scale = magnitude(interval)
            else:
                shift = magnitude(interval)
        total = math.sqrt(max(n - 1, 0)) * scale + shift
        return (-total, total)

    return transfer


def const_bound(value: Any) -> Interval | None:
    """The interval of a constant's own values; None for non-numeric or empty constants."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiub" or array.size == 0:
        return None
    return _finite(float(np.min(array)), float(np.max(array)))
