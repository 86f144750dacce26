"""Garbage is never silent: an overflowing model raises instead of emitting tokens (issue 23)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.errors import GarbageValues, UsageError
from anekit.llm import Model
from anekit.llm.config import LlmConfig
from anekit.llm.guard import check_step
from anekit.llm.sampling import Sampler, Sampling
from anekit.llm.source import expected_shapes
from anekit.llm.training import ArraySource

CONFIG = LlmConfig(architecture="test", family="llama", dim=32, n_layers=3, n_heads=4,
                   n_kv_heads=2, head_dim=8, hidden_dim=48, vocab_size=40, max_position=64)  # fmt: skip


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, shape in expected_shapes(CONFIG):
        scale = 1.0 if name.endswith("norm.weight") else 0.2
        base = 1.0 if name.endswith("norm.weight") else 0.0
        arrays[name] = (base + rng.standard_normal(shape) * scale).astype(np.float32)
    return arrays


def _model(arrays: dict[str, np.ndarray], **options) -> Model:
    return Model(CONFIG, ArraySource(arrays, "test"), backend="reference", max_seq=32, **options)


@pytest.mark.parametrize("numerics", ["ideal", None])  # None: the default (m4) profile
def test_a_healthy_model_passes_the_guard(numerics) -> None:
    with _model(_arrays(), numerics=numerics) as m:
        assert len(m.generate([1, 5, 7], 6, stop=())) == 6


@pytest.mark.parametrize("numerics", ["ideal", None])  # None: the default (m4) profile
@pytest.mark.parametrize("compress", [None, "fp16"])
def test_an_overflowing_layer_raises_naming_the_position_and_layer(compress, numerics) -> None:
    arrays = _arrays()
    arrays["model.layers.1.mlp.down_proj.weight"] *= 30000.0  # layer 1's FFN overflows fp16
    with _model(arrays, compress=compress, numerics=numerics) as m:
        with pytest.raises(GarbageValues) as caught:
            m.generate([1, 5, 7], 4, stop=())  # greedy decoding emitted token 0 here before
    error = caught.value
    assert error.position == 0
    where = "layer 1" if compress is None else "layers 0-2 (one segment program)"
    assert error.where == where and "overflowed fp16" in str(error)


def test_a_stream_too_large_for_a_plain_rmsnorm_is_normalised() -> None:
    arrays = _arrays()
    # ~2e4 stays finite, but its squares overflow fp16: a plain RMSNorm gave inf there and
    # every logit came out 0 (the guard raised); the norms reading the stream are max-abs
    # prescaled now (passes.residual.prescaled_rmsnorm), so the guard has nothing to say
    arrays["model.layers.1.mlp.down_proj.weight"] *= 3000.0
    with _model(arrays) as m:
        logits = m.logits([1, 5, 7])
    assert np.isfinite(logits).all() and float(np.ptp(logits[-1])) > 0


def test_flat_logits_name_the_output_head() -> None:
    arrays = _arrays()
    arrays["lm_head.weight"][:] = 0.0  # every token equally likely: no prediction at all
    with _model(arrays) as m:
        with pytest.raises(GarbageValues, match=r"position 2, the output head: the logits are all"):
            m.generate([1, 5, 7], 4)
        with pytest.raises(GarbageValues, match="position 0, the output head"):
            m.logits([1, 5, 7])


def test_check_step_finds_the_first_bad_column_and_program() -> None:
    clean = np.ones((1, 1, 4, 3), np.float32)
    late = clean.copy()
    late[0, 0, 2, 1] = np.inf
    saturated = clean.copy()
    saturated[0, 0, 0, 2] = 40000.0
    logits = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_step([(range(0, 1), clean)], logits, start=5, tokens=3, logit_start=6)
    with pytest.raises(GarbageValues, match="position 6, layer 2: .* non-finite"):
        check_step([(range(0, 2), clean), (range(2, 3), late), (range(3, 4), late)], logits,
                   start=5, tokens=3, logit_start=6)  # fmt: skip
    with pytest.raises(GarbageValues, match=r"position 7, layer 0: .*saturation.*40000 >= 32752"):
        check_step([(range(0, 1), saturated)], logits, start=5, tokens=3, logit_start=6,
                   saturation=32752.0)  # fmt: skip
    check_step([(range(0, 1), saturated)], logits, start=5, tokens=2, logit_start=6)  # padding
    logits[1, 2] = np.nan
    with pytest.raises(GarbageValues, match="position 7, the output head: .* non-finite"):
        check_step([(range(0, 1), clean)], logits, start=5, tokens=3, logit_start=6)


@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-30, 1.0, 1e300, 1.7e308])
def test_sampling_is_finite_at_any_finite_temperature(temperature: float) -> None:
    logits = np.array([1.0, 4.0, 2.0, -3.0, 4.0 - 2**-20], np.float32)
    sampler = Sampler(Sampling(temperature=temperature, seed=3))
    picks = {sampler(logits) for _ in range(200)}
    if temperature < 1e-6:  # only the best token (float64 tells 4 from 4 - 2**-20)
        assert picks == {1}
    elif temperature > 1e100:  # flat: every token drawn
        assert picks == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("field", ["temperature", "repetition_penalty"])
@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0])
def test_sampling_refuses_non_finite_settings(field: str, value: float) -> None:
    with pytest.raises(UsageError, match=f"{field} must be a finite number"):
        Sampling(**{field: value})


def _conv(weight: np.ndarray) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, weight.shape[1], 1, 4), "fp16")
    b.output(b.conv(x=x, weight=b.weight("w", weight.astype(np.float16))), "y")
    return b.build()


@pytest.mark.parametrize("scheme", ["int8", "lut4", "lut6", "auto", "w8a8"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_compression_refuses_non_finite_weights(scheme: str, bad: float) -> None:
    from anekit.compression import compress_with_report

    weight = np.random.default_rng(1).standard_normal((64, 64, 1, 1)) * 0.1
    weight[5, :, 0, 0] = bad  # one channel: int8 turned it into zeros and reported 0.0 before
    with pytest.raises(UsageError, match=r"weight 'w' \[64, 64, 1, 1\] holds 64 NaN or inf"):
        compress_with_report(_conv(weight), scheme, chip="m4", max_error=0.5)


def test_one_huge_channel_cannot_blind_the_error_gate() -> None:
    from anekit.compression import compress_with_report

    weight = np.random.default_rng(2).standard_normal((64, 64, 1, 1)) * 0.05
    weight[0] *= 20000.0  # per-tensor int8: its scale rounds every other channel to 0 or +-1
    program = _conv(weight)
    result = compress_with_report(program, "int8", chip="m4", granularity="per_tensor")
    # the whole-tensor relative L2 the gate used before: under the 5% budget, damage unseen
    x = np.random.default_rng(0).standard_normal((1, 64, 1, 4)).astype(np.float16)
    with anekit.compile(program, backend="reference") as k0:
        with anekit.compile(result.program, backend="reference") as k1:
            ref, got = k0(x=x)["y"].astype(np.float64), k1(x=x)["y"].astype(np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05
    rows = np.linalg.norm((got - ref)[0, 1:, 0], axis=1) / np.linalg.norm(ref[0, 1:, 0], axis=1)
    assert np.median(rows) > 0.3  # the other channels are wrecked ...
    assert result.report.error > 0.3  # ... and the per-channel gate sees it
    gated = compress_with_report(program, "int8", chip="m4", granularity="per_tensor",
                                 max_error=0.05)  # fmt: skip
    assert gated.report.fallbacks == (("w", "int8", "fp16"),)


def test_a_sliding_window_cache_beyond_memory_is_refused_before_allocating() -> None:
    import dataclasses

    from anekit.config import physical_memory

    windowed = dataclasses.replace(CONFIG, sliding_window=8)  # may pass max_position
    positions = physical_memory() // (2 * windowed.n_layers * windowed.kv_dim * 2) + 1
    with pytest.raises(UsageError, match=f"max_seq {positions} needs a KV cache of at least"):
        Model(windowed, ArraySource(_arrays(), "test"), backend="reference", max_seq=positions)
    with Model(windowed, ArraySource(_arrays(), "test"), backend="reference", max_seq=80) as m:
        assert m.max_seq == 80  # past the 64-position context: the window allows it
