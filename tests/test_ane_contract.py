"""Contract tests of the ANE backend against a recording stand-in for the PyObjC object graph.

These prove our side of the contract only: that the backend calls exactly the
selectors of ANE_NOTES section 2.1 (and 2.2 for ``_ANEClient``) in order, with
the argument kinds the framework is known to need (NSData, not str, for the MIL
text; the weights dictionary shape; QoS; one immutable NSDictionary of options),
that the temporary directory holds ``model.mil`` and ``weights/`` when the compiler
runs, and that everything is cleaned up after close and after a failed compile.
They say nothing about whether Apple's framework behaves as documented; the
hardware tests in ``test_ane_hw.py`` do that on a Mac.

The stand-in (``tests/ane_fake.py``) evaluates a request by running the reference
backend on the MIL text it was given, reading and writing the request's surfaces
with padded rows and binding indices by its ``modelAttributes``, so wiring mistakes
(wrong strides, wrong surface, wrong order, wrong packing) show up as wrong numbers.
Layout and binding have their own tests in ``test_ane_layout.py``.
"""

from __future__ import annotations

import gc
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends import budget, reference
from anekit.backends.ane import compile as ane_compile
from anekit.backends.ane import compile_mlmodelc, framework, kernel
from anekit.backends.ane.iosurface import SurfaceView
from anekit.errors import (
    BackendUnavailable,
    CompileBudgetExhausted,
    CompileError,
    EvaluationError,
)
from tests.ane_fake import (
    NSURL,
    REQUEST,
    FakeFramework,
    FakeNSError,
    FakeSurface,
    NSArray,
    NSData,
    NSDictionary,
    NSNumber,
)

__all__ = ["FakeFramework"]  # other test modules import the stand-in from here


@pytest.fixture
def fake(tmp_path: Path) -> FakeFramework:
    return FakeFramework(tmp_path / "T")


@pytest.fixture(autouse=True)
def fresh_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    monkeypatch.setattr(kernel, "LOAD_RETRY_DELAY_S", 0.0)


# -- programs ----------------------------------------------------------------------------------
RNG = np.random.default_rng(7)


def weighted_program() -> mil.Program:
    """y = x * w + 1 with w in its own weight file."""
    b = mil.Builder()
    x = b.input("x", (1, 8, 1, 16), "fp16")
    w = b.weight("w", RNG.standard_normal((1, 8, 1, 16)).astype(np.float16))
    b.output(b.add(x=b.mul(x=x, y=w), y=1.0), "y")
    return b.build()


def unweighted_program() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 8), "fp16")
    b.output(b.mul(x=x, y=2.0), "y")
    return b.build()


def three_input_program() -> mil.Program:
    """Inputs of three sizes declared largest first; two outputs declared smallest first."""
    b = mil.Builder()
    big = b.input("big", (1, 4, 1, 32), "fp16")
    mid = b.input("mid", (1, 4, 1, 16), "fp16")
    small = b.input("small", (1, 4, 1, 1), "fp16")
    b.output(b.mul(x=mid, y=small), "prod")
    b.output(b.add(x=big, y=small), "total")
    return b.build()


def random_inputs(program: mil.Program) -> dict[str, np.ndarray]:
    return {v.name: RNG.standard_normal(v.shape).astype(v.dtype.numpy) for v in program.main.inputs}


def reference_outputs(program: mil.Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return reference.compile(program)(**inputs)


# -- the in-memory sequence --------------------------------------------------------------------
def test_contract_sequence_of_selectors_for_compile_run_close(fake: FakeFramework) -> None:
    k = ane_compile(weighted_program(), framework=fake)
    k.input_buffer("x")[...] = 1.0
    k.run()
    k.close()
    assert fake.selectors_called() == [
        "modelWithMILText:weights:optionsPlist:",
        "inMemoryModelWithDescriptor:",
        "hexStringIdentifier",
        "compileWithQoS:options:error:",
        "loadWithQoS:options:error:",
        "model",  # the _ANEModel inside, whose modelAttributes give layout and binding
        "modelAttributes",
        "objectWithIOSurface:",  # input x
        "objectWithIOSurface:",  # output y
        REQUEST,
        "validate",  # asked once, before the first evaluation
        "evaluateWithQoS:options:request:error:",
        "unloadWithQoS:error:",
    ]
    receivers = [c.receiver for c in fake.calls[:2]]
    assert receivers == ["_ANEInMemoryModelDescriptor", "_ANEInMemoryModel"]
    sent = {(c.receiver, c.selector) for c in fake.calls}
    declared = {sel for sels in framework.SELECTORS.values() for _, sel in sels}
    assert {sel for _, sel in sent} - declared == set(), "a selector missing from SELECTORS"


def test_contract_descriptor_gets_nsdata_text_and_weights_dictionary(fake: FakeFramework) -> None:
    program = weighted_program()
    with ane_compile(program, framework=fake) as k:
        device_text = k.device_program.to_text()
    (call,) = fake.calls_to("modelWithMILText:weights:optionsPlist:")
    text, weights, options = call.args
    assert isinstance(text, NSData), "MIL text must be NSData of UTF-8 bytes, not a string"
    assert text.payload == device_text.encode("utf-8")
    # the device program is the program with its I/O renamed by index (see test_ane_layout)
    device = mil.parse(device_text, weights=program.weight_files())
    assert [v.name for v in device.main.inputs] == ["i0_x"]
    assert [v.name for v in device.main.outputs] == ["o0_y"]
    assert [op.op_type for op in device.ops] == [op.op_type for op in program.ops]
    assert options is None
    assert isinstance(weights, NSDictionary)
    files = program.weight_files()
    assert set(weights.items) == set(files) == {"@model_path/weights/w.bin"}
    for path, entry in weights.items.items():
        assert isinstance(entry, NSDictionary) and set(entry.items) == {"offset", "data"}
        assert entry.items["offset"] == NSNumber(0)
        assert entry.items["data"] == NSData(files[path])


def test_contract_no_weights_gives_empty_dictionary_not_nil(fake: FakeFramework) -> None:
    ane_compile(unweighted_program(), framework=fake).close()
    (call,) = fake.calls_to("modelWithMILText:weights:optionsPlist:")
    assert call.args[1] == NSDictionary({})


@pytest.mark.parametrize("qos", [21, 33])
def test_contract_qos_and_options_reach_every_call(fake: FakeFramework, qos: int) -> None:
    k = ane_compile(unweighted_program(), framework=fake, qos=qos)
    k(x=np.ones((1, 4, 1, 8), np.float16))
    k.run()
    k.close()
    expect = {
        "compileWithQoS:options:error:": (qos, NSDictionary({}), None),
        "loadWithQoS:options:error:": (qos, NSDictionary({}), None),
        "unloadWithQoS:error:": (qos, None),
    }
    for selector, args in expect.items():
        (call,) = fake.calls_to(selector)
        assert call.args == args
    evaluations = fake.calls_to("evaluateWithQoS:options:request:error:")
    assert len(evaluations) == 2
    for evaluate in evaluations:
        assert evaluate.args[0] == qos and evaluate.args[1] == NSDictionary({})
        assert evaluate.args[3] is None
    # one options dictionary per kernel, made once and reused by every call
    options = [c.args[1] for c in fake.calls if c.selector.endswith("options:error:")]
    options += [c.args[1] for c in evaluations]
    assert len(options) == 4 and all(o is options[0] for o in options)


def test_contract_temp_directory_holds_model_and_weights_at_compile_then_is_removed(
    fake: FakeFramework,
) -> None:
    program = weighted_program()
    k = ane_compile(program, framework=fake)
    (snapshot,) = fake.compile_snapshots
    assert snapshot == {
        "model.mil": k.device_program.to_text().encode("utf-8"),
        "weights/w.bin": program.weight_files()["@model_path/weights/w.bin"],
    }
    assert k.workdir.parent == fake.tmp and k.workdir.is_dir()
    k.close()
    assert not k.workdir.exists()
    assert list(fake.tmp.iterdir()) == [], "a marker or directory left behind"
    assert all(s.locks == 0 for s in fake.surfaces), "surfaces stay locked after close"


def test_contract_request_shape(fake: FakeFramework) -> None:
    with ane_compile(unweighted_program(), framework=fake) as k:
        assert fake.calls_to(REQUEST) == [], "surfaces and requests are made when first needed"
        k.run()
    (call,) = fake.calls_to(REQUEST)
    ins, in_idx, outs, out_idx, weights_buffer, stats, procedure = call.args
    assert [type(o.surface) for o in ins.items + outs.items] == [FakeSurface, FakeSurface]
    assert in_idx == NSArray([NSNumber(0)]) and out_idx == NSArray([NSNumber(0)])
    assert weights_buffer is None and stats is None and procedure == NSNumber(0)


def test_contract_surfaces_have_the_documented_properties(fake: FakeFramework) -> None:
    ane_compile(weighted_program(), framework=fake).close()
    # fp16 [1, 8, 1, 16], input and output alike: 8 rows of 32 bytes, each at a 64-byte stride
    for s in fake.surfaces:
        assert s.properties == {
            "Width": 16,
            "Height": 8,
            "BytesPerElement": 2,
            "BytesPerRow": 64,
            "AllocSize": 8 * 64,
            "PixelFormat": 0,
        }


# -- numbers through the stand-in ----------------------------------------------------------------
def test_call_and_zero_copy_buffers_give_reference_results(fake: FakeFramework) -> None:
    program = weighted_program()
    inputs = random_inputs(program)
    expected = reference_outputs(program, inputs)["y"]
    with ane_compile(program, framework=fake) as k:
        np.testing.assert_array_equal(k(**inputs)["y"], expected)
        buf = k.input_buffer("x")
        buf[...] = inputs["x"]
        k.run()
        np.testing.assert_array_equal(k.output_buffer("y"), expected)
        request = fake.calls_to("evaluateWithQoS:options:request:error:")[-1].args[2]
        x_surface = request.inputs.items[0].surface  # the request run() evaluated
        assert np.shares_memory(buf, np.frombuffer(x_surface.buffer, np.uint8)), "not zero-copy"
    assert fake.violations == []


def test_a_view_keeps_its_surface_alive_after_close(fake: FakeFramework) -> None:
    k = ane_compile(unweighted_program(), framework=fake)
    view = k.input_buffer("x")[0, 1:3]  # a view of a view
    k.close()
    del k
    gc.collect()
    assert isinstance(view, SurfaceView) and isinstance(view.surface.handle, FakeSurface)
    view[...] = 3.0
    # rows of 8 fp16 values at 64-byte (32-element) strides
    memory = np.frombuffer(view.surface.handle.buffer, np.float16).reshape(4, 32)
    assert (memory[1:3, :8] == 3.0).all() and memory[0].sum() == 0 and memory[1:3, 8:].sum() == 0


def test_packed_inputs_by_default(fake: FakeFramework) -> None:
    program = three_input_program()
    inputs = random_inputs(program)
    expected = reference_outputs(program, inputs)
    with ane_compile(program, framework=fake) as k:
        (descriptor,) = fake.calls_to("modelWithMILText:weights:optionsPlist:")
        device = mil.parse(descriptor.args[0].payload.decode())
        assert [v.name for v in device.main.inputs] == [f"i0_{k.packing.name}"]
        k.input_buffer("small")
        (request,) = fake.calls_to(REQUEST)
        assert len(request.args[0].items) == 1
        got = k(**inputs)
        for name in ("prod", "total"):
            np.testing.assert_array_equal(got[name], expected[name])
        for name, value in inputs.items():
            k.input_buffer(name)[...] = value
        k.run()
        for name in ("prod", "total"):
            np.testing.assert_array_equal(k.output_buffer(name), expected[name])


def test_unpacked_inputs_ascend_and_outputs_descend_in_size(fake: FakeFramework) -> None:
    program = three_input_program()
    inputs = random_inputs(program)
    expected = reference_outputs(program, inputs)
    with ane_compile(program, framework=fake, pack_inputs=False) as k:
        (descriptor,) = fake.calls_to("modelWithMILText:weights:optionsPlist:")
        device = mil.parse(descriptor.args[0].payload.decode())
        assert [v.name for v in device.main.inputs] == ["i0_small", "i1_mid", "i2_big"]
        assert [v.name for v in device.main.outputs] == ["o0_total", "o1_prod"]
        sizes = [v.type.nbytes for v in device.main.inputs]
        assert sizes == sorted(sizes) and len(set(sizes)) == 3
        out_sizes = [v.type.nbytes for v in device.main.outputs]
        assert out_sizes == sorted(out_sizes, reverse=True)
        # surfaces in request order: [1, 4, 1, w] fp16 is 4 rows of 64 bytes for w <= 32
        k.input_buffer("small")
        (request,) = fake.calls_to(REQUEST)
        assert [o.surface.properties["Width"] for o in request.args[0].items] == [1, 16, 32]
        got = k(**inputs)
        for name in ("prod", "total"):
            np.testing.assert_array_equal(got[name], expected[name])


def test_submit_uses_one_request_per_evaluation_in_flight(fake: FakeFramework) -> None:
    program = unweighted_program()
    fake.evaluate_delay = 0.002
    batches = [random_inputs(program) for _ in range(40)]
    with ane_compile(program, framework=fake) as k:
        assert k.max_in_flight() == 127
        futures = [k.submit(**inputs) for inputs in batches]
        results = [f.result() for f in futures]
    for inputs, got in zip(batches, results):
        np.testing.assert_array_equal(got["y"], reference_outputs(program, inputs)["y"])
    assert fake.violations == []
    assert fake.max_in_flight > 1, "submit never had two evaluations in flight"
    assert len(fake.calls_to(REQUEST)) <= 1 + 127


def test_stats_report_hardware_time_only_when_enabled(fake: FakeFramework) -> None:
    x = np.ones((1, 4, 1, 8), np.float16)
    with ane_compile(unweighted_program(), framework=fake) as k:
        k(x=x)
        assert k.last_stats() is None
    with ane_compile(unweighted_program(), framework=fake, stats=True) as k:
        k(x=x)
        stats = k.last_stats()
    assert stats is not None and stats["hw_s"] == pytest.approx(12_345e-9)
    assert stats["wall_s"] >= 0
    assert fake.calls_to("statsWithHardwareExecutionNS:")


# -- failures and cleanup --------------------------------------------------------------------------
def test_failed_compile_raises_compile_error_with_line_and_cleans_up(fake: FakeFramework) -> None:
    fake.compile_result = (False, FakeNSError("invalid op at line 6: unsupported", error_code=3))
    with pytest.raises(CompileError) as info:
        ane_compile(weighted_program(), framework=fake)
    err = info.value
    assert err.line == 6 and err.code == 3 and err.domain == "com.apple.appleneuralengine"
    assert "unsupported" in str(err)
    assert "loadWithQoS:options:error:" not in fake.selectors_called()
    assert list(fake.tmp.iterdir()) == [], "temp directory left behind after a failed compile"


def test_failed_compile_without_nserror_still_reports(fake: FakeFramework) -> None:
    fake.compile_result = (False, None)
    with pytest.raises(CompileError, match="without an NSError"):
        ane_compile(unweighted_program(), framework=fake)


def test_load_is_retried_once(fake: FakeFramework) -> None:
    fake.load_results = [(False, FakeNSError("busy"))]
    ane_compile(unweighted_program(), framework=fake).close()
    assert len(fake.calls_to("loadWithQoS:options:error:")) == 2


def test_load_failing_twice_is_a_compile_error_and_cleans_up(fake: FakeFramework) -> None:
    fake.load_results = [(False, FakeNSError("busy")), (False, FakeNSError("still busy"))]
    with pytest.raises(CompileError, match="load failed: still busy"):
        ane_compile(unweighted_program(), framework=fake)
    assert list(fake.tmp.iterdir()) == []


def test_failed_evaluation_is_an_evaluation_error_and_relocks(fake: FakeFramework) -> None:
    with ane_compile(unweighted_program(), framework=fake) as k:
        fake.evaluate_result = (False, FakeNSError("program fault", error_code=29))
        with pytest.raises(EvaluationError) as info:
            k.run()
        assert info.value.code == 29
        assert all(s.locks == 1 for s in fake.surfaces), "surfaces not locked for CPU again"


def test_compile_budget_stops_before_the_compile_call(
    fake: FakeFramework, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget(limit=1))
    ane_compile(unweighted_program(), framework=fake).close()
    with pytest.raises(CompileBudgetExhausted) as info:
        ane_compile(weighted_program(), framework=fake)
    assert (info.value.used, info.value.limit) == (1, 1)
    assert len(fake.calls_to("compileWithQoS:options:error:")) == 1
    assert list(fake.tmp.iterdir()) == []


def test_identical_programs_share_the_work_directory_until_both_close(fake: FakeFramework) -> None:
    program = weighted_program()
    a = ane_compile(program, framework=fake)
    b = ane_compile(program, framework=fake)
    assert a.workdir == b.workdir
    a.close()
    assert b.workdir.is_dir()
    b.close()
    assert not b.workdir.exists()


def test_bad_qos_is_rejected(fake: FakeFramework) -> None:
    for qos in (-1, 2**32, 1.5, True):
        with pytest.raises(ValueError, match="qos"):
            ane_compile(unweighted_program(), framework=fake, qos=qos)


# -- the _ANEClient path -----------------------------------------------------------------------------
def test_contract_client_path_for_mlmodelc(fake: FakeFramework, tmp_path: Path) -> None:
    program = weighted_program()
    path = program.save(tmp_path / "model.mlmodelc")
    inputs = random_inputs(program)
    with compile_mlmodelc(path, framework=fake, qos=25) as k:
        got = k(**inputs)
    np.testing.assert_array_equal(got["y"], reference_outputs(program, inputs)["y"])
    assert fake.selectors_called() == [
        "sharedConnection",
        "modelAtURL:key:",
        "compileModel:options:qos:error:",
        "loadModel:options:qos:error:",
        "modelAttributes",
        "objectWithIOSurface:",  # the evaluation slot, made when first needed
        "objectWithIOSurface:",
        REQUEST,
        "validate",
        "evaluateWithModel:options:request:qos:error:",
        "unloadModel:options:qos:error:",
    ]
    (model_call,) = fake.calls_to("modelAtURL:key:")
    assert model_call.args == (NSURL(str(path.resolve())), "anekit")
    (compile_call,) = fake.calls_to("compileModel:options:qos:error:")
    assert compile_call.args[1] == NSDictionary(
        {"kANEFModelType": "kANEFModelMIL", "kANEFNetPlistFilenameKey": "model.mil"}
    )
    assert compile_call.args[2] == 25


def test_client_path_needs_model_mil(fake: FakeFramework, tmp_path: Path) -> None:
    with pytest.raises(CompileError, match="no model.mil"):
        compile_mlmodelc(tmp_path, framework=fake)


# -- the bridge itself ----------------------------------------------------------------------------------
def test_error_metadata_marks_the_last_argument_of_every_error_selector_as_out() -> None:
    registered: dict[tuple[bytes, bytes], dict] = {}

    class FakeObjC:
        _C_NSBOOL = b"Z"
        _C_OUT = b"o"

        @staticmethod
        def registerMetaDataForSelector(cls: bytes, sel: bytes, meta: dict) -> None:
            registered[(cls, sel)] = meta

    framework._register_error_metadata(FakeObjC)
    # Objective-C passes self and _cmd first, so a selector's k-th argument is index k + 1.
    expected_index = {
        "compileWithQoS:options:error:": 4,
        "loadWithQoS:options:error:": 4,
        "evaluateWithQoS:options:request:error:": 5,
        "unloadWithQoS:error:": 3,
        "compileModel:options:qos:error:": 5,
        "loadModel:options:qos:error:": 5,
        "evaluateWithModel:options:request:qos:error:": 6,
        "unloadModel:options:qos:error:": 5,
    }
    got = {sel.decode(): meta["arguments"] for (_, sel), meta in registered.items()}
    assert got == {sel: {i: {"type_modifier": b"o"}} for sel, i in expected_index.items()}


def test_every_error_selector_the_backend_calls_has_metadata(
    fake: FakeFramework, tmp_path: Path
) -> None:
    with ane_compile(weighted_program(), framework=fake) as k:
        k(x=np.zeros((1, 8, 1, 16), np.float16))
    with compile_mlmodelc(weighted_program().save(tmp_path / "m"), framework=fake) as k:
        k(x=np.zeros((1, 8, 1, 16), np.float16))
    declared = {sel for sels in framework.ERROR_SELECTORS.values() for sel in sels}
    used = {c.selector for c in fake.calls if c.selector.endswith("error:")}
    assert used - declared == set()


@pytest.mark.parametrize(
    "text, line",
    [
        ("bad op at line 12", 12),
        ("model.mil:7:3: error", 7),
        ("Line: 4 unexpected", 4),
        ("no idea", None),
    ],
)
def test_mil_line_is_read_from_compiler_messages(text: str, line: int | None) -> None:
    assert framework.mil_line(text) == line


def test_ane_backend_is_unavailable_here_with_the_reason() -> None:
    ok, reason = anekit.backends.ane.available()
    if ok:
        pytest.skip("this machine has the ANE framework")
    assert reason
    with pytest.raises(BackendUnavailable, match="unavailable") as info:
        anekit.compile(unweighted_program(), backend="ane")
    assert reason in str(info.value)
    with pytest.raises(BackendUnavailable, match=reason.split(";")[0]):
        ane_compile(unweighted_program())


def test_importing_anekit_and_the_backend_never_imports_pyobjc() -> None:
    probe = """
import importlib.abc, sys
seen = []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('objc', 'Foundation', 'IOSurface'):
            seen.append(name)
        return None
sys.meta_path.insert(0, Watch())
import anekit, anekit.backends
import anekit.backends.ane as ane
for m in ('framework', 'iosurface', 'kernel', 'inmemory', 'client', 'stats', 'host',
          'layout', 'device', 'dialect', 'workdirs', 'facts'):
    __import__('anekit.backends.ane.' + m)
ane.available()
anekit.backends.available_backends()
print(seen)
"""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=root, check=True
    )
    if sys.platform == "darwin":
        pytest.skip("on macOS available() loads PyObjC by design")
    assert out.stdout.strip() == "[]"


def test_anekit_exports_compile_mlmodelc() -> None:
    module = importlib.import_module("anekit")
    assert module.compile_mlmodelc is compile_mlmodelc
