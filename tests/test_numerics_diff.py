"""``anekit.diff`` and ``anekit diff``: the first op whose outputs differ between two profiles."""

from __future__ import annotations

import json

import numpy as np

import anekit
from anekit import mil
from anekit.cli import main


def saturating_program() -> mil.Program:
    """h = x + 1; a matmul of h summing to 40 * 1000 (past N1's 32752 on m4); half of it."""
    b = mil.Builder()
    x = b.input("x", (1, 40), "fp16")
    h = b.add(x=x, y=np.float16(1.0), name="h")
    y = b.matmul(x=h, y=np.full((40, 4), 1000.0, np.float16), name="mm")
    b.output(b.mul(x=y, y=np.float16(0.5), name="half"), "y")
    return b.build()


def test_the_first_differing_op_is_the_saturating_matmul() -> None:
    report = anekit.diff(saturating_program(), {"x": np.zeros((1, 40), np.float16)}, b="m4")
    assert (report.a, report.b, report.ops) == ("ideal", "m4", 3)
    first = report.first
    assert (first.name, first.op_type, first.nonfinite) == ("mm", "matmul", True)
    assert [r.name for r in report.rows] == ["mm", "y"]  # the damage, in program order
    assert "first: op 'matmul' 'mm'" in report.summary()


def test_profiles_that_agree_report_nothing_and_small_errors_stay_under_tolerance() -> None:
    zeros = np.zeros((1, 40), np.float16)
    report = anekit.diff(saturating_program(), {"x": zeros}, a="m4", b="m4")
    assert report.first is None and report.rows == ()
    calm = anekit.diff(saturating_program(), {"x": zeros - np.float16(0.875)}, b="m4")
    assert calm.first is None  # h = 0.125: the matmul sums to 5000, inside the range


def test_the_command_prints_the_first_op_and_writes_json(tmp_path, capsys) -> None:
    model = saturating_program().save(tmp_path / "model")
    np.save(tmp_path / "x.npy", np.zeros((1, 40), np.float16))
    args = ["diff", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--b", "m4"]
    assert main(args) == 0
    assert "first: op 'matmul' 'mm'" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["first"]["name"] == "mm" and record["first"]["nonfinite"] is True
    assert main(["diff", str(model), "--random", "--b", "m9"]) == 2  # unknown profile


def test_run_takes_numerics_and_summarises_the_cliff_events(tmp_path, capsys) -> None:
    model = saturating_program().save(tmp_path / "model")
    np.save(tmp_path / "x.npy", np.zeros((1, 40), np.float16))
    args = ["run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--backend", "reference"]
    assert main([*args, "--numerics", "m4", "--json"]) == 0
    events = json.loads(capsys.readouterr().out)["cliff_events"]
    assert (events["numerics"], events["saturated"]) == ("m4", 4)
    assert events["rows"][0]["name"] == "mm"
    assert main([*args, "--numerics", "m4"]) == 0
    assert "cliff events: 4 saturated" in capsys.readouterr().out
    assert main([*args, "--numerics", "ideal", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cliff_events"]["rows"] == []


def test_chips_numerics_lists_every_family_row_with_its_status(capsys) -> None:
    assert main(["chips", "--numerics", "--json"]) == 0
    families = json.loads(capsys.readouterr().out)
    assert set(families) == {"A13", "A14", "A15", "A16"}
    assert families["A16"]["rows"]["matmul_saturation"]["status"] == "observed"
    assert families["A13"]["rows"]["slice_clamp"]["value"] == 4094.0
    assert main(["chips", "--numerics"]) == 0
    assert "N1   matmul_saturation  32752.0  assumed" in capsys.readouterr().out  # A13 first
