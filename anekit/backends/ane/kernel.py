"""What both ANE paths share: the device program, IOSurface slots, requests and evaluation.

A *slot* is one request's worth of surfaces: an input surface per device input,
an output surface per output, the ``_ANERequest`` built once over them, and the
NumPy views the host uses. The primary slot backs ``input_buffer``/``output_buffer``
and ``run()``; ``evaluate()`` (and so ``__call__`` and ``submit``) takes a slot from
a pool that grows to the ANE's queue depth, one request object per evaluation in
flight.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.backends.ane.framework import describe_error, mil_line
from anekit.backends.ane.iosurface import Surface
from anekit.backends.ane.stats import hardware_seconds, make_stats
from anekit.backends.base import QUEUE_DEPTH, Kernel, TensorSpec
from anekit.errors import CompileError, EvaluationError
from anekit.hw.chips import default_chip, get_chip
from anekit.mil import passes
from anekit.mil.passes import InputPacking
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
        text, domain, code = describe_error(error)
        raise CompileError(
            f"ANE {step} failed: {text}", line=mil_line(text), domain=domain, code=code
        )


def load_with_retry(attempt: Callable[[], tuple[bool, Any]]) -> None:
    """Load a model, retrying once after a short pause; CompileError if both attempts fail."""
    result = attempt()
    if not result[0]:
        time.sleep(LOAD_RETRY_DELAY_S)
        result = attempt()
    compile_step(result, "load")


def unload_step(result: tuple[bool, Any]) -> None:
    """Raise EvaluationError if unloading failed."""
    ok, error = result
    if not ok:
        text, domain, code = describe_error(error)
        raise EvaluationError(f"ANE unload failed: {text}", domain=domain, code=code)


def device_program(program: Program, pack_inputs: bool) -> tuple[Program, InputPacking | None]:
    """The program the ANE compiles: constants folded, inputs packed (or ordered by size)."""
    chip = get_chip(default_chip()[0])  # the host's chip: packing must stay within its limits
    limit = min(chip.max_dim_spatial, chip.max_dim_channel)
    return passes.prepare_for_device(program, pack=pack_inputs, max_dim=limit)


class Slot:
    """Surfaces, views and the request for one evaluation in flight."""

    def __init__(
        self,
        framework: Any,
        device_inputs: tuple[TensorSpec, ...],
        device_outputs: tuple[TensorSpec, ...],
        packing: InputPacking | None,
        stats: bool,
    ) -> None:
        self.inputs = [Surface.create(framework, s.nbytes) for s in device_inputs]
        self.outputs = [Surface.create(framework, s.nbytes) for s in device_outputs]
        device_views = {
            s.name: f.view(s.shape, s.dtype.numpy) for s, f in zip(device_inputs, self.inputs)
        }
        self.in_views = packing.views(device_views[packing.name]) if packing else device_views
        self.out_views = {
            s.name: f.view(s.shape, s.dtype.numpy) for s, f in zip(device_outputs, self.outputs)
        }
        self.stats = make_stats(framework) if stats else None
        self.request = _request(framework, self.inputs, self.outputs, self.stats)

    @property
    def surfaces(self) -> list[Surface]:
        return self.inputs + self.outputs

    def release(self) -> None:
        """Unlock every surface; views keep their memory alive for as long as they exist."""
        for s in self.surfaces:
            s.unlock()


def _request(fw: Any, inputs: list[Surface], outputs: list[Surface], stats: Any) -> Any:
    wrap = fw.cls("_ANEIOSurfaceObject")
    in_objects = [wrap.objectWithIOSurface_(s.handle) for s in inputs]
    out_objects = [wrap.objectWithIOSurface_(s.handle) for s in outputs]
    request = fw.cls(
        "_ANERequest"
    ).requestWithInputs_inputIndices_outputs_outputIndices_weightsBuffer_perfStats_procedureIndex_(
        fw.array(in_objects),
        fw.array([fw.number(i) for i in range(len(inputs))]),
        fw.array(out_objects),
        fw.array([fw.number(i) for i in range(len(outputs))]),
        None,
        stats,
        fw.number(0),
    )
    if request is None:
        raise EvaluationError(
            f"_ANERequest rejected {len(inputs)} input and {len(outputs)} output surfaces"
        )
    return request


class SurfaceKernel(Kernel):
    """A loaded ANE model evaluated through IOSurface slots; subclasses dispatch and unload."""

    backend = "ane"

    def __init__(
        self,
        program: Program,
        device: Program,
        packing: InputPacking | None,
        framework: Any,
        *,
        stats: bool,
    ) -> None:
        super().__init__(program)
        self.device_program = device
        self.packing = packing
        self._fw = framework
        self._stats = stats
        self._device_inputs = tuple(TensorSpec.of(v) for v in device.main.inputs)
        self._device_outputs = tuple(TensorSpec.of(v) for v in device.main.outputs)
        self._primary: Slot | None = None
        self._primary_lock = threading.Lock()
        self._idle: queue.LifoQueue[Slot] = queue.LifoQueue()
        self._made = 0
        self._made_lock = threading.Lock()
        self._last: dict[str, float] | None = None

    # -- what subclasses implement -------------------------------------------------------------
    @abstractmethod
    def _dispatch(self, request: Any) -> tuple[bool, Any]:
        """Evaluate one request synchronously; returns (ok, NSError or None)."""

    @abstractmethod
    def _unload(self) -> None:
        """Unload the model and remove what compiling left behind."""

    # -- Kernel API ----------------------------------------------------------------------------
    def _open_slots(self) -> None:
        """Build the primary slot once the model is loaded; unload again if that fails."""
        try:
            self._primary = self._new_slot()
        except BaseException:
            with contextlib.suppress(EvaluationError):  # the first error is the one to report
                self._unload()
            raise

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
            self._run_slot(self._slot0())

    def input_buffer(self, name: str) -> np.ndarray:
        self.spec(name)
        return self._slot0().in_views[name]

    def output_buffer(self, name: str) -> np.ndarray:
        self.spec(name, output=True)
        return self._slot0().out_views[name]

    def last_stats(self) -> dict[str, float] | None:
        """``{"wall_s", "hw_s"}`` of the last evaluation when compiled with ``stats=True`` and the
        framework reported hardware time; otherwise None."""
        return self._last

    def max_in_flight(self) -> int:
        return QUEUE_DEPTH

    def _release(self) -> None:
        slots = [self._primary] if self._primary is not None else []
        while not self._idle.empty():
            slots.append(self._idle.get_nowait())
        for slot in slots:
            slot.release()
        self._unload()

    # -- internals -----------------------------------------------------------------------------
    def _slot0(self) -> Slot:
        if self._primary is None:
            raise EvaluationError("kernel has no loaded model")
        return self._primary

    def _new_slot(self) -> Slot:
        return Slot(self._fw, self._device_inputs, self._device_outputs, self.packing, self._stats)

    def _acquire(self) -> Slot:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._made_lock:
            make = self._made < QUEUE_DEPTH
            if make:
                self._made += 1
        if not make:
            return self._idle.get()
        try:
            return self._new_slot()
        except BaseException:
            with self._made_lock:
                self._made -= 1
            raise

    def _run_slot(self, slot: Slot) -> None:
        for s in slot.surfaces:
            s.unlock()
        start = time.perf_counter()
        try:
            ok, error = self._dispatch(slot.request)
        finally:
            wall = time.perf_counter() - start
            for s in slot.surfaces:
                s.lock()
        if not ok:
            text, domain, code = describe_error(error)
            raise EvaluationError(f"ANE evaluation failed: {text}", domain=domain, code=code)
        hw = hardware_seconds(slot.stats)
        self._last = None if hw is None else {"wall_s": wall, "hw_s": hw}
