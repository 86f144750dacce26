"""``llm.load(..., compress=...)``: segment programs with compressed weights compiled in.

The compressed model's logits are checked against transformers' own forward run with the
weights the compressed programs store, decoded here with NumPy (tests/compress_decode.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit import llm
from anekit.errors import UsageError
from anekit.llm import compressed
from anekit.llm.config import config_from_hf
from anekit.llm.cost import estimate_llm
from anekit.llm.runners import decode_slots
from tests.compress_decode import decoded
from tests.llm_models import Case, reference_logits, rel_error, save_model

IDS = [int(t) for t in np.random.default_rng(5).integers(1, 96, 40)]
UNTIED = Case("llama", "float16", False, 2, "new")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("llm_compress")
    return path, save_model(path, UNTIED)


def test_weights_compiled_in_uncompressed_decode_exactly_as_the_dynamic_kernels(saved) -> None:
    path, _ = saved
    with llm.load(path, backend="reference", max_seq=128) as base:
        logits, tokens = base.logits(IDS), base.generate(IDS[:6], 12)
    with llm.load(path, backend="reference", max_seq=128, compress="fp16") as m:
        np.testing.assert_array_equal(m.logits(IDS), logits)
        assert m.generate(IDS[:6], 12) == tokens
        assert m.compression == {}  # nothing compressed


def hf_with(reference, programs) -> object:
    """transformers' model with every projection and the head replaced by the stored weights."""
    import copy

    import torch

    model = copy.deepcopy(reference)
    stored = {}
    for program in programs:
        for op in program.main.ops:
            name = op.outputs[0].name
            if op.op_type.startswith("constexpr_") and name not in stored:
                stored[name] = decoded(program, name).astype(np.float32)[0, 0]
    cfg = model.config
    q, kv, f = cfg.num_attention_heads * 16, cfg.num_key_value_heads * 16, cfg.intermediate_size
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            att, mlp = layer.self_attn, layer.mlp
            qkv, w13 = stored[f"l{i}_wqkv"], stored[f"l{i}_w13"]
            parts = [
                (att.q_proj, qkv[:q]),
                (att.k_proj, qkv[q : q + kv]),
                (att.v_proj, qkv[q + kv :]),
                (att.o_proj, stored[f"l{i}_wo"]),
                (mlp.gate_proj, w13[:f]),
                (mlp.up_proj, w13[f:]),
                (mlp.down_proj, stored[f"l{i}_w2"]),
            ]
            for module, w in parts:
                module.weight.copy_(torch.from_numpy(w))
        model.lm_head.weight.copy_(torch.from_numpy(stored["head_w0"]))
    return model


@pytest.mark.parametrize("scheme", ["int8", "lut4"])
def test_compressed_logits_match_transformers_with_the_stored_weights(saved, scheme) -> None:
    path, reference = saved
    with llm.load(path, backend="reference", max_seq=128, compress=scheme) as m:
        got = m.logits(IDS)
        programs = m.programs()
        report = m.compression["layers 0-1"]
    expected = reference_logits(hf_with(reference, programs), IDS)
    assert rel_error(got, expected) < 3e-2
    # the stored weights are not the dense ones: the reference without them is further off
    dense = reference_logits(reference, IDS)
    assert rel_error(dense, expected) > 2 * rel_error(got, expected)
    # int8 stores about half, 4-bit palettes about a quarter of the fp16 bytes
    ratio = {"int8": 0.5, "lut4": 0.25}[scheme]
    assert report.weight_bytes_after / report.weight_bytes_before == pytest.approx(ratio, abs=0.1)


def test_w8a8_steps_come_from_the_calibration_activations(saved) -> None:
    path, _ = saved
    with llm.load(path, backend="reference", max_seq=128, compress="w8a8", calibration=IDS) as m:
        m.logits(IDS[:8])
        program = next(p for p in m.programs() if "k_cache1" in {v.name for v in p.inputs})
        steps = m.runner.packed.states["layers 0-1"].steps
        # the first projection reads layer 0's attention RMSNorm of the embedded tokens
        embed = m.runner.packed.embed[IDS[: m.chunk]].astype(np.float32)  # [T, D]
        gain = m.runner.packed.layers[0]["attn_norm"].astype(np.float32).reshape(-1)
        xn = embed / np.sqrt((embed**2).mean(axis=1, keepdims=True) + m.config.norm_eps) * gain
    first = next(op for op in program.main.ops if op.op_type == "quantize")
    name = first.inputs["input"].name
    assert steps[name] == pytest.approx(np.abs(xn).max() / 127, rel=2e-2)
    assert sum(op.op_type == "quantize" for op in program.main.ops) == 2 * 4  # 4 per layer


# the ~100M-parameter Llama of benchmarks/llm.py
BENCH = config_from_hf(
    dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
         num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
         tie_word_embeddings=True, architectures=["LlamaForCausalLM"]),
    source="test",
)  # fmt: skip


def test_segments_and_their_compile_budget(monkeypatch) -> None:
    cfg = BENCH
    widths = {seq: 1 + len(decode_slots(seq)) for seq in (1024, 8192, 32768)}
    assert compressed.plan_segments(cfg, "int8", widths[1024]) == [range(0, 12)]
    per_layer = compressed.layer_bytes(cfg, "int8")
    assert per_layer == pytest.approx(compressed.layer_bytes(cfg, "fp16") / 2, rel=0.01)
    monkeypatch.setattr(compressed, "SEGMENT_BYTES", 5 * per_layer)
    thirds = [range(0, 4), range(4, 8), range(8, 12)]
    assert compressed.plan_segments(cfg, "int8", widths[1024]) == thirds
    monkeypatch.setattr(compressed, "SEGMENT_BYTES", per_layer)
    assert len(compressed.plan_segments(cfg, "int8", widths[8192])) == 12  # 12 x 8 + 2 = 98
    with pytest.raises(
        UsageError, match="12 segments of 1 layers, each compiled for 10 shapes, may need 122"
    ):
        compressed.plan_segments(cfg, "int8", widths[32768])
    with pytest.raises(UsageError, match="compress='auto' is not offered for language models"):
        compressed.check_scheme("auto")


def test_predicted_decode_gains_follow_the_stored_bytes() -> None:
    cfg = BENCH
    speed = {
        (chip, s): estimate_llm(cfg, chip, compress=s).decode_tokens_per_s
        for chip in ("m1", "m4")
        for s in ("fp16", "int8", "lut4")
    }
    assert speed["m4", "fp16"] < speed["m4", "int8"] < speed["m4", "lut4"]
    assert speed["m4", "int8"] < 2 * speed["m4", "fp16"]  # no more than the bytes saved
    assert speed["m1", "int8"] == pytest.approx(speed["m1", "fp16"])  # M1 folds int8
    assert speed["m1", "lut4"] > 1.5 * speed["m1", "fp16"]
    est = estimate_llm(cfg, "m4", compress="lut4")
    assert est.weight_bytes < 0.27 * estimate_llm(cfg, "m4", compress="fp16").weight_bytes
