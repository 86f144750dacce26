"""Bad input on the train/generate/bench/check/estimate command lines: clear errors, no tracebacks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from anekit.cli import build_parser, main
from anekit.train.checkpoint import FORMAT
from anekit.train.config import TrainConfig
from anekit.train.data import load_data
from tests.test_mil_text import saved_model
from tests.test_train_data import write_tokenizer

GOOD_MIL = """program(1.0)
[buildInfo = dict<string, string>({})]
{
    func main<ios17>(tensor<fp16, [1, 4]> x) {
        tensor<fp16, [1, 4]> y = relu(x = x)[name = string("y")];
    } -> (y);
}
"""
FAST = ["--batch-size", "1", "--backend", "reference", "--warmup", "1", "--sample-tokens", "0"]


def usage_error(argv: list[str], capsys) -> str:
    """Parse ``argv``; it must be rejected as a usage error (exit 2). Returns stderr."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("command", ["check", "estimate"])
def test_binary_file_is_a_located_syntax_error(command, tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.mil"
    path.write_bytes(b"program(1.0)\n\xa0\x01junk")
    assert main([command, str(path), "--chip", "m4"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2:1:" in err and "UTF-8" in err and "0xa0" in err


@pytest.mark.parametrize("command", ["check", "estimate", "train"])
def test_unknown_chip_is_a_usage_error(command, tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.mil"
    path.write_text(GOOD_MIL)
    argv = [command, "--chip", "m99"] + ([] if command == "train" else [str(path)])
    err = usage_error(argv, capsys)
    assert "argument --chip: unknown chip 'm99'" in err and "m4-pro" in err


def test_chip_spellings_are_accepted(tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.mil"
    path.write_text(GOOD_MIL)
    assert main(["estimate", str(path), "--chip", "Apple M4 Pro"]) == 0
    assert "total on m4-pro:" in capsys.readouterr().out


@pytest.mark.parametrize("size", [0, 100, 128])
def test_training_data_shorter_than_one_window(size: int, tmp_path: Path, capsys) -> None:
    data = tmp_path / "short.txt"
    data.write_bytes(b"x" * size)
    code = main(["train", "--data", str(data), "--steps", "1", "--out", str(tmp_path / "o"), *FAST])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{data} has {size} tokens" in err and "needs at least 129" in err  # tiny: seq 128


def test_tokenizer_with_a_single_token_is_rejected(tmp_path: Path) -> None:
    write_tokenizer(tmp_path / "tokenizer.bin", [(b"a", 0.0)])
    (tmp_path / "data.bin").write_bytes(bytes(600))
    with pytest.raises(ValueError, match=r"tokenizer.bin: 1 token\(s\); expected at least 2"):
        load_data(tmp_path / "data.bin")


def test_resume_from_a_state_without_train_settings(tmp_path: Path, capsys) -> None:
    ckpt = tmp_path / "ckpt-000001"
    ckpt.mkdir()
    (ckpt / "state.json").write_text(json.dumps({"format": FORMAT, "files": {}}))
    (tmp_path / "LATEST").write_text("ckpt-000001\n")
    assert main(["train", "--resume", "--out", str(tmp_path), *FAST]) == 2
    err = capsys.readouterr().err
    assert f"{ckpt}: state.json has no valid train config" in err


def test_resume_past_the_requested_steps_says_so(tmp_path: Path, capsys) -> None:
    out = str(tmp_path / "run")
    assert main(["train", "--steps", "2", "--out", out, *FAST]) == 0
    capsys.readouterr()
    assert main(["train", "--steps", "1", "--resume", "--out", out, *FAST]) == 0
    assert "nothing to train: the run already has 2 of 1 steps" in capsys.readouterr().out


def test_negative_warmup_is_rejected(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="warmup must be at least 0, found -5"):
        TrainConfig(warmup=-5)
    code = main(["train", "--steps", "3", "--warmup", "-5", "--out", str(tmp_path / "o")])
    assert code == 2
    assert "warmup must be at least 0, found -5" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--tokens", "-1"), ("--top-k", "-3"), ("--temperature", "-0.5"), ("--temperature", "nan")],
)
def test_generate_rejects_negative_or_nan_settings(flag: str, value: str, capsys) -> None:
    err = usage_error(["generate", "--ckpt", "x", flag, value], capsys)
    assert f"argument {flag}: expected a finite number >= 0, found '{value}'" in err


@pytest.mark.parametrize(("flag", "value"), [("--save-every", "-1"), ("--sample-tokens", "-5")])
def test_train_rejects_negative_counts(flag: str, value: str, capsys) -> None:
    err = usage_error(["train", flag, value], capsys)
    assert f"argument {flag}: expected a finite number >= 0" in err


def test_generate_settings_keep_their_values() -> None:
    args = build_parser().parse_args(
        ["generate", "--ckpt", "x", "--tokens", "0", "--temperature", "0.25", "--top-k", "7"]
    )
    assert (args.tokens, args.temperature, args.top_k) == (0, 0.25, 7)
    assert isinstance(args.tokens, int) and math.isclose(args.temperature, 0.25)


@pytest.mark.parametrize("flag", ["--json", "--report"])
def test_bench_output_that_is_a_directory_fails_before_measuring(
    flag: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    from anekit.bench import runner

    def must_not_run(*args, **kwargs):
        raise AssertionError("the benchmark ran although its output path is unusable")

    monkeypatch.setattr(runner, "run", must_not_run)
    code = main(["bench", "--quick", "--suite", "dispatch", "--chip", "m4", flag, str(tmp_path)])
    assert code == 2
    assert f"{flag} {tmp_path} is a directory; expected a file name" in capsys.readouterr().err


def test_empty_llama2c_bin_reports_its_length(tmp_path: Path, capsys) -> None:
    write_tokenizer(tmp_path / "tokenizer.bin", [(b"<unk>", 0.0), (b"<s>", 0.0), (b"a", 0.0)])
    data = tmp_path / "empty.bin"
    data.write_bytes(b"")
    code = main(["train", "--data", str(data), "--steps", "1", "--out", str(tmp_path / "o"), *FAST])
    assert code == 2
    assert f"{data} has 0 tokens" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "generate"])
def test_negative_seed_is_a_usage_error(command: str, capsys) -> None:
    ckpt = ["--ckpt", "x"] if command == "generate" else []
    err = usage_error([command, *ckpt, "--seed", "-1"], capsys)
    assert "argument --seed: expected a finite number >= 0, found '-1'" in err


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
        ValueError, match=r"applies only to llama2.c .bin data; found '.*corpus.txt'"
    ):
        load_data(text, tmp_path / "tokenizer.bin")
    with pytest.raises(ValueError, match="found the default corpus"):
        load_data(None, tmp_path / "tokenizer.bin")


def test_cache_path_that_is_a_file_says_so(tmp_path: Path, capsys) -> None:
    file = tmp_path / "cache"
    file.write_bytes(b"")
    assert main(["inspect", "--cache", str(file)]) == 2
    assert f"{file}: expected a cache directory, found a file" in capsys.readouterr().err


def test_bench_unknown_chip_creates_no_output_directory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "new" / "results.json"
    assert main(["bench", "--quick", "--chip", "m99", "--json", str(out)]) == 2
    assert "--chip: unknown chip 'm99'" in capsys.readouterr().err
    assert not out.parent.exists()


def test_doctor_json_into_a_directory_fails_before_the_report(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    import anekit.cmd_doctor

    def must_not_run(**kwargs):
        raise AssertionError("the report ran although --json cannot be written")

    monkeypatch.setattr(anekit.cmd_doctor, "report", must_not_run)
    assert main(["doctor", "--no-smoke", "--json", str(tmp_path)]) == 2
    assert f"--json {tmp_path} is a directory; expected a file name" in capsys.readouterr().err


# -- fmt and run on bad input (from test_review_core.py) ---------------------------------------
def test_fmt_of_a_missing_path_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nothing.mil"
    assert main(["fmt", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("anekit fmt: error:") and str(missing) in err and "Traceback" not in err


def test_run_of_a_directory_without_model_mil_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert main(["run", str(tmp_path), "--random", "--backend", "reference"]) == 2
    assert "model.mil" in capsys.readouterr().err


def run_with_input(tmp_path: Path, array: np.ndarray | None, *extra: str, name: str = "x") -> None:
    model = saved_model(tmp_path)
    argv = ["run", str(model), "--backend", "reference", *extra]
    if array is not None:
        np.save(tmp_path / "in.npy", array)
        argv += ["--input", f"{name}={tmp_path / 'in.npy'}"]
    main(argv)


def test_run_with_an_input_of_the_wrong_shape_says_which(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"input 'x': expected shape \[1, 4\].*found \[2, 2\]"):
        run_with_input(tmp_path, np.ones((2, 2), np.float16))


def test_run_with_an_input_name_the_program_lacks_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="'q=.*': the program's inputs are \\['x'\\]"):
        run_with_input(tmp_path, np.ones((1, 4), np.float16), "--random", name="q")


def test_run_with_a_file_that_is_not_npy_names_it(tmp_path: Path) -> None:
    model = saved_model(tmp_path)
    bad = tmp_path / "bad.npy"
    bad.write_text("not an array")
    with pytest.raises(SystemExit, match="cannot read .*bad.npy as .npy"):
        main(["run", str(model), "--backend", "reference", "--input", f"x={bad}"])


def test_run_rejects_a_repeat_below_one(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--repeat must be >= 1"):
        run_with_input(tmp_path, None, "--random", "--repeat", "0")


def test_run_writes_outputs_at_exactly_the_path_given(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    x = np.arange(4, dtype=np.float16).reshape(1, 4)
    run_with_input(tmp_path, x, "--out", str(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npy", "model", "outputs"]
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["y"], x + np.float16(2.0))
