"""Isolated kernels: compiled kernels hosted in a worker process recycled before the compile budget.

The ANE framework leaks with every compile and fails after about 119 compiles in
one process (ANE_NOTES section 2.4). ``anekit.compile(program, isolate=True)``
returns an :class:`IsolatedKernel` whose compiled form lives in a worker process.
The parent counts the compiles it sends to the worker; when the next one would
pass ``recycle_after`` it stops the worker and starts a fresh one, and kernels of
the old worker are compiled again there on their next use.

Every call has a deadline (``timeout=``, seconds): a worker that does not answer in
time (hung, or stopped with SIGSTOP) is killed and replaced, and the call raises
:class:`EvaluationError`; so does a worker that dies. A malformed message is answered
with an error on either side, never a dead worker. Errors raised in the worker
arrive as their own class with their fields (:mod:`anekit.backends.wire`).

Inputs and outputs live in POSIX shared memory the parent owns
(:mod:`anekit.backends.shm`), so they survive recycling, and a buffer handed out
keeps its memory mapped after the kernel is closed or collected. The worker copies
them into and out of its kernel's own buffers. Programs travel as MIL text plus
weight files. Nothing here knows which backend it hosts.

An isolated kernel runs one evaluation at a time (``max_in_flight() == 1``).
If more kernels are in use round-robin than ``recycle_after``, every recycle
recompiles them all: keep the working set of kernels below it.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import sys
import threading
import types
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from anekit.backends import shm, wire
from anekit.backends.base import Buffer, BufferSet, Kernel, TensorSpec
from anekit.backends.budget import DEFAULT_LIMIT
from anekit.backends.placement import Placement
from anekit.errors import EvaluationError
from anekit.mil.program import Program

DEFAULT_RECYCLE_AFTER = 100  # compiles per worker; below the in-process budget (budget.py)
DEFAULT_TIMEOUT_S = 120.0  # per call; a compile of a large program takes seconds, not minutes
STOP_TIMEOUT_S = 5.0

__all__ = ["DEFAULT_RECYCLE_AFTER", "DEFAULT_TIMEOUT_S", "IsolatedKernel", "compile", "flush"]


def compile(
    program: Program,
    backend: str,
    *,
    recycle_after: int = DEFAULT_RECYCLE_AFTER,
    timeout: float = DEFAULT_TIMEOUT_S,
    **options: Any,
) -> IsolatedKernel:
    """Compile ``program`` for ``backend`` in a worker recycled every ``recycle_after`` compiles.

    ``timeout`` bounds every call to the worker, in seconds; options go to the backend.
    """
    if not 1 <= recycle_after <= DEFAULT_LIMIT:
        raise ValueError(f"recycle_after must be in [1, {DEFAULT_LIMIT}], found {recycle_after}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, found {timeout!r}")
    try:
        json.dumps(options)
    except TypeError as e:
        raise TypeError(f"isolated kernels take JSON-serialisable backend options: {e}") from None
    return IsolatedKernel(program, backend, options, _host(recycle_after), timeout=float(timeout))


# -- the worker process --------------------------------------------------------------------------
class _Hosted:
    """Worker side of one kernel: the compiled kernel and the shared regions it reads and writes.

    A run names, for every input and output, a span (region name, byte offset) in the
    parent's shared memory: its own region (attached at compile) or a buffer set's, which
    is attached when first named and kept until the kernel closes.
    """

    def __init__(self, kernel: Kernel, region: shm.Region) -> None:
        self.kernel = kernel
        size = shm.layout(kernel.inputs + kernel.outputs)[1]
        if len(region) < 2 * size:
            raise EvaluationError(
                f"shared region of {len(region)} bytes; the kernel needs {2 * size}"
            )
        self.regions = {region.ref: region}
        self.views: dict[tuple[str, str, int], np.ndarray] = {}

    def run(self, spans: Any) -> dict[str, Any]:
        k = self.kernel
        ins, outs = self._spans(spans, "in", k.inputs), self._spans(spans, "out", k.outputs)
        for s in k.inputs:
            np.copyto(k.input_buffer(s.name), ins[s.name])
        k.run()
        for s in k.outputs:
            np.copyto(outs[s.name], k.output_buffer(s.name))
        events = k.events  # the reference backend's cliff events, sent back as data
        return {
            "ok": True,
            "stats": k.last_stats(),
            "events": None if events is None else events.as_dict(),
        }

    def _spans(self, spans: Any, side: str, specs: tuple[TensorSpec, ...]) -> dict[str, Any]:
        """The shared views a run command names for one side; EvaluationError if malformed."""
        table = spans.get(side) if isinstance(spans, dict) else None
        if not isinstance(table, dict) or set(table) != {s.name for s in specs}:
            raise EvaluationError(
                f"malformed run command: spans[{side!r}] must name {sorted(s.name for s in specs)}"
            )
        views = {}
        for spec in specs:
            span = table[spec.name]
            ok = isinstance(span, list) and len(span) == 2 and isinstance(span[0], str)
            if not ok or isinstance(span[1], bool) or not isinstance(span[1], int) or span[1] < 0:
                raise EvaluationError(f"malformed run command: span {span!r} of {spec.name!r}")
            ref, offset = span
            key = (ref, spec.name, offset)
            if key not in self.views:
                if ref not in self.regions:
                    self.regions[ref] = shm.Region.attach(ref)
                if offset + spec.nbytes > len(self.regions[ref]):
                    raise EvaluationError(
                        f"malformed run command: {spec.nbytes} bytes of {spec.name!r} at offset "
                        f"{offset} do not fit region {ref!r} of {len(self.regions[ref])} bytes"
                    )
                self.views[key] = self.regions[ref].view(spec, offset)
            views[spec.name] = self.views[key]
        return views

    def close(self) -> None:
        self.views.clear()
        self.regions.clear()
        self.kernel.close()


def _compile(header: dict[str, Any], frames: list[bytes]) -> _Hosted:
    """Worker side of a compile command: parse, compile, attach the parent's shared memory."""
    from anekit.backends import compile as compile_kernel
    from anekit.mil import parse

    try:
        names, region_ref = list(header["weights"]), str(header["region"])
        backend, options = str(header["backend"]), dict(header["options"])
        text = frames[0].decode("utf-8")
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise EvaluationError(f"malformed compile command: {type(e).__name__}: {e}") from None
    program = parse(text, weights=dict(zip(names, frames[1:])))
    kernel = compile_kernel(program, backend=backend, **options)
    try:
        return _Hosted(kernel, shm.Region.attach(region_ref))
    except BaseException:
        kernel.close()
        raise


def _handle(hosted: dict[int, _Hosted], header: dict[str, Any], frames: list[bytes]) -> dict:
    op, kernel_id = header.get("op"), header.get("id")
    if op == "compile":
        hosted[kernel_id] = _compile(header, frames)  # type: ignore[index]
        kernel = hosted[kernel_id].kernel  # type: ignore[index]
        return {"ok": True, "layout": kernel.layout.as_dict(), "numerics": kernel.numerics}
    if op not in ("run", "close"):
        raise EvaluationError(f"malformed command: unknown op {op!r}")
    if kernel_id not in hosted:
        raise EvaluationError(f"the worker hosts no kernel with id {kernel_id!r}")
    if op == "run":
        return hosted[kernel_id].run(header.get("spans"))
    hosted.pop(kernel_id).close()
    return {"ok": True}


def _serve(conn: Connection) -> None:
    """The worker's loop: compile, run and close kernels until told to exit or the pipe closes."""
    hosted: dict[int, _Hosted] = {}
    while True:
        try:
            header, frames = wire.recv(conn)
        except (EOFError, OSError):
            break  # the parent is gone
        except Exception as e:  # a malformed message: answer it, keep serving
            reply = wire.encode_error(e)
        else:
            if header.get("op") == "exit":
                break
            try:
                reply = _handle(hosted, header, frames)
            except Exception as e:  # every failure goes back to the parent, typed
                reply = wire.encode_error(e)
        try:
            wire.send(conn, reply)
        except (TypeError, ValueError) as e:  # a reply that is not JSON: say so instead
            wire.send(conn, wire.encode_error(EvaluationError(f"unsendable reply: {e}")))
        except OSError:
            break
    for h in hosted.values():
        h.close()


# -- the parent side --------------------------------------------------------------------------------
class WorkerHost:
    """One worker process at a time, recycled after ``recycle_after`` compiles; thread-safe."""

    def __init__(self, recycle_after: int) -> None:
        self.recycle_after = recycle_after
        self.lock = threading.RLock()
        self.generation = 0  # bumped for every worker started
        self.compiles = 0  # sent to the current worker
        self._process: Any = None
        self._conn: Connection | None = None
        self._kernels: weakref.WeakValueDictionary[int, IsolatedKernel] = (
            weakref.WeakValueDictionary()
        )
        self._forgotten: list[tuple[int, int]] = []  # (id, generation) to close in the worker
        # never held across I/O; re-entrant, since a garbage-collector callback may take it
        self._forgotten_lock = threading.RLock()
        self._next_id = 0

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def add(self, kernel: IsolatedKernel) -> int:
        """Register a kernel; returns its id."""
        with self.lock:
            self._next_id += 1
            self._kernels[self._next_id] = kernel
            return self._next_id

    def kernels(self) -> list[IsolatedKernel]:
        """The kernels registered with this host and still alive."""
        return list(self._kernels.values())

    def forget(self, kernel_id: int, generation: int) -> None:
        """Drop a kernel without talking to the worker (safe from a garbage-collector callback)."""
        self._kernels.pop(kernel_id, None)
        with self._forgotten_lock:
            self._forgotten.append((kernel_id, generation))

    def flush(self) -> None:
        """Close forgotten kernels in the worker; stop it when no kernel is left."""
        with self.lock:
            self._close_forgotten()
            if not self._kernels:
                self.stop()

    def ensure(self, kernel: IsolatedKernel) -> None:
        """Make sure ``kernel`` is compiled in the current worker, recycling it if it is full."""
        with self.lock:
            self._close_forgotten()
            if self._process is not None and kernel.generation == self.generation:
                return
            if self._process is not None and self.compiles >= self.recycle_after:
                self.stop()
            if self._process is None:
                self._start()
            self.compiles += 1
            header, frames = kernel.compile_message()
            reply = self.call(header, frames, timeout=kernel.timeout)
            kernel.generation = self.generation
            kernel.worker_layout = reply.get("layout")
            kernel.worker_numerics = reply.get("numerics")

    def _close_forgotten(self) -> None:
        with self._forgotten_lock:
            pending, self._forgotten = self._forgotten, []
        for kernel_id, generation in pending:
            if generation == self.generation and self._conn is not None:
                try:
                    self.call({"op": "close", "id": kernel_id}, timeout=STOP_TIMEOUT_S)
                except EvaluationError:
                    pass  # the worker is gone or replaced: nothing of the kernel is left

    def call(
        self, header: dict[str, Any], frames: Sequence[bytes] = (), *, timeout: float
    ) -> dict[str, Any]:
        """Send one command and wait for its reply, at most ``timeout`` seconds.

        A worker that dies, answers garbage or misses the deadline is killed and forgotten
        (the next call starts a new one) and the call raises EvaluationError.
        """
        with self.lock:
            if self._conn is None:
                raise EvaluationError("no worker process is running")
            pid, op = self.pid, header.get("op")
            late = threading.Event()
            # A large send blocks while the worker does not read: a watchdog ends it in time.
            watchdog = threading.Timer(timeout, self._kill, (late,)) if frames else None
            try:
                if watchdog is not None:
                    watchdog.start()
                wire.send(self._conn, header, frames)
                if not self._conn.poll(timeout):
                    late.set()
                    raise EOFError
                reply, _ = wire.recv(self._conn)
            except (EOFError, OSError) as e:
                code = self._discard(kill=True)
                what = (
                    f"did not answer {op!r} within {timeout:g} s and was killed"
                    if late.is_set()
                    else f"died during {op!r} (exit code {code})"
                )
                raise EvaluationError(
                    f"worker process {pid} {what}; the next call starts a new worker"
                ) from e
            except EvaluationError as e:  # a malformed reply: the stream cannot be trusted
                self._discard(kill=True)
                raise EvaluationError(
                    f"worker process {pid} sent a malformed reply to {op!r} ({e}); it was "
                    "killed and the next call starts a new worker"
                ) from e
            finally:
                if watchdog is not None:
                    watchdog.cancel()
        if reply.get("ok") is not True:
            raise wire.rebuild_error(reply)
        return reply

    def stop(self) -> None:
        """Ask the worker to exit and wait for it (killing it if it does not)."""
        with self.lock:
            if self._conn is not None:
                try:
                    wire.send(self._conn, {"op": "exit"})
                except OSError:
                    pass  # already gone
            self._discard()

    def _kill(self, late: threading.Event) -> None:
        late.set()
        process = self._process
        if process is not None:
            process.kill()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child,), name="anekit-worker", daemon=True)
        # spawn re-runs the parent's __main__ script in the child unless __main__ has no
        # file; the worker needs nothing from it, and re-running a user's script is wrong.
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            process.start()
        finally:
            sys.modules["__main__"] = main
        child.close()
        self._process, self._conn = process, parent
        self.generation += 1
        self.compiles = 0

    def _discard(self, *, kill: bool = False) -> int | None:
        """Forget the current worker, reaping its process; returns its exit code."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is None:
            return None
        if kill:
            process.kill()
        process.join(STOP_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()
        return process.exitcode


_hosts: dict[int, WorkerHost] = {}
_hosts_lock = threading.Lock()


def _host(recycle_after: int) -> WorkerHost:
    with _hosts_lock:
        if not _hosts:
            atexit.register(_close_all)
        if recycle_after not in _hosts:
            _hosts[recycle_after] = WorkerHost(recycle_after)
        return _hosts[recycle_after]


def flush() -> None:
    """Close what collected isolated kernels left in their workers; stop idle workers."""
    for host in list(_hosts.values()):
        host.flush()


def _close_all() -> None:
    """At exit: close every isolated kernel still open, freeing its memory and its worker."""
    for host in list(_hosts.values()):
        for kernel in host.kernels():
            kernel.close()
        host.flush()
        host.stop()


def _finalize(host: WorkerHost, kernel_id: int, state: _State, region: shm.Region) -> None:
    """Release an isolated kernel (on close, or when it is garbage): no I/O to the worker here."""
    host.forget(kernel_id, state.generation)
    region.close()


class _State:
    """What the finalizer of an isolated kernel needs to know; shared with the kernel."""

    generation = 0  # the worker generation the kernel is compiled in (0: none)


class IsolatedKernel(Kernel):
    """A kernel compiled in a worker process; same API as any Kernel.

    ``input_buffer``/``output_buffer`` are views of shared memory the parent owns (they
    keep it mapped after the kernel is gone); ``run()`` uses them, ``evaluate()`` (and
    ``__call__``/``submit``) a second slot, so calls never disturb the buffers. Each
    buffer set (``buffers()``) is a shared-memory region of its own, made once, whose
    buffers other isolated sets can bind; a run tells the worker which spans to read
    and write, and the worker copies them into and out of its kernel's buffers.
    """

    def __init__(
        self,
        program: Program,
        backend: str,
        options: dict[str, Any],
        host: WorkerHost,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(program)
        self.backend = backend
        self.placement = Placement(backend, f"the {backend} backend's engine",
                                   f"a worker process hosting the {backend} backend")  # fmt: skip
        self.timeout = timeout
        self.worker_layout: dict[str, Any] | None = None  # the hosted kernel's own layout
        self.worker_numerics: str | None = None  # the hosted kernel's numerics profile
        self._events: dict[str, Any] | None = None
        self._options = options
        self._host = host
        self._state = _State()
        self._last: dict[str, float] | None = None
        specs = self.inputs + self.outputs
        size = shm.layout(specs)[1]
        self._region = shm.Region.create(2 * size)
        self._primary = self._set_on(self._region, 0, {})
        self._scratch = self._set_on(self._region, size, {})  # evaluate()'s
        self._id = host.add(self)
        self._finalizer = weakref.finalize(self, _finalize, host, self._id, self._state,
                                           self._region)  # fmt: skip
        try:
            host.ensure(self)
        except BaseException:
            self._release()
            raise

    @property
    def generation(self) -> int:
        """The worker generation this kernel is compiled in (0: none)."""
        return self._state.generation

    @generation.setter
    def generation(self, value: int) -> None:
        self._state.generation = value

    @property
    def worker_pid(self) -> int | None:
        """The process id of the worker that hosts this kernel now (None if none is running)."""
        return self._host.pid

    def compile_message(self) -> tuple[dict[str, Any], list[bytes]]:
        """The command that compiles this kernel in a worker."""
        weights = self.program.weight_files()
        header = {
            "op": "compile",
            "id": self._id,
            "backend": self.backend,
            "options": self._options,
            "region": self._region.ref,
            "weights": list(weights),
        }
        return header, [self.program.to_text().encode("utf-8"), *weights.values()]

    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._host.lock:
            shared = self._scratch
            for name, value in inputs.items():
                np.copyto(shared.input(name), value)
            self._run_spans(shared.state)
            return {s.name: np.array(shared.output(s.name)) for s in self.outputs}

    def _binding_problem(self, name: str, buf: Buffer) -> str | None:
        if buf.kind != "isolated":
            return (
                "of an isolated kernel needs a buffer of another isolated kernel's set "
                f"(shared memory), found a {buf.kind} buffer"
            )
        return None

    def _make_buffers(self, share: dict[str, Buffer], compact: bool) -> BufferSet:
        own = [s for s in self.inputs if s.name not in share] + list(self.outputs)
        region = shm.Region.create(shm.layout(own)[1], collect=True)
        return self._set_on(region, 0, share)

    def _set_on(self, region: shm.Region, base: int, share: dict[str, Buffer]) -> BufferSet:
        """A buffer set on ``region`` from byte ``base``, binding ``share``'s buffers."""
        own = [s for s in self.inputs if s.name not in share] + list(self.outputs)
        offsets, _ = shm.layout(own)
        made = {
            s.name: Buffer(s, region.view(s, base + offsets[s.name]),
                           (region, base + offsets[s.name]), "isolated")
            for s in own
        }  # fmt: skip
        inputs = {s.name: share.get(s.name) or made[s.name] for s in self.inputs}
        outputs = {s.name: made[s.name] for s in self.outputs}
        spans = {
            side: {n: [b.memory[0].ref, b.memory[1]] for n, b in table.items()}
            for side, table in (("in", inputs), ("out", outputs))
        }
        return BufferSet(self, inputs, outputs, shared=frozenset(share), state=spans)

    def _run_buffers(self, buffers: BufferSet) -> None:
        with self._host.lock:
            self._run_spans(buffers.state)

    def last_stats(self) -> dict[str, float] | None:
        return self._last

    def max_in_flight(self) -> int:
        return 1

    @property
    def numerics(self) -> str | None:
        """The hosted kernel's numerics profile (None: the device's own arithmetic)."""
        return self.worker_numerics

    @property
    def events(self) -> Any:
        """The hosted kernel's cliff events of the last run, as the worker sent them."""
        from anekit.backends.reference.device import CliffEvents

        return None if self._events is None else CliffEvents.from_dict(self._events)

    def _run_spans(self, spans: dict[str, Any]) -> None:
        self._host.ensure(self)
        reply = self._host.call({"op": "run", "id": self._id, "spans": spans}, timeout=self.timeout)
        self._last = reply.get("stats")
        self._events = reply.get("events")

    def _release(self) -> None:
        self._finalizer()
        self._host.flush()
