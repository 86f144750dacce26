"""Residual-stream scaling: choose alpha so a model's residual stream fits the engine's fp16.

Real LLMs carry "massive activations": a few residual channels far above the rest
(Qwen3-1.7B peaks at 14,858, Gemma-3 at 104,162; ANE_NUMERICS.md 1b). In fp16 a stream
above 65504 is inf, and a projection writing more than 32752 into it saturates on the
engine (N1). Holding the stream at ``alpha * x`` (embeddings and every projection
writing into the stream scaled, ``LlmConfig.residual_scale``) changes no logit: every
read goes through an RMSNorm, which is scale invariant once its epsilon is
``eps * alpha**2``.

alpha is chosen by a short calibration: the model runs once on calibration tokens on the
reference backend, computing in fp32 (``storage="fp32"``) with its stream held at
:data:`PROBE_SCALE` so that block outputs, stored in fp16, cannot overflow; the largest
residual value after each block is measured, and alpha is the largest power of two that
brings it under :data:`PEAK_LIMIT`. The probe holds the fp16 weights once more while it
runs (it is closed before the model is built); ``residual_scale=`` skips it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from anekit.llm.config import LlmConfig
from anekit.passes.residual import MIN_SCALE, PEAK_LIMIT, choose_alpha

__all__ = ["MIN_SCALE", "PEAK_LIMIT", "Calibration", "calibrate", "choose_alpha"]

CALIBRATION_TOKENS = 16
# the probe's own stream scale: peaks up to 65504 * 256 stay finite in its fp16 outputs
PROBE_SCALE = 2.0**-8


@dataclass(frozen=True)
class Calibration:
    """What the calibration measured and the alpha it chose."""

    alpha: float
    peak: float  # the largest |residual| after any block (fp32)
    rms: float  # the largest per-token RMS of the residual after any block
    tokens: int


def calibrate(
    config: LlmConfig, source: Any, tokens: Sequence[int] | None = None, *, chip: str | None = None
) -> Calibration:
    """Run the model once in fp32 storage on ``tokens`` (default: seeded random ones); choose alpha."""
    from anekit.llm.model import Model

    if tokens is None:
        rng = np.random.default_rng(0)
        tokens = rng.integers(0, config.vocab_size, CALIBRATION_TOKENS).tolist()
    ids = list(tokens)
    peaks: list[tuple[float, float]] = []

    def observe(y: np.ndarray, n: int) -> None:
        stream = np.asarray(y, np.float64)[0, 0, :, :n] / PROBE_SCALE  # [D, valid tokens]
        rms = np.sqrt(np.mean(np.square(stream), axis=0))
        peaks.append((float(np.max(np.abs(stream))), float(np.max(rms))))

    from anekit.llm import kernels as K

    probe = Model(
        replace(config, residual_scale=PROBE_SCALE),
        source,
        backend="reference",
        chip=chip,
        max_seq=len(ids),
        chunk=len(ids),
        hold="fp16",
        compile_options={"storage": "fp32"},
        residual="fp16",  # the probe's stream is what is measured
    )
    with probe:
        ids = probe._tokens(ids)  # out-of-vocabulary ids: a ModelError about "calibration"
        key, state = K.BlockKey(probe.chunk, probe.max_seq), probe.runner.cache
        probe.runner.blocks(ids, 0, key, state)
        for _, y in probe.runner.residuals(key, state):
            observe(y, len(ids))
    peak = max((p for p, _ in peaks), default=0.0)
    rms = max((r for _, r in peaks), default=0.0)
    return Calibration(choose_alpha(peak), peak, rms, len(ids))
