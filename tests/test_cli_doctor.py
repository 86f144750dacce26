"""``anekit doctor``: runs everywhere, says what is missing, writes its report as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anekit import cli
from anekit.backends import ane


def test_doctor_exits_0_and_explains_why_there_is_no_ane(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok, reason = ane.available()
    if ok:
        pytest.skip("this machine has an ANE")
    out_file = tmp_path / "sub" / "report.json"
    out_file.parent.mkdir()
    assert cli.main(["doctor", "--json", str(out_file)]) == 0
    text = capsys.readouterr().out
    assert f"No ANE here: {reason}" in text
    assert "not available: the ANE backend" in text
    r = json.loads(out_file.read_text())
    assert r["ane"] == {"available": False, "reason": reason, "generation": None}
    assert r["smoke_test"] is None
    assert r["backends"]["reference"] and r["backends"]["ane"] == reason
    for key in ("os", "machine", "chip", "framework", "pyobjc", "python", "numpy"):
        assert key in r
    assert r["framework"]["present"] == Path(r["framework"]["path"]).is_dir()


def test_doctor_json_into_a_directory_fails_before_the_report(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    import anekit.doctor.report

    def must_not_run(**kwargs):
        raise AssertionError("the report ran although --json cannot be written")

    monkeypatch.setattr(anekit.doctor.report, "report", must_not_run)
    assert cli.main(["doctor", "--no-smoke", "--json", str(tmp_path)]) == 2
    assert f"--json: {tmp_path}: is a directory; expected a file name" in capsys.readouterr().err
