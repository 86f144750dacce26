"""``anekit doctor --ladder``: the generic runner, the rungs against the stand-in, the command here.

The runner is tested with a synthetic ladder (``tests/ladder_rungs.py``) whose rungs
pass, fail, crash with SIGSEGV and hang, each in its own child process. The ANE
rungs are run in this process against the recording stand-in (``tests/ane_fake.py``):
that proves they record the right evidence (which layout and binding rule give
the right numbers) when a framework behaves a given way, not how Apple's does.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from anekit import cli
from anekit.backends import ane
from anekit.doctor import ane_rungs, ladder
from anekit.errors import EvaluationError
from anekit.ladder.runner import Context, run_ladder
from tests import ladder_rungs
from tests.ane_fixtures import fresh, rung_context


# -- the runner --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, Path]:
    path = tmp_path_factory.mktemp("ladder") / "report.json"
    seen: list[str] = []
    report = run_ladder("tests.ladder_rungs", ladder_rungs.RUNGS, options={"report": str(path)},
                        report_path=path, on_result=lambda r: seen.append(r["name"]))  # fmt: skip
    return {r["name"]: r for r in report["rungs"]}, json.loads(path.read_text()), path


def test_every_rung_is_reported_in_order_with_a_status(synthetic) -> None:
    results, on_disk, _ = synthetic
    assert [r["name"] for r in on_disk["rungs"]] == [r.name for r in ladder_rungs.RUNGS]
    assert {n: r["status"] for n, r in results.items()} == {
        "passes": "pass", "fails": "fail", "after_fail": "skip", "crashes": "crash",
        "after_crash": "skip", "hangs": "timeout", "reads_report": "pass", "not_here": "skip",
    }  # fmt: skip


def test_a_pass_keeps_its_observations(synthetic) -> None:
    r = synthetic[0]["passes"]
    assert r["observed"] == {"answer": 42, "nested": {"list": [1, 2], "text": "x"}}
    assert r["question"] == "Does a rung that passes pass?" and r["seconds"] > 0


def test_a_failure_records_type_message_nserror_fields_and_traceback(synthetic) -> None:
    r = synthetic[0]["fails"]
    error = r["error"]
    assert error["type"] == "anekit.errors.CompileError"
    assert error["message"] == "ANE compile failed: nope [com.apple.ane 3]"
    assert (error["domain"], error["code"]) == ("com.apple.ane", 3)
    assert error["user_info"] == {"NSLocalizedDescription": "nope"}
    assert "ladder_rungs.py" in error["traceback"] and r["observed"]["before"] is True


def test_a_crash_costs_one_rung_and_keeps_what_was_observed_before(synthetic) -> None:
    r = synthetic[0]["crashes"]
    assert r["reason"] == "the process died of SIGSEGV"
    assert r["observed"] == {"before_the_crash": "kept"}


def test_a_hang_times_out_and_its_whole_process_group_is_killed(synthetic) -> None:
    r = synthetic[0]["hangs"]
    assert r["reason"] == "no answer within 3 s; the process was killed" and r["seconds"] < 30
    assert not _running(r["observed"]["grandchild"]), "a process the rung started outlived it"


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan stays one until its new parent reaps it)."""
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return bool(state.stdout.strip()) and not state.stdout.strip().startswith("Z")


def test_dependants_are_skipped_with_the_reason(synthetic) -> None:
    results = synthetic[0]
    assert results["after_fail"]["reason"] == "needs 'fails', which failed"
    assert results["after_crash"]["reason"] == "needs 'crashes', which crashed"
    assert results["not_here"]["reason"] == "not on Tuesdays"


def test_the_report_is_on_disk_after_every_rung(synthetic) -> None:
    seen = synthetic[0]["reads_report"]["observed"]["rungs_on_disk"]
    assert seen == ["passes", "fails", "after_fail", "crashes", "after_crash", "hangs"]


# -- the command on this machine -----------------------------------------------------------------
def test_doctor_ladder_here_exits_0_with_every_rung_and_the_reference_smoke_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok, reason = ane.available()
    if ok:
        pytest.skip("this machine has an ANE: run `anekit doctor --ladder` by hand")
    path = tmp_path / "r.json"
    assert cli.main(["doctor", "--ladder", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    rungs = {r["name"]: r for r in report["rungs"]}
    assert list(rungs) == [r.name for r in ladder.RUNGS]
    assert rungs["environment"]["status"] == "pass"
    assert rungs["environment"]["observed"]["ane_problem"] == reason.split(";")[0] or reason
    assert rungs["reference"]["status"] == "pass"
    assert all(v["match"] for v in rungs["reference"]["observed"].values())
    for name, r in rungs.items():
        if name not in ("environment", "reference"):
            assert r["status"] == "skip" and r["reason"], name
    assert rungs["imports"]["reason"] == reason
    assert report["summary"]["first_failure"] is None
    out = capsys.readouterr().out
    assert "first failing rung: none" in out and f"report written to {path}" in out


def test_budget_needs_the_ladder(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--budget"]) == 2
    assert "--budget needs --ladder" in capsys.readouterr().err


# -- the ANE rungs against the stand-in ------------------------------------------------------------
@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Context:
    options = {"evaluations": 5, "evaluations_per_thread": 3}
    return rung_context(tmp_path, monkeypatch, fresh(tmp_path, monkeypatch), options)


@pytest.mark.parametrize("row_align, held", [(64, ["auto", "pad64"]), (128, ["auto", "pad128"])])
def test_eval_unaligned_finds_which_row_stride_the_device_reads(ctx, row_align, held) -> None:
    ctx.resources["framework"].row_align = row_align
    ane_rungs.eval_unaligned(ctx)
    assert ctx.observed["layouts_that_hold"] == held
    assert ctx.observed["auto_sources"] == ["model attributes"]
    dense = ctx.observed["fp16[1,4,1,3]"]["dense"]
    assert dense["match"] is False and dense["max_abs_diff"]["y"] > 0
    summary = ladder._layout(ctx.observed)
    assert summary.startswith("layout='auto' works (strides from: model attributes)")


def test_eval_unaligned_without_attributes_shows_the_fallback(ctx) -> None:
    ctx.resources["framework"].attributes = None
    ane_rungs.eval_unaligned(ctx)
    assert ctx.observed["layouts_that_hold"] == ["auto", "pad64"]
    assert ctx.observed["auto_sources"][0].startswith("computed: 64-byte rows")


@pytest.mark.parametrize("attributes", ["alphabetical", "size"])
def test_binding_records_which_rule_the_device_follows(ctx, attributes: str) -> None:
    ctx.resources["framework"].attributes = attributes
    ane_rungs.binding(ctx)
    assert ctx.observed["rules_that_hold"] == ["symbols", attributes]
    assert ctx.observed["canonical"]["match"] and ctx.observed["packed"]["match"]
    assert ladder._binding(ctx.observed) == (
        f"canonical I/O names works; raw binding rules that hold: ['symbols', '{attributes}']"
    )


def test_descriptor_sees_whether_the_identifier_covers_the_weights(ctx) -> None:
    ane_rungs.descriptor(ctx)
    assert (
        ctx.observed["same_program_same_hex"] and ctx.observed["hex_changes_with_weight_bytes_only"]
    )
    ctx.resources["framework"].hex_ignores_weights = True
    ane_rungs.descriptor(ctx)
    assert ctx.observed["hex_changes_with_weight_bytes_only"] is False


def test_compile_load_and_unload_rungs_record_files_and_attributes(ctx) -> None:
    ane_rungs.compile_rung(ctx)
    assert set(ctx.observed["files_after"]) == {"model.mil", "weights/w.bin"}
    ane_rungs.load(ctx)
    assert ctx.observed["inner_model_attributes"]["NetworkStatusList"][0]["LiveInputList"]
    assert ctx.observed["parsed"]["input_symbols"] == ("x",)
    ane_rungs.unload(ctx)
    assert ctx.observed["workdir_left"] is False and ctx.observed["surfaces_still_locked"] == 0
    assert ctx.observed["markers_left"] == [] and ctx.observed["compile_again"]["match"]
    assert list(ctx.resources["framework"].tmp.iterdir()) == []


def test_the_other_rungs_run_and_record(ctx) -> None:
    for run in (ane_rungs.device_info, ane_rungs.selectors, ane_rungs.iosurface,
                ane_rungs.eval_aligned, ane_rungs.dialect_rung, ane_rungs.threads,
                ane_rungs.stats, ane_rungs.memory, ladder.reference):  # fmt: skip
        run(ctx)
    seen = ctx.observed
    assert seen["device_info"]["aneSubType"] == "h16" and seen["read_back_after_relock"]
    assert all(row["found"] for row in seen["selectors"] if not row["optional"])
    assert seen["dialects_that_work"] == ["ios18", "legacy"]
    assert seen["threads_8"]["error_count"] == 0
    assert seen["stats_off"] is None and seen["stats_with_mask"]["hw_s"] > 0
    assert seen["stats_without_mask"]["hw_s"] > 0  # the stand-in ignores the mask
    assert seen["pools_on"]["evaluations"] == 5


def test_selectors_fails_naming_a_missing_selector(ctx) -> None:
    del ctx.resources["framework"].selectors[("model", "loadWithQoS:options:error:")]
    with pytest.raises(Exception, match=r"-\[_ANEInMemoryModel loadWithQoS:options:error:\]"):
        ane_rungs.selectors(ctx)


def test_budget_rung_counts_compiles_until_the_first_failure(ctx, monkeypatch) -> None:
    fake = ctx.resources["framework"]
    compile_once = fake._compile
    count = {"n": 0}

    def fails_on_the_fourth(model):
        count["n"] += 1
        return (False, None) if count["n"] == 4 else compile_once(model)

    monkeypatch.setattr(fake, "_compile", fails_on_the_fourth)
    fake.selectors[("model", "compileWithQoS:options:error:")] = lambda m, q, o, e: (
        fails_on_the_fourth(m)
    )
    ane_rungs.compile_budget(ctx)
    assert ctx.observed["compiles_that_worked"] == 3
    assert ctx.observed["first_failure"]["compile"] == 4
    assert "without an NSError" in ctx.observed["first_failure"]["error"]["message"]


def test_summary_names_the_first_failure_and_unmeasured_settings() -> None:
    report = {"rungs": [
        {"name": "environment", "status": "pass", "observed": {}, "reason": None},
        {"name": "load", "status": "crash", "observed": {}, "reason": "died of SIGSEGV"},
        {"name": "eval_unaligned", "status": "skip", "observed": {},
         "reason": "needs 'load', which crashed"},
    ]}  # fmt: skip
    summary = ladder.summarize(report)
    assert summary["first_failure"] == "load"
    assert summary["counts"] == {"pass": 1, "crash": 1, "skip": 1}
    assert summary["settings"]["layout"].startswith("not measured (eval_unaligned skipped")
    assert summary["settings"]["binding"] == "not measured"


def test_shared_buffers_records_a_chained_surface_and_a_wide_request(ctx) -> None:
    ane_rungs.shared_buffers(ctx)
    chained, many = ctx.observed["chained"], ctx.observed["many_inputs"]
    assert chained["match"] and chained["one_surface"]
    assert many["match"] and many["request_inputs"] == 14


def test_shared_buffers_fails_when_the_device_reads_a_shared_surface_wrong(
    ctx, monkeypatch
) -> None:
    """A framework that ignores a bound surface (reads zeros) fails the rung, naming the case."""
    from anekit.backends.base import BufferSet

    real = BufferSet.run

    def run_unbound(self: BufferSet) -> None:
        for name in self.shared:
            self.input(name)[...] = 0  # as if the request held a surface of its own
        real(self)

    monkeypatch.setattr(BufferSet, "run", run_unbound)
    with pytest.raises(EvaluationError, match="wrong numbers with shared buffers: chained"):
        ane_rungs.shared_buffers(ctx)
    assert ctx.observed["chained"]["match"] is False
