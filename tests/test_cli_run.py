"""``anekit run``: inputs from .npy files or random, outputs to .npz, and its input errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from anekit.cli import main
from tests.clitools import weighted_program


def saved_model(tmp_path: Path) -> Path:
    return weighted_program(2.0).save(tmp_path / "model")


def test_run_of_a_directory_without_model_mil_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert main(["run", str(tmp_path), "--random", "--backend", "reference"]) == 2
    assert "model.mil" in capsys.readouterr().err


def run_with_input(tmp_path: Path, array: np.ndarray | None, *extra: str, name: str = "x") -> int:
    model = saved_model(tmp_path)
    argv = ["run", str(model), "--backend", "reference", *extra]
    if array is not None:
        np.save(tmp_path / "in.npy", array)
        argv += ["--input", f"{name}={tmp_path / 'in.npy'}"]
    return main(argv)


def usage_error(code: int, capsys, pattern: str) -> None:
    """The run failed as a usage error (exit 2) with one stderr line matching ``pattern``."""
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("anekit run: error: ") and err.count("\n") == 1
    assert re.search(pattern, err), err


def test_run_with_an_input_of_the_wrong_shape_says_which(tmp_path: Path, capsys) -> None:
    code = run_with_input(tmp_path, np.ones((2, 2), np.float16))
    usage_error(code, capsys, r"input 'x': expected shape \[1, 4\].*found \[2, 2\]")


def test_run_with_an_input_name_the_program_lacks_is_rejected(tmp_path: Path, capsys) -> None:
    code = run_with_input(tmp_path, np.ones((1, 4), np.float16), "--random", name="q")
    usage_error(code, capsys, "'q=.*': the program's inputs are \\['x'\\]")


def test_run_with_a_file_that_is_not_npy_names_it(tmp_path: Path, capsys) -> None:
    model = saved_model(tmp_path)
    bad = tmp_path / "bad.npy"
    bad.write_text("not an array")
    code = main(["run", str(model), "--backend", "reference", "--input", f"x={bad}"])
    usage_error(code, capsys, "bad.npy: not a .npy file")


def test_run_rejects_a_repeat_below_one(tmp_path: Path, capsys) -> None:
    code = run_with_input(tmp_path, None, "--random", "--repeat", "0")
    usage_error(code, capsys, "--repeat must be >= 1")


def test_run_without_a_value_for_an_input_says_how_to_give_one(tmp_path: Path, capsys) -> None:
    code = run_with_input(tmp_path, None)
    usage_error(code, capsys, "no value for input 'x' .*; give --input or --random")


def test_run_writes_outputs_at_exactly_the_path_given(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    x = np.arange(4, dtype=np.float16).reshape(1, 4)
    assert run_with_input(tmp_path, x, "--out", str(out)) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npy", "model", "outputs"]
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["y"], x + np.float16(2.0))


def test_a_mil_file_with_weights_elsewhere(tmp_path: Path, capsys) -> None:
    model = saved_model(tmp_path)
    lone = tmp_path / "lone.mil"
    lone.write_bytes((model / "model.mil").read_bytes())
    x = np.ones((1, 4), np.float16)
    np.save(tmp_path / "x.npy", x)
    argv = ["run", str(lone), "--input", f"x={tmp_path / 'x.npy'}", "--backend", "reference"]
    assert main([*argv, "--json"]) == 2  # no weights/ beside it: the weight file is missing
    assert "w.bin" in capsys.readouterr().err
    assert main([*argv, "--weights", str(model / "weights"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["outputs"][0]
    assert (summary["min"], summary["max"]) == (3.0, 3.0)  # 1 + the weight 2
    assert main([*argv, "--weights", str(tmp_path / "none")]) == 2
    assert f"{tmp_path / 'none'}: expected a weights directory" in capsys.readouterr().err


def test_run_repeat_pins_threads_warms_up_and_reports_min_and_spread(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    from anekit.backends.reference import ReferenceKernel

    calls = []
    evaluate = ReferenceKernel.evaluate

    def counting(self, inputs):
        calls.append(1)
        return evaluate(self, inputs)

    monkeypatch.setattr(ReferenceKernel, "evaluate", counting)
    assert run_with_input(tmp_path, None, "--random", "--repeat", "4", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert len(calls) == 1 + 4  # one untimed warm-up, then the timed evaluations
    assert data["repeat"] == 4 and data["threads"]["threads"] == 1
    assert 0 < data["run_min_ms"] <= data["run_ms"]
    assert data["spread"] >= 1.0 and data["noisy"] == (data["spread"] > 2.0)
    assert run_with_input(tmp_path, None, "--random", "--threads", "2") == 0
    assert "threads: " in capsys.readouterr().out


def test_run_rejects_a_thread_count_below_one(tmp_path: Path, capsys) -> None:
    code = run_with_input(tmp_path, None, "--random", "--threads", "0")
    usage_error(code, capsys, "--threads: expected a whole number >= 1, found '0'")
