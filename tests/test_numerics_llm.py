"""The outlier-LLM must-show: a transformers Llama with a residual channel above 65504.

The model is written by transformers (random init, 3 layers) and given the "massive
activation" pattern of real LLMs: every embedding carries 40000 on one channel and the
first MLP writes about 33000 more there, so the residual stream peaks near 73000, beyond
fp16 (65504), and the MLP output passes the engine's matmul cliff (32752, N1).
transformers computes it in float32; ``anekit.llm.load`` (default profile, residual
scaling chosen by calibration) must match its logits, and without the scaling the golden
model must show the failure the engine would.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anekit.errors import AnekitError
from anekit.llm import kernels as K
from tests.llm_models import Case, hf_classes, reference_logits, rel_error, save_model

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

OUTLIER = 5  # the residual channel that carries the massive activation
GATE = 7  # the MLP hidden unit that writes into it
IDS = [3, 17, 42, 8, 9, 60, 1, 2]


def outlier_model(directory: Path):
    """Save the model, plant the outlier in its safetensors file, return transformers' fp32 model."""
    import safetensors.torch as st
    import torch

    save_model(directory, Case("llama", "float16", False, 4, "new"), num_hidden_layers=3)
    path = str(directory / "model.safetensors")
    tensors = {k: v.float() for k, v in st.load_file(path).items()}
    tensors["model.embed_tokens.weight"][:, OUTLIER] = 40000.0
    mlp = "model.layers.0.mlp"
    for proj in ("gate_proj", "up_proj"):  # the unit reads the outlier: about 8 * 2 = 16
        w = tensors[f"{mlp}.{proj}.weight"]
        w[GATE] = 0.0
        w[GATE, OUTLIER] = 2.0
    tensors[f"{mlp}.down_proj.weight"][OUTLIER, GATE] = 40000.0 / 256  # silu(16) * 16 ~ 256
    st.save_file({k: v.half() for k, v in tensors.items()}, path, metadata={"format": "pt"})
    _, model_cls = hf_classes("llama")
    return model_cls.from_pretrained(directory, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def outlier(tmp_path_factory):
    directory = tmp_path_factory.mktemp("outlier")
    reference = outlier_model(directory)
    return directory, reference


def test_the_planted_stream_really_leaves_fp16(outlier) -> None:
    import torch

    _, reference = outlier
    with torch.no_grad():
        hidden = reference(torch.tensor([IDS]), output_hidden_states=True).hidden_states
    assert float(hidden[1].abs().max()) > 65504  # after the first block, in float32


def test_llm_load_matches_transformers_within_3_percent(outlier, monkeypatch) -> None:
    from anekit import llm

    monkeypatch.delenv("ANEKIT_NUMERICS", raising=False)
    directory, reference = outlier
    want = reference_logits(reference, IDS)
    with llm.load(directory, backend="reference") as m:
        got = m.logits(IDS)
        assert {k.numerics for k in m.runner.kernels()} == {"m4"}  # the default profile here
        alpha = m.config.residual_scale
        calibration = m.residual_calibration
    assert rel_error(got, want) < 0.03
    assert alpha == 1 / 16 and calibration.peak > 65504
    assert calibration.peak * alpha <= 32752 / 4


def test_without_the_scaling_the_golden_model_shows_the_failure(outlier) -> None:
    from anekit import llm

    directory, reference = outlier
    with llm.load(directory, backend="reference", numerics="m4", residual_scale=1.0,
                  residual="fp16") as m:  # fmt: skip
        try:
            got = m.logits(IDS)
        except AnekitError as e:  # the garbage guard may refuse the step: also a failure shown
            got = None
            assert "non-finite" in str(e) or "garbage" in str(e), e
        block = m.runner.kernels()[0]  # one block program runs every layer
        key = K.BlockKey(m.chunk, m.max_seq)
        m.runner.blocks(IDS, 0, key, m.runner.cache)
        first_layer = m.runner.residuals(key, m.runner.cache)[0][1][0, 0, :, : len(IDS)]
        assert np.all(np.isinf(first_layer[OUTLIER]))  # the MLP's 33000 saturated (N1)
        events = block.events  # of the last layer: the engine would say nothing
        assert events.total > 0 and events.first is not None
    if got is not None:
        assert rel_error(got, reference_logits(reference, IDS)) > 0.5


def test_convert_llm_stores_alpha_and_loading_uses_it(outlier, tmp_path, monkeypatch) -> None:
    import json

    from anekit import llm
    from anekit.cli import main

    monkeypatch.delenv("ANEKIT_NUMERICS", raising=False)
    directory, reference = outlier
    out = tmp_path / "saved"
    argv = ["convert", str(directory), "--llm", "--compress", "int8", "--chip", "m4",
            "--out", str(out), "--json"]  # fmt: skip
    assert main(argv) == 0
    manifest = json.loads((out / "anekit_llm.json").read_text())
    assert manifest["residual_scale"] == 1 / 16
    assert manifest["residual_calibration"]["peak"] > 65504
    want = reference_logits(reference, IDS)
    with llm.load(out, backend="reference", chip="m4") as m:  # no calibration: the stored alpha
        assert m.config.residual_scale == 1 / 16 and m.residual_calibration is None
        assert rel_error(m.logits(IDS), want) < 0.03
        assert m.residual_mode == "fp16"
    with llm.load(out, backend="reference", chip="m4", residual_scale=1.0, residual="fp16") as m:
        with pytest.raises(AnekitError, match="overflowed fp16"):  # a given alpha overrides it
            m.logits(IDS)
    del manifest["residual_scale"]  # a directory saved before alpha was stored
    (out / "anekit_llm.json").write_text(json.dumps(manifest))
    with llm.load(out, backend="reference", chip="m4", residual="fp16") as m:
        assert m.config.residual_scale == 1.0
