"""Decoder families beyond Llama/Qwen/Mistral, each against transformers on a tiny random model."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from anekit import llm  # noqa: E402
from anekit.errors import ModelError, UsageError  # noqa: E402
from tests.clitools import run  # noqa: E402
from tests.llm_models import Case, reference_logits, rel_error, save_model  # noqa: E402

PROMPT = [int(t) for t in np.random.default_rng(3).integers(0, 96, 30)]
TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}  # inside the tiny vocabulary


def assert_cached_decoding_matches_recompute(m) -> None:
    """KV-cached greedy decoding picks what a full recompute of every prefix picks."""
    new = m.generate(PROMPT[:12], 6, stop=())
    seq = PROMPT[:12]
    for _ in range(6):
        seq.append(int(np.argmax(m.logits(seq)[-1])))
    assert new == seq[12:]


PHI3 = [
    Case("phi3", "bfloat16", False, 2, "new", sliding_window=10),
    Case("phi3", "float16", True, 4, "old"),
]


@pytest.mark.parametrize("case", PHI3, ids=[c.id for c in PHI3])
def test_phi3_fused_weights_match_transformers(tmp_path, case) -> None:
    ref_model = save_model(tmp_path, case, **TOKENS)
    names = set(ref_model.state_dict())
    assert "model.layers.0.self_attn.qkv_proj.weight" in names  # stored fused
    assert "model.layers.0.mlp.gate_up_proj.weight" in names
    expected = reference_logits(ref_model, PROMPT)
    with llm.load(tmp_path, backend="reference", chunk=16, max_seq=64) as m:
        assert m.config.family == "phi3" and m.config.fused
        assert m.config.sliding_window == case.sliding_window
        assert rel_error(m.logits(PROMPT), expected) < 3e-2
        assert_cached_decoding_matches_recompute(m)


def test_phi3_estimate_and_refusals(tmp_path, capsys) -> None:
    save_model(tmp_path, PHI3[0], **TOKENS)
    code, out, err = run(capsys, "estimate", "--model", str(tmp_path), "--chip", "m4", "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["decode_tokens_per_s"] > 0 and record["compiles"] == 3
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["partial_rotary_factor"] = 0.5
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelError, match="partial_rotary_factor"):
        llm.load(tmp_path, backend="reference")
    raw["partial_rotary_factor"] = 1.0
    raw["rope_parameters"] = {"rope_type": "longrope", "rope_theta": 10000.0,
                              "short_factor": [1.0] * 8, "long_factor": [1.0] * 8}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelError, match="longrope"):
        llm.load(tmp_path, backend="reference")


# Gemma: each case's options make its features bite at these tiny sizes (small soft-caps, a
# query scalar other than head_dim, windows shorter than the prompt, a local RoPE base)
GEMMA = [
    (Case("gemma2", "bfloat16", True, 2, "new", sliding_window=6),
     dict(attn_logit_softcapping=2.0, final_logit_softcapping=1.5, query_pre_attn_scalar=24)),
    (Case("gemma2", "float16", False, 1, "old", sliding_window=9), {}),
    (Case("gemma3", "bfloat16", True, 2, "new", sliding_window=6),
     dict(query_pre_attn_scalar=24, num_hidden_layers=3,
          layer_types=["sliding_attention", "full_attention", "sliding_attention"],
          rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                           "full_attention": {"rope_type": "linear", "factor": 2.0,
                                              "rope_theta": 10000.0}})),
    (Case("gemma3", "float16", False, 4, "old", sliding_window=7),
     dict(num_hidden_layers=3, sliding_window_pattern=2, rope_parameters={
         "sliding_attention": {"rope_type": "default", "rope_theta": 50.0},
         "full_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
]  # fmt: skip


def gemma3_old_style(path) -> None:
    """Older Gemma-3 configs: ``rope_theta``, ``rope_local_base_freq``, ``sliding_window_pattern``."""
    raw = json.loads(path.read_text())
    rope = raw.pop("rope_parameters")
    raw["rope_theta"] = rope["full_attention"]["rope_theta"]
    raw["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
    raw["rope_scaling"] = None
    pattern = raw.pop("layer_types").index("full_attention") + 1
    raw["sliding_window_pattern"] = pattern
    raw.pop("_sliding_window_pattern", None)
    raw["torch_dtype"] = raw.pop("dtype")
    path.write_text(json.dumps(raw))


def save_gemma(directory, case: Case, options: dict):
    """Save a Gemma case (older-style Gemma-3 configs rewritten as such checkpoints ship)."""
    old3 = case.arch == "gemma3" and case.style == "old"
    saved = Case(case.arch, case.dtype, case.tied, case.kv_heads, "new", case.sliding_window)
    ref_model = save_model(directory, saved if old3 else case, **TOKENS, **options)
    if old3:
        gemma3_old_style(directory / "config.json")
    return ref_model


# the default numerics profile, "ideal", a residual stream held at 1/16 (the post-norms
# read and write it), and the compiled-in segments (local and global layers in one program)
LOADS = [{}, {"numerics": "ideal"}, {"residual_scale": 2.0**-4}, {"compress": "fp16"}]


@pytest.mark.parametrize("load", LOADS, ids=["default", "ideal", "alpha", "segments"])
@pytest.mark.parametrize(("case", "options"), GEMMA, ids=[c.id for c, _ in GEMMA])
def test_gemma_matches_transformers(tmp_path, case, options, load) -> None:
    ref_model = save_gemma(tmp_path, case, options)
    expected = reference_logits(ref_model, PROMPT)
    with llm.load(tmp_path, backend="reference", chunk=16, max_seq=64, **load) as m:
        c = m.config
        assert c.gemma and c.family == case.arch and c.local_layers == (0, 2)[: c.n_layers - 1]
        assert c.sliding_window == case.sliding_window
        assert c.residual_scale == load.get("residual_scale", 1.0)
        assert rel_error(m.logits(PROMPT), expected) < 3e-2
        assert_cached_decoding_matches_recompute(m)


def _edited(directory, **changes) -> np.ndarray:
    """anekit's logits of the saved model with ``changes`` made to its config.json."""
    path = directory / "config.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, **changes}))
    try:
        with llm.load(directory, backend="reference", chunk=16, max_seq=64) as m:
            return m.logits(PROMPT)
    finally:
        path.write_text(json.dumps(raw))


@pytest.mark.parametrize(("case", "options"), [GEMMA[0], GEMMA[2]], ids=["gemma2", "gemma3"])
def test_gemma_features_are_modelled_not_ignored(tmp_path, case, options) -> None:
    """Each feature changes the logits at these sizes, so matching transformers with it on
    shows it is modelled: turned off in the config, anekit no longer matches."""
    expected = reference_logits(save_gemma(tmp_path, case, options), PROMPT)
    changes = [{"query_pre_attn_scalar": 16}, {"sliding_window": 64},
               {"layer_types": ["full_attention"] * 3}]  # fmt: skip
    if case.arch == "gemma2":
        changes = [{"attn_logit_softcapping": None}, {"final_logit_softcapping": None},
                   *changes[:2]]  # fmt: skip
    else:
        rope = {"rope_type": "default", "rope_theta": 10000.0}
        changes.append({"rope_parameters": {"sliding_attention": rope, "full_attention": rope}})
    for change in changes:
        assert rel_error(_edited(tmp_path, **change), expected) > 3e-2, change


@pytest.mark.parametrize(("case", "options"), [GEMMA[0], GEMMA[2]], ids=["gemma2", "gemma3"])
def test_gemma_estimate(tmp_path, capsys, case, options) -> None:
    save_gemma(tmp_path, case, options)
    code, out, err = run(capsys, "estimate", "--model", str(tmp_path), "--chip", "m4", "--json")
    assert code == 0, err
    record = json.loads(out)
    # local and global layers run their own block programs: two kinds, prefill and decode each
    assert record["decode_tokens_per_s"] > 0 and record["compiles"] == 5


def test_gemma_config_refusals(tmp_path) -> None:
    save_gemma(tmp_path, *GEMMA[0])
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    bad = [({"layer_types": ["sliding_attention"]}, "layer_types must list 2"),
           ({"layer_types": ["sliding_attention", "chunked_attention"]}, "layer_types"),
           ({"hidden_activation": "gelu"}, "hidden activation 'gelu'"),
           ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
           ({"attn_logit_softcapping": -1.0}, "attn_logit_softcapping must be above 0"),
           ({"sliding_window": None}, "no sliding_window")]  # fmt: skip
    for change, message in bad:
        path.write_text(json.dumps({**raw, **change}))
        with pytest.raises(ModelError, match=message):
            llm.load(tmp_path, backend="reference")


# mixtures of experts: 6 experts, 2 per token; Qwen2-MoE with its gated shared expert
MOE = [
    (Case("qwen2_moe", "bfloat16", False, 2, "new"), dict(shared_expert_intermediate_size=48)),
    (Case("qwen3_moe", "float16", True, 1, "old"), dict(norm_topk_prob=True)),
]
EXPERTS = dict(moe_intermediate_size=32, num_experts=6, num_experts_per_tok=2)


@pytest.mark.parametrize("load", LOADS[:3], ids=["default", "ideal", "alpha"])
@pytest.mark.parametrize(("case", "options"), MOE, ids=[c.id for c, _ in MOE])
def test_moe_matches_transformers(tmp_path, case, options, load) -> None:
    ref_model = save_model(tmp_path, case, **TOKENS, **EXPERTS, **options)
    expected = reference_logits(ref_model, PROMPT)
    with llm.load(tmp_path, backend="reference", chunk=16, max_seq=64, **load) as m:
        c = m.config
        assert (c.experts, c.experts_per_token, c.expert_dim) == (6, 2, 32)
        assert c.shared_expert_dim == options.get("shared_expert_intermediate_size", 0)
        assert c.n_params() == sum(p.numel() for p in ref_model.parameters())  # tied: once
        assert rel_error(m.logits(PROMPT), expected) < 3e-2
        assert_cached_decoding_matches_recompute(m)


@pytest.mark.parametrize(("case", "options"), MOE, ids=[c.id for c, _ in MOE])
def test_moe_routing_is_modelled_and_estimated(tmp_path, capsys, case, options) -> None:
    """Top-k, the renormalisation and the shared expert change the logits at these sizes:
    matching transformers with them shows each is modelled."""
    expected = reference_logits(save_model(tmp_path, case, **TOKENS, **EXPERTS, **options),
                                PROMPT)  # fmt: skip
    changes = [{"num_experts_per_tok": 3}, {"norm_topk_prob": not options.get("norm_topk_prob")}]
    for change in changes:
        assert rel_error(_edited(tmp_path, **change), expected) > 3e-2, change
    code, out, err = run(capsys, "estimate", "--model", str(tmp_path), "--chip", "m4", "--json")
    assert code == 0, err
    assert json.loads(out)["decode_tokens_per_s"] > 0


def test_moe_refusals(tmp_path) -> None:
    save_model(tmp_path, MOE[0][0], **TOKENS, **EXPERTS, **MOE[0][1])
    with pytest.raises(UsageError, match="not supported for mixtures of experts"):
        llm.load(tmp_path, backend="reference", compress="int8")
    path = tmp_path / "config.json"
    raw = json.loads(path.read_text())
    bad = [({"mlp_only_layers": [0]}, "dense layers among the experts'"),
           ({"decoder_sparse_step": 2}, "decoder_sparse_step 2"),
           ({"num_experts_per_tok": 7}, r"num_experts_per_tok must be in \[1, 6\]")]  # fmt: skip
    for change, message in bad:
        path.write_text(json.dumps({**raw, **change}))
        with pytest.raises(ModelError, match=message):
            llm.load(tmp_path, backend="reference")


def test_moe_top_k_keeps_exactly_k_experts_on_fp16_ties() -> None:
    """Ties (common among fp16 probabilities) keep the lower index, as many as asked."""
    import anekit
    from anekit.llm import kernels as K
    from anekit.mil.builder import Builder

    rows = np.array(
        [[0.3, 0.1, 0.3], [0.2, 0.2, 0.2], [0.1, 0.2, 0.3], [0.1, 0.4, 0.1], [0.25, 0.25, 0.5]],
        np.float32,
    )  # tokens x experts
    expected = np.array([[0.3, 0.0, 0.3], [0.2, 0.2, 0.0], [0.0, 0.2, 0.3],
                         [0.1, 0.4, 0.0], [0.25, 0.0, 0.5]], np.float32)  # fmt: skip
    b = Builder()
    p = b.input("p", (1, 1, 3, 5), "fp16")  # [1, 1, E, T]
    b.output(K._top_k(b, p, 2, renormalise=False), "w")
    kernel = anekit.compile(b.build(), backend="reference", numerics="ideal")
    got = np.asarray(kernel(p=rows.T[None, None])["w"])[0, 0].T
    np.testing.assert_allclose(got, expected, atol=1e-3)
