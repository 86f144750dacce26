"""What the experiments share: the framework seam, kernels, selectors, recorded steps, timings.

Every experiment reaches Objective-C through the backend's one seam (``framework.load()``)
or the stand-in a test puts in ``ctx.resources["framework"]``. A *step* is one call whose
outcome is recorded either way (value, or the error with its NSError fields), so an
experiment goes on after a selector fails and reports what it saw; it raises only when
it cannot go on. Selectors are looked up in the runtime's listing first: a missing one is
recorded as missing, never guessed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.backends.ane import framework as objc_framework
from anekit.backends.ane.kernel import ObjCParts, evaluation_error
from anekit.errors import EvaluationError
from anekit.ladder import cases
from anekit.ladder.runner import Context, describe_exception
from anekit.mil import Builder
from anekit.probe import encoding

QOS = 21
MAX_TEXT = 2000  # characters kept of an object's description


class Failed:
    """The value of a step that raised (its error is in the report)."""

    def __repr__(self) -> str:
        return "FAILED"


FAILED = Failed()


def framework(ctx: Context) -> Any:
    """The stand-in a test provides, else the loaded framework."""
    fw = ctx.resources.get("framework")
    return fw if fw is not None else objc_framework.load()


def compile_kernel(ctx: Context, program: Any, **options: Any) -> Any:
    """Compile ``program`` on the ANE through the in-memory path."""
    from anekit.backends import ane

    return ane.compile(program, framework=framework(ctx), **options)


def step(ctx: Context, key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run one call; observe its value or its error (and time) under ``key``; FAILED on error."""
    start = time.perf_counter()
    try:
        value = fn(*args)
    except Exception as e:  # PyObjC raises objc.error and friends: all of it is an answer
        ctx.observe(
            key,
            {"ok": False, "seconds": time.perf_counter() - start, "error": describe_exception(e)},
        )
        return FAILED
    ctx.observe(key, {"ok": True, "seconds": time.perf_counter() - start, "value": summary(value)})
    return value


def step_value(seen: dict[str, Any], key: str) -> Any:
    """What a recorded step returned, or ``failed (message)``; KeyError if it never ran."""
    entry = seen[key]
    return entry.get("value") if entry.get("ok") else f"failed ({entry['error']['message']})"


def summary(value: Any) -> Any:
    """A JSON-ready account of a framework result, without calling methods that could fail."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return objc_framework.plain(value)
    if isinstance(value, (dict, list, tuple)) and len(value) <= 64:
        return objc_framework.plain(value) if _plain_kind(value) else type(value).__name__
    return f"<{type(value).__name__}>"


def _plain_kind(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return all(x is None or isinstance(x, (bool, int, float, str, dict, list)) for x in items)


def describe(obj: Any) -> str | None:
    """An object's ``description``, cut to :data:`MAX_TEXT` characters (None for nil)."""
    if obj is None:
        return None
    getter = getattr(obj, "description", None)
    return str(getter() if callable(getter) else obj)[:MAX_TEXT]


# -- selectors ------------------------------------------------------------------------------------
def listing(fw: Any, class_name: str) -> dict[str, str] | None:
    """``{"+selector": encoding, "-selector": ...}`` for a class, None if it does not exist."""
    if class_name not in fw.class_names():
        return None
    return {kind + sel: enc for kind, sel, enc in fw.methods(class_name)}


def observe_classes(ctx: Context, fw: Any, names: Iterable[str]) -> dict[str, Any]:
    """Record which of ``names`` exist and their selectors with type encodings."""
    return ctx.observe("classes", {name: listing(fw, name) for name in names})


def find(fw: Any, class_name: str, kind: str, prefixes: Iterable[str]) -> tuple[str, str] | None:
    """The first ``kind`` selector of the class starting with one of ``prefixes`` (in order)."""
    methods = listing(fw, class_name) or {}
    for prefix in prefixes:
        for name, enc in sorted(methods.items()):
            if name[0] == kind and name[1:].startswith(prefix):
                return name[1:], enc
    return None


def has(fw: Any, class_name: str, kind: str, selector: str) -> bool:
    """Whether the class (``+``) or its instances (``-``) answer ``selector``, inherited too."""
    if kind + selector in (listing(fw, class_name) or {}):
        return True
    return objc_framework.responds(fw, class_name, kind, selector)


def call(fw: Any, class_name: str, receiver: Any, selector: str, *args: Any) -> Any:
    """Send ``selector``; one ending in ``error:`` gets its out-parameter and raises on NO."""
    if selector.endswith("error:"):  # before the first lookup: PyObjC reads metadata then
        fw.error_out(class_name, selector)
    method = getattr(receiver, selector.replace(":", "_"), None)
    if method is None:
        raise EvaluationError(f"{class_name} does not respond to {selector}")
    if not selector.endswith("error:"):
        return method(*args)
    ok, error = method(*args, None)
    if not ok:
        raise evaluation_error(error, selector)
    return ok


@dataclass(frozen=True)
class Arg:
    """An argument whose value depends on the declared type: ``obj`` for ``@``, else ``scalar``."""

    obj: Any
    scalar: int


def build(
    fw: Any, class_name: str, receiver: Any, selector: str, enc: str, values: dict[str, Any]
) -> Any:
    """Send a constructor whose arguments are named by its selector's parts.

    A part's key is its text after ``With`` (``initWithInputs:`` -> ``inputs``), else the
    part itself, first letter lowered; ``values`` holds an :class:`Arg`, a Python int
    (an NSNumber where an object is declared), a list (an NSArray) or an object.
    """
    types = encoding.arguments(enc)
    parts = selector.split(":")[:-1]
    if len(types) != len(parts):
        raise EvaluationError(f"{selector}: {len(parts)} parts but {len(types)} argument types")
    args = [_convert(fw, values, _key(part), t, selector) for part, t in zip(parts, types)]
    return call(fw, class_name, receiver, selector, *args)


def _key(part: str) -> str:
    tail = part.rsplit("With", 1)[-1]
    return tail[:1].lower() + tail[1:]


def _convert(fw: Any, values: dict[str, Any], key: str, t: str, selector: str) -> Any:
    if key not in values:
        raise EvaluationError(f"no value for argument {key!r} of {selector}")
    value = values[key]
    if isinstance(value, Arg):
        return value.obj if encoding.is_object(t) else value.scalar
    if encoding.is_object(t):
        if isinstance(value, bool) or isinstance(value, int):
            return fw.number(value)
        return fw.array(value) if isinstance(value, list) else value
    if encoding.is_scalar(t):
        return int(value)
    if encoding.is_pointer(t) and not isinstance(value, (int, list)):
        return value  # e.g. an IOSurfaceRef: PyObjC passes the CF object as the pointer
    raise EvaluationError(f"{selector}: argument {key!r} has type {t!r}, which probes do not pass")


# -- kernels, programs and timings -------------------------------------------------------------
def inner_model(parts: ObjCParts) -> Any:
    """The ``_ANEModel`` inside an in-memory model (``-model``), which ``_ANEClient`` takes."""
    inner = getattr(parts.loaded, "inner_models", lambda: [])()
    if not inner:
        raise EvaluationError("the in-memory model exposes no _ANEModel (-model returned nil)")
    return inner[0]


def client(fw: Any) -> Any:
    """``+[_ANEClient sharedConnection]``."""
    connection = fw.cls("_ANEClient").sharedConnection()
    if connection is None:
        raise EvaluationError("+[_ANEClient sharedConnection] returned nil")
    return connection


def dispatch(parts: ObjCParts, request: Any = None) -> None:
    """Evaluate ``request`` (default: the primary one) on the model; raise on failure."""
    ok, error = parts.loaded.dispatch(parts.request if request is None else request)
    if not ok:
        raise evaluation_error(error, "evaluation")


def fill(kernel: Any, case: cases.Case) -> None:
    """Write the case's inputs into the kernel's buffers and clear its outputs."""
    for name, value in case.inputs.items():
        kernel.input_buffer(name)[...] = value
    for name in case.expected:
        kernel.output_buffer(name)[...] = 0


def outputs_match(kernel: Any, case: cases.Case) -> dict[str, Any]:
    """The case's comparison against the kernel's output buffers."""
    return cases.compare(case, {name: kernel.output_buffer(name) for name in case.expected})


def second_stage(shape: tuple[int, ...], upstream: cases.Case) -> cases.Case:
    """``z = y / 2 - 1/4`` on the output ``y`` of ``upstream`` (exact in fp16)."""
    b = Builder()
    y = b.input("y", shape, "fp16")
    b.output(b.sub(x=b.mul(x=y, y=0.5), y=0.25), "z")
    y_val = upstream.expected["y"]
    want = (y_val * np.float16(0.5) - np.float16(0.25)).astype(np.float16)
    return cases.Case(f"half{list(shape)}".replace(" ", ""), b.build(), {"y": y_val}, {"z": want})


def timings(samples_s: list[float]) -> dict[str, Any]:
    """Count, min, p50, p99, max and mean of durations, in milliseconds."""
    if not samples_s:
        return {"n": 0}
    ms = np.asarray(samples_s, np.float64) * 1e3
    return {
        "n": int(ms.size),
        "min_ms": float(ms.min()),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "max_ms": float(ms.max()),
        "mean_ms": float(ms.mean()),
    }


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start
