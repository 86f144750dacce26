"""``anekit fmt``: normalised text, ``--check`` exit codes, dialects, and bad paths."""

from __future__ import annotations

from pathlib import Path

from anekit import mil
from anekit.cli import main
from tests.clitools import CLEAN, run, write


def test_fmt_of_a_missing_path_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nothing.mil"
    assert main(["fmt", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("anekit fmt: error:") and str(missing) in err and "Traceback" not in err


def test_fmt_prints_the_normalised_text(tmp_path: Path, capsys) -> None:
    messy = CLEAN.replace("    ", "  ").replace("(x = x)", "(x=x)")
    code, out, _ = run(capsys, "fmt", write(tmp_path, messy))
    assert code == 0 and out == mil.parse(CLEAN).to_text()


def test_fmt_check_is_1_for_differences_and_0_for_normalised_text(tmp_path: Path, capsys) -> None:
    normal = mil.parse(CLEAN).to_text()
    code, _, err = run(capsys, "fmt", write(tmp_path, normal.replace("    ", "  ")), "--check")
    assert code == 1 and err == f"{tmp_path / 'model.mil'}: not normalised\n"
    assert run(capsys, "fmt", write(tmp_path, normal), "--check")[0] == 0


def test_fmt_check_ignores_a_byte_order_mark_and_crlf(tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.mil"
    normal = mil.parse(CLEAN).to_text()
    path.write_bytes(b"\xef\xbb\xbf" + normal.replace("\n", "\r\n").encode())
    assert run(capsys, "fmt", str(path), "--check")[0] == 0


def test_fmt_of_a_model_directory_and_the_legacy_dialect(tmp_path: Path, capsys) -> None:
    model = mil.parse(CLEAN).save(tmp_path / "model")
    assert run(capsys, "fmt", str(model), "--check")[0] == 0
    code, out, _ = run(capsys, "fmt", str(model), "--dialect", "legacy")
    assert code == 0 and out.startswith("program(1.0)") and "func main<ios16>(" in out
