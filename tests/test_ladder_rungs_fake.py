"""Every rung of ``doctor --ladder`` driven through stand-ins, one passing and one failing way.

Each rung runs in this process against a stand-in that behaves as PyObjC and the
framework are documented to (``tests/ane_fake.py``: PyObjC's real ``__metadata__()``
shape, ``objc.error`` with ``_pyobjc_info_``, ``-[_ANERequest perfStatsArray]``...), and
passes; then against one that does not, and records the right failure. This proves the
rungs ask and record the right things, not how Apple's framework behaves.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anekit.doctor import ane_rungs, dist_rungs, ladder
from anekit.errors import CompileError, EvaluationError
from anekit.ladder.runner import Context
from tests.ane_fake import FakeFramework, FakeNSError, FakeObjCError
from tests.ane_fixtures import fresh, rung_context


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeFramework:
    return fresh(tmp_path, monkeypatch)


@pytest.fixture
def ctx(tmp_path: Path, fake: FakeFramework, monkeypatch: pytest.MonkeyPatch) -> Context:
    return rung_context(
        tmp_path, monkeypatch, fake, {"evaluations": 5, "evaluations_per_thread": 3}
    )


# -- PyObjC itself: imports and bundle, through stand-in modules ------------------------------------
class _NoSuchClass(Exception):
    pass


def _fake_objc(classes: set[str]) -> types.ModuleType:
    """A stand-in ``objc`` module: loadBundle, lookUpClass raising ``nosuchclass_error``."""
    objc = types.ModuleType("objc")
    objc.__version__ = "11.0-fake"
    objc.nosuchclass_error = _NoSuchClass
    objc.bundles = []

    def look_up(name: str) -> str:
        if name not in classes:
            raise _NoSuchClass(name)
        return name

    objc.lookUpClass = look_up
    objc.loadBundle = lambda name, globals_, bundle_path, scan_classes: objc.bundles.append(
        bundle_path
    )
    return objc


def _install(monkeypatch: pytest.MonkeyPatch, classes: set[str], iosurface: bool = True) -> Any:
    objc = _fake_objc(classes)
    monkeypatch.setitem(sys.modules, "objc", objc)
    monkeypatch.setitem(sys.modules, "Foundation", types.ModuleType("Foundation"))
    monkeypatch.setitem(
        sys.modules, "IOSurface", types.ModuleType("IOSurface") if iosurface else None
    )
    return objc


ALL_CLASSES = set(ane_rungs.framework.SELECTORS)


def test_imports_records_each_module_and_the_pyobjc_version(ctx, monkeypatch) -> None:
    _install(monkeypatch, ALL_CLASSES)
    ane_rungs.imports(ctx)
    assert ctx.observed["pyobjc"] == "11.0-fake" and set(ctx.observed) >= {"objc", "IOSurface"}


def test_imports_fails_without_the_iosurface_wrapper(ctx, monkeypatch) -> None:
    _install(monkeypatch, ALL_CLASSES, iosurface=False)
    with pytest.raises(ImportError, match="IOSurface"):
        ane_rungs.imports(ctx)


def test_bundle_loads_the_framework_path_and_lists_the_classes(ctx, monkeypatch) -> None:
    objc = _install(monkeypatch, ALL_CLASSES)
    ane_rungs.bundle(ctx)
    assert objc.bundles == [ane_rungs.framework.FRAMEWORK_PATH]
    assert all(ctx.observed["classes"].values())


def test_bundle_fails_naming_a_missing_required_class(ctx, monkeypatch) -> None:
    _install(monkeypatch, ALL_CLASSES - {"_ANERequest", "_ANEClient"})
    with pytest.raises(CompileError, match="lacks _ANERequest$"):  # _ANEClient is not required
        ane_rungs.bundle(ctx)
    assert ctx.observed["classes"]["_ANEClient"] is False


# -- the framework's objects ------------------------------------------------------------------------
def test_device_info_passes_on_an_ane_and_fails_on_a_virtual_machine(ctx, fake) -> None:
    ane_rungs.device_info(ctx)
    assert ctx.observed["device_info"]["hasANE"] is True
    fake.device["isVirtualMachine"] = True
    with pytest.raises(EvaluationError, match="virtual machine"):
        ane_rungs.device_info(ctx)


def test_selectors_missing_on_the_client_path_only_do_not_fail_the_in_memory_path(
    ctx, fake
) -> None:
    del fake.selectors[("client", "compileModel:options:qos:error:")]
    del fake.selectors[("_ANEClient", "sharedConnection")]
    ane_rungs.selectors(ctx)
    assert ctx.observed["client_path_missing"] == [
        "+[_ANEClient sharedConnection]", "-[_ANEClient compileModel:options:qos:error:]"
    ]  # fmt: skip
    del fake.selectors[("model", "compileWithQoS:options:error:")]
    with pytest.raises(CompileError, match=r"in-memory path: -\[_ANEInMemoryModel compileWith"):
        ane_rungs.selectors(ctx)


def test_metadata_reads_pyobjcs_real_shape_an_out_type_not_a_modifier_key(ctx, fake) -> None:
    """PyObjC reports ``{"type": b"o^@"}`` for a registered out-parameter (no type_modifier)."""
    ane_rungs.metadata(ctx)
    rows = ctx.observed["metadata"]
    assert {r["type"] for r in rows} == {"o^@"} and all(r["out_parameter"] for r in rows)
    assert (
        "type_modifier"
        not in fake.selector_metadata("_ANEInMemoryModel", "unloadWithQoS:error:")["arguments"][3]
    )


def test_metadata_fails_when_nserror_is_a_plain_pointer(ctx, fake) -> None:
    fake.metadata_registered = False  # the metadata was not registered: b"^@"
    with pytest.raises(CompileError, match=r"compileWithQoS:options:error: \(\^@\)"):
        ane_rungs.metadata(ctx)


def test_iosurface_reads_back_what_was_written_or_fails(ctx, fake, monkeypatch) -> None:
    ane_rungs.iosurface(ctx)
    assert ctx.observed["read_back_after_relock"] is True
    assert ctx.observed["properties"]["BytesPerRow"] == 64
    monkeypatch.setattr(fake, "surface_lock", lambda surface, options: 0xE00002C2)
    with pytest.raises(EvaluationError, match="IOSurfaceLock"):
        ane_rungs.iosurface(ctx)


# -- compile and load -------------------------------------------------------------------------------
def test_descriptor_fails_when_the_framework_returns_nil(ctx, fake) -> None:
    fake.selectors[("_ANEInMemoryModelDescriptor", "modelWithMILText:weights:optionsPlist:")] = (
        lambda cls, text, weights, options: None
    )
    with pytest.raises(CompileError, match="rejected the MIL text"):
        ane_rungs.descriptor(ctx)


@pytest.mark.parametrize("covers, policy", [(True, "either"), (False, "rewrite")])
def test_descriptor_records_the_work_directory_policy_the_identifier_needs(
    ctx, fake, covers, policy
) -> None:
    fake.hex_ignores_weights = not covers
    ane_rungs.descriptor(ctx)
    assert ctx.observed["workdir_weights"].startswith(policy)


def test_compile_records_the_nserror(ctx, fake) -> None:
    fake.compile_result = (False, FakeNSError("bad op at line 3", error_code=11))
    with pytest.raises(CompileError) as info:
        ane_rungs.compile_rung(ctx)
    assert (info.value.line, info.value.code) == (3, 11)
    assert set(ctx.observed["files_after"]) == {"model.mil", "weights/w.bin"}


def test_an_objc_exception_in_compile_becomes_a_compile_error_with_its_name(ctx, fake) -> None:
    def raises(*args: Any) -> None:
        raise FakeObjCError("NSInvalidArgumentException", "unrecognized selector", {"k": 1})

    fake.selectors[("model", "compileWithQoS:options:error:")] = raises
    with pytest.raises(CompileError, match="ANE compile raised NSInvalidArgumentException: "
                       "unrecognized selector") as info:  # fmt: skip
        ane_rungs._compile(ctx, ane_rungs.weighted_program(0.5))
    assert info.value.user_info["userInfo"] == {"k": 1}
    assert isinstance(info.value.__cause__, FakeObjCError)


def test_load_dumps_the_attributes_and_answers_the_op_name_question(ctx, fake) -> None:
    ane_rungs.load(ctx)
    assert ctx.observed["outputs_named_by"] == "variable"  # the stand-in names by variable
    assert (
        "scale_op"
        in ctx.resources["framework"]
        .calls_to("modelWithMILText:weights:optionsPlist:")[0]
        .args[0]
        .payload.decode()
    )
    fake.load_results = [(False, FakeNSError("no")), (False, FakeNSError("still no"))]
    with pytest.raises(CompileError, match="ANE load failed: still no"):
        ane_rungs.load(ctx)


def test_load_records_a_model_that_names_outputs_by_op(ctx, fake) -> None:
    fake.outputs_named_by = "op"
    ane_rungs.load(ctx)
    assert ctx.observed["outputs_named_by"] == "op name"


# -- evaluation -------------------------------------------------------------------------------------
def _computes_nothing(fake: FakeFramework) -> None:
    fake.evaluate_result = (True, None)  # "succeeds" without writing any output


def test_eval_aligned_passes_and_fails_on_wrong_numbers(ctx, fake) -> None:
    ane_rungs.eval_aligned(ctx)
    assert all(r["match"] and r["buffers_match"] for r in ctx.observed.values())
    _computes_nothing(fake)
    with pytest.raises(EvaluationError, match="wrong numbers for fp16"):
        ane_rungs.eval_aligned(ctx)


def test_eval_unaligned_fails_when_no_layout_gives_the_right_numbers(ctx, fake) -> None:
    _computes_nothing(fake)
    with pytest.raises(EvaluationError, match="default layout gave wrong numbers"):
        ane_rungs.eval_unaligned(ctx)
    assert ctx.observed["layouts_that_hold"] == []


def test_eval_unaligned_records_a_refused_layout_report_per_variant(ctx, fake, monkeypatch) -> None:
    """A report the backend cannot use is each variant's recorded error, not the rung's end."""
    fake.row_align = 96  # a RowStride tmc would reject
    with pytest.raises(EvaluationError, match="default layout"):
        ane_rungs.eval_unaligned(ctx)
    auto = ctx.observed["fp16[1,4,1,3]"]["auto"]
    assert "RowStride 96 is not a multiple of 64" in auto["error"]["message"]


def test_binding_fails_when_the_default_gives_wrong_numbers(ctx, fake) -> None:
    _computes_nothing(fake)
    with pytest.raises(EvaluationError, match="default binding"):
        ane_rungs.binding(ctx)
    assert ctx.observed["rules_that_hold"] == []


def test_dialect_fails_when_the_default_dialect_does_not_compile(ctx, fake) -> None:
    default = ane_rungs._host_dialect()

    def compile_unless_default(model: Any, *args: Any) -> tuple[bool, Any]:
        legacy = "ios16" in model.text
        return (
            (False, FakeNSError("unsupported")) if legacy == (default == "legacy") else (True, None)
        )

    fake.selectors[("model", "compileWithQoS:options:error:")] = compile_unless_default
    with pytest.raises(EvaluationError, match=f"default dialect {default} does not work"):
        ane_rungs.dialect_rung(ctx)
    assert default not in ctx.observed["dialects_that_work"]


def test_threads_record_an_objc_exception_by_name_instead_of_losing_it(ctx, fake) -> None:
    calls = {"n": 0}
    evaluate = fake.selectors[("model", "evaluateWithQoS:options:request:error:")]

    def every_fifth_raises(m: Any, q: Any, o: Any, r: Any, e: Any) -> Any:
        calls["n"] += 1
        if calls["n"] % 5 == 0:
            raise FakeObjCError("NSRangeException", "index 3 beyond bounds")
        return evaluate(m, q, o, r, e)

    fake.selectors[("model", "evaluateWithQoS:options:request:error:")] = every_fifth_raises
    with pytest.raises(EvaluationError, match="NSRangeException: index 3 beyond bounds"):
        ane_rungs.threads(ctx)
    assert ctx.observed["threads_2"]["error_count"] >= 1


@pytest.mark.parametrize(
    "where, read_from",
    [("array", "perfStatsArray[0]"), ("property", "perfStats"),
     ("attached", "the attached stats object"), (None, "nowhere")],
)  # fmt: skip
def test_stats_records_where_the_hardware_time_was_found(ctx, fake, where, read_from) -> None:
    fake.stats_where = where
    ane_rungs.stats(ctx)
    assert ctx.observed["read_from"].startswith(read_from)
    assert ctx.observed["stats_off"] is None
    attached_only = ctx.observed["stats_attached_only"]
    assert (attached_only is not None) == (where == "attached")


def test_stats_fails_naming_an_objc_exception_of_the_request(ctx, fake) -> None:
    def raises(r: Any) -> None:
        raise FakeObjCError("NSGenericException", "perfStatsArray unavailable")

    fake.selectors[("request", "perfStatsArray")] = raises
    with pytest.raises(EvaluationError, match="NSGenericException: perfStatsArray unavailable"):
        ane_rungs.stats(ctx)


def test_memory_records_growth_and_fails_on_a_failing_evaluation(ctx, fake) -> None:
    ane_rungs.memory(ctx)
    assert ctx.observed["pools_on"]["evaluations"] == 5 and "pools_off" in ctx.observed
    fake.evaluate_result = (False, FakeNSError("evaluation refused", error_code=29))
    with pytest.raises(EvaluationError, match="evaluation refused"):
        ane_rungs.memory(ctx)


def test_unload_fails_when_the_framework_refuses_to_unload(ctx, fake) -> None:
    fake.unload_result = (False, FakeNSError("busy"))
    with pytest.raises(EvaluationError, match="ANE unload failed: busy"):
        ane_rungs.unload(ctx)


def test_request_validation_refused_fails_evaluation_rungs(ctx, fake) -> None:
    fake.request_valid = False
    with pytest.raises(EvaluationError, match=r"-\[_ANERequest validate\] refused"):
        ane_rungs.eval_aligned(ctx)


def test_worker_runs_an_isolated_kernel_and_fails_without_the_backend(ctx) -> None:
    ctx.options["worker_backend"] = "reference"  # the worker's isolation, not the ANE
    ane_rungs.worker(ctx)
    assert ctx.observed["isolated"]["match"] and ctx.observed["isolated"]["worker_pid"] > 0
    ctx.options["worker_backend"] = "ane"  # off macOS: BackendUnavailable with the reason
    if not ane_rungs.host.problem(ane_rungs.host.facts()):
        pytest.skip("this machine may have an ANE")
    with pytest.raises(Exception, match="unavailable"):
        ane_rungs.worker(ctx)


def test_reference_fails_naming_a_case_with_wrong_numbers(ctx, monkeypatch) -> None:
    ladder.reference(ctx)
    assert all(r["match"] for r in ctx.observed.values())
    from anekit.backends.reference import kernel as reference_kernel

    real = reference_kernel.ReferenceKernel.evaluate

    def off_by_one(self: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: v + 1 for k, v in real(self, inputs).items()}

    monkeypatch.setattr(reference_kernel.ReferenceKernel, "evaluate", off_by_one)
    with pytest.raises(EvaluationError, match="reference backend gave wrong numbers"):
        ladder.reference(ctx)


def test_environment_records_the_machine(ctx) -> None:
    ladder.environment(ctx)
    assert ctx.observed["python"] == sys.version.split()[0]
    assert "numpy" in ctx.observed["packages"]


def test_two_processes_measures_one_and_two_processes_at_once(tmp_path: Path) -> None:
    """On the reference backend: proves the measurement, not what an Ultra's dies do."""
    options = {"backend": "reference", "seconds": 0.3, "start_delay": 4.0, "side": 32}
    ctx = Context(options, None, tmp_path)
    dist_rungs.two_processes(ctx)
    seen = ctx.observed
    assert seen["one_process_per_s"] > 0 and len(seen["two_processes_per_s"]) == 2
    total = sum(seen["two_processes_per_s"])
    assert seen["ratio"] == pytest.approx(total / seen["one_process_per_s"])
    expected = "two dies'" if seen["ratio"] >= dist_rungs.TWO_DIES else "one die's"
    assert expected in seen["verdict"]
    assert next(r for r in ladder.RUNGS if r.name == "two_processes").needs == ("worker",)


def test_every_rung_of_the_ladder_is_driven_here() -> None:
    """A new rung needs a test here: the names of the rungs this file drives."""
    here = Path(__file__).parent
    names = (Path(__file__).name, "test_doctor_ladder.py", "test_numerics_rung.py")
    source = "".join((here / n).read_text() for n in names)
    functions = {r.run.__name__ for r in ladder.RUNGS}
    undriven = {f for f in functions if f"ane_rungs.{f}(" not in source
                and f"ladder.{f}(" not in source and f"dist_rungs.{f}(" not in source
                and f"numerics_rung.{f}(" not in source
                and f != "compile_budget"}  # fmt: skip
    assert undriven == set()  # budget, shared_buffers: test_doctor_ladder.py; numerics: its own
