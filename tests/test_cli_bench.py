"""``anekit bench``: a real ``--quick`` run of a cheap suite, and its JSON, plots and report."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from anekit.bench import plots, report, suites
from anekit.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def test_quick_dispatch_through_the_cli(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path
    argv = ["bench", "--quick", "--suite", "dispatch", "--backend", "reference", "--chip", "m4"]
    argv += ["--json", str(out / "results.json"), "--plot", str(out / "plots")]
    argv += ["--report", str(out / "report" / "bench.md")]
    assert main(argv) == 0
    stdout, stderr = capsys.readouterr()
    data = json.loads((out / "results.json").read_text())
    assert (data["backend"], data["chip"], data["quick"]) == ("reference", "m4", True)
    rows = data["suites"]["dispatch"]["rows"]
    assert [r["params"] for r in rows] == list(suites.DISPATCH.quick)
    assert all(r["measured"]["median_s"] > 0 and r["predicted_s"] > 0 for r in rows)
    # the console table and plain progress lines (stderr is not a terminal here)
    assert "== dispatch:" in stdout and "channels=1024 seq=64" in stdout
    assert f"[{len(rows)}/{len(rows)}] dispatch" in stderr
    # one PNG per suite run, linked from the report
    png = out / "plots" / "dispatch.png"
    assert png.read_bytes().startswith(PNG)
    text = (out / "report" / "bench.md").read_text()
    assert "![dispatch](../plots/dispatch.png)" in text
    assert "## Per-call overhead" in text and "reference: run()" in text
    assert "| channels=256 seq=64 |" in text and "[m4-single1x1-256]" in text
    assert "https://github.com/maderix/ANE/issues/3" in text


def test_plots_for_every_suite(tmp_path):
    pytest.importorskip("matplotlib")
    results = _fake_results()
    written = plots.write_plots(results, tmp_path)
    assert set(written) == set(results["suites"])
    for path in written.values():
        assert path.read_bytes().startswith(PNG)


def test_missing_matplotlib_is_a_clear_message(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    assert plots.matplotlib_missing() == plots.MISSING
    code = main(["bench", "--quick", "--suite", "dispatch", "--plot", str(tmp_path)])
    assert code == 2
    assert "pip install 'anekit[plot]'" in capsys.readouterr().err
    with pytest.raises(ModuleNotFoundError, match="matplotlib"):
        plots.write_plots(_fake_results(), tmp_path)


def test_list_and_unknown_suites_and_chips(capsys):
    assert main(["bench", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(suites.SUITES)
    assert main(["bench", "--suite", "nonsense"]) == 2  # a usage error, before measuring
    assert "unknown suite 'nonsense'" in capsys.readouterr().err
    assert main(["bench", "--chip", "m99", "--suite", "dispatch"]) == 2
    assert "unknown chip 'm99'" in capsys.readouterr().err


def test_help_warns_that_a_full_reference_run_is_long(capsys):
    assert main(["bench", "--help"]) == 0
    out = capsys.readouterr().out
    assert "a full run takes\na long time; --quick runs small sweeps" in out
    assert "minutes" not in out  # no duration nobody measured here (bench_quick.py times it)


def test_json_writer_refuses_nan(tmp_path):
    with pytest.raises(ValueError):
        report.write_json({"x": float("nan")}, tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists()


def _fake_results():
    """Results of two tiny two-series suites, shaped as the runner makes them."""

    def row(series, x, seconds, published):
        measured = {"median_s": seconds, "p25_s": seconds * 0.9, "p75_s": seconds * 1.1}
        return {
            "series": series,
            "x": x,
            "flops": 1e9 * x,
            "measured": {**measured, "min_s": seconds * 0.8, "noisy": x == 8},
            "predicted_s": seconds / 2,
            "published": [{"seconds": seconds / 3}] if published else [],
        }

    suite = {
        "title": "t",
        "x_label": "x",
        "rows": [row(s, x, 1e-3 * x, x == 4) for s in ("a", "b") for x in (1, 2, 4, 8)],
        "marks": [{"x": 2.0, "label": "a threshold"}],
    }
    suites = {"one": suite, "two": suite}
    return {"backend": "reference", "chip": "m4", "chip_name": "Apple M4", "suites": suites}


def test_progress_bar_on_a_terminal(monkeypatch):
    pytest.importorskip("tqdm")
    from anekit.cli.bench import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    row = {"measured": {"median_s": 1e-3}}
    with Progress(2) as update:
        update("peak", {"depth": 1}, row)
        update("peak", {"depth": 2}, row)
    text = term.getvalue()
    assert "2/2" in text and "peak depth=2" in text
    assert "[1/2]" not in text  # the bar replaces the plain lines


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
    assert f"{flag}: {tmp_path}: is a directory; expected a file name" in capsys.readouterr().err


def test_bench_unknown_chip_creates_no_output_directory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "new" / "results.json"
    assert main(["bench", "--quick", "--chip", "m99", "--json", str(out)]) == 2
    assert "--chip: unknown chip 'm99'" in capsys.readouterr().err
    assert not out.parent.exists()


def _recording_runner(monkeypatch) -> dict:
    """Replace the runner with one that records its keyword arguments; returns them."""
    from anekit.bench import runner

    seen: dict = {}

    def record(*args, **kwargs):
        seen.update(kwargs)
        return _fake_results()

    monkeypatch.setattr(runner, "run", record)
    monkeypatch.setattr(runner, "plan", lambda *args: [])
    monkeypatch.setattr(report, "console", lambda results: "")
    return seen


def test_bench_without_chip_says_which_it_predicts_for(capsys, monkeypatch) -> None:
    from anekit.hw.chips import default_chip, get_chip

    chosen, how = default_chip()
    seen = _recording_runner(monkeypatch)
    assert main(["bench", "--quick"]) == 0
    assert f"chip {chosen}: {how} (pass --chip to choose)" in capsys.readouterr().err
    assert seen["chip"] is get_chip(chosen)  # the profile itself, resolved once by the CLI


def test_bench_threads_reach_the_runner_and_are_checked(capsys, monkeypatch) -> None:
    seen = _recording_runner(monkeypatch)
    assert main(["bench", "--quick", "--chip", "m4", "--threads", "2"]) == 0
    assert seen["threads"] == 2
    assert main(["bench", "--quick", "--chip", "m4"]) == 0
    assert seen["threads"] == 1
    assert main(["bench", "--threads", "x"]) == 2
    assert "--threads: expected a whole number >= 1, found 'x'" in capsys.readouterr().err
