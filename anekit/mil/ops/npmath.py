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
    """erf(x) (NumPy has no erf), vectorised, in x's precision (as a ufunc computes).

    float64 and other inputs: float64 to a relative error of about 1e-7. float32 (the
    reference backend's fp16 and fp32 values): :func:`erf32`, within 4.3e-7 absolute and
    7e-7 relative, ten times faster. The fp16 storage model rounds the result to 11
    bits, far coarser than either error.
    """
    if isinstance(x, np.ndarray) and x.dtype == np.float32:
        return erf32(x)
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


_CHUNK = 1 << 14  # elements per pass: a chunk and its three temporaries stay in L2
# erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4] (float32 rounds erf to +-1 beyond). P of degree 6,
# Q of degree 4 with Q(0) = 1, constant term first: a rational least-squares fit made for
# this module (Sanathanan-Koerner iterations with Lawson weights on 80k points of [0, 4]
# against float64 erf; 5.4e-8 absolute in float64, 4.2e-7 once evaluated in float32).
_ERF_P = (
    1.128378677153185, 0.2139460387979338, 0.052433645533766796, 0.004293109248457219,
    0.00015553812268923064, -1.9903244080315167e-06, 1.921713403825035e-08,
)  # fmt: skip
_ERF_Q = (
    1.0, 0.5229323958860748, 0.12080017601328959, 0.015551204780539042,
    0.0010980516232815974,
)  # fmt: skip
_ERF_P32 = tuple(np.float32(c) for c in reversed(_ERF_P))  # Horner order
_ERF_Q32 = tuple(np.float32(c) for c in reversed(_ERF_Q))
_FOUR, _ONE = np.float32(4.0), np.float32(1.0)


def erf32(x: np.ndarray) -> np.ndarray:
    """erf of float32 values in float32, within 4.3e-7 absolute and 7e-7 relative of erf.

    A cache-sized chunk at a time with ``out=`` ufuncs (about 25 passes). erf(-0) = -0
    (P and Q keep one sign on [0, 16]), erf(+-inf) = +-1 (clamped to 4), NaN stays NaN.
    """
    return _float32_chunks(x, _erf_chunk)


def _float32_chunks(x: np.ndarray, kernel: Callable[..., None]) -> np.ndarray:
    """Run ``kernel(xs, out, s1, s2, s3)`` over cache-sized float32 chunks of ``x``.

    ``out`` is the chunk's slice of the result and ``s1..s3`` are scratch buffers of the
    chunk's size, reused across chunks so a long tensor costs three chunks of memory.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, np.float32)
    xf, of = x.reshape(-1), out.reshape(-1)
    n = min(_CHUNK, xf.size)
    scratch = [np.empty(n, np.float32) for _ in range(3)]
    for i in range(0, xf.size, _CHUNK):
        xs = xf[i : i + _CHUNK]
        kernel(xs, of[i : i + _CHUNK], *(s[: xs.size] for s in scratch))
    return out


def _erf_chunk(
    xs: np.ndarray, p: np.ndarray, cc: np.ndarray, x2: np.ndarray, qq: np.ndarray
) -> None:
    """erf of one chunk ``xs`` into ``p``: the clamped rational fit in Horner form."""
    np.minimum(xs, _FOUR, out=cc)
    np.maximum(cc, -_FOUR, out=cc)  # (np.clip's wrapper costs more than two passes)
    np.square(cc, out=x2)
    p.fill(_ERF_P32[0])
    for k in _ERF_P32[1:]:
        p *= x2
        p += k
    p *= cc
    qq.fill(_ERF_Q32[0])
    for k in _ERF_Q32[1:]:
        qq *= x2
        qq += k
    p /= qq
    np.minimum(p, _ONE, out=p)  # the fit may pass +-1 by an ulp near 4
    np.maximum(p, -_ONE, out=p)


def real_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return integers.trunc_div(x, y) if is_int(x) else np.true_divide(x, y)


def exp2(x: np.ndarray) -> np.ndarray:
    return integers.power("exp2", np.asarray(2), x) if is_int(x) else np.exp2(x)


def channel_vector(alpha: np.ndarray, rank: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast over axis 1 of a rank-``rank`` tensor."""
    return np.reshape(alpha, (1, -1) + (1,) * (rank - 2))


_ERFC_FIT32 = tuple(np.float32(c) for c in reversed(_ERFC_FIT))  # Horner order, float32
_HALF, _RSQRT2 = np.float32(0.5), np.float32(1.0 / math.sqrt(2.0))


def gelu_exact(x: np.ndarray) -> np.ndarray:
    """x Phi(x) = 0.5x erfc(-x/sqrt 2) in float32, to a relative error of a few 1e-7.

    Phi(-|x|) = erfc(|x|/sqrt 2)/2 by the fit of :func:`erf` (the tail keeps its relative
    accuracy: no 1 + erf cancellation), Phi(|x|) = 1 - Phi(-|x|), selected on x's sign bit
    (so -0 gives -0). Computed a cache-sized chunk at a time with ``out=`` ufuncs: about
    ten times faster than :func:`erf` in float64 (the 12-layer BERT's GELUs cost more than
    its matmuls that way). gelu(+inf) = inf, gelu(-inf) = NaN (0 x -inf), as
    0.5x(1 + erf(x/sqrt 2)).
    """
    return _float32_chunks(x, _gelu_chunk)


def _gelu_chunk(
    xs: np.ndarray, o: np.ndarray, zz: np.ndarray, tt: np.ndarray, pp: np.ndarray
) -> None:
    """GELU of one chunk ``xs`` into ``o``: Phi from the erfc fit, chosen by sign bit."""
    np.abs(xs, out=zz)
    zz *= _RSQRT2  # z = |x| / sqrt 2
    np.multiply(zz, _HALF, out=tt)
    tt += _ONE
    np.divide(_ONE, tt, out=tt)  # t = 1 / (1 + z/2)
    pp.fill(_ERFC_FIT32[0])
    for c in _ERFC_FIT32[1:]:
        pp *= tt
        pp += c
    np.square(zz, out=zz)
    pp -= zz
    np.exp(pp, out=pp)
    pp *= tt  # erfc(z)
    pp *= _HALF  # Phi(-|x|)
    np.subtract(_ONE, pp, out=o)  # Phi(|x|)
    # Phi(x): Phi(-|x|) where the sign bit of x is set, else Phi(|x|), as bits
    sign = zz.view(np.int32)
    np.right_shift(xs.view(np.int32), 31, out=sign)  # all ones where negative
    pu, ou = pp.view(np.int32), o.view(np.int32)
    np.bitwise_and(pu, sign, out=pu)
    np.invert(sign, out=sign)
    np.bitwise_and(ou, sign, out=ou)
    np.bitwise_or(ou, pu, out=ou)
    o *= xs


GELU_MODES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "EXACT": gelu_exact,
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


def softsign_into(out: np.ndarray, x: np.ndarray) -> None:
    """x / (1 + np.abs(x)) (reads x after writing out: never in place)"""
    np.abs(x, out=out)
    np.add(1, out, out=out)
    np.divide(x, out, out=out)


def sigmoid_hard_into(out: np.ndarray, x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> None:
    """np.minimum(np.maximum(alpha * x + beta, 0), 1)"""
    np.multiply(alpha, x, out=out)
    np.add(out, beta, out=out)
    np.maximum(out, 0, out=out)
    np.minimum(out, 1, out=out)
