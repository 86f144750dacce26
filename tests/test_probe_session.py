"""``anekit probe`` end to end: the runner, the report on disk, the command here.

Experiments run in their own processes through the doctor ladder's runner. A synthetic
set (``tests/probe_rungs.py``) runs two real experiments against the stand-in between one
that crashes with SIGSEGV and one that hangs: both are recorded (with what they observed
first) and cost nothing of the others' results. On this machine (no ANE), ``--list``
names every experiment with its question and ``--json`` exits 0 with all of them skipped.
"""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest

from anekit import cli
from anekit.backends import ane
from anekit.probe import session
from anekit.probe.experiments import EXPERIMENTS
from tests import probe_rungs


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("probe") / "r.json"
    out = io.StringIO()
    report, code = session.run(probe_rungs.EXPERIMENTS, path, out=out,
                               options={"evaluations": 20}, module="tests.probe_rungs")  # fmt: skip
    return report, code, json.loads(path.read_text()), out.getvalue()


def test_a_crash_and_a_hang_cost_only_themselves(synthetic) -> None:
    report, code, on_disk, _ = synthetic
    results = {r["name"]: r for r in on_disk["experiments"]}
    assert [r["name"] for r in on_disk["experiments"]] == [e.name for e in probe_rungs.EXPERIMENTS]
    assert {n: r["status"] for n, r in results.items()} == {
        "realtime": "pass", "crashes": "crash", "hangs": "timeout", "weight-reload": "pass",
        "needs-metal": "skip"}  # fmt: skip
    assert results["crashes"]["reason"] == "the process died of SIGSEGV"
    assert results["crashes"]["observed"] == {"before_the_crash": "kept"}
    assert results["hangs"]["observed"] == {"started": True}
    # the experiments after them ran in full, in their own processes
    assert results["weight-reload"]["observed"]["fresh_compile"]["computed_with"] == "new"
    assert results["realtime"]["observed"]["latency"]["evaluateRealTime"]["n"] == 20
    assert code == 1 and on_disk["summary"]["counts"] == {"pass": 2, "crash": 1, "timeout": 1,
                                                          "skip": 1}  # fmt: skip


def test_a_missing_requirement_is_a_skip_with_its_reason(synthetic) -> None:
    skipped = synthetic[2]["experiments"][-1]
    if importlib.util.find_spec("Metal") is not None:
        pytest.skip("Metal is installed here")
    assert skipped["reason"].startswith("metal: pyobjc-framework-Metal is not installed")


def test_the_report_says_where_it_ran_and_each_finding(synthetic) -> None:
    _, _, on_disk, out = synthetic
    assert on_disk["requires"] == {e.name: list(e.needs) for e in probe_rungs.EXPERIMENTS}
    assert {"anekit", "python", "macos", "chip", "machine"} <= set(on_disk)
    headlines = on_disk["summary"]["headlines"]
    assert headlines["weight-reload"].startswith("after unload/patch/reload the model computes "
                                                 "with: old weights")  # fmt: skip
    assert headlines["realtime"].startswith("evaluateWithQoS p50 ")
    assert headlines["needs-metal"].startswith("skipped: metal: ")
    lines = out.splitlines()
    assert lines[0] == "anekit probe: 5 experiments, each in its own process"
    assert lines[2].split()[:2] == ["crash", "crashes"]
    assert "send the report back" in out and lines[-1].startswith("2 failed, crashed or timed out")


def test_list_names_every_experiment_with_its_question(capsys, tmp_path) -> None:
    path = tmp_path / "list.json"
    assert cli.main(["probe", "--list", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    for e in EXPERIMENTS:
        assert f"{e.name}\n  {e.question}\n" in out
    rows = json.loads(path.read_text())
    assert [r["name"] for r in rows] == [e.name for e in EXPERIMENTS]
    assert out.rstrip().endswith("8 experiments")


def test_probe_here_exits_0_with_every_experiment_skipped_and_why(capsys, tmp_path) -> None:
    ok, reason = ane.available()
    if ok:
        pytest.skip("this machine has an ANE: run `anekit probe` by hand")
    path = tmp_path / "r.json"
    assert cli.main(["probe", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    assert [r["name"] for r in report["experiments"]] == [e.name for e in EXPERIMENTS]
    for r in report["experiments"]:
        assert r["status"] == "skip" and r["reason"] == f"ane: {reason}"
    assert report["summary"]["counts"] == {"skip": 8}


def test_named_experiments_run_alone_and_a_typo_is_a_usage_error(capsys, tmp_path) -> None:
    path = tmp_path / "r.json"
    assert cli.main(["probe", "realtime", "chaining", "--json", str(path)]) == 0
    names = [r["name"] for r in json.loads(path.read_text())["experiments"]]
    assert names == ["chaining", "realtime"]  # table order
    assert cli.main(["probe", "realtim"]) == 2
    err = capsys.readouterr().err
    assert "anekit probe: error: unknown experiment 'realtim'; expected one of: chaining" in err
    assert cli.main(["probe", "--json", str(tmp_path)]) == 2
    assert Path(tmp_path).is_dir()
