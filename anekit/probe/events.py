"""GPU<->ANE fences: a Metal ``MTLSharedEvent`` as ``_ANESharedEvents`` on a request.

A request can carry wait events (the ANE starts once an event reaches a value) and
signal events (the ANE sets an event when it is done). Their ``sharedEvent`` is an
``IOSurfaceSharedEvent``; a Metal ``MTLSharedEvent`` hands its own through the
``IOSurfaceSharedEvent`` selector (how ggml's Metal/ANE backend and tmc/apple's x/ane
build them; neither is Apple's documented API). :func:`fenced_request` builds such a
request; the ``shared_events`` experiment checks, with a GPU signal, that the ANE
really waits and really signals back. Until it has passed on a Mac, wait on the CPU.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from anekit.backends.ane.kernel import ObjCParts, request_for
from anekit.errors import EvaluationError
from anekit.ladder import cases
from anekit.ladder.runner import Context
from anekit.probe.common import (
    FAILED,
    compile_kernel,
    dispatch,
    fill,
    find,
    framework,
    has,
    observe_classes,
    outputs_match,
    step,
)

EVENT_CLASSES = ("_ANESharedEvents", "_ANESharedSignalEvent", "_ANESharedWaitEvent", "_ANERequest")
SIGNAL_TYPE = 0  # eventType of the signal event as ggml passes it (tmc/apple x/ane passes 5)
WAIT_BEFORE_SIGNAL_S = 0.3  # how long the ANE is given to (wrongly) run before the GPU signals
SIGNAL_TIMEOUT_S = 5.0  # how long to wait for the ANE's signal back
SENTINEL = -7.0  # outputs are set to this first: a value the program never produces
_EVENTS_FACTORY = (  # the request factory that takes shared events
    "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:"
    "procedureIndex:sharedEvents:"
)


def ios_event(event: Any) -> Any:
    """The ``IOSurfaceSharedEvent`` behind a Metal ``MTLSharedEvent``."""
    getter = getattr(event, "IOSurfaceSharedEvent", None)
    if getter is None:
        raise EvaluationError("this MTLSharedEvent does not answer IOSurfaceSharedEvent")
    shared = getter()
    if shared is None:
        raise EvaluationError("-[MTLSharedEvent IOSurfaceSharedEvent] returned nil")
    return shared


def fenced_request(
    fw: Any,
    parts: ObjCParts,
    *,
    wait: tuple[Any, int] | None = None,
    signal: tuple[Any, int] | None = None,
    signal_type: int = SIGNAL_TYPE,
) -> Any:
    """A request over ``parts``' surfaces that waits for ``wait = (MTLSharedEvent, value)``
    before the ANE starts and sets ``signal = (MTLSharedEvent, value)`` when it is done."""
    waits, signals = [], []
    if wait is not None:
        cls = fw.cls("_ANESharedWaitEvent")
        if has(fw, "_ANESharedWaitEvent", "+", "waitEventWithValue:sharedEvent:"):
            waits.append(cls.waitEventWithValue_sharedEvent_(wait[1], ios_event(wait[0])))
        else:  # the variant ANE_NOTES 2.3 lists
            waits.append(
                cls.waitEventWithValue_sharedEvent_eventType_(wait[1], ios_event(wait[0]), 0)
            )
    if signal is not None:
        signals.append(
            fw.cls("_ANESharedSignalEvent").signalEventWithValue_symbolIndex_eventType_sharedEvent_(
                signal[1], 0, signal_type, ios_event(signal[0])
            )
        )
    if any(e is None for e in (*waits, *signals)):
        raise EvaluationError("_ANESharedWaitEvent or _ANESharedSignalEvent returned nil")
    events = fw.cls("_ANESharedEvents").sharedEventsWithSignalEvents_waitEvents_(
        fw.array(signals), fw.array(waits)
    )
    if events is None:
        raise EvaluationError(
            "+[_ANESharedEvents sharedEventsWithSignalEvents:waitEvents:] returned nil"
        )
    if not has(fw, "_ANERequest", "-", "setSharedEvents:"):
        return _request_with_events(fw, parts, events)
    request = request_for(
        fw, parts.inputs, parts.outputs, parts.input_indices, parts.output_indices
    )
    request.setSharedEvents_(events)
    return request


def _request_with_events(fw: Any, parts: ObjCParts, events: Any) -> Any:
    """The request built with its events (the factory ggml uses) where it cannot set them."""
    wrap = fw.cls("_ANEIOSurfaceObject")
    factory = getattr(fw.cls("_ANERequest"), _EVENTS_FACTORY.replace(":", "_"))
    request = factory(
        fw.array([wrap.objectWithIOSurface_(s.handle) for s in parts.inputs]),
        fw.array([fw.number(i) for i in parts.input_indices]),
        fw.array([wrap.objectWithIOSurface_(s.handle) for s in parts.outputs]),
        fw.array([fw.number(i) for i in parts.output_indices]),
        None,
        None,
        fw.number(0),
        events,
    )
    if request is None:
        raise EvaluationError("_ANERequest with sharedEvents: returned nil")
    return request


def gpu_signal(queue: Any, event: Any, value: int) -> None:
    """Signal ``event`` to ``value`` from the GPU (a command buffer with only that in it)."""
    buffer = queue.commandBuffer()
    buffer.encodeSignalEvent_value_(event, value)
    buffer.commit()
    buffer.waitUntilCompleted()


def wait_for(event: Any, value: int, timeout_s: float) -> float | None:
    """Seconds until ``event.signaledValue() >= value``, or None if it did not within the time."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        if int(event.signaledValue()) >= value:
            return time.perf_counter() - start
        time.sleep(0.0005)
    return None


def shared_events(ctx: Context) -> None:
    """Does the ANE wait for a GPU signal before it starts, and signal back when done?"""
    fw = framework(ctx)
    observe_classes(ctx, fw, EVENT_CLASSES)
    ctx.observe("request_sets_shared_events", has(fw, "_ANERequest", "-", "setSharedEvents:"))
    ctx.observe("request_factory_with_events", find(fw, "_ANERequest", "+", (_EVENTS_FACTORY,)))
    device = fw.metal_device()
    ctx.observe("metal_device", str(device.name()))
    queue = device.newCommandQueue()
    go, done = device.newSharedEvent(), device.newSharedEvent()
    case = cases.affine((1, 64, 1, 64), "fp16")
    with compile_kernel(ctx, case.program) as k:
        parts = k.objc_parts()
        fill(k, case)
        k.output_buffer("y")[...] = SENTINEL
        request = step(
            ctx, "fenced_request", lambda: fenced_request(fw, parts, wait=(go, 1), signal=(done, 1))
        )
        if request is FAILED:
            return
        step(ctx, "validate", lambda: bool(request.validate()))
        timeout = float(ctx.options.get("signal_timeout_s", SIGNAL_TIMEOUT_S))
        ctx.observe("fence", _fenced_run(parts, request, queue, go, done, k, case, timeout))
        fill(k, case)  # and the same program without events, as the control
        with parts.device_owned():
            step(ctx, "unfenced_evaluation", dispatch, parts)
        ctx.observe("unfenced_numbers", outputs_match(k, case))


def _fenced_run(
    parts: ObjCParts,
    request: Any,
    queue: Any,
    go: Any,
    done: Any,
    k: Any,
    case: cases.Case,
    timeout: float,
) -> dict[str, Any]:
    """Evaluate in a thread; signal ``go`` from the GPU after a pause; watch ``done``."""
    outcome: dict[str, Any] = {}

    def evaluate() -> None:
        start = time.perf_counter()
        try:
            dispatch(parts, request)
            outcome["evaluation"] = "returned"
        except Exception as e:
            outcome["evaluation"] = f"{type(e).__name__}: {e}"
        outcome["evaluation_s"] = time.perf_counter() - start

    with parts.device_owned():
        thread = threading.Thread(target=evaluate, daemon=True)
        thread.start()
        time.sleep(WAIT_BEFORE_SIGNAL_S)
        untouched = bool(np.all(np.asarray(k.output_buffer("y"), np.float32) == SENTINEL))
        early = {
            "returned": not thread.is_alive(),
            "output_untouched": untouched,
            "done_value": int(done.signaledValue()),
        }
        signalled = time.perf_counter()
        gpu_signal(queue, go, 1)
        back = wait_for(done, 1, timeout)
        thread.join(timeout)
        if thread.is_alive():  # release an evaluation still waiting, as ggml does on failure
            go.setSignaledValue_(2**63)
            thread.join(timeout)
        outcome["gpu_signal_to_done_s"] = back
        outcome["gpu_signal_to_return_s"] = time.perf_counter() - signalled
    numbers = outputs_match(k, case)
    waited = early["output_untouched"] and early["done_value"] == 0
    return {
        **outcome,
        "before_gpu_signal": early,
        "numbers": numbers,
        "ane_waited_for_gpu": waited and numbers["match"],
        "ane_signalled_back": back is not None,
        "fence_works": waited and numbers["match"] and back is not None,
    }


def shared_events_headline(seen: dict[str, Any]) -> str:
    """The finding in one line (``anekit probe``'s summary)."""
    fence = seen["fence"]
    return (
        f"ANE waited for the GPU: {fence['ane_waited_for_gpu']}; signalled back: "
        f"{fence['ane_signalled_back']}; fence works: {fence['fence_works']}"
    )
