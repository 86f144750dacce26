"""``anekit train`` end to end: logs, checkpoints, Ctrl-C and --resume, samples; bad input."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")

from anekit.cli import main  # noqa: E402
from anekit.errors import UsageError  # noqa: E402
from anekit.train.checkpoint import FORMAT  # noqa: E402
from anekit.train.config import TrainConfig  # noqa: E402
from anekit.train.data import load_data  # noqa: E402
from anekit.train.model import Model  # noqa: E402
from tests.test_train_data import small_vocab, write_tokenizer  # noqa: E402

FAST = ["--batch-size", "1", "--backend", "reference", "--warmup", "1"]
QUIET = [*FAST, "--sample-tokens", "0"]


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_train_logs_checkpoints_and_samples(tmp_path: Path, capsys) -> None:
    out, log = tmp_path / "run", tmp_path / "log.jsonl"
    code = main(["train", "--steps", "3", "--out", str(out), "--log", str(log),
                 "--sample-tokens", "8", "--prompt", "def ", *FAST])  # fmt: skip
    assert code == 0
    records = read_log(log)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert {"step", "loss", "lr", "ms", "tokens_per_s"} <= set(records[0])
    assert (out / "LATEST").read_text().strip() == "ckpt-000003"
    text = capsys.readouterr().out
    assert "cost model:" in text and "ms of ANE kernel time per step on m4" in text
    assert "--- sample" in text and "def " in text

    assert main(["generate", "--ckpt", str(out), "--prompt", "class", "--tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("class")


def _sigint_during(monkeypatch, step: int, micro_batch: int, count: int = 1) -> None:
    """Send SIGINT ``count`` times from inside ``micro_batch`` (0-based) of step ``step`` (1-based)."""
    real = Model.loss_and_grads
    calls = []

    def interrupted(self: Model, *args, **kwargs):
        calls.append(None)
        if len(calls) == (step - 1) * 2 + micro_batch + 1:  # the runs below accumulate 2
            for _ in range(count):
                os.kill(os.getpid(), signal.SIGINT)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Model, "loss_and_grads", interrupted)


def test_ctrl_c_inside_a_step_saves_that_whole_step_and_resumes_exactly(
    tmp_path: Path, monkeypatch
) -> None:
    args = ["train", "--steps", "5", "--sample-tokens", "0", "--save-every", "0", *FAST]
    args += ["--grad-accum", "2"]
    assert main([*args, "--out", str(tmp_path / "a"), "--log", str(tmp_path / "a.jsonl")]) == 0
    run_b = [*args, "--out", str(tmp_path / "b"), "--log", str(tmp_path / "b.jsonl")]
    with monkeypatch.context() as patch:
        _sigint_during(patch, step=3, micro_batch=0)  # the data iterator has moved on
        assert main(run_b) == 130
    # the step Ctrl-C arrived in was finished, then saved whole
    assert (tmp_path / "b" / "LATEST").read_text().strip() == "ckpt-000003"
    assert main([*run_b, "--resume"]) == 0
    losses = lambda name: [r["loss"] for r in read_log(tmp_path / name)]  # noqa: E731
    assert len(losses("b.jsonl")) == 5
    assert losses("b.jsonl") == losses("a.jsonl")


def test_a_second_ctrl_c_stops_at_once_and_keeps_the_last_checkpoint(
    tmp_path: Path, monkeypatch
) -> None:
    run = ["train", "--steps", "5", "--sample-tokens", "0", "--save-every", "1", *FAST]
    run += ["--grad-accum", "2", "--out", str(tmp_path / "b")]
    _sigint_during(monkeypatch, step=3, micro_batch=0, count=2)
    assert main(run) == 130
    assert (tmp_path / "b" / "LATEST").read_text().strip() == "ckpt-000002"  # no half step


def test_clear_errors_for_nothing_to_resume_and_missing_data(tmp_path: Path, capsys) -> None:
    assert main(["train", "--resume", "--out", str(tmp_path), *FAST]) == 2
    assert "no checkpoint here" in capsys.readouterr().err
    assert main(["train", "--data", str(tmp_path / "none.txt"), *FAST]) == 2
    assert (
        "none.txt: cannot read training text: no such file or directory" in capsys.readouterr().err
    )


def test_llama2c_data_sets_the_vocabulary_and_sampling_decodes_with_it(
    tmp_path: Path, capsys
) -> None:
    write_tokenizer(tmp_path / "tokenizer.bin", small_vocab())
    data = tmp_path / "stories.bin"
    np.random.default_rng(0).integers(3, 265, size=400).astype("<u2").tofile(data)
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--steps", "1", "--out", str(out),
                 "--sample-tokens", "0", *FAST]) == 0  # fmt: skip
    assert "vocabulary: 256 -> 265" in capsys.readouterr().out
    assert main(["generate", "--ckpt", str(out), "--prompt", "ab", "--tokens", "3"]) == 0
    assert capsys.readouterr().out.startswith("ab")


@pytest.mark.parametrize("size", [0, 100, 128])
def test_training_data_shorter_than_one_window(size: int, tmp_path: Path, capsys) -> None:
    data = tmp_path / "short.txt"
    data.write_bytes(b"x" * size)
    code = main(
        ["train", "--data", str(data), "--steps", "1", "--out", str(tmp_path / "o"), *QUIET]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"{data} has {size} tokens" in err and "needs at least 129" in err  # tiny: seq 128


def test_tokenizer_with_a_single_token_is_rejected(tmp_path: Path) -> None:
    write_tokenizer(tmp_path / "tokenizer.bin", [(b"a", 0.0)])
    (tmp_path / "data.bin").write_bytes(bytes(600))
    with pytest.raises(UsageError, match=r"tokenizer.bin: 1 token\(s\); expected at least 2"):
        load_data(tmp_path / "data.bin")


def test_resume_from_a_state_without_train_settings(tmp_path: Path, capsys) -> None:
    ckpt = tmp_path / "ckpt-000001"
    ckpt.mkdir()
    (ckpt / "state.json").write_text(json.dumps({"format": FORMAT, "step": 1, "files": {}}))
    (tmp_path / "LATEST").write_text("ckpt-000001\n")
    assert main(["train", "--resume", "--out", str(tmp_path), *QUIET]) == 2
    err = capsys.readouterr().err
    assert f"{ckpt}: state.json has no valid train config" in err


def test_resume_past_the_requested_steps_says_so(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "run")
    assert main(["train", "--steps", "2", "--out", out, *QUIET]) == 0
    capsys.readouterr()
    assert main(["train", "--steps", "1", "--resume", "--out", out, *QUIET]) == 0
    assert "nothing to train: the run already has 2 of 1 steps" in capsys.readouterr().out


def test_negative_warmup_is_rejected(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="warmup must be at least 0, found -5"):
        TrainConfig(warmup=-5)
    code = main(["train", "--steps", "3", "--warmup", "-5", "--out", str(tmp_path / "o")])
    assert code == 2
    assert "warmup must be at least 0, found -5" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--save-every", "-1"), ("--sample-tokens", "-5")])
def test_train_rejects_negative_counts(flag: str, value: str, capsys) -> None:
    assert main(["train", flag, value]) == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a finite number >= 0" in err


def test_empty_llama2c_bin_reports_its_length(tmp_path: Path, capsys) -> None:
    write_tokenizer(tmp_path / "tokenizer.bin", [(b"<unk>", 0.0), (b"<s>", 0.0), (b"a", 0.0)])
    data = tmp_path / "empty.bin"
    data.write_bytes(b"")
    code = main(
        ["train", "--data", str(data), "--steps", "1", "--out", str(tmp_path / "o"), *QUIET]
    )
    assert code == 2
    assert f"{data} has 0 tokens" in capsys.readouterr().err


@pytest.mark.parametrize("lr", ["inf", "nan"])
def test_infinite_or_nan_learning_rate_is_rejected(lr: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="need 0 <= min_lr <= lr < inf"):
        TrainConfig(lr=float(lr))
    assert main(["train", "--steps", "1", "--lr", lr, "--out", str(tmp_path / "o")]) == 2
    assert f"lr={lr}" in capsys.readouterr().err


def test_tokenizer_with_text_data_is_not_silently_ignored(tmp_path: Path) -> None:
    write_tokenizer(tmp_path / "tokenizer.bin", [(b"<unk>", 0.0), (b"<s>", 0.0), (b"a", 0.0)])
    text = tmp_path / "corpus.txt"
    text.write_text("a" * 300)
    with pytest.raises(
        UsageError, match=r"applies only to llama2.c .bin data; found '.*corpus.txt'"
    ):
        load_data(text, tmp_path / "tokenizer.bin")
    with pytest.raises(UsageError, match="found the default corpus"):
        load_data(None, tmp_path / "tokenizer.bin")


def test_a_run_already_in_out_is_not_replaced(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["train", "--steps", "1", "--out", str(out), *QUIET]) == 0
    capsys.readouterr()
    assert main(["train", "--steps", "1", "--out", str(out), *QUIET]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"anekit train: error: {out} already holds a run (latest: ckpt-000001); "
        "pass --resume to continue it or choose another --out\n"
    )
