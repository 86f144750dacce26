"""The engine's arithmetic departures that an op declares as a numerics hook (``OpDef.numerics``).

Each hook is ``hook(profile, args, result) -> (result, saturated)``: it takes the op's
arguments (a dict of arrays and constants), its IEEE result, and a numerics profile
(:mod:`anekit.hw.numerics`, read by attribute), and returns the result the engine
gives with the number of values it saturated. The reference backend runs a hook only
under a profile whose field (``Numerics.reads``) differs from the ideal one; the
catalogue rows (N5, N7, N9, N10) are in ``docs/numerics.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit.fp16 import (
    FLUSH_BELOW_BITS,
    HALF_QUANTUM,
    INF_BITS,
    KEEP_BITS,
    MAGNITUDE,
    MIN_NORMAL_BITS,
    OVERFLOW_BITS,
    SIGN_BIT,
    round_fp16,
    round_fp16_away,
)
from anekit.mil.ops.registry import Numerics

FP16_OVERFLOW = 65520.0  # the smallest sum the fp16 reduce path stores as inf (N10)


def _float(x: Any) -> bool:
    return np.asarray(x).dtype.kind == "f"


def _half_away(profile: Any, args: dict[str, Any], result: Any) -> tuple[Any, int]:
    """N5: ``round`` adds 0.5 away from zero, stores that sum in fp16, then truncates.

    The fp16 store of ``x + 0.5`` is what corrupts |x| >= 1024 (1024 -> 1025): there the
    sum is a tie that goes away from zero.
    """
    x = args["x"]
    if not _float(x):
        return result, 0
    shifted = round_fp16_away(np.asarray(x, np.float32) + np.copysign(np.float32(0.5), x))
    return np.trunc(shifted), 0


def _exp_cliff(profile: Any, args: dict[str, Any], result: Any) -> tuple[Any, int]:
    """N9: softplus's exp saturates to inf above the exp threshold; log(inf) is then N8's value."""
    x = np.asarray(args["x"], np.float32)
    with np.errstate(over="ignore"):
        cliff = np.exp(x) > np.float32(profile.exp_saturation)
    n = int(np.count_nonzero(cliff))
    if not n:
        return result, 0
    after = profile.nonfinite_for("log").get("+inf", np.inf)
    return np.where(cliff, np.float32(after), result), n


def _unshifted_sum(profile: Any, args: dict[str, Any], result: Any) -> tuple[Any, int]:
    """N10: logsumexp without a max shift: a sum of exps above fp16's range overflows to inf."""
    x = args["x"]
    if not _float(x):
        return result, 0
    axes = args.get("axes")
    axis = None if axes is None else tuple(int(v) for v in np.ravel(axes))
    with np.errstate(over="ignore"):
        e = np.exp(np.asarray(x, np.float32))
        if profile.exp_saturation is not None:
            e[e > profile.exp_saturation] = np.inf
        total = np.sum(e, axis=axis, keepdims=bool(args["keep_dims"]))
    over = total >= FP16_OVERFLOW
    n = int(np.count_nonzero(over))
    return (np.where(over, np.float32(np.inf), result), n) if n else (result, 0)


def width_offset_clamp(start_of_last_axis: Any) -> Numerics:
    """N7: a slice starting past 0 on the last (width) axis maps |x| above the clamp to +-inf.

    ``start_of_last_axis(args)`` gives the slice's first index on the last axis.
    """

    def hook(profile: Any, args: dict[str, Any], result: Any) -> tuple[Any, int]:
        r = np.asarray(result)
        if r.dtype.kind != "f" or r.ndim == 0 or start_of_last_axis(args) == 0:
            return result, 0
        over = np.abs(r) > np.float32(profile.slice_clamp)
        n = int(np.count_nonzero(over))
        return (np.where(over, np.copysign(np.float32(np.inf), r), r), n) if n else (result, 0)

    return Numerics(hook=hook, reads="slice_clamp")


ROUND_HALF_AWAY = Numerics(hook=_half_away, reads="round_ties")
SOFTPLUS_EXP_CLIFF = Numerics(hook=_exp_cliff, reads="exp_saturation")
EXP_SATURATES = Numerics(saturates="exp")
LOGSUMEXP_UNSHIFTED = Numerics(hook=_unshifted_sum, reads="logsumexp_shift")


# -- N3 inside the dot product: the "precise" profiles ("m4:precise") -------------------------
PRODUCT_CHUNK = 1 << 18  # products a precise matmul holds at once (1 MiB of float32)
STORE_CHUNK = 1 << 16  # products stored per pass: they and the masks stay in the L2 cache
_SMALLEST_NORMAL = np.float32(2.0**-14)


def store_products(p: np.ndarray, profile: Any) -> tuple[int, int]:
    """Store products in fp16 in place as the engine does (N3), with the profile's tie rule,
    overflow to inf and flush (N12); returns how many finite products became inf and how
    many non-zero products became zero."""
    nonzero = int(np.count_nonzero(p))
    saturated = _store(p, profile)
    return saturated, nonzero - int(np.count_nonzero(p))


def _store(p: np.ndarray, profile: Any) -> int:
    if profile.tie == "away" and profile.flush_subnormals and p.flags.c_contiguous:
        u = p.reshape(-1).view(np.uint32)
        return sum(
            _store_away_flushed(u[i : i + STORE_CHUNK]) for i in range(0, u.size, STORE_CHUNK)
        )
    finite = np.isfinite(p)
    rounded = round_fp16_away(p) if profile.tie == "away" else round_fp16(p)
    saturated = int(np.count_nonzero(finite & ~np.isfinite(rounded)))
    if profile.flush_subnormals:
        rounded *= ~(np.abs(rounded) < _SMALLEST_NORMAL)  # x * 0 keeps the sign
    p[...] = rounded
    return saturated


def _store_away_flushed(u: np.ndarray) -> int:
    """``store_products`` for every chip family's rules (ties away, flush) on the float32
    bits, in place: a few integer passes instead of a general fp16 rounding."""
    m = np.bitwise_and(u, MAGNITUDE)
    finite = m < INF_BITS
    over = (m >= OVERFLOW_BITS) & finite
    small = m < FLUSH_BELOW_BITS
    edge = (m >= FLUSH_BELOW_BITS) & (m < MIN_NORMAL_BITS)  # rounds up to the smallest normal
    sign = np.bitwise_and(u, SIGN_BIT)
    np.add(u, HALF_QUANTUM, out=u, where=finite)  # half a quantum away from zero, then cut
    np.bitwise_and(u, KEEP_BITS, out=u, where=finite)
    np.bitwise_or(sign, INF_BITS, out=u, where=over)
    np.copyto(u, sign, where=small)
    np.bitwise_or(sign, MIN_NORMAL_BITS, out=u, where=edge)
    return int(np.count_nonzero(over))


def precise_matmul(profile: Any, counts: list[int]) -> Any:
    """``np.matmul`` with every product stored in fp16 (``store_products``) and summed wide
    (float64), a block of rows at a time; the products saturated and flushed are added to
    ``counts[0]`` and ``counts[1]``."""

    round_input = round_fp16_away if profile.tie == "away" else round_fp16

    def matmul(a: Any, b: Any) -> np.ndarray:
        # the operands in fp16 too (N3; a no-op for fp16 values, not for an op's own
        # intermediates such as attention's softmax weights); inputs are not flushed
        a, b = (np.ascontiguousarray(round_input(v), np.float32) for v in (a, b))
        vec_a, vec_b = a.ndim == 1, b.ndim == 1
        a = a[None, :] if vec_a else a
        b = b[:, None] if vec_b else b
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        out = np.empty((*batch, m, n), np.float32)
        step = max(1, PRODUCT_CHUNK // max(1, int(np.prod(batch, dtype=np.int64)) * k * n))
        with np.errstate(all="ignore"):
            for i in range(0, m, step):
                # [*batch, rows, K, N], C-ordered whatever the operands' strides
                p = np.multiply(a[..., i : i + step, :, None], b[..., None, :, :], order="C")
                saturated, flushed = store_products(p, profile)
                counts[0] += saturated
                counts[1] += flushed
                out[..., i : i + step, :] = p.sum(axis=-2, dtype=np.float64)
        if vec_b:
            out = out[..., 0]
        return out[..., 0, :] if vec_a and not vec_b else out[..., 0] if vec_a else out

    return matmul


def rounded_products(reference: Any, saturates: str | None) -> Numerics:
    """N3 (and N12) inside the dot product, for an op whose ``reference(..., matmul=)`` does its
    multiply-accumulate through ``matmul``: run where the profile's ``products`` is "fp16"
    (the precise variants), also saturating its output as ``saturates`` (N1)."""

    def hook(profile: Any, args: dict[str, Any], result: Any) -> tuple[Any, int]:
        if not _float(result):
            return result, 0
        counts = [0, 0]
        result = reference(**args, matmul=precise_matmul(profile, counts))
        return result, (counts[0], counts[1])

    return Numerics(saturates=saturates, hook=hook, reads="products")
