"""The fp32 host residual: the residual stream carried in float32 between programs.

Between programs the residual stream normally stays in the programs' fp16, held at alpha
(``anekit.llm.residual``: chosen by a short calibration). Where one program cannot hold
it (a prompt whose stream peaks far above what the calibration saw: real models' massive
activations sit on a few tokens, such as the first one), the runner carries it in float32
on the host instead:

- each program gets the stream at a scale ``s`` chosen for that call, the largest power
  of two <= alpha keeping its peak under :data:`HOST_LIMIT` (:func:`host_scale`), and
  ``rescale = s / alpha`` (``anekit.llm.kernels.block_program``'s host form);
- inside, each half of a layer writes its output at alpha as before (so every projection
  stays in the matmul range alpha was chosen for) and adds ``rescale * o`` to the stream
  it reads; the program returns ``d``, what its layers add, at alpha;
- the host adds ``d / alpha`` to its float32 stream. Only norms read the stream, and a
  norm is scale invariant, so ``s`` may change from call to call. Their epsilon stays
  ``eps * alpha**2``: read at ``s < alpha`` it is ``(alpha / s)**2`` larger relative to the
  stream, which only happens for a peak above ``HOST_LIMIT / (2 s)``; its mean square is
  then at least ``peak**2 / D``, so epsilon's relative weight stays under
  ``4 eps alpha**2 D / HOST_LIMIT**2`` (2.4e-9 for eps 1e-5 and D = 16384).

When (``llm.load(residual=)``): "fp16" never; "host" always; "auto" (the default) from the
first step whose program output stream is non-finite or at the numerics profile's
saturation (:func:`overflow`, the guard's own test): that step runs again in the host
form and the model stays in it; ``Model.residual_mode`` and ``runner.host_reason`` report
it, and a RuntimeWarning says so once. The programs' stored ``d`` (sums of two
projections at most per layer) are checked by the guard against fp16's own range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from anekit.errors import UsageError

__all__ = ["HOST_LIMIT", "RESIDUAL_MODES", "check_residual", "host_scale", "overflow"]

# the stream's peak as a program reads it: plus a projection's output (at most 32752, N1)
# it stays inside fp16 in the program's add
HOST_LIMIT = 16384.0
RESIDUAL_MODES = ("auto", "fp16", "host")
_SMALLEST = 2.0**-24  # fp16's smallest step: a non-finite stream gets it (inf stays inf)


def check_residual(residual: str) -> str:
    """``residual`` if it is one of :data:`RESIDUAL_MODES`; UsageError otherwise."""
    if residual not in RESIDUAL_MODES:
        raise UsageError(f"residual must be one of {RESIDUAL_MODES}, found {residual!r}")
    return residual


def host_scale(stream: np.ndarray, alpha: float) -> float:
    """The scale of one call: the largest power of two <= alpha keeping ``stream``'s peak
    under :data:`HOST_LIMIT` (a non-finite stream: the smallest; the guard names it)."""
    peak = float(np.abs(stream).max()) if stream.size else 0.0
    if not math.isfinite(peak):
        return min(alpha, _SMALLEST)
    need = max(peak / HOST_LIMIT, 1.0)
    return min(alpha, 2.0 ** -math.ceil(math.log2(need)))


def overflow(
    residuals: Sequence[tuple[range, np.ndarray]], start: int, tokens: int, saturation: float
) -> str | None:
    """Why a step's fp16 stream does not fit (the first program whose output is non-finite
    or at ``saturation`` on a real column), or None.

    Args:
        residuals: each program of the step: its layers and output stream ``[1, 1, D, T]``.
        start, tokens: the step's first position and its real columns.
        saturation: the magnitude at which a stored value has overflowed.
    """
    for layers, y in residuals:
        peak = np.abs(np.asarray(y[0, 0, :, :tokens], np.float32)).max(axis=0)
        bad = ~(peak < saturation)
        if bad.any():
            column = int(np.argmax(bad))
            where = f"layer {layers.start}" if len(layers) == 1 else (
                f"layers {layers.start}-{layers.stop - 1}")  # fmt: skip
            return (
                f"position {start + column}, {where}: the fp16 residual stream reached "
                f"{float(peak[column]):g} (saturation {saturation:g})"
            )
    return None
