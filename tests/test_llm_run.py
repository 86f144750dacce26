"""Streaming text, timing reports, training checkpoints, sampling and the LLM cost model."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from anekit import llm
from anekit.errors import UsageError
from anekit.hw.chips import get_chip
from anekit.hw.cost import input_weight_bytes
from anekit.llm.config import config_from_hf
from anekit.llm.cost import compare_published, estimate_llm, published, streamed_params
from anekit.llm.run import estimate_report, stats_lines, stats_report, stream_text
from anekit.llm.sampling import Sampler, Sampling
from tests.llm_models import RecordingSink


def test_stream_text_writes_the_prompt_then_each_piece(tmp_path):
    pytest.importorskip("transformers")
    from tests.llm_models import Case, save_model, save_tokenizer

    save_model(tmp_path, Case("llama", "float16", True, 2, "new"))
    tok = save_tokenizer(tmp_path)
    prompt = "Once upon a time"
    with llm.load(tmp_path, backend="reference", max_seq=64) as m:
        sink = RecordingSink()
        stats = stream_text(m, prompt, sink, 12, stop=())
        ids = tok.encode(prompt).ids
        new = m.generate(ids, 12, stop=())
        report = stats_report(m, stats, "m4")
    assert sink.writes[0] == prompt
    assert len([w for w in sink.writes[1:] if w.strip()]) >= 3  # text arrived as it was decoded
    expected = tok.decode(ids + new)
    assert sink.getvalue() == prompt + expected[len(tok.decode(ids)) :] + "\n"
    assert stats.prompt_tokens == len(ids) and stats.new_tokens == 12
    assert report["prefill_tokens_per_s"] > 0 and report["decode_tokens_per_s"] > 0
    assert report["first_token_ms"] > 0 and report["predicted"]["chip"] == "m4"
    lines = stats_lines(report)
    assert lines[0].startswith("placement: reference (CPU via the NumPy reference backend")
    assert lines[0].endswith("; asked for)") and report["placement"]["skipped"] == []
    assert lines[1].startswith(f"prompt tokens: {len(ids)}") and "predicted on m4" in lines[-1]


def test_training_checkpoint_decodes_like_the_training_model(tmp_path):
    pytest.importorskip("safetensors")
    from anekit.train.config import ModelConfig, TrainConfig
    from anekit.train.data import ByteTokenizer
    from anekit.train.loop import Trainer
    from anekit.train.model import Model as TrainModel
    from anekit.train.sample import generate

    cfg = ModelConfig("t", dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                      hidden_dim=96, vocab_size=256, seq_len=32)  # fmt: skip
    tokens = np.frombuffer(b"the cat sat on the mat. " * 20, np.uint8)
    trainer = Trainer(cfg, TrainConfig(steps=1, batch_size=1), tokens, backend="reference")
    trainer.train_step()
    out = trainer.save(tmp_path)
    trainer.close()
    ids = list(b"the cat")
    with TrainModel(cfg, 1, "reference", training=False) as tm:
        tm.load(trainer.params)
        window = np.zeros((1, 32), np.int64)
        window[0, : len(ids)] = ids
        trace = tm.forward(trainer.params, window)
        expected = tm.logits(trainer.params, trace)[: len(ids)]
        text = generate(tm, trainer.params, ByteTokenizer(), "the cat", 6, None, temperature=0.0)
    with llm.load(out, backend="reference") as m:
        assert rel(m.logits(ids), expected) < 3e-2
        new = m.generate(ids, 6, stop=())
        assert m.max_seq == 32 and m.config.sliding_window == 32
        # past the trained window: the cache grows, attention keeps to the last 32 tokens
        m.reserve(80)
        longer = m.generate(ids, 70, stop=())
    assert bytes(ids + new).decode() == text
    assert len(longer) == 70 and longer[:6] == new
    assert llm.read_model_config(out) == m.config


def test_reserve_refuses_more_than_the_context_without_a_window(tmp_path):
    pytest.importorskip("transformers")
    from tests.llm_models import Case, save_model

    save_model(tmp_path, Case("qwen3", "float16", True, 2, "new"), max_position_embeddings=48)
    with llm.load(tmp_path, backend="reference") as m:
        assert m.max_seq == 48
        with pytest.raises(UsageError, match="exceeds the model's context of 48"):
            m.reserve(49)
        m.reserve(20)
        with pytest.raises(UsageError, match="exceed the cache of 20"):
            m.generate([1, 2, 3], 18)
        assert len(m.generate([1, 2, 3], 17, stop=())) == 17


def rel(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def test_sampling_rules():
    logits = np.array([3.0, 2.0, 1.0, 0.0])
    # top_p = 0.5: the most likely token alone holds 64 % of the mass
    s = Sampler(Sampling(temperature=1.0, top_p=0.5, seed=0))
    assert {s(logits) for _ in range(50)} == {0}
    s = Sampler(Sampling(temperature=1.0, top_p=0.8, seed=0))  # 0.64 + 0.24 reaches 0.8
    assert {s(logits) for _ in range(200)} == {0, 1}
    s = Sampler(Sampling(temperature=1.0, top_k=3, seed=0))
    assert {s(logits) for _ in range(300)} == {0, 1, 2}
    # repetition penalty: 2.0 / 1.2 < 1.9, so a seen token 0 loses to token 1
    assert Sampler(Sampling(repetition_penalty=1.2))(np.array([2.0, 1.9]), [0]) == 1
    assert Sampler(Sampling(repetition_penalty=1.2))(np.array([-1.0, -1.1]), [0]) == 1
    assert Sampler(Sampling())(np.array([2.0, 1.9]), [0]) == 0
    with pytest.raises(UsageError, match="temperature must be a finite number of at least 0"):
        Sampling(temperature=-1)


def test_predicted_decode_is_within_1_5x_of_each_published_figure():
    rows = compare_published()
    assert len(rows) == len(published()["figures"]) >= 5
    for row in rows:
        assert 1 / 1.5 <= row["ratio"] <= 1.5, row


def test_decode_prediction_is_bound_by_dram_bandwidth():
    data = published()["models"]["qwen3-0.6b"]
    cfg = config_from_hf(data["config"])
    chip = get_chip("m5-pro")
    est = estimate_llm(cfg, chip, prompt_tokens=64)
    assert est.weight_bytes == 2 * streamed_params(cfg)
    # weights taken as inputs stream at the fitted fraction of the measured bandwidth
    assert est.weights_s == pytest.approx(input_weight_bytes(est.weight_bytes) / chip.cost.dram_bw)
    # weights dominate one decode step, and a chip with twice the bandwidth nearly halves it
    assert est.weights_s <= est.decode_step_s < 1.5 * est.weights_s
    fast = dataclasses.replace(
        chip, cost=dataclasses.replace(chip.cost, dram_bw=2 * chip.cost.dram_bw)
    )
    faster = estimate_llm(cfg, fast, prompt_tokens=64)
    assert 1.4 < est.decode_step_s / faster.decode_step_s < 2.0  # the per-call floors stay
    # prefill amortises the weights over a chunk: far more tokens per second than decode
    assert est.prefill_tokens_per_s > 20 * est.decode_tokens_per_s
    _, lines = estimate_report(cfg, "m5-pro", 64)
    assert "decode" in lines[3] and f"{est.decode_tokens_per_s:.1f}" in lines[3]


def test_importing_anekit_llm_imports_no_optional_package():
    code = (
        "import sys, anekit; from anekit import llm; llm.load; "
        "print(sorted(m for m in ('torch', 'transformers', 'tokenizers', 'safetensors') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("chip", ["m4", "m4-pro", "m5-pro"])
def test_kernels_of_a_published_model_pass_the_chip_checks(chip):
    """No check errors for the programs Qwen3-0.6B would compile (warnings: padded [D, 1] rows)."""
    import anekit
    from anekit.llm import kernels as K

    cfg = config_from_hf(published()["models"]["qwen3-0.6b"]["config"])
    programs = [
        K.block_program(cfg, K.BlockKey(1, 128)),
        K.block_program(cfg, K.BlockKey(64, 1024)),
        K.head_program(
            cfg, K.HeadKey(1, K.head_pieces(cfg.vocab_size, get_chip(chip).max_dim_channel))
        ),
    ]
    for program in programs:
        errors = [d for d in anekit.check(program, chip) if d.severity == "error"]
        assert errors == []
