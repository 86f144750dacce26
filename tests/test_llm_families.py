"""Decoder families beyond Llama/Qwen/Mistral, each against transformers on a tiny random model."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from anekit import llm  # noqa: E402
from anekit.errors import ModelError  # noqa: E402
from tests.clitools import run  # noqa: E402
from tests.llm_models import Case, reference_logits, rel_error, save_model  # noqa: E402

PROMPT = [int(t) for t in np.random.default_rng(3).integers(0, 96, 30)]
TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}  # inside the tiny vocabulary
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
        new = m.generate(PROMPT[:12], 6, stop=())
        seq = PROMPT[:12]
        for _ in range(6):  # KV-cached decoding picks what a full recompute picks
            seq.append(int(np.argmax(m.logits(seq)[-1])))
        assert new == seq[12:]


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
