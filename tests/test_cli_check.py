"""``anekit check``: compiler-style diagnostics, JSON, and exit 1 on errors."""

from __future__ import annotations

import json

from tests.clitools import BROKEN, CLEAN, run, write


def test_check_prints_compiler_style_diagnostics_and_fails_on_errors(capsys, tmp_path):
    path = write(tmp_path, BROKEN)
    code, out, _ = run(capsys, "check", path, "--chip", "m4")
    assert code == 1
    assert f"{path}:6: error: 'acos' did not compile" in out and "[op-unsupported]" in out


def test_check_passes_a_clean_program_and_says_which_chip(capsys, tmp_path):
    code, out, err = run(capsys, "check", write(tmp_path, CLEAN))
    assert code == 0
    assert "m4: 0 error(s)" in out
    assert "chip m4:" in err  # the default and how it was chosen


def test_check_json(capsys, tmp_path):
    code, out, _ = run(capsys, "check", write(tmp_path, BROKEN), "--chip", "m1", "--json")
    found = json.loads(out)
    assert code == 1
    assert {"severity", "rule", "op", "line", "message", "source"} <= set(found[0])
    assert any(d["rule"] == "legacy-dialect" for d in found)


def test_missing_file_is_a_clean_error(capsys, tmp_path):
    code, _, err = run(capsys, "check", str(tmp_path / "nope.mil"))
    assert code == 2 and "no such file" in err


def test_a_model_directory_is_checked_with_its_weights(capsys, tmp_path):
    import numpy as np

    from anekit import mil

    b = mil.Builder()
    x = b.input("x", (1, 64, 1, 32), "fp16")
    b.output(b.conv(x=x, weight=b.weight("w", np.ones((8, 64, 1, 1), np.float16))), "y")
    model = b.build().save(tmp_path / "model")
    code, out, _ = run(capsys, "check", str(model), "--chip", "m4")
    assert code == 0 and "m4: 0 error(s)" in out


def _linear_model(tmp_path, weight_value: float):
    import numpy as np

    from anekit import mil

    b = mil.Builder()
    x = b.input("x", (2, 16), "fp16")
    w = np.full((4, 16), weight_value, np.float16)
    b.output(b.add_op("linear", {"x": x, "weight": b.weight("w", w)}), "y")
    return b.build().save(tmp_path / "model")


def test_range_runs_the_range_rules_with_the_weights(capsys, tmp_path):
    model = _linear_model(tmp_path, 2.0)  # bound = 16 * 2 * |x|
    code, out, _ = run(capsys, "check", str(model), "--chip", "m4", "--range", "x=-1100:1100")
    assert code == 0  # static bounds are warnings
    assert "[fp16-saturation]" in out and f"{16 * 2 * 1100:.6g}" in out  # 35200 > 32752
    code, out, _ = run(capsys, "check", str(model), "--chip", "m4", "--range", "x=-1000:1000")
    assert code == 0 and "[fp16-saturation]" not in out  # 32000


def test_calibrate_uses_observed_ranges_and_errors_on_an_observed_saturation(capsys, tmp_path):
    import numpy as np

    model = _linear_model(tmp_path, 2.0)
    samples = np.zeros((3, 2, 16), np.float16)
    samples[1, 0, :] = 1100.0  # one sample drives the output to 16 * 2 * 1100 = 35200
    np.save(tmp_path / "x.npy", samples)
    code, out, _ = run(
        capsys, "check", str(model), "--chip", "m4", "--calibrate", f"x={tmp_path / 'x.npy'}"
    )
    assert code == 1 and "error:" in out and "observed [0, 35200]" in out
    np.save(tmp_path / "small.npy", samples[:1] + np.float16(1.0))  # outputs 32
    code, out, _ = run(
        capsys, "check", str(model), "--chip", "m4", "--calibrate", f"x={tmp_path / 'small.npy'}"
    )
    assert code == 0 and "[fp16-saturation]" not in out


def test_bad_range_is_a_clean_error(capsys, tmp_path):
    code, _, err = run(capsys, "check", str(_linear_model(tmp_path, 1.0)), "--range", "x=1")
    assert code == 2 and "NAME=LO:HI" in err
