"""Experiments on how requests reach the ANE: chaining, the real-time path, queue depth.

- ``chaining``: two programs, the first writing straight into the second's input
  surface, each given an ``_ANEChainingRequest`` and
  ``-[_ANEClient prepareChainingWithModel:options:chainingReq:qos:error:]``; then the
  output-set and buffers-ready calls that would start the chain, against two separate
  evaluations.
- ``realtime``: ``beginRealTimeTask`` and ``evaluateRealTimeWithModel:options:request:error:``
  against ``evaluateWithQoS:``, interleaved in blocks, p50/p99 over many evaluations each.
- ``queue_depth``: 1 to 127 evaluations in flight (one thread and one request each) and
  the throughput at each depth.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from anekit.backends.ane.iosurface import Surface
from anekit.backends.ane.layout import computed
from anekit.backends.base import QUEUE_DEPTH, TensorSpec
from anekit.ladder import cases
from anekit.ladder.runner import Context
from anekit.mil.types import DType
from anekit.probe.common import (
    FAILED,
    Arg,
    build,
    call,
    client,
    compile_kernel,
    dispatch,
    fill,
    find,
    framework,
    has,
    inner_model,
    observe_classes,
    outputs_match,
    second_stage,
    step,
    step_value,
    timings,
)

SHAPE = (1, 64, 1, 64)  # 128-byte rows: every layout rule agrees on it
CHAINING_CLASSES = (
    "_ANEChainingRequest",
    "_ANEBuffer",
    "_ANEIOSurfaceOutputSets",
    "_ANEOutputSetEnqueue",
    "_ANEInputBuffersReady",
)
PREPARE = "prepareChainingWithModel:options:chainingReq:qos:error:"
STATS_SURFACE_BYTES = 16384  # the output set's statistics surface (size unknown; one page)
CHAIN_POLL_S = 1.0  # how long a started chain may take to write the final output
REALTIME_BLOCKS = 10  # the two paths alternate in this many blocks (shared-machine fairness)
DEPTHS = (1, 2, 4, 8, 16, 32, 64, QUEUE_DEPTH)


# -- chaining -----------------------------------------------------------------------------------
def chaining(ctx: Context) -> None:
    """Two programs chained through one surface: does the chain validate, prepare and run?"""
    fw = framework(ctx)
    observe_classes(ctx, fw, CHAINING_CLASSES)
    ctx.observe("prepare_selector", has(fw, "_ANEClient", "-", PREPARE))
    first = cases.affine(SHAPE, "fp16")
    second = second_stage(SHAPE, first)
    n = int(ctx.options.get("evaluations", 200))
    with compile_kernel(ctx, first.program) as ka, compile_kernel(ctx, second.program) as kb:
        fill(ka, first)
        ctx.observe("separate", _separate(ka, kb, second, n))
        pa, pb = ka.objc_parts(), kb.objc_parts()
        stats = Surface.create(
            fw, computed(TensorSpec("stats", (STATS_SURFACE_BYTES,), DType.uint8), 64, "probe")
        )
        stats.unlock()  # only the device writes it
        # the first program writes into the second's input surface: no host copy between them
        plans = {
            "first": (pa, pa.inputs[0], pa.input_indices[0], pb.inputs[0], pa.output_indices[0]),
            "second": (pb, pb.inputs[0], pb.input_indices[0], pb.outputs[0], pb.output_indices[0]),
        }
        prepared = {}
        for label, (parts, src, src_index, dst, dst_index) in plans.items():
            request = _chain_request(ctx, fw, label, src, src_index, dst, dst_index, stats)
            if request is FAILED:
                continue
            step(ctx, f"{label}_validate", lambda r=request: bool(r.validate()))
            prepared[label] = step(ctx, f"{label}_prepare", _prepare, fw, parts, request)
        kb.output_buffer("z")[...] = 0
        if all(prepared.get(k) not in (None, FAILED) for k in plans):
            ctx.observe("chained", _start_chain(ctx, fw, pa, pb, kb, second))


def _separate(ka: Any, kb: Any, second: cases.Case, n: int) -> dict[str, Any]:
    """Run the two programs ``n`` times one after the other, copying between them on the host."""
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        ka.run()
        kb.input_buffer("y")[...] = ka.output_buffer("y")
        kb.run()
        samples.append(time.perf_counter() - start)
    return {"per_pair": timings(samples), **outputs_match(kb, second)}


def _chain_request(
    ctx: Context,
    fw: Any,
    label: str,
    src: Surface,
    src_index: int,
    dst: Surface,
    dst_index: int,
    stats: Surface,
) -> Any:
    """``_ANEBuffer`` for each end, an output set over the destination, the chaining request."""
    wrap = fw.cls("_ANEIOSurfaceObject")
    ends = {}
    for end, surface, index in (("input", src, src_index), ("output", dst, dst_index)):
        ends[end] = step(
            ctx,
            f"{label}_{end}_buffer",
            _make,
            fw,
            "_ANEBuffer",
            ("bufferWithIOSurfaceObject:", "initWithIOSurfaceObject:"),
            {
                "iOSurfaceObject": wrap.objectWithIOSurface_(surface.handle),
                "symbolIndex": index,
                "source": Arg(end, 0 if end == "input" else 1),
            },
        )
    if FAILED in ends.values():
        return FAILED
    sets = step(
        ctx,
        f"{label}_output_sets",
        _make,
        fw,
        "_ANEIOSurfaceOutputSets",
        ("objectWithstatsSurRef:", "initWithstatsSurRef:"),
        {"statsSurRef": stats.handle, "outputBuffer": [ends["output"]]},
    )
    if sets is FAILED:
        return FAILED
    return step(
        ctx,
        f"{label}_chaining_request",
        _make,
        fw,
        "_ANEChainingRequest",
        ("chainingRequestWithInputs:", "initWithInputs:"),
        # the loopback symbol ids are NSArray<NSNumber> (Espresso; runtime headers), -1: none
        {
            "inputs": [ends["input"]],
            "outputSets": [sets],
            "outputs": [sets],
            "lbInputSymbolId": [fw.number(-1)],
            "lbOutputSymbolId": [fw.number(-1)],
            "procedureIndex": 0,
            "signalEvents": [],
            "transactionHandle": 0,
            "fwEnqueueDelay": 0,
            "memoryPoolId": 0,
        },
    )


def _make(fw: Any, class_name: str, prefixes: tuple[str, str], values: dict[str, Any]) -> Any:
    """Build with the class factory starting ``prefixes[0]``, else ``alloc`` + ``prefixes[1]``."""
    factory = find(fw, class_name, "+", prefixes[:1])
    if factory is not None:
        obj = build(fw, class_name, fw.cls(class_name), *factory, values)
    else:
        init = find(fw, class_name, "-", prefixes[1:])
        if init is None:
            raise LookupError(f"{class_name} has no selector starting {' or '.join(prefixes)}")
        obj = build(fw, class_name, fw.cls(class_name).alloc(), *init, values)
    if obj is None:
        raise LookupError(f"{class_name} returned nil")
    return obj


def _prepare(fw: Any, parts: Any, request: Any) -> bool:
    return call(
        fw,
        "_ANEClient",
        client(fw),
        PREPARE,
        inner_model(parts),
        parts.loaded.options,
        request,
        parts.loaded.qos,
    )


def _start_chain(ctx: Context, fw: Any, pa: Any, pb: Any, kb: Any, second: cases.Case) -> Any:
    """Enqueue the output sets and mark the inputs ready; did the final output appear?"""
    cl = client(fw)
    with pa.device_owned(), pb.device_owned():
        for label, parts in (("second", pb), ("first", pa)):
            step(
                ctx,
                f"{label}_enqueue_sets",
                _signal_call,
                fw,
                cl,
                parts,
                "_ANEOutputSetEnqueue",
                ("outputSetWithProcedureIndex:", "initOutputSetWithProcedureIndex:"),
                "enqueueSetsWithModel:outputSet:options:qos:error:",
                {
                    "procedureIndex": 0,
                    "setIndex": 0,
                    "signalValue": 1,
                    "signalNotRequired": 0,
                    "isOpenLoop": 0,
                },
            )
        start = time.perf_counter()
        step(
            ctx,
            "first_buffers_ready",
            _signal_call,
            fw,
            cl,
            pa,
            "_ANEInputBuffersReady",
            ("inputBuffersWithProcedureIndex:", "initInputsProcedureIndex:"),
            "buffersReadyWithModel:inputBuffers:options:qos:error:",
            {
                "procedureIndex": 0,
                "inputBufferInfoIndex": 0,
                "inputFreeValue": 1,
                "executionDelay": 0,
                "initInputsProcedureIndex": 0,
            },
        )
        deadline = start + float(ctx.options.get("chain_poll_s", CHAIN_POLL_S))
        while time.perf_counter() < deadline and not np.any(kb.output_buffer("z")):
            time.sleep(0.001)
        seconds = time.perf_counter() - start
    return {"seconds_to_output": seconds, **outputs_match(kb, second)}


def _signal_call(
    fw: Any,
    cl: Any,
    parts: Any,
    class_name: str,
    prefixes: tuple[str, str],
    selector: str,
    values: dict[str, Any],
) -> bool:
    obj = _make(fw, class_name, prefixes, values)
    return call(
        fw,
        "_ANEClient",
        cl,
        selector,
        inner_model(parts),
        obj,
        parts.loaded.options,
        parts.loaded.qos,
    )


# -- the real-time path ---------------------------------------------------------------------------
REALTIME = "evaluateRealTimeWithModel:options:request:error:"
LOAD_REALTIME = "loadRealTimeModel:options:qos:error:"
UNLOAD_REALTIME = "unloadRealTimeModel:options:qos:error:"


def realtime(ctx: Context) -> None:
    """p50/p99 latency of evaluateRealTime (inside beginRealTimeTask) against evaluateWithQoS."""
    fw = framework(ctx)
    n = int(ctx.options.get("evaluations", 1000))
    ctx.observe(
        "selectors",
        {
            s: has(fw, "_ANEClient", "-", s)
            for s in (
                "beginRealTimeTask",
                "endRealTimeTask",
                REALTIME,
                LOAD_REALTIME,
                UNLOAD_REALTIME,
            )
        },
    )
    case = cases.affine((1, 256, 1, 64), "fp16")
    with compile_kernel(ctx, case.program) as k:
        parts, cl = k.objc_parts(), client(fw)
        inner = inner_model(parts)

        def realtime_once() -> None:
            with parts.loaded.pool():  # as every backend call: PyObjC drains no pool itself
                call(fw, "_ANEClient", cl, REALTIME, inner, parts.loaded.options, parts.request)

        paths = {"evaluateWithQoS": lambda: dispatch(parts), "evaluateRealTime": realtime_once}
        # as the framework's own order has it: the model loaded for real time, then the task
        loaded = _realtime_model(ctx, fw, cl, parts, LOAD_REALTIME)
        began = step(ctx, "begin_real_time_task", lambda: bool(cl.beginRealTimeTask()))
        try:
            for name, fn in list(paths.items()):  # each path must give the right numbers first
                fill(k, case)
                with parts.device_owned():
                    outcome = step(ctx, f"{name}_first", fn)
                ctx.observe(f"{name}_numbers", outputs_match(k, case))
                if outcome is FAILED:
                    del paths[name]
            ctx.observe("latency", _interleaved(parts, paths, n))
        finally:
            if began is True:
                step(ctx, "end_real_time_task", lambda: bool(cl.endRealTimeTask()))
            if loaded is True:
                _realtime_model(ctx, fw, cl, parts, UNLOAD_REALTIME)


def _realtime_model(ctx: Context, fw: Any, cl: Any, parts: Any, selector: str) -> Any:
    """``loadRealTimeModel:``/``unloadRealTimeModel:`` on the inner model, as a recorded step."""
    label = selector.split(":")[0].replace("RealTimeModel", "_real_time_model")
    return step(
        ctx,
        label,
        call,
        fw,
        "_ANEClient",
        cl,
        selector,
        inner_model(parts),
        parts.loaded.options,
        parts.loaded.qos,
    )


def _interleaved(parts: Any, paths: dict[str, Any], n: int) -> dict[str, Any]:
    """Time ``n`` calls of each path, the paths alternating in blocks; stop a path at an error."""
    samples: dict[str, list[float]] = {name: [] for name in paths}
    errors: dict[str, str | None] = {name: None for name in paths}
    per_block = max(n // REALTIME_BLOCKS, 1)
    with parts.device_owned():
        for _ in range(REALTIME_BLOCKS):
            for name, fn in paths.items():
                for _ in range(per_block if errors[name] is None else 0):
                    start = time.perf_counter()
                    try:
                        fn()
                    except Exception as e:
                        errors[name] = f"{type(e).__name__}: {e}"
                        break
                    samples[name].append(time.perf_counter() - start)
    return {name: {**timings(samples[name]), "error": errors[name]} for name in paths}


# -- queue depth ----------------------------------------------------------------------------------
def queue_depth(ctx: Context) -> None:
    """Evaluations in flight from 1 to 127, one thread and request each: throughput at each."""
    depths = tuple(int(d) for d in ctx.options.get("depths", DEPTHS))
    per_depth = int(ctx.options.get("evaluations_per_depth", 256))
    case = cases.affine((1, 128, 1, 128), "fp16")
    inputs = {"x": case.inputs["x"]}
    with compile_kernel(ctx, case.program) as k:
        ctx.observe("warm_up", _in_flight(k, max(depths), max(depths), inputs, case))
        rows = {}
        for depth in depths:
            rows[str(depth)] = ctx.observe(
                f"depth_{depth}", _in_flight(k, depth, max(per_depth, 2 * depth), inputs, case)
            )
    ctx.observe("throughput_per_s", {d: r["per_s"] for d, r in rows.items()})


def _in_flight(
    k: Any, depth: int, total: int, inputs: dict[str, Any], case: cases.Case
) -> dict[str, Any]:
    """``total`` evaluations from ``depth`` threads; wall time, rate, wrong answers, errors."""
    want = case.expected["y"]
    errors: list[str] = []

    def one(_: int) -> bool:
        try:
            return bool(np.array_equal(k.evaluate(inputs)["y"], want))
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")
            return False

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=depth) as pool:
        right = sum(pool.map(one, range(total)))
    seconds = time.perf_counter() - start
    return {
        "evaluations": total,
        "seconds": seconds,
        "per_s": total / seconds,
        "wrong": total - right - len(errors),
        "errors": errors[:5],
        "error_count": len(errors),
    }


def chaining_headline(seen: dict[str, Any]) -> str:
    """The finding in one line (``anekit probe``'s summary)."""
    chained = seen.get("chained")
    prepare = {
        k: step_value(seen, f"{k}_prepare") for k in ("first", "second") if f"{k}_prepare" in seen
    }
    ran = "not started" if chained is None else ("right numbers" if chained["match"] else "WRONG")
    return (
        f"prepare: {prepare or 'not reached'}; chained run: {ran}; separate pair p50 "
        f"{seen['separate']['per_pair']['p50_ms']:.3f} ms"
    )


def realtime_headline(seen: dict[str, Any]) -> str:
    """The finding in one line (``anekit probe``'s summary)."""
    rows = [
        f"{name} p50 {t['p50_ms']:.3f} / p99 {t['p99_ms']:.3f} ms"
        for name, t in seen["latency"].items()
        if t.get("n")
    ]
    return "; ".join(rows) or "no path ran"


def queue_depth_headline(seen: dict[str, Any]) -> str:
    """The finding in one line (``anekit probe``'s summary)."""
    rates = seen["throughput_per_s"]
    best = max(rates, key=rates.get)
    return f"depth 1: {rates['1']:.0f}/s; best {rates[best]:.0f}/s at depth {best}"
