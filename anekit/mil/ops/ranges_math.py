"""Range transfers of functions with domains, poles, pieces or parameters: the activations
with constants, log/rsqrt/inverse, the trig and hyperbolic functions, exp2, round, mod and
floor_div, cumsum, reduce_prod/reduce_log_sum, quantize and dequantize.

Same contract as :mod:`anekit.mil.ops.ranges` (``transfer(args, bound) -> Interval | None``),
and sound under every numerics profile, since a transfer does not know which one runs:

- a value whose magnitude is below 2^-14 may have been stored as a signed zero (N12's flush)
  by the op that made it, so log, rsqrt, inverse, mod and floor_div widen such an end of
  their operand to 0 (:func:`may_flush`), and an epsilon below 2^-14 counts as maybe 0;
- where the IEEE result may be NaN or infinite (log or rsqrt of a value that may be 0 or
  negative, inverse or a divisor across 0, asin outside [-1, 1], tan across a pole) there is
  no finite bound under ``"ideal"``, and a chip profile's replacement (NaN -> 0) gives no
  bound on the IEEE side either: unbounded (None);
- round includes N5's half-away store of ``x + 0.5`` (1024 -> 1025), whatever the tie rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.fp16 import SMALLEST_NORMAL
from anekit.mil.ops.ranges import (
    Bound,
    Interval,
    RangeFn,
    corners,
    finite,
    magnitude,
    monotone,
    reduced,
)

HALF_ULP = 2.0**-11  # fp16's relative rounding error


def may_flush(x: Interval) -> Interval:
    """``x`` with an end inside (-2^-14, 2^-14) widened to 0: its op may have flushed it."""
    lo, hi = x
    return (0.0 if 0.0 < lo < SMALLEST_NORMAL else lo, 0.0 if -SMALLEST_NORMAL < hi < 0.0 else hi)


def _const(a: Any, name: str) -> float:
    return float(np.asarray(a.const(name), np.float64))


def _plus_epsilon(a: Any, bound: Bound) -> Interval | None:
    """``x + epsilon`` (log, rsqrt, inverse), both maybe flushed."""
    x = bound(a.x)
    if x is None:
        return None
    e_lo, e_hi = may_flush((_const(a, "epsilon"),) * 2)
    lo, hi = may_flush(x)
    return (lo + e_lo, hi + e_hi)


def logarithm(a: Any, bound: Bound) -> Interval | None:
    """log(x + epsilon): unbounded where x + epsilon may be 0 or negative (-inf, NaN)."""
    y = _plus_epsilon(a, bound)
    if y is None or y[0] <= 0.0:
        return None
    return finite(math.log(y[0]), math.log(y[1]))


def reciprocal_root(a: Any, bound: Bound) -> Interval | None:
    """rsqrt: 1 / sqrt(x + epsilon), decreasing; unbounded where x + epsilon may be 0."""
    y = _plus_epsilon(a, bound)
    if y is None or y[0] <= 0.0:
        return None
    return finite(1.0 / math.sqrt(y[1]), 1.0 / math.sqrt(y[0]))


def reciprocal(a: Any, bound: Bound) -> Interval | None:
    """inverse: 1 / (x + epsilon); unbounded where x + epsilon may be 0 (across 0, or at it)."""
    y = _plus_epsilon(a, bound)
    if y is None or y[0] <= 0.0 <= y[1]:
        return None
    return finite(1.0 / y[1], 1.0 / y[0])


def in_domain(fn: Callable[[float], float], lo: float, hi: float, *, open_ends: bool = False,
              increasing: bool = True) -> RangeFn:  # fmt: skip
    """A monotone function defined on [lo, hi] (``open_ends``: (lo, hi)): unbounded outside."""
    inner = monotone(fn, increasing=increasing)

    def transfer(a: Any, bound: Bound) -> Interval | None:
        x = bound(a.x)
        if x is None or x[0] < lo or x[1] > hi or (open_ends and (x[0] == lo or x[1] == hi)):
            return None
        return inner(a, bound)

    return transfer


ASIN = in_domain(np.arcsin, -1.0, 1.0)
ACOS = in_domain(np.arccos, -1.0, 1.0, increasing=False)
ATANH = in_domain(np.arctanh, -1.0, 1.0, open_ends=True)  # +-inf at +-1
SOFTSIGN = monotone(lambda v: v / (1.0 + abs(v)))


def even(fn: Callable[[float], float]) -> RangeFn:
    """An even function increasing in |x| (cosh): least at the point nearest 0."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        x = bound(a.x)
        if x is None:
            return None
        nearest = 0.0 if x[0] <= 0.0 <= x[1] else min(abs(x[0]), abs(x[1]))
        with np.errstate(over="ignore"):
            return finite(float(fn(nearest)), float(fn(magnitude(x))))

    return transfer


def tangent(a: Any, bound: Bound) -> Interval | None:
    """tan: increasing inside one branch (-pi/2 + k pi, pi/2 + k pi); unbounded across a pole."""
    x = bound(a.x)
    if x is None:
        return None
    k = math.floor((x[0] + math.pi / 2) / math.pi)
    pole = k * math.pi + math.pi / 2
    if not (x[1] < pole - 1e-6 and x[0] > pole - math.pi + 1e-6):
        return None
    return finite(math.tan(x[0]), math.tan(x[1]))


def power_of_two(a: Any, bound: Bound) -> Interval | None:
    """exp2: increasing; integer x < 0 truncates toward 0."""
    x = bound(a.x)
    if x is None:
        return None
    with np.errstate(over="ignore"):
        lo, hi = float(np.exp2(x[0])), float(np.exp2(x[1]))
    return finite(math.floor(lo) if a.x.dtype.is_int else lo, hi)


def _round_up(v: float) -> float:
    """The most a rounding of v >= 0 gives: ceil, or N5's trunc(fp16(v + 0.5)) rounded up."""
    return max(math.ceil(v), math.floor((v + 0.5) * (1 + HALF_ULP)))


def _round_down(v: float) -> float:
    """The least a rounding of v >= 0 gives."""
    return min(math.floor(v), math.floor((v + 0.5) * (1 - HALF_ULP)))


def rounded(a: Any, bound: Bound) -> Interval | None:
    """round: monotone and odd, halves to even (ideal) or N5's half away through an fp16 store
    of x + 0.5 (1024 -> 1025 on the engine): each end rounded outward by either rule."""
    x = bound(a.x)
    if x is None or not all(math.isfinite(v) for v in x):
        return None
    lo = _round_down(x[0]) if x[0] >= 0 else -_round_up(-x[0])
    hi = _round_up(x[1]) if x[1] >= 0 else -_round_down(-x[1])
    return (float(lo), float(hi))


def _pieces(x: Interval, negative: Callable[[float], list[float]],
            positive: Callable[[float], list[float]]) -> Interval | None:  # fmt: skip
    """The hull of a function continuous at 0, monotone on x < 0 (``negative``) and on x >= 0
    (``positive``); each maps an end point to its value(s)."""
    values = []
    if x[0] < 0.0:
        values += negative(x[0]) + negative(min(x[1], 0.0))
    if x[1] >= 0.0:
        values += positive(max(x[0], 0.0)) + positive(x[1])
    return finite(min(values), max(values))


def _alphas(a: Any) -> list[float]:
    alpha = np.asarray(a.const("alpha"), np.float64)
    return [float(alpha.min()), float(alpha.max())]


def leaky(a: Any, bound: Bound) -> Interval | None:
    """leaky_relu (x, else alpha x) and prelu (alpha per channel: its least and largest)."""
    x = bound(a.x)
    if x is None:
        return None
    alphas = _alphas(a)
    return _pieces(x, lambda v: [s * v for s in alphas], lambda v: [v])


def exponential_linear(a: Any, bound: Bound) -> Interval | None:
    """elu: x for x > 0, else alpha (exp(x) - 1), monotone either side (alpha of any sign)."""
    x = bound(a.x)
    if x is None:
        return None
    alpha = _const(a, "alpha")
    return _pieces(x, lambda v: [alpha * math.expm1(v)], lambda v: [v])


def _affine(a: Any, x: Interval) -> Interval | None:
    alpha, beta = _const(a, "alpha"), _const(a, "beta")
    return finite(*sorted((alpha * x[0] + beta, alpha * x[1] + beta)))


def affine(a: Any, bound: Bound) -> Interval | None:
    """linear_activation: alpha x + beta."""
    x = bound(a.x)
    return None if x is None else _affine(a, x)


def hard_sigmoid(a: Any, bound: Bound) -> Interval | None:
    """sigmoid_hard: alpha x + beta clamped to [0, 1]."""
    x = bound(a.x)
    y = None if x is None else _affine(a, x)
    return (0.0, 1.0) if y is None else (min(max(y[0], 0.0), 1.0), min(max(y[1], 0.0), 1.0))


def scaled_tanh(a: Any, bound: Bound) -> Interval | None:
    """alpha tanh(beta x): monotone in x; within |alpha| whatever x."""
    alpha, beta = _const(a, "alpha"), _const(a, "beta")
    x = bound(a.x)
    if x is None:
        return (-abs(alpha), abs(alpha))
    return finite(*sorted(alpha * math.tanh(beta * v) for v in x))


def thresholded(a: Any, bound: Bound) -> Interval | None:
    """threshold: max(x, alpha)."""
    x, alpha = bound(a.x), _const(a, "alpha")
    return None if x is None else (max(x[0], alpha), max(x[1], alpha))


def _divisor(a: Any, bound: Bound) -> tuple[Interval, Interval] | None:
    x, y = bound(a.x), bound(a.y)
    if x is None or y is None:
        return None
    y = may_flush(y)
    return None if y[0] <= 0.0 <= y[1] else (x, y)


def remainder(a: Any, bound: Bound) -> Interval | None:
    """mod (NumPy remainder, y's sign): x itself where 0 <= x < y (or y < x <= 0), else within
    [0, y] for y > 0 and [y, 0] for y < 0 (closed: a tiny negative x mod y rounds to y)."""
    both = _divisor(a, bound)
    if both is None:
        return None
    x, y = both
    if y[0] > 0.0:
        return x if 0.0 <= x[0] and x[1] < y[0] else (0.0, y[1])
    return x if x[1] <= 0.0 and x[0] > y[1] else (y[0], 0.0)


def floored_quotient(a: Any, bound: Bound) -> Interval | None:
    """floor_div: floor(x / y), the quotient's corners widened by an ulp (float64 rounding)."""
    both = _divisor(a, bound)
    if both is None:
        return None
    q = corners(*both, lambda p, r: p / r)
    if q is None:
        return None
    return finite(math.floor(np.nextafter(q[0], -np.inf)), math.floor(np.nextafter(q[1], np.inf)))


def running_sum(a: Any, bound: Bound) -> Interval | None:
    """cumsum: element i sums k in 1..n elements (exclusive: 0..n-1) along ``axis``."""
    x = bound(a.x)
    n = a.x.type.shape[int(a.const("axis"))]
    if x is None or not isinstance(n, int):
        return None
    few, many = (0, n - 1) if bool(a.const("exclusive")) else (min(1, n), n)
    return finite(min(few * x[0], many * x[0]), max(few * x[1], many * x[1]))


def _product(x: Interval, n: int) -> Interval | None:
    with np.errstate(over="ignore"):
        if x[0] >= 0.0:
            return finite(float(np.power(x[0], n)), float(np.power(x[1], n)))
        top = float(np.power(magnitude(x), n))
    return finite(-top, top)


def _log_sum(x: Interval, n: int) -> Interval | None:
    lo, hi = may_flush(x)
    if n < 1 or lo <= 0.0:
        return None  # log of a sum that may be 0 or negative
    return finite(math.log(n * lo), math.log(n * hi))


PRODUCT = reduced(_product)
LOG_SUM = reduced(_log_sum)


def _ints(dtype: Any) -> Interval:
    info = np.iinfo(np.dtype(dtype))
    return (float(info.min), float(info.max))


def _values(a: Any, name: str, default: float) -> np.ndarray:
    value = a.const(name)
    return np.unique(np.asarray(default if value is None else value, np.float64))


def quantized(a: Any, bound: Bound) -> Interval | None:
    """quantize: rint(x / scale) + zero_point, clipped to int8/uint8, for every scale."""
    info = _ints(str(a.const("output_dtype")))
    x = bound(a.input)
    if x is None:
        return info
    q = [p / s for p in x for s in _values(a, "scale", 1.0)]
    zero = _values(a, "zero_point", 0.0)
    lo, hi = math.floor(min(q)) + zero.min(), math.ceil(max(q)) + zero.max()
    return (min(max(float(lo), info[0]), info[1]), min(max(float(hi), info[0]), info[1]))


def affine_of(data: str, zero: str, scale: str) -> RangeFn:
    """``(data - zero) * scale`` (dequantize, constexpr_affine_dequantize,
    constexpr_blockwise_shift_scale): the corners of the box of the three bounds; data of an
    integer type without a bound is within that type's range, a missing zero is 0."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        q_value, z_value = getattr(a, data), getattr(a, zero)
        q = bound(q_value)
        if q is None and q_value.dtype.is_int:
            q = _ints(q_value.dtype.numpy)
        z = (0.0, 0.0) if z_value is None else bound(z_value)
        s = bound(getattr(a, scale))
        if q is None or z is None or s is None:
            return None
        return corners((q[0] - z[1], q[1] - z[0]), s, lambda v, w: v * w)

    return transfer


def with_zero(name: str) -> RangeFn:
    """constexpr_sparse_to_dense: the values of ``name`` and zeros."""

    def transfer(a: Any, bound: Bound) -> Interval | None:
        v = bound(getattr(a, name))
        return None if v is None else (min(v[0], 0.0), max(v[1], 0.0))

    return transfer


DEQUANTIZED = affine_of("input", "zero_point", "scale")
AFFINE_DEQUANTIZED = affine_of("quantized_data", "zero_point", "scale")
SHIFT_SCALED = affine_of("data", "offset", "scale")
