"""What both ANE paths share: the loaded model, IOSurface slots, requests and evaluation.

A :class:`Loaded` model is what a compile path hands over: it dispatches requests,
reports ``modelAttributes`` and unloads once. Every framework call runs inside an
autorelease pool (PyObjC drains none without a run loop; ANE_NOTES 2.5), with one
immutable empty options dictionary per model, reused.

A *slot* is one request's worth of surfaces: an input surface per device input,
an output surface per output, laid out as :func:`~anekit.backends.ane.layout.plan`
says, the ``_ANERequest`` built once over them with the planned indices, and the
strided NumPy views the host uses. Every buffer set (``kernel.buffers()``) is a slot
of its own, made once; a set may bind surfaces of other sets for some inputs
(``share=``: the same IOSurface in several requests, when its geometry is the one
this model reads), so weights are held once and read by several programs. The
primary set backs ``input_buffer``/``output_buffer`` and ``run()``; ``evaluate()``
(and so ``__call__`` and ``submit(**inputs)``) takes a slot from a pool that grows to
the ANE's queue depth, one request object per evaluation in flight. A kernel that is
never closed is unloaded when it is garbage collected (``weakref.finalize``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit.backends.ane.device import DeviceProgram
from anekit.backends.ane.framework import describe_error, mil_line, plain, translated
from anekit.backends.ane.iosurface import Surface
from anekit.backends.ane.layout import IOPlan, TensorLayout, plan
from anekit.backends.ane.stats import check_stats_read, hardware_seconds, make_stats
from anekit.backends.base import (
    QUEUE_DEPTH,
    Buffer,
    BufferLayout,
    BufferSet,
    Kernel,
    KernelLayout,
    TensorSpec,
)
from anekit.errors import AnekitError, CompileError, EvaluationError
from anekit.mil.program import Program

MAX_QOS = 2**32 - 1  # the selectors take an unsigned int
LOAD_RETRY_DELAY_S = 0.1  # one load retry after 100 ms helps occasionally (ANE_NOTES 2.1)


def check_qos(qos: int) -> int:
    """Validate a QoS value (21 is what every published client uses; ANE_NOTES 2.1)."""
    if isinstance(qos, bool) or not isinstance(qos, int) or not 0 <= qos <= MAX_QOS:
        raise ValueError(f"qos must be an int in [0, {MAX_QOS}], found {qos!r}")
    return qos


def compile_step(result: tuple[bool, Any], step: str) -> None:
    """Raise CompileError with the framework's text (and the MIL line it names) if ``step`` failed."""
    ok, error = result
    if not ok:
        text, domain, code, info = describe_error(error)
        raise CompileError(
            f"ANE {step} failed: {text}",
            line=mil_line(text),
            domain=domain,
            code=code,
            user_info=info,
        )


def load_with_retry(attempt: Callable[[], tuple[bool, Any]]) -> None:
    """Load a model, retrying once after a short pause; CompileError if both attempts fail."""
    result = attempt()
    if not result[0]:
        time.sleep(LOAD_RETRY_DELAY_S)
        result = attempt()
    compile_step(result, "load")


def evaluation_error(error: Any, what: str) -> EvaluationError:
    """The EvaluationError for a failed framework call, with the NSError's fields."""
    text, domain, code, info = describe_error(error)
    return EvaluationError(f"ANE {what} failed: {text}", domain=domain, code=code, user_info=info)


def read_attributes(candidates: list[Any]) -> Any:
    """The first non-empty ``modelAttributes`` among model objects, as plain Python (or None)."""
    for obj in candidates:
        getter = getattr(obj, "modelAttributes", None)
        if getter is None:
            continue
        attrs = plain(getter())
        if attrs:
            return attrs
    return None


class Loaded(ABC):
    """A compiled and loaded model: it dispatches requests and unloads once."""

    def __init__(self, framework: Any, qos: int, *, autorelease: bool = True) -> None:
        self.fw = framework
        self.qos = check_qos(qos)
        self.autorelease = autorelease
        self.options = framework.empty_options()  # immutable, reused for every call

    def pool(self) -> contextlib.AbstractContextManager[Any]:
        """The autorelease pool every framework call runs in (none with ``autorelease=False``)."""
        return self.fw.pool() if self.autorelease else contextlib.nullcontext()

    @contextlib.contextmanager
    def call(self, what: str, error_type: type[AnekitError] = EvaluationError) -> Iterator[None]:
        """A framework call: in a pool, an ``objc.error`` raised inside becomes ``error_type``."""
        with self.pool(), translated(self.fw, what, error_type):
            yield

    @abstractmethod
    def attributes(self) -> Any:
        """The compiled model's ``modelAttributes`` as plain Python, or None."""

    @abstractmethod
    def dispatch(self, request: Any) -> tuple[bool, Any]:
        """Evaluate one request synchronously; returns (ok, NSError or None)."""

    @abstractmethod
    def unload(self) -> None:
        """Unload the model and remove what compiling left behind (called once)."""


class Slot:
    """Surfaces, views and the request for one evaluation in flight (or one buffer set).

    ``shared`` gives surfaces of other slots to bind for some device inputs (by index);
    every other surface is made here. Each surface is held while the slot lives.
    """

    def __init__(
        self,
        loaded: Loaded,
        kernel_plan: IOPlan,
        device: DeviceProgram,
        stats: bool,
        shared: Mapping[int, Surface] | None = None,
    ) -> None:
        fw = loaded.fw
        fn = device.program.main
        shared = shared or {}
        with loaded.call("request building"):
            self.inputs = [
                shared[i] if i in shared else Surface.create(fw, lay)
                for i, lay in enumerate(kernel_plan.inputs)
            ]
            self.outputs = [Surface.create(fw, lay) for lay in kernel_plan.outputs]
            self.in_views, self.out_views = host_views(
                device,
                [s.view(_shape(v), v.dtype.numpy) for v, s in zip(fn.inputs, self.inputs)],
                [s.view(_shape(v), v.dtype.numpy) for v, s in zip(fn.outputs, self.outputs)],
            )
            self.stats = make_stats(fw) if stats else None
            self.request = _request(fw, self, kernel_plan)
        for s in self.surfaces:
            s.hold()

    @property
    def surfaces(self) -> list[Surface]:
        return self.inputs + self.outputs

    def release(self) -> None:
        """Let go of every surface (the last holder unlocks it); views keep the memory alive."""
        run_all([s.drop for s in self.surfaces])


def run_all(steps: list[Callable[[], Any]]) -> None:
    """Call every step even when one fails; then raise the first failure."""
    errors: list[Exception] = []
    for step in steps:
        try:
            step()
        except Exception as e:
            errors.append(e)
    if errors:
        raise errors[0]


def host_views(
    device: DeviceProgram, ins: list[np.ndarray], outs: list[np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Arrays of the device tensors by host name (a packed input split into its inputs' views)."""
    fn = device.program.main
    in_views: dict[str, np.ndarray] = {}
    for v, arr in zip(fn.inputs, ins):
        host = device.input_names[v.name]
        if host == _packed(device):
            in_views.update(device.packing.views(arr))
        else:
            in_views[host] = arr
    return in_views, {device.output_names[v.name]: a for v, a in zip(fn.outputs, outs)}


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in v.type.shape)


def _request(fw: Any, slot: Slot, kernel_plan: IOPlan) -> Any:
    return request_for(fw, slot.inputs, slot.outputs, kernel_plan.input_indices,
                       kernel_plan.output_indices, slot.stats)  # fmt: skip


def request_for(
    fw: Any,
    inputs: Sequence[Surface],
    outputs: Sequence[Surface],
    input_indices: Sequence[int],
    output_indices: Sequence[int],
    stats: Any = None,
) -> Any:
    """An ``_ANERequest`` over the surfaces at the given request indices (ANE_NOTES 2.1 step 6).

    The arrays list the surfaces in ascending request index, as tmc's x/ane passes them
    (not in the program's signature order); ``-validate`` is asked once, where it exists.
    """
    wrap = fw.cls("_ANEIOSurfaceObject")
    in_order = sorted(range(len(inputs)), key=lambda i: input_indices[i])
    out_order = sorted(range(len(outputs)), key=lambda i: output_indices[i])
    request = fw.cls(
        "_ANERequest"
    ).requestWithInputs_inputIndices_outputs_outputIndices_weightsBuffer_perfStats_procedureIndex_(
        fw.array([wrap.objectWithIOSurface_(inputs[i].handle) for i in in_order]),
        fw.array([fw.number(input_indices[i]) for i in in_order]),
        fw.array([wrap.objectWithIOSurface_(outputs[i].handle) for i in out_order]),
        fw.array([fw.number(output_indices[i]) for i in out_order]),
        None,
        stats,
        fw.number(0),
    )
    what = f"{len(inputs)} input and {len(outputs)} output surfaces"
    if request is None:
        raise EvaluationError(f"_ANERequest rejected {what}")
    validate = getattr(request, "validate", None)
    if validate is not None and not validate():
        raise EvaluationError(
            f"-[_ANERequest validate] refused the request over {what} at input indices "
            f"{list(input_indices)} and output indices {list(output_indices)}"
        )
    return request


@dataclass(frozen=True)
class ObjCParts:
    """The Objective-C objects behind a kernel's primary slot, for experiments (``anekit probe``).

    ``loaded`` is the compiled model (``loaded.model``, ``loaded.options``, ``loaded.qos``);
    ``request`` the primary slot's ``_ANERequest``; the surfaces and indices are the ones it
    was built over, so an experiment can build variants of it (:func:`request_for`).
    """

    loaded: Loaded
    request: Any
    inputs: tuple[Surface, ...]
    outputs: tuple[Surface, ...]
    input_indices: tuple[int, ...]
    output_indices: tuple[int, ...]

    @contextlib.contextmanager
    def device_owned(self) -> Iterator[None]:
        """Unlock the surfaces while the device may use them (the host must not), lock them after."""
        surfaces = (*self.inputs, *self.outputs)
        for s in surfaces:
            s.device_begin()
        try:
            yield
        finally:
            for s in surfaces:
                s.device_end()


def _release_all(loaded: Loaded, slots: list[Slot]) -> None:
    """Release every slot's surfaces and unload; every step runs, the first failure is raised."""
    run_all([slot.release for slot in slots] + [loaded.unload])


class SurfaceKernel(Kernel):
    """A loaded ANE model evaluated through IOSurface slots laid out as the model reports."""

    backend = "ane"
    engine = "Apple Neural Engine"

    def __init__(
        self,
        program: Program,
        device: DeviceProgram,
        loaded: Loaded,
        *,
        stats: bool,
        stats_read: str = "request",
        layout: str = "auto",
        binding: str = "auto",
    ) -> None:
        super().__init__(program)
        self._stats_read = check_stats_read(stats_read)
        self.device_program = device.program
        self.packing = device.packing
        self._device = device
        self._loaded = loaded
        self._stats = stats
        self._slots: list[Slot] = []  # every slot made, so close (or the finalizer) frees them
        self._finalizer = weakref.finalize(self, _release_all, loaded, self._slots)
        self._free: queue.LifoQueue[Slot] = queue.LifoQueue()
        self._made_lock = threading.Lock()
        self._pool_slots = 0  # slots made for evaluate(), at most the queue depth
        self._last: dict[str, float] | None = None
        try:
            specs_in = tuple(TensorSpec.of(v) for v in device.program.main.inputs)
            specs_out = tuple(TensorSpec.of(v) for v in device.program.main.outputs)
            self.plan = plan(specs_in, specs_out, loaded.attributes(), layout=layout,
                             binding=binding)  # fmt: skip
            self._layout = self._describe()
        except BaseException:
            with contextlib.suppress(Exception):  # the first error is the one to report
                self._finalizer()
            raise

    # -- Kernel API ----------------------------------------------------------------------------
    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        slot = self._acquire()
        try:
            for name, value in inputs.items():
                np.copyto(slot.in_views[name], value)
            self._run_slot(slot)
            return {name: np.array(view) for name, view in slot.out_views.items()}
        finally:
            self._free.put(slot)

    def _make_buffers(self, share: dict[str, Buffer], compact: bool) -> BufferSet:
        """A new slot: its own surfaces and request, bound to ``share``'s surfaces where given."""
        index = self._device_inputs()
        shared = {index[name]: buf.memory for name, buf in share.items()}
        return self._wrap(self._new_slot(shared), frozenset(share))

    def _binding_problem(self, name: str, buf: Buffer) -> str | None:
        index = self._device_inputs()
        if name not in index:
            return (
                "is packed into one surface with the other inputs; compile with "
                "pack_inputs=False to bind shared buffers"
            )
        if buf.kind != "ane" or not isinstance(buf.memory, Surface):
            return (
                f"of an ANE kernel needs a whole IOSurface of an ANE buffer set; this {buf.kind} "
                "buffer is not one (part of a packed surface?)"
            )
        need, has = self.plan.inputs[index[name]], buf.memory.layout
        if buf.memory.framework is not self._loaded.fw:
            return "cannot bind a surface of another framework"
        if _geometry(has) != _geometry(need):
            return (
                f"is read as {_describe_geometry(need)}; the buffer's surface is "
                f"{_describe_geometry(has)}"
            )
        return None

    def _device_inputs(self) -> dict[str, int]:
        """Host input name -> index of the device input that is its own surface (not packed)."""
        fn, device = self.device_program.main, self._device
        return {device.input_names[v.name]: i for i, v in enumerate(fn.inputs)}

    def _run_buffers(self, buffers: BufferSet) -> None:
        self._run_slot(buffers.state)

    @property
    def layout(self) -> KernelLayout:
        """Strides and sizes of every buffer, where they came from, and its request index."""
        return self._layout

    @property
    def surfaces(self) -> list[Surface]:
        """Every IOSurface this kernel's slots use (each once; bound ones included)."""
        with self._made_lock:
            unique = {id(s): s for slot in self._slots for s in slot.surfaces}
        return list(unique.values())

    def last_stats(self) -> dict[str, float] | None:
        """``{"wall_s", "hw_s"}`` of the last evaluation when compiled with ``stats=True`` and the
        framework reported hardware time; otherwise None."""
        return self._last

    def max_in_flight(self) -> int:
        return QUEUE_DEPTH

    def objc_parts(self) -> ObjCParts:
        """The model, request and surfaces of the primary slot (``input_buffer``'s), for experiments."""
        self._check_open()
        slot = self._primary_buffers().state
        return ObjCParts(self._loaded, slot.request, tuple(slot.inputs), tuple(slot.outputs),
                         tuple(self.plan.input_indices), tuple(self.plan.output_indices))  # fmt: skip

    def _release(self) -> None:
        self._finalizer()

    # -- internals -----------------------------------------------------------------------------
    def _new_slot(self, shared: Mapping[int, Surface] | None = None) -> Slot:
        slot = Slot(self._loaded, self.plan, self._device, self._stats, shared)
        with self._made_lock:
            self._slots.append(slot)
        return slot

    def _wrap(self, slot: Slot, shared: frozenset[str]) -> BufferSet:
        """The buffer set of a slot: a Buffer per host input and output."""
        fn, device = self.device_program.main, self._device
        inputs = {}
        for v, surface in zip(fn.inputs, slot.inputs):
            host = device.input_names[v.name]
            if host == _packed(device):  # views into one surface: not bindable alone
                for seg in device.packing.segments:
                    inputs[seg.name] = Buffer(
                        self.spec(seg.name), slot.in_views[seg.name], None, "ane"
                    )
            else:
                inputs[host] = Buffer(self.spec(host), slot.in_views[host], surface, "ane")
        outputs = {}
        for v, surface in zip(fn.outputs, slot.outputs):
            host = device.output_names[v.name]
            spec = self.spec(host, output=True)
            outputs[host] = Buffer(spec, slot.out_views[host], surface, "ane")
        return BufferSet(self, inputs, outputs, shared=shared, state=slot)

    def _acquire(self) -> Slot:
        """A slot for one evaluation: a free one, a new one up to the queue depth, or wait."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._made_lock:
            make = self._pool_slots < QUEUE_DEPTH
            self._pool_slots += make
        return self._new_slot() if make else self._free.get()

    def _run_slot(self, slot: Slot) -> None:
        running: list[Surface] = []
        start = time.perf_counter()
        try:
            for s in slot.surfaces:
                s.device_begin()
                running.append(s)
            start = time.perf_counter()
            ok, error = self._loaded.dispatch(slot.request)
        finally:
            wall = time.perf_counter() - start
            for s in running:
                s.device_end()
        if not ok:
            raise evaluation_error(error, "evaluation")
        if not self._stats:
            return
        with self._loaded.call("reading performance statistics"):
            hw = hardware_seconds(slot.request, slot.stats, self._stats_read)
        self._last = None if hw is None else {"wall_s": wall, "hw_s": hw[0], "read_from": hw[1]}

    def _describe(self) -> KernelLayout:
        """The layout of every buffer, from the plan (before any surface exists)."""
        fn, device = self.device_program.main, self._device
        ins, outs = (
            [_phantom(_shape(v), v.dtype.numpy, lay) for v, lay in zip(values, lays)]
            for values, lays in ((fn.inputs, self.plan.inputs), (fn.outputs, self.plan.outputs))
        )
        in_views, out_views = host_views(device, ins, outs)
        inputs, outputs = {}, {}
        for i, v in enumerate(fn.inputs):
            host = device.input_names[v.name]
            names = [s.name for s in device.packing.segments] if host == _packed(device) else [host]
            for name in names:
                lay = self.plan.inputs[i]
                source = lay.source
                if name != host or v.name != host:
                    source += f"; device input {v.name!r}"
                inputs[name] = _buffer(in_views[name], self.spec(name), lay.alloc_size, source,
                                       self.plan.input_indices[i])  # fmt: skip
        for i, v in enumerate(fn.outputs):
            name, lay = device.output_names[v.name], self.plan.outputs[i]
            source = lay.source
            if v.name != name:
                source += f"; device output {v.name!r}"
            outputs[name] = _buffer(out_views[name], self.spec(name, output=True), lay.alloc_size,
                                    source, self.plan.output_indices[i])  # fmt: skip
        notes = (f"binding: {self.plan.binding}", *self.plan.notes)
        return KernelLayout(MappingProxyType(inputs), MappingProxyType(outputs), notes)


def _phantom(shape: tuple[int, ...], dtype: Any, layout: TensorLayout) -> np.ndarray:
    """An array with the strides a surface view of ``layout`` has, over no memory (never read)."""
    return np.lib.stride_tricks.as_strided(
        np.zeros(1, dtype), shape, layout.strides(shape), writeable=False
    )


def _geometry(layout: TensorLayout) -> tuple[int, ...]:
    """What decides where a surface's elements lie (the layout's source does not)."""
    return (layout.channels, layout.height, layout.width, layout.itemsize, layout.row_stride,
            layout.plane_stride)  # fmt: skip


def _describe_geometry(layout: TensorLayout) -> str:
    return (
        f"{layout.channels}x{layout.height} rows of {layout.width} x {layout.itemsize} bytes at "
        f"{layout.row_stride}-byte rows and {layout.plane_stride}-byte planes"
    )


def _packed(device: DeviceProgram) -> str | None:
    return device.packing.name if device.packing is not None else None


def _buffer(
    view: np.ndarray, spec: TensorSpec, nbytes: int, source: str, index: int
) -> BufferLayout:
    return BufferLayout(spec.shape, spec.dtype, tuple(view.strides), nbytes, source, index)
