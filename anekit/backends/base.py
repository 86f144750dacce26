"""What every backend provides: a compiled :class:`Kernel` with one calling convention."""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit import fp16
from anekit.backends.placement import Placement
from anekit.errors import AnekitError, KernelClosed, UnknownName, UsageError
from anekit.mil.program import Program, Value
from anekit.mil.types import DType

QUEUE_DEPTH = 127  # evaluations the ANE accepts in flight (ANE_NOTES section 1)
HOST = "host"  # the Buffer kind of the default buffer sets: NumPy arrays, read through evaluate


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one kernel input or output."""

    name: str
    shape: tuple[int, ...]
    dtype: DType

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"

    @classmethod
    def of(cls, v: Value) -> TensorSpec:
        if not v.type.is_static:
            raise AnekitError(
                f"{v.name!r} has a dynamic shape {v.type}; kernels need static shapes"
            )
        return cls(v.name, tuple(int(d) for d in v.type.shape), v.type.dtype)


@dataclass(frozen=True)
class BufferLayout:
    """How one input or output buffer lies in memory, and where that layout came from.

    Attributes:
        shape: the tensor's shape.
        dtype: its element type.
        strides: byte strides of ``input_buffer()``/``output_buffer()`` per axis.
        nbytes: bytes the backend allocated for the buffer holding it.
        source: where the strides came from (e.g. "model attributes", "computed: 64-byte
            rows", "dense host memory").
        index: the request index it is bound to, where the backend binds by index.
    """

    shape: tuple[int, ...]
    dtype: DType
    strides: tuple[int, ...]
    nbytes: int
    source: str
    index: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "shape": list(self.shape),
            "dtype": str(self.dtype),
            "strides": list(self.strides),
            "nbytes": self.nbytes,
            "source": self.source,
            "index": self.index,
        }


@dataclass(frozen=True)
class KernelLayout:
    """Every input and output buffer's layout, plus notes on how the backend chose them."""

    inputs: Mapping[str, BufferLayout]
    outputs: Mapping[str, BufferLayout]
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "inputs": {k: v.as_dict() for k, v in self.inputs.items()},
            "outputs": {k: v.as_dict() for k, v in self.outputs.items()},
            "notes": list(self.notes),
        }


def contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def dense_layout(kernel: Kernel, source: str = "dense host memory") -> KernelLayout:
    """The layout of a kernel whose buffers are C-contiguous arrays of their specs."""

    def one(spec: TensorSpec) -> BufferLayout:
        strides = contiguous_strides(spec.shape, spec.dtype.itemsize)
        return BufferLayout(spec.shape, spec.dtype, strides, spec.nbytes, source)

    return KernelLayout(
        MappingProxyType({s.name: one(s) for s in kernel.inputs}),
        MappingProxyType({s.name: one(s) for s in kernel.outputs}),
    )


@dataclass(frozen=True, eq=False)
class Buffer:
    """The memory behind one input or output of a :class:`BufferSet`, to bind into another set.

    Attributes:
        spec: name, shape and dtype of the tensor it was made for.
        array: the zero-copy view the host reads and writes.
        memory: the backend's handle (an IOSurface, a NumPy array, a shared-memory span);
            None where the memory cannot be bound elsewhere (part of a packed surface).
        kind: which kernels can bind it: "ane", "reference", "isolated", or "host" (plain
            arrays of a backend without memory of its own).
    """

    spec: TensorSpec
    array: np.ndarray
    memory: Any
    kind: str


class BufferSet:
    """One evaluation's worth of bindable memory of a kernel: a buffer per input and output.

    Made by ``kernel.buffers()``; run by ``kernel.run(bs)`` (or ``bs.run()``), queued by
    ``kernel.submit(bs)``. ``input(name)``/``output(name)`` are zero-copy views of the memory
    the backend reads and writes: fill inputs in place (weights once, a cache row at a time)
    and read outputs after a run. A set runs one evaluation at a time; different sets of one
    kernel run concurrently. ``shared`` names the inputs bound to another set's buffers.
    """

    def __init__(
        self,
        kernel: Kernel,
        inputs: dict[str, Buffer],
        outputs: dict[str, Buffer],
        *,
        shared: frozenset[str] = frozenset(),
        state: Any = None,
    ) -> None:
        self.kernel = kernel
        self._inputs = inputs
        self._outputs = outputs
        self.shared = shared
        self.state = state  # the backend's own: an ANE slot, a worker's spans
        self.lock = threading.Lock()

    def buffer(self, name: str, *, output: bool = False) -> Buffer:
        """The buffer of input (or output) ``name``, to pass to another set's ``share=``."""
        table = self._outputs if output else self._inputs
        buf = table.get(name)
        if buf is None:
            kind = "output" if output else "input"
            raise UnknownName(f"no {kind} {name!r}; {kind}s: {sorted(table)}")
        return buf

    def input(self, name: str) -> np.ndarray:
        """The array the backend reads input ``name`` from (write it in place)."""
        return self.buffer(name).array

    def output(self, name: str) -> np.ndarray:
        """The array the backend writes output ``name`` to."""
        return self.buffer(name, output=True).array

    def write(self, name: str, value: Any, *, saturate: bool = False) -> None:
        """Copy ``value`` into input ``name``, checked and converted as a call's inputs are."""
        buf = self.buffer(name)
        fp16.cast_into(buf.array, convert_input(buf.spec, value, saturate=saturate))

    def run(self) -> None:
        """``kernel.run(self)``."""
        self.kernel.run(self)

    def submit(self) -> Future[BufferSet]:
        """``kernel.submit(self)``."""
        return self.kernel.submit(self)

    def __repr__(self) -> str:
        shared = f", shared {sorted(self.shared)}" if self.shared else ""
        return f"<BufferSet of {self.kernel!r}{shared}>"


class Kernel(ABC):
    """A compiled program, ready to run.

    Call it with arrays (``k(x=a) -> {"y": ...}``), or fill ``input_buffer(name)``
    in place and call ``run()`` to avoid copies, or ``submit(**inputs)`` for many
    evaluations in flight. For several bindable sets of memory of one program (one per
    layer of a model, say) make :meth:`buffers` and ``run(bs)`` each. Close it (or use
    ``with``) to release the backend's resources: ``close()`` waits for the calls in
    flight, and a call after it raises :class:`~anekit.errors.KernelClosed`.
    """

    backend: str = ""
    engine: str = "unknown"  # what executes it, for the placement receipt
    route: str = "unknown"  # how it gets there

    def __init__(self, program: Program) -> None:
        program.require_weights("compile")
        self.program = program
        # where it runs and why: anekit.compile adds the backends it passed over
        self.placement = Placement(self.backend, self.engine, self.route)
        self.inputs = tuple(TensorSpec.of(v) for v in program.main.inputs)
        self.outputs = tuple(TensorSpec.of(v) for v in program.main.outputs)
        self._input_specs = {s.name: s for s in self.inputs}
        self._output_specs = {s.name: s for s in self.outputs}
        self._closed = False
        self._calls = 0  # calls in flight (queued submits included); close waits for them
        self._idle = threading.Condition()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._primary: BufferSet | None = None

    # -- what a backend implements -------------------------------------------------------------
    @abstractmethod
    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on validated inputs; return fresh output arrays. Must be thread-safe."""

    # The three buffer-set hooks below default to host arrays run through ``evaluate`` (a copy
    # each way per run); a backend with memory of its own to bind overrides all three.
    def _make_buffers(self, share: dict[str, Buffer], compact: bool) -> BufferSet:
        """A new buffer set whose ``share`` inputs bind those buffers (each checked already)."""

        def host(spec: TensorSpec) -> Buffer:
            array = np.zeros(spec.shape, spec.dtype.numpy)
            return Buffer(spec, array, array, HOST)

        inputs = {s.name: share.get(s.name) or host(s) for s in self.inputs}
        outputs = {s.name: host(s) for s in self.outputs}
        return BufferSet(self, inputs, outputs, shared=frozenset(share))

    def _binding_problem(self, name: str, buf: Buffer) -> str | None:
        """Why input ``name`` cannot bind ``buf`` (shape and dtype match), or None if it can."""
        if buf.kind != HOST:
            return f"of a {type(self).__name__} binds host arrays only, not a {buf.kind!r} buffer"
        return None

    def _run_buffers(self, buffers: BufferSet) -> None:
        """Run once reading ``buffers``' inputs and writing its outputs (the set is locked)."""
        results = self.evaluate({s.name: buffers.input(s.name) for s in self.inputs})
        for name, value in results.items():
            np.copyto(buffers.output(name), value)

    def _primary_buffers(self) -> BufferSet:
        """The set behind ``input_buffer``/``output_buffer``/``run()``, made when first needed."""
        with self._pool_lock:
            if self._primary is None:
                self._primary = self._make_buffers({}, True)
            return self._primary

    def _release(self) -> None:  # noqa: B027  (optional hook: most kernels hold nothing)
        """Free backend resources (called once by ``close``, after the calls in flight)."""

    def last_stats(self) -> dict[str, float] | None:
        """Hardware timing of the last evaluation where the backend can measure it, else None."""
        return None

    @property
    def numerics(self) -> str | None:
        """The numerics profile fp16 results are stored by (None: the device's own arithmetic)."""
        return None

    @property
    def events(self) -> Any:
        """The last evaluation's cliff events (the reference backend's ``CliffEvents``).

        None where the backend cannot tell: the engine never reports them.
        """
        return None

    @property
    def layout(self) -> KernelLayout:
        """How each input and output buffer lies in memory (strides, size) and why.

        Backends with their own memory (the ANE's padded IOSurface rows) override this;
        the default describes dense host arrays.
        """
        return dense_layout(self)

    # -- shared behaviour ---------------------------------------------------------------------
    def __call__(self, **inputs: Any) -> dict[str, np.ndarray]:
        with self._in_flight():
            return self.evaluate(self.validate(inputs))

    def buffers(
        self,
        share: Mapping[str, Buffer] | None = None,
        *,
        compact: bool = False,
        strict: bool = True,
    ) -> BufferSet:
        """A new set of bindable memory for one evaluation (see :class:`BufferSet`).

        Args:
            share: input name -> a :class:`Buffer` of another set (of this kernel or another
                one of the same backend, e.g. ``other.buffer("w")``) to bind instead of new
                memory: weights held once and read by several programs, a table shared by
                every layer, an output read as the next program's input. The buffer's shape
                and dtype must be the input's (else UsageError).
            compact: hold fp16 tensors in 2 bytes even where the backend computes on float32
                (the reference backend then converts them on each run instead of reading
                them in place); no effect on the ANE, whose surfaces are fp16.
            strict: a buffer this kernel cannot bind (another memory layout, another kind of
                kernel) is a UsageError saying why; with False it gets memory of its own
                instead, and the set's ``shared`` names only the inputs that were bound.
        """
        with self._in_flight():
            bound = {}
            for name, buf in dict(share or {}).items():
                spec = self._input_specs.get(name)
                if spec is None:
                    raise UsageError(
                        f"share: the kernel has no input {name!r}; inputs: {sorted(self._input_specs)}"
                    )
                if not isinstance(buf, Buffer):
                    raise UsageError(
                        f"share: input {name!r} must be bound to a Buffer (set.buffer(name)), "
                        f"found {type(buf).__name__}"
                    )
                if buf.spec.shape != spec.shape or buf.spec.dtype != spec.dtype:
                    raise UsageError(
                        f"share: input {spec} cannot bind buffer {buf.spec} (shape and dtype differ)"
                    )
                problem = self._binding_problem(name, buf)
                if problem is None:
                    bound[name] = buf
                elif strict:
                    raise UsageError(f"share: input {name!r} {problem}")
            return self._make_buffers(bound, bool(compact))

    def run(self, buffers: BufferSet | None = None, /) -> None:
        """Run once in place: on ``buffers`` (a set of this kernel), or on ``input_buffer``s."""
        with self._in_flight():
            bs = self._primary_buffers() if buffers is None else self._own(buffers)
            with bs.lock:
                self._run_buffers(bs)

    def input_buffer(self, name: str) -> np.ndarray:
        """The array ``run()`` reads input ``name`` from (zero-copy on the ANE)."""
        self.spec(name)
        return self._primary_buffers().input(name)

    def output_buffer(self, name: str) -> np.ndarray:
        """The array ``run()`` writes output ``name`` to (zero-copy on the ANE)."""
        self.spec(name, output=True)
        return self._primary_buffers().output(name)

    def submit(self, buffers: BufferSet | None = None, /, **inputs: Any) -> Future[Any]:
        """Queue one evaluation: of ``inputs`` (a Future of the output dict), or of a buffer set
        run in place (a Future of the set)."""
        if buffers is not None and inputs:
            raise UsageError("submit takes a buffer set or input arrays, not both")
        self._begin()
        try:
            if buffers is None:
                job: Any = (self.evaluate, self.validate(inputs))
            else:
                job = (self._run_set, self._own(buffers))
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=self.max_in_flight())
            return self._pool.submit(self._finish, *job)
        except BaseException:
            self._end()
            raise

    def _run_set(self, bs: BufferSet) -> BufferSet:
        with bs.lock:
            self._run_buffers(bs)
        return bs

    def _finish(self, fn: Any, arg: Any) -> Any:
        """Run a queued job; it was counted in flight when it was submitted."""
        try:
            return fn(arg)
        finally:
            self._end()

    def max_in_flight(self) -> int:
        """How many evaluations ``submit`` runs at once."""
        return 4

    def validate(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check names, shapes and dtypes; convert floats to the declared float dtype."""
        unknown = sorted(set(inputs) - set(self._input_specs))
        missing = sorted(set(self._input_specs) - set(inputs))
        if unknown or missing:
            expected = ", ".join(str(s) for s in self.inputs)
            raise UsageError(
                f"inputs do not match the kernel: unknown {unknown}, missing {missing}; "
                f"expected {expected}"
            )
        return {
            name: convert_input(self._input_specs[name], value) for name, value in inputs.items()
        }

    def spec(self, name: str, *, output: bool = False) -> TensorSpec:
        """The spec of an input (or output) by name; UnknownName (a KeyError) lists the names."""
        specs = self._output_specs if output else self._input_specs
        try:
            return specs[name]
        except KeyError:
            kind = "output" if output else "input"
            raise UnknownName(f"no {kind} {name!r}; {kind}s: {sorted(specs)}") from None

    def close(self) -> None:
        """Release the kernel once the calls in flight are done; calling it again does nothing.

        Calls that start after ``close()`` began raise KernelClosed; buffers handed out stay
        readable (their memory lives as long as they do).
        """
        with self._idle:
            if self._closed:
                return
            self._closed = True
            while self._calls:
                self._idle.wait()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._release()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has begun."""
        return self._closed

    # -- calls in flight ----------------------------------------------------------------------
    def _begin(self) -> None:
        with self._idle:
            if self._closed:
                raise KernelClosed(self._label())
            self._calls += 1

    def _end(self) -> None:
        with self._idle:
            self._calls -= 1
            if not self._calls:
                self._idle.notify_all()

    @contextlib.contextmanager
    def _in_flight(self) -> Iterator[None]:
        """Count a call in flight for its duration (close waits for it); KernelClosed after close."""
        self._begin()
        try:
            yield
        finally:
            self._end()

    def _check_open(self) -> None:
        if self._closed:
            raise KernelClosed(self._label())

    def _label(self) -> str:
        names = [s.name for s in self.inputs]
        more = ", ..." if len(names) > 4 else ""
        return f"the {self.backend!r} kernel of ({', '.join(names[:4])}{more})"

    def _own(self, buffers: Any) -> BufferSet:
        if not isinstance(buffers, BufferSet) or buffers.kernel is not self:
            what = (
                "a buffer set of another kernel"
                if isinstance(buffers, BufferSet)
                else type(buffers).__name__
            )
            raise UsageError(
                f"run/submit takes a buffer set made by this kernel's buffers(), found {what}"
            )
        return buffers

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
            return
        # An exception is already propagating: it is the one to report. A failure to close
        # is attached to it as a note instead of replacing it.
        try:
            self.close()
        except Exception as close_error:
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(
                    f"while closing the kernel: {type(close_error).__name__}: {close_error}"
                )

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.inputs)
        outs = ", ".join(str(s) for s in self.outputs)
        return f"<{type(self).__name__} backend={self.backend!r} ({ins}) -> ({outs})>"


def convert_input(spec: TensorSpec, value: Any, *, saturate: bool = False) -> np.ndarray:
    """Return ``value`` as an array of the spec's dtype; UsageError (a ValueError) for anything lossy.

    A finite float beyond the input's range (70000.0 into fp16) is rejected like an integer
    the dtype cannot hold, naming the input, the value and the range; ``saturate=True``
    clips such floats to the largest finite value instead.
    """
    arr = np.asarray(value)
    if arr.shape != spec.shape:
        raise UsageError(
            f"input {spec.name!r}: expected shape {list(spec.shape)} (rank {len(spec.shape)}), "
            f"found {list(arr.shape)} (rank {arr.ndim})"
        )
    target = spec.dtype.numpy
    if arr.dtype == target:
        return arr
    kind = arr.dtype.kind
    if spec.dtype.is_float and kind == "f":
        top = float(np.finfo(target).max)
        if saturate:
            arr = np.clip(arr, -top, top)  # inf and nan pass through clip unchanged
        with np.errstate(over="ignore"):
            converted = fp16.to_fp16(arr) if spec.dtype is DType.fp16 else arr.astype(target)
        _reject_new(spec, arr, np.isinf(converted) & np.isfinite(arr), f"[{-top:g}, {top:g}]")
        return converted
    if spec.dtype.is_float and kind in "iu":
        converted = arr.astype(target)
        exact = converted.astype(arr.dtype) == arr
        _reject_new(spec, arr, ~exact, f"{spec.dtype} (integers it represents exactly)")
        return converted
    if spec.dtype.is_int and kind in "iu":
        info = np.iinfo(target)
        _reject_new(spec, arr, (arr < info.min) | (arr > info.max), f"[{info.min}, {info.max}]")
        return arr.astype(target)
    if spec.dtype is DType.bool and kind == "b":
        return arr
    raise UsageError(
        f"input {spec.name!r}: expected {spec.dtype}, found {arr.dtype} (conversion would lose data)"
    )


def _reject_new(spec: TensorSpec, arr: np.ndarray, bad: np.ndarray, valid: str) -> None:
    """UsageError naming the first value of ``arr`` where ``bad`` holds, if any does."""
    if not bad.any():
        return
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), arr.shape))
    raise UsageError(
        f"input {spec.name!r}: value {arr[index].item()!r} at index {list(index)} does not fit "
        f"{spec.dtype}: valid values are {valid} ({int(bad.sum())} such values)"
    )
