"""``anekit estimate``: per-op rows, totals, JSON, and one line per chip."""

from __future__ import annotations

import json

import pytest

from anekit.hw.chips import chips, get_chip
from tests.clitools import CLEAN, GOOD_MIL, run, write


def test_estimate_prints_rows_and_totals(capsys, tmp_path):
    code, out, _ = run(capsys, "estimate", write(tmp_path, CLEAN), "--chip", "m5")
    assert code == 0
    assert "(call)" in out and "sigmoid" in out and "total on m5:" in out


def test_estimate_json_matches_the_api(capsys, tmp_path):
    from anekit import mil
    from anekit.hw import estimate

    code, out, _ = run(capsys, "estimate", write(tmp_path, CLEAN), "--chip", "m4", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["seconds"] == pytest.approx(estimate(mil.parse(CLEAN), get_chip("m4")).seconds)
    assert {r["bound"] for r in data["rows"]} <= {"compute", "memory", "overhead"}


def test_estimate_all_chips_gives_one_line_each(capsys, tmp_path):
    code, out, _ = run(capsys, "estimate", write(tmp_path, CLEAN), "--all-chips")
    body = out.splitlines()[1:]
    assert code == 0
    assert [line.split()[0] for line in body] == chips()


def test_chip_spellings_are_accepted(tmp_path, capsys) -> None:
    code, out, _ = run(capsys, "estimate", write(tmp_path, GOOD_MIL), "--chip", "Apple M4 Pro")
    assert code == 0
    assert "total on m4-pro:" in out
