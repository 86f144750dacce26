"""The NumPy functions the elementwise ops compute with (NumPy has no erf, sigmoid or GELU)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.mil.ops import integers


def quiet(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    """Wrap a formula: no floating-point warnings (NaN/inf are results), always an ndarray."""

    def reference(**kwargs: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(**kwargs))

    return reference


def is_int(x: np.ndarray) -> bool:
    return np.asarray(x).dtype.kind in "iu"


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


# erfc(z) ~ t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0: a Chebyshev fit with a relative
# error below 1.2e-7 for every z (Press et al., Numerical Recipes, 2nd ed., section 6.2,
# erfcc). Coefficients of P, constant term first.
_ERFC_FIT = (
    -1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277,
)  # fmt: skip
_ERF_SERIES_BELOW = 0.5  # |x| under this: the Taylor series, exact to float64 in 12 terms


def erf(x: np.ndarray) -> np.ndarray:
    """erf(x) in float64 to a relative error of about 1e-7 (NumPy has no erf), vectorised.

    The fp16 storage model rounds the result to 11 bits, far coarser than the error.
    """
    x = np.asarray(x, np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.full_like(z, _ERFC_FIT[-1])
    for c in reversed(_ERFC_FIT[:-1]):
        poly *= t
        poly += c
    np.square(z, out=z)
    poly -= z
    with np.errstate(under="ignore"):
        np.exp(poly, out=poly)
    poly *= t
    result = np.copysign(np.subtract(1.0, poly, out=poly), x)
    small = np.abs(x) < _ERF_SERIES_BELOW
    if small.any():  # erf(x) = 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1)): exact near 0
        xs = x[small]
        x2, term, series = xs * xs, xs.copy(), xs.copy()
        for n in range(1, 12):
            term *= x2
            term *= -1.0 / n
            series += term / (2 * n + 1)
        result[small] = np.copysign(series * (2.0 / math.sqrt(math.pi)), xs)  # keeps erf(-0) = -0
    return result


def real_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return integers.trunc_div(x, y) if is_int(x) else np.true_divide(x, y)


def exp2(x: np.ndarray) -> np.ndarray:
    return integers.power("exp2", np.asarray(2), x) if is_int(x) else np.exp2(x)


def channel_vector(alpha: np.ndarray, rank: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast over axis 1 of a rank-``rank`` tensor."""
    return np.reshape(alpha, (1, -1) + (1,) * (rank - 2))


GELU_MODES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "EXACT": lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0))),
    "TANH_APPROXIMATION": lambda x: (
        0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    ),
    "SIGMOID_APPROXIMATION": lambda x: x * sigmoid(1.702 * x),
}


# -- out= forms: a formula of the elementwise ops, one ufunc at a time into ``out`` ---------------
# Each replays its op's reference on float32 operands (same ufuncs, same order, same operands), so
# it gives the same bits; the reference backend runs it into a planned buffer (registry.Ufunc).
def sigmoid_into(out: np.ndarray, x: np.ndarray) -> None:
    """1.0 / (1.0 + np.exp(-x))"""
    np.negative(x, out=out)
    np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.divide(1.0, out, out=out)


def silu_into(out: np.ndarray, x: np.ndarray) -> None:
    """x * sigmoid(x) (reads x after writing out: never in place)"""
    sigmoid_into(out, x)
    np.multiply(x, out, out=out)


def relu_into(out: np.ndarray, x: np.ndarray) -> None:
    """np.maximum(x, 0)"""
    np.maximum(x, 0, out=out)


def relu6_into(out: np.ndarray, x: np.ndarray) -> None:
    """np.minimum(np.maximum(x, 0), 6)"""
    np.maximum(x, 0, out=out)
    np.minimum(out, 6, out=out)


def clip_into(out: np.ndarray, x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
    """np.minimum(np.maximum(x, alpha), beta)"""
    np.maximum(x, alpha, out=out)
    np.minimum(out, beta, out=out)


def threshold_into(out: np.ndarray, x: np.ndarray, alpha: np.ndarray) -> None:
    """np.maximum(x, alpha)"""
    np.maximum(x, alpha, out=out)


def rsqrt_into(out: np.ndarray, x: np.ndarray, epsilon: np.ndarray) -> None:
    """1.0 / np.sqrt(x + epsilon)"""
    np.add(x, epsilon, out=out)
    np.sqrt(out, out=out)
    np.divide(1.0, out, out=out)


def inverse_into(out: np.ndarray, x: np.ndarray, epsilon: np.ndarray) -> None:
    """1.0 / (x + epsilon)"""
    np.add(x, epsilon, out=out)
    np.divide(1.0, out, out=out)


def log_into(out: np.ndarray, x: np.ndarray, epsilon: np.ndarray) -> None:
    """np.log(x + epsilon)"""
    np.add(x, epsilon, out=out)
    np.log(out, out=out)


def linear_into(out: np.ndarray, x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
    """alpha * x + beta"""
    np.multiply(alpha, x, out=out)
    np.add(out, beta, out=out)


def scaled_tanh_into(out: np.ndarray, x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
    """alpha * np.tanh(beta * x)"""
    np.multiply(beta, x, out=out)
    np.tanh(out, out=out)
    np.multiply(alpha, out, out=out)
