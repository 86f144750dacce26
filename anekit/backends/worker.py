"""Isolated kernels: compiled kernels hosted in a worker process recycled before the compile budget.

The ANE framework leaks with every compile and fails after about 119 compiles in
one process (ANE_NOTES section 2.4). ``anekit.compile(program, isolate=True)``
returns an :class:`IsolatedKernel` whose compiled form lives in a worker process.
The parent counts the compiles it sends to the worker; when the next one would
pass ``recycle_after`` it stops the worker and starts a fresh one, and kernels of
the old worker are compiled again there on their next use. A worker that dies
surfaces as :class:`EvaluationError`; the next call starts a new one.

Inputs and outputs live in memory the parent owns, so they survive recycling: a
global IOSurface looked up by ID on a Mac with the ANE framework, POSIX shared
memory elsewhere. The worker copies them into and out of its kernel's own
buffers. Commands travel over a pipe as JSON, programs as MIL text plus weight
files. Nothing here knows which backend it hosts.

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
from collections.abc import Sequence
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from anekit.backends.base import Kernel, TensorSpec
from anekit.backends.budget import DEFAULT_LIMIT
from anekit.errors import (
    BackendUnavailable,
    CompileError,
    EvaluationError,
    MilTypeError,
    WeightFileError,
)
from anekit.mil.program import Program

DEFAULT_RECYCLE_AFTER = 100  # compiles per worker; below the in-process budget (budget.py)
ALIGN = 64  # byte alignment of each tensor in a shared region
STOP_TIMEOUT_S = 5.0

__all__ = ["DEFAULT_RECYCLE_AFTER", "IsolatedKernel", "compile"]


def compile(
    program: Program, backend: str, *, recycle_after: int = DEFAULT_RECYCLE_AFTER, **options: Any
) -> IsolatedKernel:
    """Compile ``program`` for ``backend`` inside a worker process recycled every ``recycle_after`` compiles."""
    if not 1 <= recycle_after <= DEFAULT_LIMIT:
        raise ValueError(f"recycle_after must be in [1, {DEFAULT_LIMIT}], found {recycle_after}")
    try:
        json.dumps(options)
    except TypeError as e:
        raise TypeError(f"isolated kernels take JSON-serialisable backend options: {e}") from None
    return IsolatedKernel(program, backend, options, _host(recycle_after))


# -- shared memory -----------------------------------------------------------------------------
class Region:
    """Memory shared between the parent (which owns it) and the worker, found by (kind, ref)."""

    kind = ""

    def __init__(self, ref: Any, buf: memoryview, owner: Any) -> None:
        self.ref = ref
        self.buf = buf
        self._owner = owner

    def close(self, *, unlink: bool) -> None:
        """Stop using the memory; the owner also frees it (``unlink``)."""


class ShmRegion(Region):
    """POSIX shared memory (``multiprocessing.shared_memory``)."""

    kind = "shm"

    @classmethod
    def create(cls, nbytes: int) -> ShmRegion:
        shm = SharedMemory(create=True, size=nbytes)
        return cls(shm.name, shm.buf, shm)

    @classmethod
    def attach(cls, ref: str) -> ShmRegion:
        shm = SharedMemory(name=ref)
        return cls(ref, shm.buf, shm)

    def close(self, *, unlink: bool) -> None:
        try:
            self._owner.close()
        except BufferError:
            pass  # a caller still holds a view; the mapping goes with the last view
        if unlink:
            self._owner.unlink()


class SurfaceRegion(Region):
    """A global IOSurface, looked up by ID in the worker (macOS with the ANE framework)."""

    kind = "iosurface"

    @classmethod
    def create(cls, nbytes: int) -> SurfaceRegion:
        from anekit.backends.ane import framework
        from anekit.backends.ane.iosurface import Surface

        fw = framework.load()
        surface = Surface.create(fw, nbytes, shared=True)
        return cls(surface.id, fw.surface_memory(surface.handle, nbytes), surface)

    @classmethod
    def attach(cls, ref: int, nbytes: int) -> SurfaceRegion:
        from anekit.backends.ane import framework
        from anekit.backends.ane.iosurface import Surface

        fw = framework.load()
        surface = Surface.lookup(fw, ref, nbytes)
        return cls(ref, fw.surface_memory(surface.handle, nbytes), surface)

    def close(self, *, unlink: bool) -> None:
        self._owner.unlock()  # the surface is freed when its last reference goes


def create_region(nbytes: int) -> Region:
    """Parent side: new shared memory of ``nbytes`` (IOSurface where the ANE framework loads)."""
    from anekit.backends.ane import framework

    if framework.problem() is None:
        return SurfaceRegion.create(nbytes)
    return ShmRegion.create(nbytes)


def attach_region(kind: str, ref: Any, nbytes: int) -> Region:
    """Worker side: the parent's region by kind and reference."""
    if kind == SurfaceRegion.kind:
        return SurfaceRegion.attach(ref, nbytes)
    return ShmRegion.attach(ref)


def layout(specs: Sequence[TensorSpec]) -> tuple[dict[str, int], int]:
    """Byte offset of each tensor in a region (64-byte aligned) and the region's size."""
    offsets, end = {}, 0
    for s in specs:
        offsets[s.name] = end
        end += -(-s.nbytes // ALIGN) * ALIGN
    return offsets, max(end, ALIGN)


def views(region: Region, specs: Sequence[TensorSpec], base: int) -> dict[str, np.ndarray]:
    """Arrays on ``region`` for ``specs``, laid out by :func:`layout` from byte ``base``."""
    offsets, _ = layout(specs)
    return {
        s.name: np.ndarray(s.shape, s.dtype.numpy, buffer=region.buf, offset=base + offsets[s.name])
        for s in specs
    }


# -- the wire ---------------------------------------------------------------------------------
def _send(conn: Connection, header: dict[str, Any], frames: Sequence[bytes] = ()) -> None:
    conn.send_bytes(json.dumps({**header, "frames": len(frames)}).encode())
    for frame in frames:
        conn.send_bytes(frame)


def _recv(conn: Connection) -> tuple[dict[str, Any], list[bytes]]:
    header = json.loads(conn.recv_bytes())
    return header, [conn.recv_bytes() for _ in range(header.pop("frames"))]


_FIELDS = ("line", "column", "op", "param", "file", "offset", "domain", "code")
_REBUILD: dict[str, type[Exception]] = {
    "BackendUnavailable": BackendUnavailable,
    "CompileError": CompileError,
    "CompileBudgetExhausted": CompileError,
    "EvaluationError": EvaluationError,
    "MilTypeError": MilTypeError,
    "WeightFileError": WeightFileError,
    "ValueError": ValueError,
    "TypeError": TypeError,
}


def _error_reply(e: Exception) -> dict[str, Any]:
    fields = {f: getattr(e, f) for f in _FIELDS if isinstance(getattr(e, f, None), (int, str))}
    return {"ok": False, "kind": type(e).__name__, "message": str(e), "fields": fields}


def _rebuild(reply: dict[str, Any]) -> Exception:
    """The worker's exception as the parent raises it (same class where it can be rebuilt)."""
    cls = _REBUILD.get(reply["kind"])
    if cls is None:
        return EvaluationError(f"worker raised {reply['kind']}: {reply['message']}")
    err = cls(reply["message"])
    for name, value in reply["fields"].items():
        setattr(err, name, value)
    return err


# -- the worker process --------------------------------------------------------------------------
class _Hosted:
    """Worker side of one kernel: the compiled kernel and its two slots of shared views."""

    def __init__(self, kernel: Kernel, region: Region) -> None:
        self.kernel = kernel
        self.region = region
        specs = kernel.inputs + kernel.outputs
        size = layout(specs)[1]
        self.slots = [views(region, specs, 0), views(region, specs, size)]

    def run(self, slot: int) -> dict[str, Any]:
        shared, k = self.slots[slot], self.kernel
        for s in k.inputs:
            np.copyto(k.input_buffer(s.name), shared[s.name])
        k.run()
        for s in k.outputs:
            np.copyto(shared[s.name], k.output_buffer(s.name))
        return {"ok": True, "stats": k.last_stats()}

    def close(self) -> None:
        self.slots.clear()
        self.kernel.close()
        self.region.close(unlink=False)


def _compile(header: dict[str, Any], frames: list[bytes]) -> _Hosted:
    """Worker side of a compile command: parse, compile, attach the parent's shared memory."""
    from anekit.backends import compile as compile_kernel
    from anekit.mil import parse

    program = parse(frames[0].decode("utf-8"), weights=dict(zip(header["weights"], frames[1:])))
    kind, ref, nbytes = header["region"]
    region = attach_region(kind, ref, nbytes)
    try:
        kernel = compile_kernel(program, backend=header["backend"], **header["options"])
    except BaseException:
        region.close(unlink=False)
        raise
    return _Hosted(kernel, region)


def _serve(conn: Connection) -> None:
    """The worker's loop: compile, run and close kernels until told to exit or the pipe closes."""
    hosted: dict[int, _Hosted] = {}
    while True:
        try:
            header, frames = _recv(conn)
        except EOFError:
            break
        op = header["op"]
        if op == "exit":
            break
        try:
            if op == "compile":
                hosted[header["id"]] = _compile(header, frames)
                reply: dict[str, Any] = {"ok": True}
            elif op == "run":
                reply = hosted[header["id"]].run(header["slot"])
            else:  # close
                hosted.pop(header["id"]).close()
                reply = {"ok": True}
        except Exception as e:  # every failure goes back to the parent, typed
            reply = _error_reply(e)
        _send(conn, reply)
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
        self._kernels: set[IsolatedKernel] = set()
        self._next_id = 0

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def add(self, kernel: IsolatedKernel) -> int:
        """Register a kernel; returns its id."""
        with self.lock:
            self._next_id += 1
            self._kernels.add(kernel)
            return self._next_id

    def kernels(self) -> list[IsolatedKernel]:
        """The kernels registered with this host."""
        with self.lock:
            return list(self._kernels)

    def remove(self, kernel: IsolatedKernel) -> None:
        """Forget a kernel; the worker stops with the last one."""
        with self.lock:
            self._kernels.discard(kernel)
            if not self._kernels:
                self.stop()

    def ensure(self, kernel: IsolatedKernel) -> None:
        """Make sure ``kernel`` is compiled in the current worker, recycling it if it is full."""
        with self.lock:
            if self._process is not None and kernel.generation == self.generation:
                return
            if self._process is not None and self.compiles >= self.recycle_after:
                self.stop()
            if self._process is None:
                self._start()
            self.compiles += 1
            header, frames = kernel.compile_message()
            self.call(header, frames)
            kernel.generation = self.generation

    def call(self, header: dict[str, Any], frames: Sequence[bytes] = ()) -> dict[str, Any]:
        """Send one command and wait for its reply; a dead worker becomes EvaluationError."""
        with self.lock:
            if self._conn is None:
                raise EvaluationError("no worker process is running")
            pid = self.pid
            try:
                _send(self._conn, header, frames)
                reply, _ = _recv(self._conn)
            except (EOFError, OSError) as e:
                code = self._discard()
                raise EvaluationError(
                    f"worker process {pid} died during {header['op']!r} (exit code {code}); "
                    "the next call starts a new worker"
                ) from e
        if not reply["ok"]:
            raise _rebuild(reply)
        return reply

    def stop(self) -> None:
        """Ask the worker to exit and wait for it (killing it if it does not)."""
        with self.lock:
            if self._conn is not None:
                try:
                    _send(self._conn, {"op": "exit"})
                except OSError:
                    pass  # already gone
            self._discard()

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

    def _discard(self) -> int | None:
        """Forget the current worker, reaping its process; returns its exit code."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is None:
            return None
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


def _close_all() -> None:
    """At exit: close every isolated kernel still open, freeing its memory and its worker."""
    for host in list(_hosts.values()):
        for kernel in list(host.kernels()):
            kernel.close()
        host.stop()


class IsolatedKernel(Kernel):
    """A kernel compiled in a worker process; same API as any Kernel.

    ``input_buffer``/``output_buffer`` are views of shared memory the parent owns;
    ``run()`` uses them, ``evaluate()`` (and ``__call__``/``submit``) a second slot,
    so calls never disturb the buffers.
    """

    def __init__(
        self, program: Program, backend: str, options: dict[str, Any], host: WorkerHost
    ) -> None:
        super().__init__(program)
        self.backend = backend
        self._options = options
        self._host = host
        self.generation = 0  # the worker generation this kernel is compiled in (0: none)
        self._last: dict[str, float] | None = None
        specs = self.inputs + self.outputs
        size = layout(specs)[1]
        self._region = create_region(2 * size)
        self._slots = [views(self._region, specs, 0), views(self._region, specs, size)]
        self._id = host.add(self)
        try:
            host.ensure(self)
        except BaseException:
            self._detach()
            raise

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
            "region": [self._region.kind, self._region.ref, len(self._region.buf)],
            "weights": list(weights),
        }
        return header, [self.program.to_text().encode("utf-8"), *weights.values()]

    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._host.lock:
            shared = self._slots[1]
            for name, value in inputs.items():
                np.copyto(shared[name], value)
            self._run_slot(1)
            return {s.name: shared[s.name].copy() for s in self.outputs}

    def run(self) -> None:
        self._check_open()
        with self._host.lock:
            self._run_slot(0)

    def input_buffer(self, name: str) -> np.ndarray:
        self.spec(name)
        return self._slots[0][name]

    def output_buffer(self, name: str) -> np.ndarray:
        self.spec(name, output=True)
        return self._slots[0][name]

    def last_stats(self) -> dict[str, float] | None:
        return self._last

    def max_in_flight(self) -> int:
        return 1

    def _run_slot(self, slot: int) -> None:
        self._host.ensure(self)
        self._last = self._host.call({"op": "run", "id": self._id, "slot": slot})["stats"]

    def _release(self) -> None:
        with self._host.lock:
            try:
                if self.generation == self._host.generation and self._host.pid is not None:
                    self._host.call({"op": "close", "id": self._id})
            finally:
                self._detach()

    def _detach(self) -> None:
        self._slots.clear()
        self._host.remove(self)
        self._region.close(unlink=True)
