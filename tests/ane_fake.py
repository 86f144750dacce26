"""A recording stand-in for the PyObjC object graph of AppleNeuralEngine.framework.

It records every selector sent (with the autorelease-pool depth at the time), keeps
fake IOSurfaces as byte arrays, and evaluates a request by running the reference
backend on the MIL text it was given. It reads and writes the surfaces the way it
says the hardware lays them out, with its own row arithmetic (independent of the
backend's): rows of each tensor at ``row_align``-byte strides, planes padded by
``plane_pad`` bytes. It binds request indices the way its ``modelAttributes`` say:

- ``attributes = "alphabetical"`` (default): ``LiveInputList``/``LiveOutputList`` and the
  symbol arrays list tensors in alphabetical order of their MIL names (Orion's finding);
- ``attributes = "size"``: inputs by ascending and outputs by descending byte size;
- ``attributes = None``: no attributes at all; then the "hardware" reads 64-byte rows
  and binds by signature order, which is what the backend's fallback must match.

Wiring mistakes (wrong strides, wrong surface, wrong index) show up as wrong numbers.
This proves our side of the contract only, never Apple's.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit import mil
from anekit.backends import reference
from anekit.errors import BackendUnavailable

REQUEST = (
    "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:"
)


# The class each instance label of the stand-in stands for (for ``methods``).
INSTANCES_OF = {
    "model": "_ANEInMemoryModel",
    "ane_model": "_ANEModel",
    "client_model": "_ANEModel",
    "client": "_ANEClient",
    "stats": "_ANEPerformanceStats",
}


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

    def count(self) -> int:
        return len(self.items)

    def objectAtIndex_(self, index: int) -> Any:
        return self.items[index]


class FakeObjCError(Exception):
    """Stands in for ``objc.error``: an Objective-C exception with PyObjC's ``_pyobjc_info_``."""

    def __init__(self, name: str, reason: str, user_info: dict[str, Any] | None = None) -> None:
        super().__init__(f"{name} - {reason}")
        self._pyobjc_info_ = {"name": name, "reason": reason, "userInfo": user_info}


@dataclass(frozen=True)
class NSURL:
    path: str


@dataclass
class FakeNSError:
    text: str
    domain_name: str = "com.apple.appleneuralengine"
    error_code: int = 7
    info: dict[str, Any] | None = None

    def localizedDescription(self) -> str:
        return self.text

    def userInfo(self) -> dict[str, Any]:
        return self.info or {}

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
    pool_depth: int


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
            self._fw.calls.append(Call(self.label, selector, args, self._fw.pool_depth()))
            return impl(self, *args)

        return send


@dataclass(frozen=True)
class TrueLayout:
    """How the stand-in's "hardware" lays out one tensor: rows of ``row`` bytes, planes of ``plane``."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    channels: int
    height: int
    row: int
    plane: int

    @property
    def width(self) -> int:
        return self.shape[-1] if self.shape else 1

    def read(self, buffer: bytearray) -> np.ndarray:
        """The tensor, read row by row from ``buffer`` (zeros past its end)."""
        item, out = self.dtype.itemsize, []
        buffer = bytearray(bytes(buffer).ljust(self.channels * self.plane, b"\0"))
        for r in range(self.channels * self.height):
            c, h = divmod(r, self.height)
            start = c * self.plane + h * self.row
            out.append(np.frombuffer(bytes(buffer[start : start + self.width * item]), self.dtype))
        return np.concatenate(out).reshape(self.shape)

    def write(self, buffer: bytearray, value: np.ndarray) -> None:
        """Write the tensor row by row into ``buffer``."""
        rows = np.ascontiguousarray(value, self.dtype).reshape(-1, self.width)
        for r, row in enumerate(rows):
            c, h = divmod(r, self.height)
            start = c * self.plane + h * self.row
            data = row.tobytes()[: max(len(buffer) - start, 0)]  # nothing past the end
            buffer[start : start + len(data)] = data

    def entry(self, symbol_suffix: str, name: str | None = None) -> dict[str, Any]:
        """This tensor as a ``LiveInputList``/``LiveOutputList`` entry (named ``name``)."""
        kind = {2: "Float16", 4: "Float32"}[self.dtype.itemsize]
        name = self.name if name is None else name
        return {
            "Name": name,
            "Symbol": name + symbol_suffix,
            "Channels": self.channels,
            "Height": self.height,
            "Width": self.width,
            "RowStride": self.row,
            "PlaneStride": self.plane,
            "Type": kind,
        }


class FakeFramework:
    """The Framework seam with every Objective-C object replaced by a recording stand-in."""

    pyobjc_version = "fake"
    foreign_errors = (FakeObjCError,)

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.calls: list[Call] = []
        self.surfaces: list[FakeSurface] = []
        self.compile_snapshots: list[dict[str, bytes]] = []
        self.compile_result: tuple[bool, Any] = (True, None)
        self.load_results: list[tuple[bool, Any]] = []
        self.evaluate_result: tuple[bool, Any] | None = None
        self.unload_result: tuple[bool, Any] = (True, None)
        self.evaluate_delay = 0.0
        self.attributes: str | None = "alphabetical"
        self.row_align = 64
        self.plane_pad = 0
        self.symbol_suffix = ""
        self.outputs_named_by = "variable"  # or "op": the compiler names outputs by op name
        self.hex_ignores_weights = False
        self.metadata_registered = True  # whether NSError** reads as an out-parameter
        self.stats_where = "attached"  # "attached", "array", "property" or None: where ns land
        self.request_valid = True  # what -[_ANERequest validate] answers
        self.device = {"hasANE": True, "isVirtualMachine": False, "aneSubType": "h16",
                       "numANECores": 16, "numANEs": 1}  # fmt: skip
        self.violations: list[str] = []
        self.in_flight: set[int] = set()
        self.max_in_flight = 0
        self.pools_entered = 0
        self._depth = threading.local()
        self._guard = threading.Lock()
        self.selectors = self._selector_table()

    def _selector_table(self) -> dict[tuple[str, str], Any]:
        table: dict[tuple[str, str], Any] = {
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
            ("model", "unloadWithQoS:error:"): lambda m, q, e: self.unload_result,
            ("model", "model"): lambda m: m.inner,
            ("model", "setPerfStatsMask:"): lambda m, mask: None,
            ("ane_model", "modelAttributes"): lambda m: self.model_attributes(
                m.text, m.weights, m.align
            ),
            ("ane_model", "setPerfStatsMask:"): lambda m, mask: None,
            ("_ANEIOSurfaceObject", "objectWithIOSurface:"): lambda c, s: ObjCObject(
                self, "io", surface=s
            ),
            ("_ANERequest", REQUEST): self._request,
            ("request", "validate"): lambda r: self.request_valid,
            ("request", "perfStatsArray"): lambda r: NSArray(
                [r.reported] if self.stats_where == "array" and r.reported else []
            ),
            ("request", "perfStats"): lambda r: (
                r.reported if self.stats_where == "property" else None
            ),
            ("_ANEPerformanceStats", "statsWithHardwareExecutionNS:"): lambda c, ns: ObjCObject(
                self, "stats", ns=ns
            ),
            ("stats", "hwExecutionTime"): lambda s: s.ns,
            ("_ANEClient", "sharedConnection"): lambda c: ObjCObject(self, "client"),
            ("_ANEModel", "modelAtURL:key:"): self._client_model,
            ("client_model", "modelAttributes"): lambda m: self.model_attributes(m.text, m.weights),
            ("client", "compileModel:options:qos:error:"): lambda c, m, o, q, e: self._compile(m),
            ("client", "loadModel:options:qos:error:"): lambda c, m, o, q, e: self._load(),
            ("client", "evaluateWithModel:options:request:qos:error:"): lambda c, m, o, r, q, e: (
                self._evaluate(m, r)
            ),
            ("client", "unloadModel:options:qos:error:"): lambda c, m, o, q, e: self.unload_result,
        }
        for key in ("hasANE", "isVirtualMachine", "aneSubType", "numANECores", "numANEs"):
            table[("_ANEDeviceInfo", key)] = lambda c, key=key: self.device.get(key)
        return table

    # -- the Framework interface ---------------------------------------------------------------
    @contextlib.contextmanager
    def pool(self) -> Iterator[None]:
        self._depth.value = self.pool_depth() + 1
        with self._guard:
            self.pools_entered += 1
        try:
            yield
        finally:
            self._depth.value -= 1

    def pool_depth(self) -> int:
        return getattr(self._depth, "value", 0)

    def empty_options(self) -> NSDictionary:
        return NSDictionary({})

    def cls(self, name: str) -> ObjCObject:
        if not any(label == name for label, _ in self.selectors):
            raise BackendUnavailable(f"no class {name}")
        return ObjCObject(self, name)

    def selector_metadata(self, class_name: str, selector: str) -> dict[str, Any]:
        """``__metadata__()`` as PyObjC really returns it: a registered ``type_modifier`` is
        merged into the native type (``b"o^@"``), there is no ``type_modifier`` key."""
        self.cls(class_name)
        n = selector.count(":")
        arguments: dict[int, dict[str, Any]] = {0: {"type": b"@"}, 1: {"type": b":"}}
        for i in range(2, n + 1):
            arguments[i] = {"type": b"@"}
        arguments[n + 1] = {"type": b"o^@" if self.metadata_registered else b"^@"}
        return {"retval": {"type": b"Z"}, "arguments": arguments, "variadic": False}

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

    def class_names(self) -> list[str]:
        return sorted({label for label, _ in self.selectors if label.startswith("_ANE")})

    def methods(self, class_name: str) -> list[tuple[str, str, str]]:
        rows = []
        for label, sel in self.selectors:
            if label == class_name:
                rows.append(("+", sel, "@24@0:8@16"))
            elif INSTANCES_OF.get(label) == class_name:
                rows.append(("-", sel, "@24@0:8@16"))
        return sorted(rows)

    # -- the "hardware" layout and binding -------------------------------------------------------
    def true_layout(self, v: mil.program.Value, align: int) -> TrueLayout:
        shape = tuple(int(d) for d in v.shape)
        lead = shape[:-1]
        height = lead[-1] if lead else 1
        channels = math.prod(lead[:-1]) if len(lead) > 1 else 1
        if self.attributes is None:  # no attributes: plain rows, as the backend's fallback
            channels, height = math.prod(lead) if lead else 1, 1
        width = shape[-1] if shape else 1
        row = -(-width * v.dtype.itemsize // align) * align
        plane = height * row + (self.plane_pad if self.attributes else 0)
        return TrueLayout(v.name, shape, v.dtype.numpy, channels, height, row, plane)

    def reported_name(self, v: Any) -> str:
        """The name the compiled model gives a tensor: its variable's, or its op's name."""
        if self.outputs_named_by == "op" and v.producer is not None:
            return str(v.producer.attrs.get("name", v.name))
        return v.name

    def order(self, values: tuple[Any, ...], *, outputs: bool) -> list[Any]:
        """The tensors in the order request indices count them."""
        if self.attributes == "alphabetical":
            return sorted(values, key=self.reported_name)
        if self.attributes == "size":
            sign = -1 if outputs else 1
            return sorted(values, key=lambda v: sign * v.type.nbytes)
        return list(values)

    def model_attributes(
        self, text: str, weights: Any, align: int | None = None
    ) -> dict[str, Any] | None:
        if self.attributes is None:
            return None
        fn = mil.parse(text, weights=weights).main
        align = self.row_align if align is None else align
        in_order = self.order(fn.inputs, outputs=False)
        out_order = self.order(fn.outputs, outputs=True)
        ins = [(self.true_layout(v, align), self.reported_name(v)) for v in in_order]
        outs = [(self.true_layout(v, align), self.reported_name(v)) for v in out_order]
        suffix = self.symbol_suffix
        return {
            "NetworkStatusList": [
                {
                    "LiveInputList": [t.entry(suffix, name) for t, name in ins],
                    "LiveOutputList": [t.entry(suffix, name) for t, name in outs],
                }
            ],
            "ANEFModelDescription": {
                "kANEFModelInputSymbolsArrayKey": [name + suffix for _, name in ins],
                "kANEFModelOutputSymbolsArrayKey": [name + suffix for _, name in outs],
            },
        }

    # -- selector implementations --------------------------------------------------------------
    def _descriptor(self, cls: ObjCObject, text: Any, weights: Any, options: Any) -> ObjCObject:
        return ObjCObject(self, "descriptor", text=text, weights=weights)

    def _model(self, cls: ObjCObject, descriptor: ObjCObject) -> ObjCObject:
        payload = descriptor.text.payload
        weights = {k: v.items["data"].payload for k, v in descriptor.weights.items.items()}
        keyed = (
            payload
            if self.hex_ignores_weights
            else payload + repr(sorted(weights.items())).encode()
        )
        text = payload.decode()
        # a model's rows keep the alignment in force when it was made (as a compiled model's)
        inner = ObjCObject(self, "ane_model", text=text, weights=weights, align=self.row_align)
        return ObjCObject(self, "model", hex=hashlib.sha256(keyed).hexdigest(), text=text,
                          weights=weights, inner=inner, align=self.row_align)  # fmt: skip

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
            reported=None,
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
            self._report_stats(request)
            return True, None
        finally:
            with self._guard:
                self.in_flight.discard(id(request))

    def _compute(self, model: ObjCObject, request: ObjCObject) -> None:
        program = mil.parse(model.text, weights=model.weights)
        fn = program.main
        align = getattr(model, "align", self.row_align) if self.attributes else 64
        in_order = self.order(fn.inputs, outputs=False)
        out_order = self.order(fn.outputs, outputs=True)
        inputs = {}
        for obj, index in zip(request.inputs.items, request.input_indices.items):
            truth = self.true_layout(in_order[index.value], align)
            self._check_size(obj.surface, truth)
            inputs[truth.name] = truth.read(obj.surface.buffer)
        outs = reference.compile(program)(**inputs)
        for obj, index in zip(request.outputs.items, request.output_indices.items):
            truth = self.true_layout(out_order[index.value], align)
            self._check_size(obj.surface, truth)
            truth.write(obj.surface.buffer, outs[truth.name])

    def _report_stats(self, request: ObjCObject) -> None:
        """Put the hardware time where this stand-in's framework keeps it (``stats_where``)."""
        if request.stats is None or self.stats_where is None:
            return
        if self.stats_where == "attached":
            request.stats.ns = 12_345
        else:
            request.reported = ObjCObject(self, "stats", ns=23_456)

    def _check_size(self, surface: FakeSurface, truth: TrueLayout) -> None:
        need = truth.channels * truth.plane
        if len(surface.buffer) < need:
            self.violations.append(f"{truth.name}: surface of {len(surface.buffer)} < {need} bytes")

    # -- helpers for the tests -----------------------------------------------------------------
    def selectors_called(self) -> list[str]:
        return [c.selector for c in self.calls]

    def calls_to(self, selector: str) -> list[Call]:
        return [c for c in self.calls if c.selector == selector]


class SurfaceWrites:
    """Counts the bytes the host writes into IOSurface views (see :func:`count_surface_writes`)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.writes = 0
        self._depth = 0  # inside a counted write: its inner copies are not counted again

    def reset(self) -> None:
        self.bytes = self.writes = 0

    def count(self, dst: Any) -> None:
        from anekit.backends.ane.iosurface import SurfaceView

        if isinstance(dst, SurfaceView) and self._depth == 0:
            self.bytes += dst.size * dst.itemsize
            self.writes += 1

    @contextlib.contextmanager
    def inside(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1


def count_surface_writes(monkeypatch: Any) -> SurfaceWrites:
    """Count host writes into surface views: ``np.copyto``, item assignment, ``fp16.cast_into``.

    Those are the ways anekit's code (backend and ``llm``) writes into a view; the
    stand-in's own "hardware" writes go to its byte arrays directly and are not counted.
    """
    from anekit import fp16
    from anekit.backends.ane.iosurface import SurfaceView

    counter = SurfaceWrites()
    copyto, cast = np.copyto, fp16.cast_into

    def counted_copyto(dst: Any, src: Any, *args: Any, **kw: Any) -> None:
        counter.count(dst)
        with counter.inside():
            copyto(dst, src, *args, **kw)

    def counted_cast(dst: Any, src: Any) -> None:
        counter.count(dst)
        with counter.inside():
            cast(dst, src)

    def counted_setitem(self: Any, key: Any, value: Any) -> None:
        counter.count(np.ndarray.__getitem__(self, key))
        with counter.inside():
            np.ndarray.__setitem__(self, key, value)

    monkeypatch.setattr(np, "copyto", counted_copyto)
    monkeypatch.setattr(fp16, "cast_into", counted_cast)
    monkeypatch.setattr(SurfaceView, "__setitem__", counted_setitem, raising=False)
    return counter
