"""Contract tests of the ANE backend against a recording stand-in for the PyObjC object graph.

These prove our side of the contract only: that the backend calls exactly the
selectors of ANE_NOTES section 2.1 (and 2.2 for ``_ANEClient``) in order, with
the argument kinds the framework is known to need (NSData, not str, for the MIL
text; the weights dictionary shape; QoS; real NSDictionary options), that the
temporary directory holds ``model.mil`` and ``weights/`` when the compiler runs,
and that everything is cleaned up after close and after a failed compile. They
say nothing about whether Apple's framework behaves as documented; the hardware
tests in ``test_ane_hw.py`` do that on a Mac.

The stand-in evaluates a request by running the reference backend on the MIL text
it was given, reading and writing the request's surfaces, so wiring mistakes
(wrong surface, wrong order, wrong packing) show up as wrong numbers.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

REQUEST = (
    "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:"
)


# -- the recording stand-in ---------------------------------------------------------------------
@dataclass(frozen=True)
class NSData:
    payload: bytes


@dataclass(frozen=True)
class NSNumber:
    value: int | bool


@dataclass
class NSDictionary:
    items: dict[Any, Any]


@dataclass
class NSArray:
    items: list[Any]


@dataclass(frozen=True)
class NSURL:
    path: str


@dataclass
class FakeNSError:
    text: str
    domain_name: str = "com.apple.appleneuralengine"
    error_code: int = 7

    def localizedDescription(self) -> str:
        return self.text

    def userInfo(self) -> dict[str, str]:
        return {}

    def domain(self) -> str:
        return self.domain_name

    def code(self) -> int:
        return self.error_code


@dataclass
class FakeSurface:
    properties: dict[str, Any]
    buffer: bytearray
    id: int
    locks: int = 0


@dataclass
class Call:
    receiver: str
    selector: str
    args: tuple[Any, ...]


class ObjCObject:
    """Stands in for a PyObjC object: ``obj.a_b_(x, y)`` records selector ``a:b:``."""

    def __init__(self, fw: FakeFramework, label: str, **state: Any) -> None:
        self._fw = fw
        self.label = label
        self.__dict__.update(state)

    def __getattr__(self, pyname: str) -> Any:
        selector = pyname.replace("_", ":")
        impl = self._fw.selectors.get((self.label, selector))
        if impl is None:
            raise AttributeError(f"{self.label} does not respond to {selector}")

        def send(*args: Any) -> Any:
            self._fw.calls.append(Call(self.label, selector, args))
            return impl(self, *args)

        return send


class FakeFramework:
    """The Framework seam with every Objective-C object replaced by a recording stand-in."""

    pyobjc_version = "fake"

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.calls: list[Call] = []
        self.surfaces: list[FakeSurface] = []
        self.compile_snapshots: list[dict[str, bytes]] = []
        self.compile_result: tuple[bool, Any] = (True, None)
        self.load_results: list[tuple[bool, Any]] = []
        self.evaluate_result: tuple[bool, Any] | None = None
        self.evaluate_delay = 0.0
        self.violations: list[str] = []
        self.in_flight: set[int] = set()
        self.max_in_flight = 0
        self._guard = threading.Lock()
        self.selectors = {
            (
                "_ANEInMemoryModelDescriptor",
                "modelWithMILText:weights:optionsPlist:",
            ): self._descriptor,
            ("_ANEInMemoryModel", "inMemoryModelWithDescriptor:"): self._model,
            ("model", "hexStringIdentifier"): lambda m: m.hex,
            ("model", "compileWithQoS:options:error:"): lambda m, q, o, e: self._compile(m),
            ("model", "loadWithQoS:options:error:"): lambda m, q, o, e: self._load(),
            ("model", "evaluateWithQoS:options:request:error:"): lambda m, q, o, r, e: (
                self._evaluate(m, r)
            ),
            ("model", "unloadWithQoS:error:"): lambda m, q, e: (True, None),
            ("_ANEIOSurfaceObject", "objectWithIOSurface:"): lambda c, s: ObjCObject(
                self, "io", surface=s
            ),
            ("_ANERequest", REQUEST): self._request,
            ("_ANEPerformanceStats", "statsWithHardwareExecutionNS:"): lambda c, ns: ObjCObject(
                self, "stats", ns=ns
            ),
            ("stats", "hwExecutionTime"): lambda s: s.ns,
            ("_ANEClient", "sharedConnection"): lambda c: ObjCObject(self, "client"),
            ("_ANEModel", "modelAtURL:key:"): self._client_model,
            ("client", "compileModel:options:qos:error:"): lambda c, m, o, q, e: self._compile(m),
            ("client", "loadModel:options:qos:error:"): lambda c, m, o, q, e: self._load(),
            ("client", "evaluateWithModel:options:request:qos:error:"): lambda c, m, o, r, q, e: (
                self._evaluate(m, r)
            ),
            ("client", "unloadModel:options:qos:error:"): lambda c, m, o, q, e: (True, None),
            ("_ANEDeviceInfo", "aneSubType"): lambda c: "h16",
        }

    # -- the Framework interface ---------------------------------------------------------------
    def cls(self, name: str) -> ObjCObject:
        if not any(label == name for label, _ in self.selectors):
            raise BackendUnavailable(f"no class {name}")
        return ObjCObject(self, name)

    def data(self, payload: bytes) -> NSData:
        assert isinstance(payload, bytes)
        return NSData(payload)

    def number(self, value: int | bool) -> NSNumber:
        return NSNumber(value)

    def dictionary(self, items: dict[Any, Any]) -> NSDictionary:
        return NSDictionary(dict(items))

    def array(self, items: list[Any]) -> NSArray:
        return NSArray(list(items))

    def file_url(self, path: str) -> NSURL:
        return NSURL(path)

    def temporary_directory(self) -> str:
        return str(self.tmp)

    def surface_create(self, properties: dict[str, Any]) -> FakeSurface:
        s = FakeSurface(
            dict(properties), bytearray(properties["AllocSize"]), len(self.surfaces) + 1
        )
        self.surfaces.append(s)
        return s

    def surface_lock(self, surface: FakeSurface, options: int) -> int:
        surface.locks += 1
        return 0

    def surface_unlock(self, surface: FakeSurface, options: int) -> int:
        if surface.locks == 0:
            return 0xE00002C2  # kIOReturnNotLocked-like: an unbalanced unlock
        surface.locks -= 1
        return 0

    def surface_memory(self, surface: FakeSurface, nbytes: int) -> memoryview:
        return memoryview(surface.buffer)[:nbytes]

    def surface_id(self, surface: FakeSurface) -> int:
        return surface.id

    def surface_lookup(self, surface_id: int) -> FakeSurface | None:
        return next((s for s in self.surfaces if s.id == surface_id), None)

    def class_names(self) -> list[str]:
        return sorted({label for label, _ in self.selectors if label.startswith("_ANE")})

    def methods(self, class_name: str) -> list[tuple[str, str, str]]:
        return [("+", sel, "@24@0:8@16") for label, sel in self.selectors if label == class_name]

    # -- selector implementations --------------------------------------------------------------
    def _descriptor(self, cls: ObjCObject, text: Any, weights: Any, options: Any) -> ObjCObject:
        return ObjCObject(self, "descriptor", text=text, weights=weights)

    def _model(self, cls: ObjCObject, descriptor: ObjCObject) -> ObjCObject:
        payload = descriptor.text.payload
        weights = {k: v.items["data"].payload for k, v in descriptor.weights.items.items()}
        hex_id = hashlib.sha256(payload + repr(sorted(weights.items())).encode()).hexdigest()
        return ObjCObject(self, "model", hex=hex_id, text=payload.decode(), weights=weights)

    def _client_model(self, cls: ObjCObject, url: NSURL, key: str) -> ObjCObject:
        root = Path(url.path)
        return ObjCObject(
            self, "client_model", text=(root / "model.mil").read_text(), weights=root / "weights"
        )

    def _compile(self, model: ObjCObject) -> tuple[bool, Any]:
        if hasattr(model, "hex"):
            workdir = self.tmp / model.hex
            self.compile_snapshots.append(
                {
                    str(p.relative_to(workdir)): p.read_bytes()
                    for p in workdir.rglob("*")
                    if p.is_file()
                }
                if workdir.is_dir()
                else {}
            )
        return self.compile_result

    def _load(self) -> tuple[bool, Any]:
        return self.load_results.pop(0) if self.load_results else (True, None)

    def _request(
        self, cls: ObjCObject, ins, in_idx, outs, out_idx, weights_buf, stats, proc
    ) -> ObjCObject:
        return ObjCObject(
            self, "request", inputs=ins, input_indices=in_idx, outputs=outs,
            output_indices=out_idx, weights_buffer=weights_buf, stats=stats, procedure=proc,
        )  # fmt: skip

    def _evaluate(self, model: ObjCObject, request: ObjCObject) -> tuple[bool, Any]:
        with self._guard:
            if id(request) in self.in_flight:
                self.violations.append("one request evaluated twice at once")
            self.in_flight.add(id(request))
            self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
        try:
            time.sleep(self.evaluate_delay)
            surfaces = [o.surface for o in request.inputs.items + request.outputs.items]
            if any(s.locks for s in surfaces):
                self.violations.append("a surface was CPU-locked during evaluation")
            if self.evaluate_result is not None:
                return self.evaluate_result
            self._compute(model, request)
            if request.stats is not None:
                request.stats.ns = 12_345
            return True, None
        finally:
            with self._guard:
                self.in_flight.discard(id(request))

    def _compute(self, model: ObjCObject, request: ObjCObject) -> None:
        program = mil.parse(model.text, weights=model.weights)
        fn = program.main
        inputs = {}
        for obj, index in zip(request.inputs.items, request.input_indices.items):
            v = fn.inputs[index.value]
            inputs[v.name] = np.frombuffer(obj.surface.buffer, v.dtype.numpy).reshape(v.shape)
        outs = reference.compile(program)(**inputs)
        for obj, index in zip(request.outputs.items, request.output_indices.items):
            name = fn.outputs[index.value].name
            obj.surface.buffer[:] = np.ascontiguousarray(outs[name]).tobytes()

    # -- helpers for the tests -----------------------------------------------------------------
    def selectors_called(self) -> list[str]:
        return [c.selector for c in self.calls]

    def calls_to(self, selector: str) -> list[Call]:
        return [c for c in self.calls if c.selector == selector]


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
        "objectWithIOSurface:",  # input x
        "objectWithIOSurface:",  # output y
        REQUEST,
        "evaluateWithQoS:options:request:error:",
        "unloadWithQoS:error:",
    ]
    receivers = [c.receiver for c in fake.calls[:2]]
    assert receivers == ["_ANEInMemoryModelDescriptor", "_ANEInMemoryModel"]


def test_contract_descriptor_gets_nsdata_text_and_weights_dictionary(fake: FakeFramework) -> None:
    program = weighted_program()
    ane_compile(program, framework=fake).close()
    (call,) = fake.calls_to("modelWithMILText:weights:optionsPlist:")
    text, weights, options = call.args
    assert isinstance(text, NSData), "MIL text must be NSData of UTF-8 bytes, not a string"
    assert text.payload == program.to_text().encode("utf-8")
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
    k.close()
    expect = {
        "compileWithQoS:options:error:": (qos, NSDictionary({}), None),
        "loadWithQoS:options:error:": (qos, NSDictionary({}), None),
        "unloadWithQoS:error:": (qos, None),
    }
    for selector, args in expect.items():
        (call,) = fake.calls_to(selector)
        assert call.args == args
    (evaluate,) = fake.calls_to("evaluateWithQoS:options:request:error:")
    assert (
        evaluate.args[0] == qos
        and evaluate.args[1] == NSDictionary({})
        and evaluate.args[3] is None
    )


def test_contract_temp_directory_holds_model_and_weights_at_compile_then_is_removed(
    fake: FakeFramework,
) -> None:
    program = weighted_program()
    k = ane_compile(program, framework=fake)
    (snapshot,) = fake.compile_snapshots
    assert snapshot == {
        "model.mil": program.to_text().encode("utf-8"),
        "weights/w.bin": program.weight_files()["@model_path/weights/w.bin"],
    }
    assert k.workdir.parent == fake.tmp and k.workdir.is_dir()
    k.close()
    assert not k.workdir.exists()
    assert all(s.locks == 0 for s in fake.surfaces), "surfaces stay locked after close"


def test_contract_request_shape(fake: FakeFramework) -> None:
    ane_compile(unweighted_program(), framework=fake).close()
    (call,) = fake.calls_to(REQUEST)
    ins, in_idx, outs, out_idx, weights_buffer, stats, procedure = call.args
    assert [type(o.surface) for o in ins.items + outs.items] == [FakeSurface, FakeSurface]
    assert in_idx == NSArray([NSNumber(0)]) and out_idx == NSArray([NSNumber(0)])
    assert weights_buffer is None and stats is None and procedure == NSNumber(0)


def test_contract_surfaces_have_the_documented_properties(fake: FakeFramework) -> None:
    ane_compile(weighted_program(), framework=fake).close()
    nbytes = 8 * 16 * 2  # fp16 [1, 8, 1, 16], input and output alike
    for s in fake.surfaces:
        assert s.properties == {
            "Width": nbytes,
            "Height": 1,
            "BytesPerElement": 1,
            "BytesPerRow": nbytes,
            "AllocSize": nbytes,
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
        x_surface = fake.calls_to(REQUEST)[0].args[0].items[0].surface
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
    memory = np.frombuffer(view.surface.handle.buffer, np.float16).reshape(1, 4, 1, 8)
    assert (memory[0, 1:3] == 3.0).all() and memory[0, 0].sum() == 0


def test_packed_inputs_by_default(fake: FakeFramework) -> None:
    program = three_input_program()
    inputs = random_inputs(program)
    expected = reference_outputs(program, inputs)
    with ane_compile(program, framework=fake) as k:
        (descriptor,) = fake.calls_to("modelWithMILText:weights:optionsPlist:")
        device = mil.parse(descriptor.args[0].payload.decode())
        assert [v.name for v in device.main.inputs] == [k.packing.name]
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
        assert [v.name for v in device.main.inputs] == ["small", "mid", "big"]
        assert [v.name for v in device.main.outputs] == ["total", "prod"]
        (request,) = fake.calls_to(REQUEST)
        sizes = [len(o.surface.buffer) for o in request.args[0].items]
        assert sizes == sorted(sizes) and len(set(sizes)) == 3
        out_sizes = [len(o.surface.buffer) for o in request.args[2].items]
        assert out_sizes == sorted(out_sizes, reverse=True)
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
        "objectWithIOSurface:",
        "objectWithIOSurface:",
        REQUEST,
        "objectWithIOSurface:",  # the evaluation slot
        "objectWithIOSurface:",
        REQUEST,
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
for m in ('framework', 'iosurface', 'kernel', 'inmemory', 'client', 'stats'):
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
