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


def finite(lo: float, hi: float) -> Interval | None:
    """``(lo, hi)``, or None (unbounded) where an end is not finite."""
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else None


def monotone(fn: Callable[[float], float], *, increasing: bool = True) -> RangeFn:
    """A monotone elementwise function of ``x``: the bound maps through its end points."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        x = bound(a.x)
        if x is None:
            return None
        with np.errstate(all="ignore"):
            lo, hi = (float(fn(x[0])), float(fn(x[1])))
        return finite(*((lo, hi) if increasing else (hi, lo)))

    return transfer


def bounded(lo: float, hi: float) -> RangeFn:
    """An output inside fixed bounds whatever the input (sigmoid, tanh, softmax)."""
    return lambda a, bound: (lo, hi)


def passes(name: str = "x") -> RangeFn:
    """An op whose output elements are elements of input ``name`` (movement, max/min reductions)."""
    return lambda a, bound: bound(getattr(a, name))


def reduced(combine: Callable[[Interval, int], Interval | None]) -> RangeFn:
    """A reduction over ``axes`` (all when absent): ``combine(x's interval, element count)``."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        x = bound(a.x)
        shape = a.x.type.shape
        axes = a.const("axes")
        if x is None or not all(isinstance(d, int) for d in shape):
            return None
        picked = range(len(shape)) if axes is None else (int(v) for v in np.ravel(axes))
        return combine(x, math.prod(shape[i] for i in picked))

    return transfer


def _log_sum_exp(x: Interval, n: int) -> Interval | None:
    """Between the largest element's bound and it plus log(n); unbounded where the engine's
    unshifted sum of exps may pass fp16's 65504 (N10), whatever the profile."""
    with np.errstate(over="ignore"):
        if n * np.exp(x[1]) > 65504.0:
            return None
    return finite(x[0], x[1] + math.log(max(n, 1)))


# sums: the count times the input bound (the other reductions: the same, over |x| or x^2)
scaled_by_count = reduced(lambda x, n: (min(x[0] * n, 0.0), max(x[1] * n, 0.0)))
L1 = reduced(lambda x, n: finite(0.0, n * magnitude(x)))
L2 = reduced(lambda x, n: finite(0.0, math.sqrt(n) * magnitude(x)))
SUM_SQUARE = reduced(lambda x, n: finite(0.0, n * magnitude(x) ** 2))
LOG_SUM_EXP = reduced(_log_sum_exp)


def corners(x: Interval, y: Interval, fn: Callable[[float, float], float]) -> Interval | None:
    """The hull of ``fn`` at the four corners (fn monotone in each argument on the box)."""
    values = [fn(p, q) for p in x for q in y]
    return finite(min(values), max(values))


def _divide(x: Interval, y: Interval) -> Interval | None:
    if y[0] <= 0.0 <= y[1]:
        return None  # a divisor that may be 0: unbounded
    return corners(x, y, lambda p, q: p / q)


BINARY: dict[str, Callable[[Interval, Interval], Interval | None]] = {
    "add": lambda x, y: finite(x[0] + y[0], x[1] + y[1]),
    "sub": lambda x, y: finite(x[0] - y[1], x[1] - y[0]),
    "mul": lambda x, y: corners(x, y, lambda p, q: p * q),
    "div": _divide,
    "max": lambda x, y: (max(x[0], y[0]), max(x[1], y[1])),
    "min": lambda x, y: (min(x[0], y[0]), min(x[1], y[1])),
}


def _square(x: Interval) -> Interval | None:
    low = 0.0 if x[0] <= 0.0 <= x[1] else min(x[0] ** 2, x[1] ** 2)
    return finite(low, max(x[0] ** 2, x[1] ** 2))


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
        return finite(-total, total)

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
    return finite(float(np.min(array)), float(np.max(array)))


def _hull(*intervals: Interval | None) -> Interval | None:
    """The smallest interval holding every one given (None if any is unbounded)."""
    if any(i is None for i in intervals):
        return None
    return (min(i[0] for i in intervals), max(i[1] for i in intervals))  # type: ignore[index]


def _with_zero(interval: Interval | None) -> Interval | None:
    return None if interval is None else (min(interval[0], 0.0), max(interval[1], 0.0))


def moved(a: Any, bound: Bound) -> Interval | None:
    """A movement op: every output element is an element of ``x`` (or of one of ``values``)."""
    if "values" in a.opdef.by_name:
        return _hull(*(bound(v) for v in a.values))
    return bound(a.x)


def moved_or_zero(a: Any, bound: Bound) -> Interval | None:
    """A movement op that also writes zeros (band_part's outside, space_to_batch's padding)."""
    return _with_zero(moved(a, bound))


def padded(a: Any, bound: Bound) -> Interval | None:
    """pad: ``x``'s elements, and ``constant_val`` where the mode is constant."""
    x = bound(a.x)
    if a.const("mode") != "constant":
        return x  # reflect / replicate copy elements of x
    value = a.const("constant_val")
    return _hull(x, (0.0, 0.0) if value is None else const_bound(value))


def values_of(*names: str) -> RangeFn:
    """An output made of the given parameters' values (fill, one_hot, range_1d, select)."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        values = [getattr(a, n) for n in names]
        return _hull(*(None if v is None else bound(v) for v in values))

    return transfer


def matmul_like(a: Any, bound: Bound) -> Interval | None:
    """einsum (a matmul over x's axis -1 and y's axis -3): |out| <= max|x| * the largest sum of
    |y| along the contracted axis when y is a constant (likewise for a constant x), else
    K * max|x| * max|y|."""
    xv, yv = a.values
    x, y = bound(xv), bound(yv)
    if x is None or y is None:
        return None
    if yv.const is not None:
        total = magnitude(x) * _largest_sum(yv.const, -3)
    elif xv.const is not None:
        total = magnitude(y) * _largest_sum(xv.const, -1)
    else:
        k = xv.type.shape[-1]
        if not isinstance(k, int):
            return None
        total = k * magnitude(x) * magnitude(y)
    return finite(-total, total)


def _largest_sum(const: Any, axis: int | tuple[int, ...]) -> float:
    sums = np.sum(np.abs(np.asarray(const, np.float64)), axis=axis)
    return float(np.max(sums)) if sums.size else 0.0


def transposed_contraction(a: Any, bound: Bound) -> Interval | None:
    """conv_transpose: each output element gets at most one product per (input channel of its
    group, kernel tap), so |out| <= max|x| * max over output channels of sum |w| + max|bias|."""
    x, w = bound(a.x), bound(a.weight)
    if x is None or w is None:
        return None
    wv, groups = a.weight, int(a.const("groups"))
    shape = wv.type.shape
    if not all(isinstance(d, int) for d in shape):
        return None
    per_group = shape[0] // groups
    if (
        wv.const is not None
    ):  # [C_in, C_out/groups, *K] -> [groups, C_in/groups, C_out/groups, taps]
        w_abs = np.abs(np.asarray(wv.const, np.float64)).reshape(groups, per_group, shape[1], -1)
        gain = float(np.max(w_abs.sum(axis=(1, 3)))) if w_abs.size else 0.0
    else:
        gain = magnitude(w) * per_group * math.prod(shape[2:])
    total = magnitude(x) * gain
    if a.bias is not None:
        b = bound(a.bias)
        if b is None:
            return None
        total += magnitude(b)
    return finite(-total, total)


def affine_per_channel(a: Any, bound: Bound) -> Interval | None:
    """batch_norm with constant statistics: ``(x - mean) * gamma / sqrt(var + eps) + beta`` per
    channel, the union of each channel's image of x's interval."""
    x = bound(a.x)
    names = ("mean", "variance", "gamma", "beta", "epsilon")
    consts = {n: a.const(n) for n in names}
    if x is None or consts["mean"] is None or consts["variance"] is None:
        return None
    f64 = {n: None if v is None else np.asarray(v, np.float64) for n, v in consts.items()}
    with np.errstate(all="ignore"):
        scale = 1.0 / np.sqrt(f64["variance"] + f64["epsilon"])
        if f64["gamma"] is not None:
            scale = scale * f64["gamma"]
        shift = np.zeros_like(scale) if f64["beta"] is None else f64["beta"]
        ends = [(x[0] - f64["mean"]) * scale + shift, (x[1] - f64["mean"]) * scale + shift]
    return finite(float(np.min(ends)), float(np.max(ends)))


def unit_ball(a: Any, bound: Bound) -> Interval | None:
    """l2_norm: each element is at most 1 in magnitude, with x's sign."""
    x = bound(a.x)
    if x is None:
        return (-1.0, 1.0)
    return (-1.0 if x[0] < 0 else 0.0, 1.0 if x[1] > 0 else 0.0)


def response_normalized(a: Any, bound: Bound) -> Interval | None:
    """local_response_norm: x over ``(k + alpha/size * window)**beta``, whose denominator is at
    least ``k**beta`` when k > 0 and alpha, beta >= 0: |out| <= |x| / k**beta, with x's sign."""
    x = bound(a.x)
    k, alpha, beta = (float(np.asarray(a.const(n))) for n in ("k", "alpha", "beta"))
    if x is None or not (k > 0 and alpha >= 0 and beta >= 0):
        return None
    floor = k**beta
    return finite(min(x[0], 0.0) / floor, max(x[1], 0.0) / floor)


def averaged(a: Any, bound: Bound) -> Interval | None:
    """avg_pool: a mean of x's elements (and of padding zeros, unless they are excluded)."""
    x = bound(a.x)
    return x if bool(a.const("exclude_padding_from_average")) else _with_zero(x)


def root_sum_square(a: Any, bound: Bound) -> Interval | None:
    """l2_pool: sqrt of a window's sum of squares: at most sqrt(window size) * max|x|."""
    x = bound(a.x)
    if x is None:
        return None
    taps = math.prod(int(k) for k in np.ravel(a.const("kernel_sizes")))
    return (0.0, math.sqrt(taps) * magnitude(x))


def power(a: Any, bound: Bound) -> Interval | None:
    """pow: for x >= 0 the extremes are at the corners (0 ** y < 0 unbounded); for an x that
    may be negative only a constant integer exponent is bounded (|x| ** y, even: not negative)."""
    x, y = bound(a.x), bound(a.y)
    if x is None or y is None:
        return None
    if x[0] >= 0.0:
        if x[0] == 0.0 and y[0] < 0.0:
            return None
        with np.errstate(all="ignore"):
            return corners(x, y, lambda p, q: float(np.power(p, q)))
    exponent = a.y.const
    if exponent is None:
        return None
    e = np.unique(np.asarray(exponent, np.float64))
    if not np.all(e == np.round(e)) or np.any(e < 0):
        return None  # NaN for a fractional power of a negative value; 1/0 for a negative one
    top = max(magnitude(x) ** float(v) for v in e)
    return finite(0.0 if np.all(e % 2 == 0) else -top, top)


def absolute(a: Any, bound: Bound) -> Interval | None:
    """abs: from the magnitude nearest 0 (0 if x may be 0) to the largest."""
    x = bound(a.x)
    if x is None:
        return None
    return (0.0 if x[0] <= 0.0 <= x[1] else min(abs(x[0]), abs(x[1])), magnitude(x))


def squared(a: Any, bound: Bound) -> Interval | None:
    """square: x * x."""
    x = bound(a.x)
    return None if x is None else _square(x)


def clipped(a: Any, bound: Bound) -> Interval | None:
    """clip: ``min(max(x, alpha), beta)``, monotone in x (beta wins if alpha > beta)."""
    x = bound(a.x)
    if x is None:
        return None
    alpha, beta = (float(np.asarray(a.const(n))) for n in ("alpha", "beta"))
    return (min(max(x[0], alpha), beta), min(max(x[1], alpha), beta))


def softplus_bound(a: Any, bound: Bound) -> Interval | None:
    """softplus: between 0 (the engine's exp cliff drops large inputs to 0, N9) and
    softplus of x's upper end."""
    x = bound(a.x)
    return None if x is None else finite(0.0, float(np.logaddexp(0.0, x[1])))


def dips_below_zero(least: float) -> RangeFn:
    """gelu, silu: ``x * g(x)`` with g in [0, 1]: between ``least`` (its minimum) and max(x, 0);
    never negative where x is not."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        x = bound(a.x)
        if x is None:
            return None
        return (least if x[0] < 0.0 else 0.0, max(x[1], 0.0))

    return transfer


GELU = dips_below_zero(-0.1702)  # below every mode: EXACT -0.16997, TANH -0.17004, SIGMOID -0.16361
SILU = dips_below_zero(-0.2785)  # x sigmoid(x) is least at x = -1.2785: -0.27846
