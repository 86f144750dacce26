"""Exact integer arithmetic for the op references: a value int32 cannot hold is an error, never wrapped.

The ANE computes in fp16; int32 tensors are shapes, indices and counters, and nothing
documents that its integer arithmetic wraps. So the golden model must not invent the
values NumPy's fixed-width arithmetic gives (``mul(2**20, 2**20) == 0``,
``reduce_sum([2**31 - 1, 1]) == -2**31``, ``floor_div(x, 0) == 0``). Every integer
formula here is computed exactly (in int64, whose range holds any sum or product of two
int32 values, or in Python integers where int64 could overflow), and a result outside
the output dtype's range, a non-finite float result of integer inputs, or an integer
division by zero raises :class:`~anekit.errors.EvaluationError` naming the op, the first
offending element, its index and the valid range.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.errors import EvaluationError

WIDE = np.int64
_WIDE_SAFE = 2.0**62  # magnitudes below this: every int64 sum of two such terms is exact


def is_int(x: Any) -> bool:
    return np.asarray(x).dtype.kind in "iu"


def fit(op: str, exact: Any, dtype: Any, what: str = "result") -> np.ndarray:
    """``exact`` (int64, object or float values of an integer formula) stored in ``dtype``.

    EvaluationError where a value is outside ``dtype``'s range (or is not finite).
    """
    exact, dtype = np.asarray(exact), np.dtype(dtype)
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        bad = (exact < info.min) | (exact > info.max)
        if exact.dtype.kind == "f":
            bad |= ~np.isfinite(exact)
    bad = np.asarray(bad, bool)
    if bad.any():
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))
        value = exact[index] if exact.ndim else exact[()]
        shown = int(value) if exact.dtype.kind != "f" or np.isfinite(value) else float(value)
        where = f" at index {list(index)}" if index else ""
        raise EvaluationError(
            f"{op}: the {what} {shown}{where} does not fit {dtype.name} [{info.min}, {info.max}] "
            f"({int(bad.sum())} such elements); the golden model does not wrap integers"
        )
    return exact.astype(dtype)


def nonzero_divisor(op: str, y: Any) -> None:
    """EvaluationError if an integer divisor is 0 anywhere."""
    zero = np.asarray(y) == 0
    if zero.any():
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(zero)), zero.shape))
        where = f" at index {list(index)}" if index else ""
        raise EvaluationError(
            f"{op}: integer division by zero{where} ({int(zero.sum())} such elements); the "
            "golden model gives no value for it"
        )


def binary(
    op: str,
    fn: Callable[[np.ndarray, np.ndarray], Any],
    *,
    divides: bool = False,
    exact: Callable[[str, np.ndarray, np.ndarray], Any] | None = None,
) -> Callable[[Any, Any], np.ndarray]:
    """``fn(x, y)``; for integer operands computed exactly (``exact``, else ``fn`` in int64)."""

    def reference(x: Any, y: Any) -> np.ndarray:
        if not (is_int(x) and is_int(y)):
            return fn(x, y)
        dtype = np.result_type(x, y)
        wide_x, wide_y = np.asarray(x, WIDE), np.asarray(y, WIDE)
        if divides:
            nonzero_divisor(op, wide_y)
        result = exact(op, wide_x, wide_y) if exact is not None else fn(wide_x, wide_y)
        return fit(op, result, dtype)

    return reference


def unary(op: str, fn: Callable[[np.ndarray], Any]) -> Callable[[Any], np.ndarray]:
    """``fn(x)``; for an integer x computed in int64 and checked to fit x's dtype."""

    def reference(x: Any) -> np.ndarray:
        if not is_int(x):
            return fn(x)
        x = np.asarray(x)
        return fit(op, fn(x.astype(WIDE)), x.dtype)

    return reference


def trunc_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x / y rounded toward zero in integers (divisors already checked to be nonzero)."""
    q = np.floor_divide(x, y)
    return q + ((np.remainder(x, y) != 0) & ((x < 0) != (y < 0))).astype(q.dtype)


def power(op: str, x: np.ndarray, y: np.ndarray, limit: int = 2**31) -> np.ndarray:
    """x ** y in int64, exactly, by repeated squaring; EvaluationError if ``|x ** y| > limit``.

    A negative power truncates toward zero (``1 / x ** |y|``: 0 unless ``|x| == 1``), and
    of 0 it divides by zero: an error too. Every product stays below ``limit ** 2 <= 2 ** 62``,
    so int64 never overflows here.
    """
    x, y = np.broadcast_arrays(np.asarray(x, WIDE), np.asarray(y, WIDE))
    nonzero_divisor(op, np.where(y < 0, x, 1))  # 0 ** -n is 1 / 0
    result = np.ones(x.shape, WIDE)
    base, e = x.copy(), np.maximum(y, 0)
    over = np.zeros(x.shape, bool)
    while (e > 0).any():
        odd = (e & 1) == 1
        result = np.where(odd, result * base, result)
        over |= odd & ((result > limit) | (result < -limit))
        e = e >> 1
        more = e > 0
        base = np.where(more & ~over, base * base, base)
        over |= more & (base > limit)  # the top bit of e still multiplies by base
        result = np.where(over, 1, result)  # keep every operand small
        base = np.where(over, 1, base)
    if over.any():
        i = tuple(int(k) for k in np.unravel_index(int(np.argmax(over)), over.shape))
        raise EvaluationError(
            f"{op}: {int(x[i])} ** {int(y[i])} = {int(x[i]) ** int(y[i])} at index {list(i)} is "
            f"beyond +-{limit} ({int(over.sum())} such elements); the golden model does not "
            "wrap integers"
        )
    negative = np.where(np.abs(x) == 1, np.where(y % 2 == 0, 1, x), 0)
    return np.where(y < 0, negative, result)


def matmul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """An exact integer matrix product: int64 where no partial sum can overflow, else Python ints."""
    x, y = np.asarray(x, WIDE), np.asarray(y, WIDE)
    bound = np.matmul(np.abs(x).astype(np.float64), np.abs(y).astype(np.float64))
    if bound.size == 0 or float(bound.max()) < _WIDE_SAFE:
        return np.matmul(x, y)
    return np.matmul(x.astype(object), y.astype(object))


def reduce(
    op: str, fn: Callable[..., Any], x: np.ndarray, *, integral: bool, **kw: Any
) -> np.ndarray:
    """An integer reduction ``fn(x, axis=, keepdims=)`` computed exactly, stored in x's dtype.

    It runs in int64 where a float64 bound (the sum of squares, or the product, of the
    magnitudes) proves no partial result can overflow, as every int32 sum; else
    ``integral`` formulas (sums, products, extrema) run in Python integers and the others
    (mean, norms, logs) in float64. A float result is rounded toward zero.
    """
    x = np.asarray(x)
    wide = x.astype(WIDE)
    magnitude = np.abs(x.astype(np.float64))
    axis = kw.get("axis")
    with np.errstate(divide="ignore", over="ignore"):
        if fn is np.prod:
            bound = np.exp2(np.sum(np.log2(magnitude), axis=axis))
        else:
            bound = np.sum(magnitude * magnitude, axis=axis)
    safe = np.size(bound) == 0 or float(np.max(bound)) < _WIDE_SAFE
    data = wide if safe else wide.astype(object) if integral else x.astype(np.float64)
    result = np.asarray(fn(data, **kw))
    if result.dtype.kind == "f":
        result = np.trunc(result)
    return fit(op, result, x.dtype)
