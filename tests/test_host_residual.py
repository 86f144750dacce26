"""The fp32 host residual between programs (anekit.llm.runners, "Host residual"; issue 25).

A 3-layer Llama written by transformers whose massive activation is carried by one token
only (the attention-sink pattern of real LLMs): token TRIGGER's embedding holds 30000 on
one channel and every layer's MLP adds about 20000 more there, so its stream peaks near
90000 after the last layer, beyond fp16 (65504), while each projection's output stays
under the matmul cliff (32752, N1). The calibration tokens do not contain TRIGGER, so it
chooses alpha = 1, and the prompt then overflows inside one program: under the default
(m4) profile the fp16 stream is inf and the guard refuses the step; with the host residual
(chosen by "auto" at that step) the logits match transformers' float32 ones.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from anekit.errors import GarbageValues
from tests.llm_models import Case, hf_classes, reference_logits, rel_error, save_model

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

OUTLIER = 5  # the residual channel carrying the massive activation
GATE = 7  # the MLP hidden unit of every layer that writes into it
TRIGGER = 9  # the one token whose embedding carries it
IDS = [3, 17, TRIGGER, 8, 42, 60, 1, 2]
CALIBRATION = [3, 17, 8, 42, 60, 1, 2, 11]  # no TRIGGER: alpha 1


def trigger_model(directory: Path):
    import safetensors.torch as st
    import torch

    save_model(directory, Case("llama", "float16", False, 4, "new"), num_hidden_layers=3)
    path = str(directory / "model.safetensors")
    tensors = {k: v.float() for k, v in st.load_file(path).items()}
    embed = tensors["model.embed_tokens.weight"]
    embed[:, OUTLIER] = 0.0  # only the trigger's stream ever holds anything there
    embed[TRIGGER, OUTLIER] = 30000.0
    for layer in range(3):
        mlp = f"model.layers.{layer}.mlp"
        tensors[f"model.layers.{layer}.post_attention_layernorm.weight"][OUTLIER] = 1.0
        for proj in ("gate_proj", "up_proj"):  # reads the outlier: about 8 * 2 = 16
            w = tensors[f"{mlp}.{proj}.weight"]
            w[GATE] = 0.0
            w[GATE, OUTLIER] = 2.0
        down = tensors[f"{mlp}.down_proj.weight"]
        down[:, GATE] = 0.0
        down[OUTLIER] = 0.0
        down[OUTLIER, GATE] = 20000.0 / 256  # silu(16) * 16 ~ 256: about 20000 a layer
        tensors[f"model.layers.{layer}.self_attn.o_proj.weight"][OUTLIER] = 0.0
    st.save_file({k: v.half() for k, v in tensors.items()}, path, metadata={"format": "pt"})
    _, model_cls = hf_classes("llama")
    return model_cls.from_pretrained(directory, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def trigger(tmp_path_factory):
    directory = tmp_path_factory.mktemp("trigger")
    return directory, trigger_model(directory)


def test_the_trigger_stream_leaves_fp16_while_each_projection_stays_under_the_cliff(
    trigger,
) -> None:
    import torch

    _, reference = trigger
    with torch.no_grad():
        hidden = reference(torch.tensor([IDS]), output_hidden_states=True).hidden_states
    peaks = [float(h.abs().max()) for h in hidden]
    assert peaks[-2] > 65504  # after the second layer, in float32 (the last is normed)
    steps = [b - a for a, b in zip(peaks[:-2], peaks[1:-1])]
    assert max(steps) < 32752  # every layer's own output fits the matmul range


@pytest.mark.parametrize("compress", [None, "fp16"])  # one program per layer / one for all
def test_the_host_residual_matches_transformers_where_fp16_overflows(
    trigger, compress, monkeypatch
) -> None:
    from anekit import llm

    monkeypatch.delenv("ANEKIT_NUMERICS", raising=False)
    directory, reference = trigger
    want = reference_logits(reference, IDS)
    options = {"backend": "reference", "calibration": CALIBRATION, "compress": compress}
    with llm.load(directory, residual="fp16", **options) as m:
        assert m.config.residual_scale == 1.0  # the calibration never saw the trigger
        with pytest.raises(GarbageValues, match="overflowed fp16"):
            m.logits(IDS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with llm.load(directory, **options) as m:  # residual="auto"
            assert m.residual_mode == "fp16"
            got = m.logits(IDS)
            assert m.residual_mode == "host" and "position 2" in m.runner.host_reason
            assert {k.numerics for k in m.runner.kernels()} == {"m4"}
            again = m.logits(IDS)  # stays in the host form: no second switch
    assert rel_error(got, want) < 0.03, rel_error(got, want)
    np.testing.assert_array_equal(got, again)
    assert sum("carried in float32 on the host" in str(w.message) for w in caught) == 1


def test_residual_host_from_the_start_and_a_healthy_model_unchanged(trigger) -> None:
    from anekit import llm

    directory, reference = trigger
    ids = [i for i in IDS if i != TRIGGER]
    want = reference_logits(reference, ids)
    options = {"backend": "reference", "calibration": CALIBRATION}
    with llm.load(directory, **options) as m:
        fp16_logits = m.logits(ids)
        assert m.residual_mode == "fp16"  # nothing overflowed: auto stays in fp16
    with llm.load(directory, residual="host", **options) as m:
        host_logits = m.logits(ids)
        generated = m.generate(IDS, 4, stop=())
    assert rel_error(fp16_logits, want) < 0.03 and rel_error(host_logits, want) < 0.03
    assert len(generated) == 4


def test_an_unknown_residual_mode_is_refused(trigger) -> None:
    from anekit import llm
    from anekit.errors import UsageError

    directory, _ = trigger
    with pytest.raises(UsageError, match="residual must be one of"):
        llm.load(directory, backend="reference", residual="fp32", residual_scale=1.0)
    with pytest.raises(UsageError, match="residual must be one of"):  # before anything is read
        llm.load(directory / "missing", residual="fp32")


def test_generate_takes_residual_and_strict(trigger, capsys) -> None:
    from anekit.cli import main
    from tests.llm_models import save_tokenizer

    directory, _ = trigger
    if not (directory / "tokenizer.json").exists():
        save_tokenizer(directory)
    argv = ["generate", "--model", str(directory), "--prompt", "Once upon", "--max-tokens", "2",
            "--backend", "reference", "--residual", "host", "--strict"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err


def test_serve_takes_residual_and_strict(trigger, monkeypatch) -> None:
    """The flags reach the served model: the server itself is replaced by a recorder (the
    socket is bound on loopback port 0 and closed by the command)."""
    pytest.importorskip("starlette")
    from anekit.cli import main
    from anekit.llm.serve import server
    from tests.llm_models import save_tokenizer

    directory, _ = trigger
    if not (directory / "tokenizer.json").exists():
        save_tokenizer(directory)
    seen = []

    def record(engine, settings, sock, **kw) -> None:
        seen.append((engine.model.residual_mode, engine.model.strict, sock.getsockname()[0]))

    monkeypatch.setattr(server, "run_server", record)
    common = ["serve", "--model", str(directory), "--port", "0", "--backend", "reference"]
    assert main([*common, "--residual", "host", "--strict", "--quiet"]) == 0
    assert main([*common, "--quiet"]) == 0
    assert seen == [("host", True, "127.0.0.1"), ("fp16", False, "127.0.0.1")]
