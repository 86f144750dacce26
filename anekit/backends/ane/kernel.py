"""What both ANE paths share: the loaded model, IOSurface slots, requests and evaluation.

A :class:`Loaded` model is what a compile path hands over: it dispatches requests,
reports ``modelAttributes`` and unloads once. Every framework call runs inside an
autorelease pool (PyObjC drains none without a run loop; ANE_NOTES 2.5), with one
immutable empty options dictionary per model, reused.

A *slot* is one request's worth of surfaces: an input surface per device input,
an output surface per output, laid out as :func:`~anekit.backends.ane.layout.plan`
says, the ``_ANERequest`` built once over them with the planned indices, and the
strided NumPy views the host uses. The primary slot backs ``input_buffer``/
``output_buffer`` and ``run()``; ``evaluate()`` (and so ``__call__`` and ``submit``)
takes a slot from a pool that grows to the ANE's queue depth, one request object per
evaluation in flight. A kernel that is never closed is unloaded when it is garbage
collected (``weakref.finalize``).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit.backends.ane.device import DeviceProgram
from anekit.backends.ane.framework import describe_error, mil_line, plain
from anekit.backends.ane.iosurface import Surface
from anekit.backends.ane.layout import IOPlan, plan
from anekit.backends.ane.stats import hardware_seconds, make_stats
from anekit.backends.base import QUEUE_DEPTH, BufferLayout, Kernel, KernelLayout, TensorSpec
from anekit.errors import CompileError, EvaluationError
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
    """Surfaces, views and the request for one evaluation in flight."""

    def __init__(self, loaded: Loaded, kernel_plan: IOPlan, device: DeviceProgram, stats: bool):
        fw = loaded.fw
        fn = device.program.main
        with loaded.pool():
            self.inputs = [Surface.create(fw, lay) for lay in kernel_plan.inputs]
            self.outputs = [Surface.create(fw, lay) for lay in kernel_plan.outputs]
            self.in_views: dict[str, np.ndarray] = {}
            for v, surface in zip(fn.inputs, self.inputs):
                view = surface.view(_shape(v), v.dtype.numpy)
                host = device.input_names[v.name]
                if device.packing is not None and host == device.packing.name:
                    self.in_views.update(device.packing.views(view))
                else:
                    self.in_views[host] = view
            self.out_views = {
                device.output_names[v.name]: surface.view(_shape(v), v.dtype.numpy)
                for v, surface in zip(fn.outputs, self.outputs)
            }
            self.stats = make_stats(fw) if stats else None
            self.request = _request(fw, self, kernel_plan)

    @property
    def surfaces(self) -> list[Surface]:
        return self.inputs + self.outputs

    def release(self) -> None:
        """Unlock every surface; views keep their memory alive for as long as they exist."""
        for s in self.surfaces:
            s.unlock()


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
    """An ``_ANERequest`` over the surfaces at the given request indices (ANE_NOTES 2.1 step 6)."""
    wrap = fw.cls("_ANEIOSurfaceObject")
    in_objects = [wrap.objectWithIOSurface_(s.handle) for s in inputs]
    out_objects = [wrap.objectWithIOSurface_(s.handle) for s in outputs]
    request = fw.cls(
        "_ANERequest"
    ).requestWithInputs_inputIndices_outputs_outputIndices_weightsBuffer_perfStats_procedureIndex_(
        fw.array(in_objects),
        fw.array([fw.number(i) for i in input_indices]),
        fw.array(out_objects),
        fw.array([fw.number(i) for i in output_indices]),
        None,
        stats,
        fw.number(0),
    )
    if request is None:
        raise EvaluationError(
            f"_ANERequest rejected {len(in_objects)} input and {len(out_objects)} output surfaces"
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
            s.unlock()
        try:
            yield
        finally:
            for s in surfaces:
                s.lock()


def _release_all(loaded: Loaded, slots: list[Slot]) -> None:
    """Unlock every slot's surfaces and unload; every step runs, the first failure is raised."""
    errors: list[Exception] = []
    for slot in slots:
        try:
            slot.release()
        except Exception as e:
            errors.append(e)
    try:
        loaded.unload()
    except Exception as e:
        errors.append(e)
    if errors:
        raise errors[0]


class SurfaceKernel(Kernel):
    """A loaded ANE model evaluated through IOSurface slots laid out as the model reports."""

    backend = "ane"

    def __init__(
        self,
        program: Program,
        device: DeviceProgram,
        loaded: Loaded,
        *,
        stats: bool,
        layout: str = "auto",
        binding: str = "auto",
    ) -> None:
        super().__init__(program)
        self.device_program = device.program
        self.packing = device.packing
        self._device = device
        self._loaded = loaded
        self._stats = stats
        self._slots: list[Slot] = []  # every slot made, so close (or the finalizer) frees them
        self._finalizer = weakref.finalize(self, _release_all, loaded, self._slots)
        self._primary_lock = threading.Lock()
        self._idle: queue.LifoQueue[Slot] = queue.LifoQueue()
        self._made_lock = threading.Lock()
        self._last: dict[str, float] | None = None
        try:
            specs_in = tuple(TensorSpec.of(v) for v in device.program.main.inputs)
            specs_out = tuple(TensorSpec.of(v) for v in device.program.main.outputs)
            self.plan = plan(specs_in, specs_out, loaded.attributes(), layout=layout,
                             binding=binding)  # fmt: skip
            self._primary = self._new_slot()
        except BaseException:
            with contextlib.suppress(Exception):  # the first error is the one to report
                self._finalizer()
            raise
        self._layout = self._describe()

    # -- Kernel API ----------------------------------------------------------------------------
    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        slot = self._acquire()
        try:
            for name, value in inputs.items():
                np.copyto(slot.in_views[name], value)
            self._run_slot(slot)
            return {name: np.array(view) for name, view in slot.out_views.items()}
        finally:
            self._idle.put(slot)

    def run(self) -> None:
        self._check_open()
        with self._primary_lock:
            self._run_slot(self._primary)

    def input_buffer(self, name: str) -> np.ndarray:
        self.spec(name)
        return self._primary.in_views[name]

    def output_buffer(self, name: str) -> np.ndarray:
        self.spec(name, output=True)
        return self._primary.out_views[name]

    @property
    def layout(self) -> KernelLayout:
        """Strides and sizes of every buffer, where they came from, and its request index."""
        return self._layout

    @property
    def surfaces(self) -> list[Surface]:
        """Every IOSurface this kernel has made (all slots)."""
        with self._made_lock:
            return [s for slot in self._slots for s in slot.surfaces]

    def last_stats(self) -> dict[str, float] | None:
        """``{"wall_s", "hw_s"}`` of the last evaluation when compiled with ``stats=True`` and the
        framework reported hardware time; otherwise None."""
        return self._last

    def max_in_flight(self) -> int:
        return QUEUE_DEPTH

    def objc_parts(self) -> ObjCParts:
        """The model, request and surfaces of the primary slot (``input_buffer``'s), for experiments."""
        self._check_open()
        slot = self._primary
        return ObjCParts(self._loaded, slot.request, tuple(slot.inputs), tuple(slot.outputs),
                         tuple(self.plan.input_indices), tuple(self.plan.output_indices))  # fmt: skip

    def _release(self) -> None:
        self._finalizer()

    # -- internals -----------------------------------------------------------------------------
    def _new_slot(self) -> Slot:
        slot = Slot(self._loaded, self.plan, self._device, self._stats)
        with self._made_lock:
            self._slots.append(slot)
        return slot

    def _acquire(self) -> Slot:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._made_lock:
            make = len(self._slots) < QUEUE_DEPTH
        return self._new_slot() if make else self._idle.get()

    def _run_slot(self, slot: Slot) -> None:
        for s in slot.surfaces:
            s.unlock()
        start = time.perf_counter()
        try:
            ok, error = self._loaded.dispatch(slot.request)
        finally:
            wall = time.perf_counter() - start
            for s in slot.surfaces:
                s.lock()
        if not ok:
            raise evaluation_error(error, "evaluation")
        with self._loaded.pool():
            hw = hardware_seconds(slot.stats)
        self._last = None if hw is None else {"wall_s": wall, "hw_s": hw}

    def _describe(self) -> KernelLayout:
        fn, slot, device = self.device_program.main, self._primary, self._device
        inputs, outputs = {}, {}
        for i, v in enumerate(fn.inputs):
            host = device.input_names[v.name]
            names = [s.name for s in device.packing.segments] if host == _packed(device) else [host]
            for name in names:
                source = self.plan.inputs[i].source
                if name != host or v.name != host:
                    source += f"; device input {v.name!r}"
                inputs[name] = _buffer(slot.in_views[name], self.spec(name), slot.inputs[i],
                                       source, self.plan.input_indices[i])  # fmt: skip
        for i, v in enumerate(fn.outputs):
            name = device.output_names[v.name]
            source = self.plan.outputs[i].source
            if v.name != name:
                source += f"; device output {v.name!r}"
            outputs[name] = _buffer(slot.out_views[name], self.spec(name, output=True),
                                    slot.outputs[i], source, self.plan.output_indices[i])  # fmt: skip
        notes = (f"binding: {self.plan.binding}", *self.plan.notes)
        return KernelLayout(MappingProxyType(inputs), MappingProxyType(outputs), notes)


def _packed(device: DeviceProgram) -> str | None:
    return device.packing.name if device.packing is not None else None


def _buffer(
    view: np.ndarray, spec: TensorSpec, surface: Surface, source: str, index: int
) -> BufferLayout:
    return BufferLayout(spec.shape, spec.dtype, tuple(view.strides), surface.nbytes, source, index)
