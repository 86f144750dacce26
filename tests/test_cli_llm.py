"""``anekit generate --model`` and ``anekit estimate --model``: streaming text, stats, predictions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from anekit import llm  # noqa: E402
from anekit.cli import main  # noqa: E402
from anekit.hw.chips import chips  # noqa: E402
from tests.llm_models import Case, RecordingSink, save_model, save_tokenizer  # noqa: E402

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("model")
    save_model(directory, Case("qwen3", "bfloat16", True, 2, "new"))
    save_tokenizer(directory)
    return directory


def test_generate_model_streams_the_prompt_then_the_continuation(model_dir, monkeypatch, capsys):
    out = RecordingSink()
    monkeypatch.setattr(sys, "stdout", out)
    argv = ["generate", "--model", str(model_dir), "--prompt", PROMPT, "--tokens", "10",
            "--temperature", "0", "--backend", "reference"]  # fmt: skip
    assert main(argv) == 0
    with llm.load(model_dir, backend="reference") as m:
        ids = m.tokenizer.encode(PROMPT)
        new = m.generate(ids, 10)
        continuation = m.tokenizer.decode(ids + new)[len(m.tokenizer.decode(ids)) :]
    assert out.getvalue() == PROMPT + continuation + "\n"
    assert out.writes[0] == PROMPT and len([w for w in out.writes[1:] if w.strip()]) >= 3
    (summary,) = capsys.readouterr().err.splitlines()  # always one line, as mlx-lm prints
    assert summary.startswith("prompt: ") and "generation: 10 tokens" in summary
    assert "peak memory: " in summary
    # then where it ran (nothing was skipped: the backend was asked for)
    assert summary.endswith(" | placement: reference (CPU via the NumPy reference backend (the "
                            "ANE's numerics modelled); asked for)")  # fmt: skip


def test_generate_stats_go_to_stderr(model_dir, capsys):
    argv = ["generate", "--model", str(model_dir), "--prompt", PROMPT, "--tokens", "4",
            "--backend", "reference", "--chip", "m5-pro", "--stats"]  # fmt: skip
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith(PROMPT)
    lines = err.splitlines()
    assert lines[0].startswith("prompt: ") and "generation: 4 tokens" in lines[0]
    assert lines[1].startswith("placement: reference (CPU via")
    assert lines[2].startswith("prompt tokens: ") and "new tokens: 4" in lines[2]
    assert lines[3].startswith("time to first token: ")
    assert lines[4].startswith("one-time: imports ") and "threads: pinned to 1" in lines[4]
    assert lines[5].startswith("measured on reference: prefill ") and "decode" in lines[5]
    assert lines[6].startswith("predicted on m5-pro: prefill ")
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().err)
    assert report["new_tokens"] == 4 and report["predicted"]["chip"] == "m5-pro"
    assert report["startup"]["imports_ms"] >= 0 and report["startup"]["load_ms"] > 0
    assert report["placement"]["backend"] == "reference"
    assert report["decode_tokens_per_s"] > 0 and report["prefill_tokens_per_s"] > 0


def test_generate_model_errors_are_one_line(model_dir, tmp_path, capsys):
    bare = tmp_path / "bare"
    save_model(bare, Case("llama", "float16", True, 2, "new"))  # no tokenizer.json
    capsys.readouterr()  # transformers' own progress lines
    assert main(["generate", "--model", str(bare), "--prompt", "x", "--backend", "reference"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("anekit generate: error: ") and "no tokenizer" in err
    assert err.count("\n") == 1
    raw = json.loads((bare / "config.json").read_text())
    (bare / "config.json").write_text(json.dumps({**raw, "architectures": ["GPT2LMHeadModel"]}))
    assert main(["generate", "--model", str(bare), "--backend", "reference"]) == 2
    err = capsys.readouterr().err
    assert "GPT2LMHeadModel" in err and "Qwen3ForCausalLM" in err and err.count("\n") == 1
    assert main(["generate", "--model", str(model_dir), "--ckpt", "x"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    argv = ["generate", "--model", str(model_dir), "--backend", "reference"]
    assert main(argv) == 2
    assert "the prompt is empty and the model has no BOS token" in capsys.readouterr().err
    assert main([*argv, "--prompt", PROMPT, "--tokens", "300"]) == 2  # 256 positions allowed
    assert "exceeds the model's context of 256" in capsys.readouterr().err


def test_generate_llama2c_checkpoint(tmp_path, capsys):
    import numpy as np

    from tests.test_llm_llama2c import _weights, write_legacy, write_tokenizer

    pieces = [b"<unk>", b"<s>", b"</s>"] + [bytes([32 + i]) for i in range(37)]
    write_tokenizer(tmp_path / "tokenizer.bin", pieces)
    write_legacy(tmp_path / "stories.bin", _weights(np.random.default_rng(0), True))
    argv = ["generate", "--model", str(tmp_path / "stories.bin"), "--prompt", "AB",
            "--tokens", "6", "--backend", "reference"]  # fmt: skip
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("AB")


def test_estimate_model(model_dir, capsys):
    argv = ["estimate", "--model", str(model_dir), "--chip", "m4-pro", "--prompt-tokens", "32"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "chip m4-pro, prompt of 32 tokens" in text and "tok/s" in text
    assert main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    est = llm.cost.estimate_llm(llm.read_model_config(model_dir), "m4-pro", prompt_tokens=32)
    assert record["decode_tokens_per_s"] == round(est.decode_tokens_per_s, 2)
    assert record["prompt_tokens"] == 32 and record["chip"] == "m4-pro"
    assert main(["estimate", "--model", str(model_dir), "--all-chips"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == chips()


def test_estimate_needs_a_program_or_a_model(model_dir, capsys):
    assert main(["estimate"]) == 2
    assert "give a program (FILE or DIR) or --model DIR" in capsys.readouterr().err
    assert main(["estimate", "x.mil", "--model", str(model_dir)]) == 2
    assert main(["estimate", "--model", str(model_dir), "--prompt-tokens", "0"]) == 2
    assert "prompt_tokens must be in [1," in capsys.readouterr().err


def test_generate_compressed_decodes_like_the_compressed_model(model_dir, monkeypatch, capsys):
    out = RecordingSink()
    monkeypatch.setattr(sys, "stdout", out)
    argv = ["generate", "--model", str(model_dir), "--prompt", PROMPT, "--tokens", "6",
            "--temperature", "0", "--backend", "reference", "--compress", "int8"]  # fmt: skip
    assert main(argv) == 0
    with llm.load(model_dir, backend="reference", compress="int8") as m:
        ids = m.tokenizer.encode(PROMPT)
        new = m.generate(ids, 6)
        continuation = m.tokenizer.decode(ids + new)[len(m.tokenizer.decode(ids)) :]
        assert m.compression["head"].weight_bytes_after < m.compression["head"].weight_bytes_before
    assert out.getvalue() == PROMPT + continuation + "\n"


def test_estimate_model_compressed_json(model_dir, capsys):
    from anekit.llm.cost import estimate_llm

    argv = ["estimate", "--model", str(model_dir), "--chip", "m1", "--compress", "lut4", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    expected = estimate_llm(llm.read_model_config(model_dir), "m1", compress="lut4")
    assert data["compress"] == "lut4" and data["weight_bytes"] == expected.weight_bytes
    assert data["decode_tokens_per_s"] == round(expected.decode_tokens_per_s, 2)
    assert main(["generate", "--model", str(model_dir), "--compress", "auto"]) == 2
    assert "unknown compression 'auto'" in capsys.readouterr().err
