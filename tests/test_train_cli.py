"""``anekit train`` and ``anekit generate`` end to end: logs, checkpoints, Ctrl-C and --resume, samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")

from anekit.cli import main  # noqa: E402
from anekit.train.loop import Trainer  # noqa: E402
from tests.test_train_data import small_vocab, write_tokenizer  # noqa: E402

FAST = ["--batch-size", "1", "--backend", "reference", "--warmup", "1"]


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


def test_interrupted_and_resumed_run_logs_the_same_losses(tmp_path: Path, monkeypatch) -> None:
    args = ["train", "--steps", "4", "--sample-tokens", "0", "--save-every", "0", *FAST]
    assert main([*args, "--out", str(tmp_path / "a"), "--log", str(tmp_path / "a.jsonl")]) == 0

    real_step = Trainer.train_step

    def interrupt_at_step_3(self: Trainer):
        if self.step == 2:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(Trainer, "train_step", interrupt_at_step_3)
    run_b = [*args, "--out", str(tmp_path / "b"), "--log", str(tmp_path / "b.jsonl")]
    assert main(run_b) == 130  # Ctrl-C: checkpoint of step 2 saved, then the usual exit code
    assert (tmp_path / "b" / "LATEST").read_text().strip() == "ckpt-000002"
    monkeypatch.setattr(Trainer, "train_step", real_step)
    assert main([*run_b, "--resume"]) == 0
    losses = lambda name: [r["loss"] for r in read_log(tmp_path / name)]  # noqa: E731
    assert losses("b.jsonl") == losses("a.jsonl")


def test_clear_errors_for_nothing_to_resume_and_missing_data(tmp_path: Path, capsys) -> None:
    assert main(["train", "--resume", "--out", str(tmp_path), *FAST]) == 2
    assert "no checkpoint here" in capsys.readouterr().err
    assert main(["train", "--data", str(tmp_path / "none.txt"), *FAST]) == 2
    assert "is not a file" in capsys.readouterr().err


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
