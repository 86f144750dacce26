"""Experiments on the other ways in: ``_ANEVirtualClient`` and ``_ANEPerformanceStats``.

- ``virtual_client``: can ``_ANEVirtualClient`` (multi-process, virtualised access) be
  created from this process, what does it report, and does an evaluation through it work?
- ``perf_counters``: every way to make an ``_ANEPerformanceStats`` (``+new``, ``alloc/init``,
  ``+statsWithHardwareExecutionNS:``, ``-initWithHardwareExecution:perfCounterData:``),
  each attached to a request under each perf-stats mask: which fields come back. The
  factory with pointer out-parameters (``statsWithRequestPerformanceBuffer:statsBufferSize:``)
  is listed, not called: called blind it would write through pointers we cannot size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from anekit.backends.ane import framework as objc_framework
from anekit.backends.ane.kernel import request_for
from anekit.backends.ane.stats import set_perf_mask
from anekit.errors import EvaluationError
from anekit.ladder import cases
from anekit.ladder.runner import Context
from anekit.probe import encoding
from anekit.probe.common import (
    FAILED,
    call,
    client,
    compile_kernel,
    describe,
    dispatch,
    fill,
    framework,
    has,
    inner_model,
    observe_classes,
    outputs_match,
    step,
)

VIRTUAL_PROPERTIES = (
    "connect",
    "hostBuildVersion",
    "hostCapabilityMask",
    "hostDataInterfaceVersion",
)
STATS_CLASSES = ("_ANEPerformanceStats", "_ANEPerformanceStatsIOSurface")
MASKS = (0, 1, 2, 4, 8, 15)  # no counters, each of the four bits, all of them
# Zero-argument instance methods that are not read-only getters: never called blind.
NOT_GETTERS = frozenset(
    "dealloc .cxx_destruct init new copy mutableCopy retain release autorelease".split()
)
# Names that read as actions, not properties: skipped too (a probe must not change state).
ACTION_PREFIXES = tuple(
    "reset clear emit start stop begin end flush print dump invalidate release free remove "
    "update set".split()
)
MAX_DATA_READ = 1 << 20  # an NSData longer than this is reported by length only
MAX_COUNTER_BYTES = 4096  # of perfCounterData kept in the report (as hex)


# -- _ANEVirtualClient ----------------------------------------------------------------------------
def virtual_client(ctx: Context) -> None:
    """Can _ANEVirtualClient be created and used from this process?"""
    fw = framework(ctx)
    observe_classes(ctx, fw, ("_ANEVirtualClient",))
    cl = client(fw)
    # only the getters the runtime lists are sent: a guessed one would fail for the wrong reason
    for name in _listed(ctx, fw, "_ANEClient", ("isVirtualClient", "virtualClient")):
        step(ctx, f"client_{name}", lambda name=name: _plain_call(cl, name))
    vc = step(ctx, "shared_connection", lambda: fw.cls("_ANEVirtualClient").sharedConnection())
    if vc is FAILED or vc is None:
        vc = step(ctx, "new", lambda: fw.cls("_ANEVirtualClient").new())
    if vc is FAILED or vc is None:
        ctx.observe("usable", False)
        return
    ctx.observe("description", describe(vc))
    for name in _listed(ctx, fw, "_ANEVirtualClient", VIRTUAL_PROPERTIES):
        step(ctx, name, lambda name=name: _plain_call(vc, name))
    case = cases.affine((1, 64, 1, 64), "fp16")
    with compile_kernel(ctx, case.program) as k:
        parts = k.objc_parts()
        fill(k, case)
        with parts.device_owned():
            ran = step(
                ctx,
                "evaluate",
                call,
                fw,
                "_ANEVirtualClient",
                vc,
                "evaluateWithModel:options:request:qos:error:",
                inner_model(parts),
                parts.loaded.options,
                parts.request,
                parts.loaded.qos,
            )
        numbers = ctx.observe("numbers", outputs_match(k, case))
    ctx.observe("usable", ran is not FAILED and numbers["match"])


def _listed(ctx: Context, fw: Any, class_name: str, getters: Iterable[str]) -> list[str]:
    """The ``getters`` instances of ``class_name`` answer; the others observed as absent."""
    present = [name for name in getters if has(fw, class_name, "-", name)]
    ctx.observe(f"{class_name}_getters_absent", [n for n in getters if n not in present])
    return present


def _plain_call(obj: Any, selector: str) -> Any:
    method = getattr(obj, selector, None)
    if method is None:
        raise EvaluationError(f"{type(obj).__name__} does not respond to {selector}")
    return objc_framework.plain(method())


# -- _ANEPerformanceStats ---------------------------------------------------------------------------
def perf_counters(ctx: Context) -> None:
    """_ANEPerformanceStats through every factory and mask: which fields come back?"""
    fw = framework(ctx)
    classes = observe_classes(ctx, fw, STATS_CLASSES)
    methods = classes.get("_ANEPerformanceStats") or {}
    if "+driverMaskForANEFMask:" in methods:
        cls = fw.cls("_ANEPerformanceStats")
        ctx.observe(
            "driver_masks",
            {
                str(m): step(
                    ctx, f"driver_mask_{m}", lambda m=m: int(cls.driverMaskForANEFMask_(m))
                )
                for m in MASKS
            },
        )
    factories = {name: step(ctx, f"factory_{name}", make, fw) for name, make in _FACTORIES.items()}
    made = {name: obj for name, obj in factories.items() if obj not in (FAILED, None)}
    ctx.observe("factories_that_work", sorted(made))
    getters = _getters(methods)
    case = cases.affine((1, 64, 1, 64), "fp16")
    with compile_kernel(ctx, case.program, stats=True) as k:
        parts = k.objc_parts()
        models = [parts.loaded.model, inner_model(parts)]
        for mask in MASKS:
            set_perf_mask(models, mask)  # after load: load clears the mask (tmc/apple x/ane)
            for name in made:
                stats = _FACTORIES[name](fw)  # a fresh object per evaluation
                step(ctx, f"mask_{mask}_{name}", _evaluate_with, fw, parts, k, case, stats, getters)


def _new(fw: Any) -> Any:
    return fw.cls("_ANEPerformanceStats").new()


def _alloc_init(fw: Any) -> Any:
    return fw.cls("_ANEPerformanceStats").alloc().init()


def _with_ns(fw: Any) -> Any:
    return fw.cls("_ANEPerformanceStats").statsWithHardwareExecutionNS_(0)


def _init_with_counters(fw: Any) -> Any:
    return (
        fw.cls("_ANEPerformanceStats").alloc().initWithHardwareExecution_perfCounterData_(0, None)
    )


_FACTORIES = {
    "new": _new,
    "alloc_init": _alloc_init,
    "statsWithHardwareExecutionNS": _with_ns,
    "initWithHardwareExecution_perfCounterData": _init_with_counters,
}


def _getters(methods: dict[str, str]) -> list[str]:
    """Instance methods without arguments that return an object or a number."""
    out = []
    for name, enc in sorted(methods.items()):
        sel = name[1:]
        if name[0] != "-" or ":" in sel or sel in NOT_GETTERS or sel.startswith("_"):
            continue
        if sel.startswith(ACTION_PREFIXES):
            continue
        returned = encoding.split(enc)[0]
        if encoding.is_object(returned) or encoding.is_scalar(returned):
            out.append(sel)
    return out


def _evaluate_with(
    fw: Any, parts: Any, k: Any, case: cases.Case, stats: Any, getters: list[str]
) -> dict[str, Any]:
    """One evaluation with ``stats`` as the request's perfStats; every getter's value after."""
    request = request_for(
        fw, parts.inputs, parts.outputs, parts.input_indices, parts.output_indices, stats
    )
    fill(k, case)
    with parts.device_owned():
        dispatch(parts, request)
    fields: dict[str, Any] = {}
    for sel in getters or ["hwExecutionTime"]:
        try:
            value = getattr(stats, sel)()
        except Exception as e:
            fields[sel] = f"raised {type(e).__name__}: {e}"
            continue
        fields[sel] = _field(value)
    return {
        "numbers_match": outputs_match(k, case)["match"],
        "fields": fields,
        "description": describe(stats),
    }


def _field(value: Any) -> Any:
    """A getter's value for the report: NSData as its length and leading bytes in hex."""
    if hasattr(value, "bytes") and hasattr(value, "length"):
        n = int(value.length())
        data = bytes(value)[:MAX_COUNTER_BYTES] if 0 < n <= MAX_DATA_READ else b""
        return {"bytes": n, "hex": data.hex()}
    return objc_framework.plain(value)


def virtual_client_headline(seen: dict[str, Any]) -> str:
    """The finding in one line (``anekit probe``'s summary)."""
    return f"usable from this process: {seen['usable']}"


def perf_counters_headline(seen: dict[str, Any]) -> str:
    """The finding in one line (``anekit probe``'s summary)."""
    return f"factories that work: {', '.join(seen['factories_that_work']) or 'none'}"
