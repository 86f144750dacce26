"""``anekit chips | check | estimate``: output, JSON and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anekit.cli import main
from anekit.hw.chips import chips, get_chip

CLEAN = """program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios18>(tensor<fp16, [1, 64, 1, 32]> x) {
        tensor<fp16, [1, 64, 1, 32]> y = relu(x = x)[name = string("y")];
        tensor<fp16, [1, 64, 1, 32]> z = sigmoid(x = y)[name = string("z")];
    } -> (z);
}
"""

BROKEN = CLEAN.replace("sigmoid(", "acos(")


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "model.mil"
    path.write_text(text, encoding="utf-8")
    return str(path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_chips_table_lists_every_profile_and_the_default(capsys):
    code, out, _ = run(capsys, "chips")
    assert code == 0
    lines = out.splitlines()
    for name in chips():
        assert any(line.split()[:1] == [name] for line in lines)
    assert "default chip: m4" in out


def test_chips_json_carries_sources(capsys):
    code, out, _ = run(capsys, "chips", "--json")
    data = json.loads(out)
    assert code == 0 and data["default"]["chip"] == "m4"
    fact = data["chips"]["m4"]["rated_tops"]
    assert (
        fact["value"] == 38 and fact["source"].startswith("https://") and fact["estimate"] is False
    )


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


def test_missing_file_is_a_clean_error(capsys, tmp_path):
    code, _, err = run(capsys, "check", str(tmp_path / "nope.mil"))
    assert code == 2 and "no such file" in err
