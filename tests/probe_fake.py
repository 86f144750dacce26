"""A recording stand-in for the classes ``anekit probe`` and the Metal view use, on top of
the backend's (``tests/ane_fake.py``).

It adds, as selectors in the same recording table: ``_ANEClient``'s real-time, chaining
and mutable-weights selectors, ``_ANEChainingRequest`` and its parts, the shared-event
classes, ``_ANEVirtualClient``, the ``_ANEPerformanceStats`` factories; and, outside the
table, a Metal device whose shared events and command buffers behave as Metal's do, and
``MTLBuffer``s over the fake surfaces' own byte arrays. Each behaviour a probe asks
about can be switched (``chain_prepares``, ``events_honoured``, ``reload_reads_files``,
...), so the tests show the experiment records the answer the framework gives.
This proves our side of the contract only, never Apple's.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tests import ane_fake
from tests.ane_fake import FakeNSError, FakeSurface, NSArray, NSNumber, ObjCObject

PREPARE = "prepareChainingWithModel:options:chainingReq:qos:error:"
CHAIN = ("chainingRequestWithInputs:outputSets:lbInputSymbolId:lbOutputSymbolId:procedureIndex:"
         "signalEvents:transactionHandle:fwEnqueueDelay:memoryPoolId:")  # fmt: skip
MAP = "mapMutableWeightsForModel:andProcedure:mappedWeightsBuffer:size:error:"
SYNC = "syncMutableWeightsForModel:andProcedure:fromOffset:withSize:error:"
UNMAP = "unmapMutableWeightsForModel:andProcedure:"

# Type encodings the stand-in reports (the real ones where published; objects otherwise).
ENCODINGS = {
    "bufferWithIOSurfaceObject:symbolIndex:source:": "@40@0:8@16@24q32",
    "objectWithstatsSurRef:outputBuffer:": "@32@0:8^{__IOSurface=}16@24",
    CHAIN: "@88@0:8@16@24@32@40@48@56@64Q72Q80",
    "outputSetWithProcedureIndex:setIndex:signalValue:signalNotRequired:isOpenLoop:": "@40@0:8I16I20Q24B32B36",
    "inputBuffersWithProcedureIndex:inputBufferInfoIndex:inputFreeValue:executionDelay:": "@48@0:8I16@20@28Q36",
    PREPARE: "B48@0:8@16@24@32I40^@44",
    MAP: "B56@0:8@16@24^^v32^Q40^@48",
    SYNC: "B56@0:8@16@24Q32Q40^@48",
    UNMAP: "B32@0:8@16@24",
    "hwExecutionTime": "Q16@0:8",
    "perfCounterData": "@16@0:8",
    "performanceCounters": "@16@0:8",
    "driverMaskForANEFMask:": "I20@0:8I16",
    "beginRealTimeTask": "B16@0:8",
    "endRealTimeTask": "B16@0:8",
}
# The class each instance label stands for (the backend stand-in's, plus the probes').
INSTANCES_OF = {**ane_fake.INSTANCES_OF, "vclient": "_ANEVirtualClient",
                "chain_request": "_ANEChainingRequest", "buffer": "_ANEBuffer",
                "request": "_ANERequest"}  # fmt: skip


class FakeSharedEvent:
    """An ``MTLSharedEvent``: a value the CPU and the GPU (command buffers) can set."""

    def __init__(self) -> None:
        self.value = 0
        self.changed = threading.Condition()

    def signaledValue(self) -> int:
        return self.value

    def setSignaledValue_(self, value: int) -> None:
        with self.changed:
            self.value = value
            self.changed.notify_all()

    def IOSurfaceSharedEvent(self) -> FakeIOSurfaceSharedEvent:  # the bridge ggml uses
        return FakeIOSurfaceSharedEvent(self)


class FakeIOSurfaceSharedEvent:
    def __init__(self, event: FakeSharedEvent) -> None:
        self.event = event


class FakeCommandBuffer:
    def __init__(self, device: FakeMetalDevice) -> None:
        self.device, self.signals = device, []

    def encodeSignalEvent_value_(self, event: FakeSharedEvent, value: int) -> None:
        self.signals.append((event, value))

    def commit(self) -> None:
        self.device.committed.append(self)
        for event, value in self.signals:
            event.setSignaledValue_(value)

    def waitUntilCompleted(self) -> None:
        pass


class FakeMetalDevice:
    def __init__(self) -> None:
        self.committed: list[FakeCommandBuffer] = []
        self.events: list[FakeSharedEvent] = []
        self.buffers: list[FakeMTLBuffer] = []

    def name(self) -> str:
        return "Fake Apple GPU"

    def newCommandQueue(self) -> Any:
        device = self

        class Queue:
            def commandBuffer(self) -> FakeCommandBuffer:
                return FakeCommandBuffer(device)

        return Queue()

    def newSharedEvent(self) -> FakeSharedEvent:
        self.events.append(FakeSharedEvent())
        return self.events[-1]


class FakeMTLBuffer:
    """An ``MTLBuffer`` made ``NoCopy`` over memory it was handed."""

    def __init__(self, memory: memoryview, device: FakeMetalDevice) -> None:
        self.memory, self.device = memory, device

    def length(self) -> int:
        return len(self.memory)


class ProbeFramework(ane_fake.FakeFramework):
    """The backend's stand-in plus everything the probes and the Metal view send."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.metal = FakeMetalDevice()
        self.metal_copies = False  # a Metal that copies the memory (must be refused)
        self.chain_prepares = True
        self.chain_runs = True
        self.events_honoured = True
        self.realtime_fails = False
        self.realtime_models: set[int] = set()  # ids of models loaded for real time
        self.reload_reads_files = False  # Orion's finding; False is maderix's
        self.virtual_client = True
        self.mutable = True
        self.cache_dir: Path | None = None
        self.compiled_hexes: set[str] = set()
        self.error_outs: list[tuple[str, str]] = []
        self.chains: dict[int, ObjCObject] = {}
        self.mutable_maps: list[tuple[Any, Any]] = []

    def _selector_table(self) -> dict[tuple[str, str], Any]:
        t = super()._selector_table()
        t.update({
            ("client", "beginRealTimeTask"): lambda c: True,
            ("client", "endRealTimeTask"): lambda c: True,
            ("client", "evaluateRealTimeWithModel:options:request:error:"): self._realtime,
            ("client", "loadRealTimeModel:options:qos:error:"): lambda c, m, o, q, e: (
                self._realtime_load(m, True)),
            ("client", "unloadRealTimeModel:options:qos:error:"): lambda c, m, o, q, e: (
                self._realtime_load(m, False)),
            ("client", "isVirtualClient"): lambda c: False,
            ("client", "virtualClient"): lambda c: None,
            ("client", PREPARE): self._prepare,
            ("client", "enqueueSetsWithModel:outputSet:options:qos:error:"):
                lambda c, m, s, o, q, e: (True, None),
            ("client", "buffersReadyWithModel:inputBuffers:options:qos:error:"): self._ready,
            ("client", MAP): lambda *a: (True, None),
            ("client", SYNC): self._sync,
            ("client", UNMAP): lambda c, m, p: self.mutable_maps.pop() and True,
            ("client", "compiledModelExistsFor:"): lambda c, m: True,
            ("_ANEBuffer", "bufferWithIOSurfaceObject:symbolIndex:source:"):
                lambda c, io, index, source: ObjCObject(self, "buffer", io=io, index=index,
                                                        source=source),
            ("_ANEIOSurfaceOutputSets", "objectWithstatsSurRef:outputBuffer:"):
                lambda c, stats, buffers: ObjCObject(self, "output_sets", stats=stats,
                                                     buffers=buffers),
            ("_ANEChainingRequest", CHAIN): lambda c, ins, sets, *rest: ObjCObject(
                self, "chain_request", inputs=ins, sets=sets, rest=rest),
            ("chain_request", "validate"): lambda r: True,
            ("_ANEOutputSetEnqueue", "outputSetWithProcedureIndex:setIndex:signalValue:"
             "signalNotRequired:isOpenLoop:"): lambda c, *a: ObjCObject(self, "set", args=a),
            ("_ANEInputBuffersReady", "inputBuffersWithProcedureIndex:inputBufferInfoIndex:"
             "inputFreeValue:executionDelay:"): lambda c, *a: ObjCObject(self, "ready", args=a),
            ("_ANESharedWaitEvent", "waitEventWithValue:sharedEvent:"):
                lambda c, v, e: ObjCObject(self, "wait_event", value=v, shared=e),
            ("_ANESharedSignalEvent", "signalEventWithValue:symbolIndex:eventType:sharedEvent:"):
                lambda c, v, s, t, e: ObjCObject(self, "signal_event", value=v, type=t, shared=e),
            ("_ANESharedEvents", "sharedEventsWithSignalEvents:waitEvents:"):
                lambda c, s, w: ObjCObject(self, "shared_events", signals=s, waits=w),
            ("request", "setSharedEvents:"): lambda r, e: setattr(r, "shared_events", e),
            ("_ANERequest", ane_fake.REQUEST + "sharedEvents:"): self._request_with_events,
            ("request", "validate"): lambda r: True,
            ("_ANEVirtualClient", "sharedConnection"): lambda c: (
                ObjCObject(self, "vclient") if self.virtual_client else None),
            ("_ANEVirtualClient", "new"): lambda c: None,
            ("vclient", "description"): lambda v: "<_ANEVirtualClient: fake>",
            ("vclient", "connect"): lambda v: 0,
            ("vclient", "hostBuildVersion"): lambda v: "24A335",
            ("vclient", "hostCapabilityMask"): lambda v: 3,
            ("vclient", "hostDataInterfaceVersion"): lambda v: 1,
            ("vclient", "evaluateWithModel:options:request:qos:error:"):
                lambda v, m, o, r, q, e: self._evaluate(m, r),
            ("_ANEPerformanceStats", "new"): lambda c: None,  # ANE_NOTES 2.3: nil
            ("_ANEPerformanceStats", "alloc"): lambda c: ObjCObject(self, "stats_alloc"),
            ("stats_alloc", "init"): lambda s: None,
            ("stats_alloc", "initWithHardwareExecution:perfCounterData:"):
                lambda s, ns, data: ObjCObject(self, "stats", ns=ns),
            ("_ANEPerformanceStats", "driverMaskForANEFMask:"): lambda c, m: m << 8,
            ("stats", "perfCounterData"): lambda s: FakeNSData(getattr(s, "counters", b"")),
            ("stats", "performanceCounters"): lambda s: {"cycles": len(getattr(s, "counters", b""))},
            ("model", "loadWithQoS:options:error:"): lambda m, q, o, e: self._load_model(m),
            ("ane_model", "setPerfStatsMask:"): lambda m, mask: setattr(m, "mask", mask),
        })  # fmt: skip
        return t

    # -- the Framework interface additions --------------------------------------------------
    def methods(self, class_name: str) -> list[tuple[str, str, str]]:
        rows = []
        for label, sel in self.selectors:
            if label == class_name:
                rows.append(("+", sel, ENCODINGS.get(sel, "@24@0:8@16")))
            elif INSTANCES_OF.get(label) == class_name:
                rows.append(("-", sel, ENCODINGS.get(sel, "@24@0:8@16")))
        return sorted(rows)

    def error_out(self, class_name: str, selector: str) -> None:
        self.error_outs.append((class_name, selector))

    def metal_device(self) -> FakeMetalDevice:
        return self.metal

    def metal_buffer(self, surface: FakeSurface, device: FakeMetalDevice) -> tuple[Any, memoryview]:
        memory = memoryview(bytearray(surface.buffer) if self.metal_copies else surface.buffer)
        buffer = FakeMTLBuffer(memory, device)
        device.buffers.append(buffer)
        return buffer, memory

    def map_mutable_weights(self, client: Any, model: Any, procedure: Any,
                            max_bytes: int) -> tuple[bool, memoryview | None, Any]:  # fmt: skip
        self.calls.append(ane_fake.Call("client", MAP, (model, procedure), self.pool_depth()))
        if not self.mutable or not isinstance(procedure, NSNumber):
            return False, None, FakeNSError("no mutable weights for this procedure")
        ((path, blob),) = model.weights.items()
        model.mapped = (path, bytearray(blob))
        self.mutable_maps.append((model, procedure))
        return True, memoryview(model.mapped[1]), None

    # -- behaviours ---------------------------------------------------------------------------
    def _compile(self, model: ObjCObject) -> tuple[bool, Any]:
        result = super()._compile(model)
        hex_id = getattr(model, "hex", None)
        if self.cache_dir is not None and hex_id and hex_id not in self.compiled_hexes:
            bundle = self.cache_dir / "24A335" / hex_id / "H16G.bundle"
            bundle.mkdir(parents=True)
            (bundle / "H16G.e5").write_bytes(b"e5" * 1344)
        self.compiled_hexes.add(hex_id)
        return result

    def _load_model(self, model: ObjCObject) -> tuple[bool, Any]:
        if self.reload_reads_files and getattr(model, "hex", None):
            workdir = self.tmp / model.hex
            for path in list(model.weights):
                name = path.split("weights/", 1)[1]
                model.weights[path] = model.inner.weights[path] = (
                    workdir / "weights" / name).read_bytes()  # fmt: skip
        return self._load()

    def _realtime(self, c: Any, model: Any, options: Any, request: Any, error: Any) -> Any:
        if self.realtime_fails or id(model) not in self.realtime_models:
            return False, FakeNSError("real-time evaluation refused", error_code=0x1D)
        return self._evaluate(model, request)

    def _realtime_load(self, model: Any, load: bool) -> tuple[bool, None]:
        """A model evaluates in real time only between loadRealTimeModel and its unload."""
        (self.realtime_models.add if load else self.realtime_models.discard)(id(model))
        return True, None

    def _prepare(self, c: Any, model: Any, options: Any, chain: Any, qos: int, error: Any) -> Any:
        if not self.chain_prepares:
            return False, FakeNSError("chaining needs an Espresso program", error_code=15)
        self.chains[id(model)] = (model, chain)
        return True, None

    def _ready(self, c: Any, model: Any, ready: Any, options: Any, qos: int, error: Any) -> Any:
        """Run the chain from ``model``: each prepared model whose input the last one wrote."""
        if not self.chain_runs:
            return False, FakeNSError("buffersReady is blocked", error_code=5)
        written = None
        for _ in range(len(self.chains) + 1):
            step = [(m, ch) for m, ch in self.chains.values()
                    if (written is None and m is model) or
                    (written is not None and ch.inputs.items[0].io.surface is written)]  # fmt: skip
            if not step:
                break
            m, ch = step[0]
            out = ch.sets.items[0].buffers.items[0]
            request = ObjCObject(self, "request", inputs=NSArray([ch.inputs.items[0].io]),
                                 input_indices=NSArray([ch.inputs.items[0].index]),
                                 outputs=NSArray([out.io]), output_indices=NSArray([out.index]),
                                 stats=None)  # fmt: skip
            self._compute(m, request)
            written = out.io.surface
        return True, None

    def _request_with_events(self, cls: Any, *args: Any) -> ObjCObject:
        request = self._request(cls, *args[:-1])
        request.shared_events = args[-1]
        return request

    def _sync(self, c: Any, model: Any, procedure: Any, offset: int, size: int, error: Any) -> Any:
        path, data = model.mapped
        model.weights[path] = bytes(data)
        return True, None

    def _evaluate(self, model: ObjCObject, request: ObjCObject) -> tuple[bool, Any]:
        events = getattr(request, "shared_events", None)
        if events is not None and self.events_honoured:
            for wait in events.waits.items:
                shared = wait.shared.event
                with shared.changed:
                    shared.changed.wait_for(lambda s=shared, v=wait.value: s.value >= v, 5.0)
        if request.stats is not None:
            mask = getattr(getattr(model, "inner", model), "mask", 0)
            request.stats.counters = bytes(8 * bin(mask).count("1"))
        result = super()._evaluate(model, request)
        if events is not None and self.events_honoured:
            for signal in events.signals.items:
                signal.shared.event.setSignaledValue_(signal.value)
        return result


class FakeNSData:
    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def length(self) -> int:
        return len(self.payload)

    def bytes(self) -> memoryview:
        return memoryview(self.payload)

    def __bytes__(self) -> bytes:  # PyObjC's NSData has the buffer protocol
        return self.payload


def surface_of(fake: ProbeFramework, buffer: FakeMTLBuffer) -> FakeSurface:
    """The fake surface whose byte array the buffer's memory is."""
    return next(s for s in fake.surfaces if buffer.memory.obj is s.buffer)
