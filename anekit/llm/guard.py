"""The garbage guard: every step's values checked before a token is chosen from them.

An overflowing model does not fail by itself: its logits come out all NaN (greedy decoding
then picks token 0) or, under the ANE's arithmetic, all zero (the engine stores NaN as 0).
So each step checks what the programs left behind, cheaply (one reduction per program over
the step's columns, next to the matrix products that made them):

* the residual stream after each program: non-finite, or at or above the saturation
  magnitude (fp16's largest value by default) where the engine would have stored inf;
* the logits: non-finite, or without variance (every token equally likely is no prediction).

The first program (in order) whose output is bad names the layer; bad logits over a clean
residual stream name the output head. Either raises :class:`~anekit.errors.GarbageValues`
with the first bad token position.

The golden model also says where it applied a cliff the engine applies silently
(``Kernel.events``: values saturated to inf or non-finite values replaced; flushed
subnormals are routine and ignored here). The runners keep them per program run
(``CacheState.cliffs``; one kernel serves every layer), and :func:`check_cliffs` names the
step's positions, the first layer (or the head) and its first op: a
:class:`~anekit.errors.GarbageValues` when the caller asked for strictness
(``llm.load(strict=True)``), else a :class:`GarbageWarning` (once per model), since such
values may still cancel out (``inf * 0`` replaced by 0) and leave the tokens right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from anekit.errors import GarbageValues
from anekit.fp16 import FP16_MAX

__all__ = ["FP16_SATURATION", "GarbageWarning", "check_cliffs", "check_step", "saturation_of"]


class GarbageWarning(RuntimeWarning):
    """The golden model saturated or replaced values in a step (:func:`check_cliffs`, not strict)."""


FP16_SATURATION = FP16_MAX  # fp16's largest finite value: a stored value there has overflowed


def saturation_of(numerics: str) -> float:
    """The magnitude at which a stored residual has overflowed under a numerics profile (or a
    chip's): its matmul saturation (32752 on the ANE families that have one), else fp16's."""
    from anekit.hw.numerics import numerics_profile

    return numerics_profile(numerics).matmul_saturation or FP16_SATURATION


def check_step(
    residuals: Sequence[tuple[range, np.ndarray]],
    logits: np.ndarray,
    *,
    start: int,
    tokens: int,
    logit_start: int,
    saturation: float = FP16_SATURATION,
) -> None:
    """GarbageValues if a step's residual stream or logits are garbage.

    Args:
        residuals: each program of the step, in order: the layers it ran and its output
            residual stream ``[1, 1, D, T]``.
        logits: the step's logits ``[R, V]`` (rows for positions ``logit_start...``).
        start: the position of the step's first column.
        tokens: the step's real columns (the rest are padding).
        logit_start: the position of the first row of ``logits``.
        saturation: the magnitude at which a stored value has overflowed.
    """
    for layers, stream in residuals:
        columns = np.asarray(stream[0, 0, :, :tokens], np.float32)
        peak = np.abs(columns).max(axis=0)  # NaN stays NaN: "not below" catches it too
        bad = ~(peak < saturation)
        if bad.any():
            column = int(np.argmax(bad))
            what = "non-finite (NaN or inf)" if not np.isfinite(peak[column]) else (
                f"at the saturation magnitude ({float(peak[column]):g} >= {saturation:g})"
            )  # fmt: skip
            raise GarbageValues(
                f"the residual stream is {what}: the model overflowed fp16; refusing to "
                "choose tokens from it",
                position=start + column,
                where=_layers(layers),
            )
    peak = max((float(np.abs(s[0, 0, :, :tokens]).max()) for _, s in residuals), default=0.0)
    _check_logits(logits, logit_start, peak)


def check_cliffs(
    cliffs: Sequence[tuple[range, Any]],
    head: Any,
    *,
    start: int,
    tokens: int,
    strict: bool,
) -> str | None:
    """The step's first cliff event (values saturated or replaced), if any.

    Args:
        cliffs: each program run of the step that had events, in order: its layers and the
            kernel's ``CliffEvents`` of that run (``CacheState.cliffs``).
        head: the head's events of the step (or None).
        start, tokens: the step's first position and its real columns.
        strict: raise GarbageValues; else return the message (the caller warns).
    """
    runs = [(_layers(layers), events) for layers, events in cliffs]
    if head is not None:
        runs.append(("the output head", head))
    for where, events in runs:
        row = next((r for r in events.rows if r.saturated or r.replaced), None)
        if row is None:
            continue
        span = f"positions {start}-{start + tokens - 1}" if tokens > 1 else f"position {start}"
        message = (
            f"under numerics {events.numerics!r} the engine would store garbage in the step "
            f"at {span}: {row.describe()}"
        )
        if strict:
            raise GarbageValues(message, position=start, where=f"{where}, op {row.name!r}")
        return f"{where}: {message}"
    return None


def _check_logits(logits: np.ndarray, first: int, peak: float) -> None:
    """GarbageValues at the first row of ``logits [R, V]`` that is non-finite or flat.

    ``peak`` (the residual stream's largest magnitude) goes into the message: a stream in the
    thousands whose logits are flat points at a normalisation that overflowed.
    """
    finite = np.isfinite(logits).all(axis=1)
    flat = logits.max(axis=1) == logits.min(axis=1)
    bad = ~finite | flat
    if bad.any():
        row = int(np.argmax(bad))
        what = "non-finite (NaN or inf)" if not finite[row] else (
            f"all equal ({float(logits[row, 0]):g}): no token is preferred"
        )  # fmt: skip
        raise GarbageValues(
            f"the logits are {what} although the residual stream stayed finite (largest "
            f"magnitude {peak:g}); refusing to choose a token from them",
            position=first + row,
            where="the output head",
        )


def _layers(layers: range) -> str:
    if len(layers) == 1:
        return f"layer {layers.start}"
    return f"layers {layers.start}-{layers.stop - 1} (one segment program)"
