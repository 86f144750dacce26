"""Hugging Face models: anekit's kernels against transformers' own float32 forward on the same files."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from anekit import llm  # noqa: E402
from anekit.errors import ModelError, UsageError  # noqa: E402
from tests.llm_models import (  # noqa: E402
    Case,
    reference_logits,
    rel_error,
    save_model,
    save_tokenizer,
)

# every architecture in bf16 and fp16, tied and untied, GQA and MQA, both config styles
CASES = [
    Case("llama", "bfloat16", False, 2, "new"),
    Case("llama", "float16", True, 1, "old"),
    Case("qwen2", "bfloat16", True, 2, "old"),
    Case("qwen2", "float16", False, 1, "new"),
    Case("qwen3", "bfloat16", False, 2, "new"),
    Case("qwen3", "float16", True, 1, "old"),
    Case("mistral", "bfloat16", False, 2, "old"),
    Case("mistral", "float16", True, 4, "new", sliding_window=12),
]
PROMPT = [int(t) for t in np.random.default_rng(7).integers(0, 96, 40)]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_logits_match_transformers_and_cached_decoding_matches_recompute(tmp_path, case):
    ref_model = save_model(tmp_path, case)
    expected = reference_logits(ref_model, PROMPT)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert ("rope_parameters" in raw) == (case.style == "new")
    with llm.load(tmp_path, backend="reference", chunk=16, max_seq=64) as m:
        assert m.config.tie_embeddings is case.tied and m.config.n_kv_heads == case.kv_heads
        got = m.logits(PROMPT)  # 40 tokens: three chunks, the last one padded
        assert got.dtype == np.float32 and got.shape == expected.shape
        assert rel_error(got, expected) < 3e-2
        # KV-cached greedy decoding picks what a full recompute of every prefix picks
        new = m.generate(PROMPT[:20], 8, stop=())
        seq = PROMPT[:20]
        for _ in range(8):
            seq.append(int(np.argmax(m.logits(seq)[-1])))
        assert new == seq[20:]


def test_rope_scaling_and_window_change_the_model(tmp_path):
    """The llama3 scaling and Mistral's window are modelled, not ignored: turning them off differs."""
    scaled = save_model(tmp_path / "a", Case("llama", "float16", False, 2, "new"))
    plain = save_model(
        tmp_path / "b", Case("llama", "float16", False, 2, "new"), rope_parameters=None
    )
    ids = PROMPT[:30]
    assert rel_error(reference_logits(plain, ids), reference_logits(scaled, ids)) > 3e-2
    windowed = save_model(tmp_path / "c", Case("mistral", "float16", True, 4, "new", 12))
    full = save_model(tmp_path / "d", Case("mistral", "float16", True, 4, "new", None))
    assert rel_error(reference_logits(full, ids), reference_logits(windowed, ids)) > 3e-2


def test_sharded_checkpoint_loads(tmp_path):
    case = Case("qwen3", "bfloat16", False, 2, "new")
    ref_model = save_model(tmp_path, case)
    ref_model.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 2
    with llm.load(tmp_path / "sharded", backend="reference") as m:
        assert rel_error(m.logits(PROMPT[:10]), reference_logits(ref_model, PROMPT[:10])) < 3e-2


def test_shard_outside_the_model_directory_is_refused(tmp_path):
    case = Case("llama", "float16", True, 2, "new")
    ref_model = save_model(tmp_path / "m", case)
    ref_model.save_pretrained(tmp_path / "s", max_shard_size="40KB")
    index = tmp_path / "s" / "model.safetensors.index.json"
    raw = json.loads(index.read_text())
    name = next(iter(raw["weight_map"]))
    raw["weight_map"][name] = "../m/model.safetensors"
    index.write_text(json.dumps(raw))
    with pytest.raises(ModelError, match="not a relative file name inside the directory"):
        llm.load(tmp_path / "s", backend="reference")


def test_greedy_generation_is_deterministic_and_sampling_follows_the_seed(tmp_path):
    save_model(tmp_path, Case("qwen2", "bfloat16", False, 2, "new"))
    with llm.load(tmp_path, backend="reference", max_seq=64) as m:
        greedy = m.generate(PROMPT[:6], 10, stop=())
        assert m.generate(PROMPT[:6], 10, stop=()) == greedy
        assert m.generate(PROMPT[:6], 10, top_k=1, temperature=1.0, stop=()) == greedy
        sampled = [m.generate(PROMPT[:6], 10, temperature=1.5, seed=s, stop=()) for s in (1, 1, 2)]
        assert sampled[0] == sampled[1] != sampled[2]
        streamed = list(m.stream(PROMPT[:6], 10, stop=()))
        assert streamed == greedy
        assert m.stats.prompt_tokens == 6 and m.stats.new_tokens == 10
        stop = greedy[3]
        assert m.generate(PROMPT[:6], 10, stop=stop) == greedy[: greedy.index(stop)]
        # one prefill, one head, decode buckets: a handful of programs for any depth
        assert 3 <= m.compiles <= 4


def test_compile_count_does_not_grow_with_depth(tmp_path):
    for layers in (1, 6):
        save_model(
            tmp_path / str(layers),
            Case("llama", "float16", True, 2, "new"),
            num_hidden_layers=layers,
        )
        with llm.load(tmp_path / str(layers), backend="reference", max_seq=64) as m:
            m.generate(PROMPT[:4], 2, stop=())
            assert m.compiles == 3  # prefill block, decode block, head


def test_bf16_value_that_overflows_fp16_names_the_tensor(tmp_path):
    import torch

    case = Case("llama", "bfloat16", False, 2, "new")
    model = save_model(tmp_path, case)
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight[3, 5] = 1.0e5  # finite in bf16, inf in fp16
    model.to(torch.bfloat16).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="model.layers.1.mlp.up_proj.weight") as info:
        llm.load(tmp_path, backend="reference")
    assert "overflow fp16" in str(info.value) and "99840" in str(info.value)


def test_unsupported_architecture_is_a_clear_error(tmp_path):
    save_model(tmp_path, Case("llama", "float16", True, 2, "new"))
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["architectures"] = ["GPT2LMHeadModel"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelError) as info:
        llm.load(tmp_path, backend="reference")
    message = str(info.value)
    assert "GPT2LMHeadModel" in message
    for arch in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"):
        assert arch in message


def test_missing_head_and_wrong_shapes_are_errors(tmp_path):
    save_model(tmp_path, Case("llama", "float16", False, 2, "new"))
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "intermediate_size": 80}))
    with pytest.raises(ModelError, match=r"gate_proj.weight.*expected shape \[80, 64\]"):
        llm.load(tmp_path, backend="reference")
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ModelError, match="no model.safetensors"):
        llm.load(tmp_path, backend="reference")


def test_head_is_split_above_the_chip_dimension_limit(tmp_path, monkeypatch):
    """A vocabulary above the limit is computed in pieces; the logits are still whole and right."""
    from anekit.llm import kernels

    case = Case("qwen2", "float16", True, 2, "new")
    ref_model = save_model(tmp_path, case, vocab=200)
    assert kernels.head_pieces(151936, 65536) == (50646, 50645, 50645)
    split = kernels.head_pieces
    monkeypatch.setattr(kernels, "head_pieces", lambda vocab, limit: split(vocab, 64))
    with llm.load(tmp_path, backend="reference") as m:  # a pretend limit of 64 rows: 4 pieces
        got = m.logits(PROMPT[:12])
    assert len(m.runner.pieces) == 4 and max(m.runner.pieces) <= 64
    assert rel_error(got, reference_logits(ref_model, PROMPT[:12])) < 3e-2


def test_prompt_errors(tmp_path):
    save_model(tmp_path, Case("llama", "float16", True, 2, "new"))
    with llm.load(tmp_path, backend="reference", max_seq=16) as m:
        with pytest.raises(UsageError, match="exceed the cache of 16"):
            m.generate(PROMPT[:10], 7)
        with pytest.raises(UsageError, match="outside the vocabulary"):
            m.logits([1, 96])
        with pytest.raises(UsageError, match="no tokens"):
            m.logits([])
        with pytest.raises(UsageError, match="top_p"):
            m.generate([1], 1, top_p=0.0)


def test_tokenizer_json_is_loaded_and_round_trips(tmp_path):
    save_model(tmp_path, Case("llama", "float16", True, 2, "new"))
    save_tokenizer(tmp_path)
    with llm.load(tmp_path, backend="reference") as m:
        text = "Once upon a time the robot read a book."
        ids = m.tokenizer.encode(text)
        assert m.tokenizer.decode(ids) == text and m.tokenizer.vocab_size == 96
