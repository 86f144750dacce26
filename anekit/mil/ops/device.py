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

from anekit.fp16 import round_fp16_away
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
