"""Call tracing: every message to the ANE classes, with arguments summarised and timings.

``with anekit.trace() as t:`` replaces each method of ``_ANEClient``, ``_ANEInMemoryModel``,
``_ANEModel`` and ``_ANERequest`` (the seed's discovery method, method swizzling) for the
life of the block, and restores them after, so code that calls the framework, anekit's
or CoreML's, is recorded as it runs. ``t.records`` holds one :class:`Call` per message
(class, ``+``/``-``, selector, summarised arguments and result, start and duration,
thread, nesting depth); ``jsonl=`` streams them as JSON lines (flushed per call, so a
crash keeps what came before); :func:`timeline` prints them readably.
``anekit trace -- python script.py`` runs a script under a trace (:mod:`.tracehost`).

Methods whose types cannot be passed through safely (structures, C arrays, unions, bit
fields, blocks, pointers other than a trailing ``NSError**`` of a BOOL method), the
ownership-transferring families (``init...``, ``new...``, ``copy...``, ``alloc...``) and
the runtime's own housekeeping (``dealloc``, ``retain``, ``description``, ...) are left
alone; ``t.skipped`` says which.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

from anekit.errors import UsageError
from anekit.probe import encoding

DEFAULT_CLASSES = ("_ANEClient", "_ANEInMemoryModel", "_ANEModel", "_ANERequest")
# The runtime's housekeeping, and what the summaries themselves would call: never traced.
HOUSEKEEPING = frozenset(
    """
    dealloc .cxx_destruct retain release autorelease retainCount class description
    debugDescription hash isEqual: copyWithZone: zone respondsToSelector:
    methodSignatureForSelector: forwardInvocation: encodeWithCoder: initWithCoder:
    supportsSecureCoding self superclass isKindOfClass: conformsToProtocol:
    allowsWeakReference retainWeakReference _tryRetain _isDeallocating load initialize
    """.split()
)
OWNERSHIP_FAMILIES = ("init", "new", "copy", "mutableCopy", "alloc")
MAX_ARG_CHARS = 120  # a summarised argument is cut to this


@dataclass(frozen=True)
class Call:
    """One traced message."""

    index: int  # order of completion
    start_s: float  # since the trace began
    seconds: float
    thread: int
    depth: int  # traced calls already running on this thread when it began
    class_name: str
    kind: str  # "+" class method, "-" instance method
    selector: str
    args: list[Any]
    result: Any
    error: str | None  # the exception it raised, if any

    def line(self) -> str:
        """``[_ANEClient evaluateWithModel:<..> options:{} ...] -> True``, readable."""
        parts = self.selector.split(":")
        if len(parts) == 1:
            message = self.selector
        else:
            message = " ".join(f"{p}:{_short(a)}" for p, a in zip(parts, self.args))
        outcome = f"raised {self.error}" if self.error else f"-> {_short(self.result)}"
        return f"{self.kind}[{self.class_name} {message}] {outcome}"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_ARG_CHARS else text[: MAX_ARG_CHARS - 3] + "..."


def summarize(value: Any) -> Any:
    """A short, JSON-ready account of an argument or result, calling no Objective-C method."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value if len(value) <= MAX_ARG_CHARS else value[:MAX_ARG_CHARS] + "..."
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if isinstance(value, tuple):
        return [summarize(v) for v in value[:8]]
    kind = type(value).__name__
    try:
        if hasattr(value, "keys"):
            keys = [str(k) for k in list(value.keys())[:8]]
            return f"<{kind} {len(value)} keys" + (f": {', '.join(keys)}>" if keys else ">")
        if hasattr(value, "__len__"):
            return f"<{kind} of {len(value)}>"
    except Exception:  # a proxy that does not behave as a container after all
        pass
    return f"<{kind}>"


def traceable(selector: str, enc: str) -> str | None:
    """Why a method is left alone (None if it can be wrapped)."""
    if selector in HOUSEKEEPING or selector.startswith(("_", "anekitTraced")):
        return "housekeeping"
    if selector.startswith(OWNERSHIP_FAMILIES):
        # callers of init/new/copy/alloc... transfer ownership by the selector's name; the
        # recorder is implemented under another name and would get the counts wrong
        return "an ownership-transferring method family"
    try:
        types = encoding.split(enc)
    except ValueError as e:
        return f"unreadable type encoding: {e}"
    for i, t in enumerate(types):
        bare = t.lstrip(encoding.QUALIFIERS)
        last_error = i == len(types) - 1 and bare == "^@" and selector.lower().endswith("error:")
        if bare[:1] in "{[(b" or (bare.startswith("^") and not last_error) or bare in ("?", "*"):
            return f"type {t!r} is not passed through"
        if bare == "@?":
            return "a block argument is not passed through"
        if last_error and types[0].lstrip(encoding.QUALIFIERS) not in ("B", "c"):
            return "an NSError** method that does not return BOOL"
    return None


class Tracer:
    """Wraps the methods of ``classes`` through ``runtime`` and records every call."""

    def __init__(
        self, runtime: Any, classes: Sequence[str] = DEFAULT_CLASSES, *, jsonl: TextIO | None = None
    ) -> None:
        self.runtime = runtime
        self.classes = tuple(classes)
        self.records: list[Call] = []
        self.skipped: dict[str, str] = {}
        self.traced: list[str] = []
        self._jsonl = jsonl
        self._handles: list[Any] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._t0 = time.perf_counter()

    def start(self) -> None:
        """Install the wrappers; on any failure, remove the ones installed and re-raise."""
        self._t0 = time.perf_counter()
        try:
            for class_name in self.classes:
                for kind, selector, enc in self.runtime.methods(class_name):
                    name = f"{kind}[{class_name} {selector}]"
                    why = traceable(selector, enc)
                    if why is not None:
                        self.skipped[name] = why
                        continue
                    around = self._around(class_name, kind, selector)
                    self._handles.append(
                        self.runtime.swizzle(class_name, kind, selector, enc, around)
                    )
                    self.traced.append(name)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Restore every replaced method (last installed first); safe to call twice."""
        while self._handles:
            self.runtime.restore(self._handles.pop())

    def _around(self, class_name: str, kind: str, selector: str) -> Any:
        def around(call_original: Any, receiver: Any, args: tuple[Any, ...]) -> Any:
            depth = getattr(self._local, "depth", 0)
            self._local.depth = depth + 1
            start = time.perf_counter()
            result, error = None, None
            try:
                result = call_original(receiver, *args)
                return result
            except BaseException as e:
                error = f"{type(e).__name__}: {e}"
                raise
            finally:
                seconds = time.perf_counter() - start
                self._local.depth = depth
                self._record(class_name, kind, selector, args, result, error, start, seconds, depth)

        return around

    def _record(
        self,
        class_name: str,
        kind: str,
        selector: str,
        args: tuple[Any, ...],
        result: Any,
        error: str | None,
        start: float,
        seconds: float,
        depth: int,
    ) -> None:
        try:  # bookkeeping must never break the traced program
            with self._lock:
                call = Call(
                    len(self.records),
                    start - self._t0,
                    seconds,
                    threading.get_ident(),
                    depth,
                    class_name,
                    kind,
                    selector,
                    [summarize(a) for a in args],
                    summarize(result),
                    error,
                )
                self.records.append(call)
                if self._jsonl is not None:
                    self._jsonl.write(json.dumps(asdict(call), default=str) + "\n")
                    self._jsonl.flush()
        except Exception:
            pass


@contextlib.contextmanager
def trace(
    classes: Sequence[str] = DEFAULT_CLASSES,
    *,
    jsonl: str | Path | TextIO | None = None,
    runtime: Any = None,
) -> Iterator[Tracer]:
    r"""Record every message to ``classes`` while the block runs; restore the methods after.

    Args:
        classes (sequence of str): Objective-C classes to trace. Default: ``_ANEClient``,
            ``_ANEInMemoryModel``, ``_ANEModel``, ``_ANERequest``.
        jsonl (str | Path | file): where to stream the calls as JSON lines. Default: nowhere.
        runtime: the Objective-C runtime seam; default: PyObjC's (macOS; BackendUnavailable
            elsewhere). Tests pass a stand-in.
    Returns:
        Tracer: ``records`` (a :class:`Call` per message), ``traced``, ``skipped``.
    """
    if runtime is None:
        from anekit.probe.runtime import PyObjCRuntime

        runtime = PyObjCRuntime()
    with contextlib.ExitStack() as stack:
        sink = jsonl
        if isinstance(jsonl, (str, Path)):
            sink = stack.enter_context(Path(jsonl).open("w", encoding="utf-8"))
        tracer = Tracer(runtime, classes, jsonl=sink)  # type: ignore[arg-type]
        tracer.start()
        try:
            yield tracer
        finally:
            tracer.stop()


def timeline(records: Sequence[Call]) -> str:
    """The calls in order of start, indented by nesting, with start offsets and durations."""
    lines = []
    for c in sorted(records, key=lambda c: (c.start_s, c.depth)):
        lines.append(
            f"{c.start_s * 1e3:11.3f} ms {c.seconds * 1e3:9.3f} ms  {'  ' * c.depth}{c.line()}"
        )
    threads = len({c.thread for c in records})
    lines.append(f"{len(records)} calls on {threads} thread{'s' if threads != 1 else ''}")
    return "\n".join(lines)


def read_jsonl(path: Path, max_bytes: int) -> list[Call]:
    """The calls a trace streamed to ``path`` (a line cut short by a crash is dropped)."""
    size = path.stat().st_size
    if size > max_bytes:
        raise UsageError(f"the trace is {size} bytes, over the {max_bytes} read", path=str(path))
    calls = []
    for line in path.read_text("utf-8", errors="replace").splitlines():
        try:
            calls.append(Call(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return calls
