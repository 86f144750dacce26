"""What every backend provides: a compiled :class:`Kernel` with one calling convention."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit import fp16
from anekit.errors import AnekitError, UsageError
from anekit.mil.program import Program, Value
from anekit.mil.types import DType

QUEUE_DEPTH = 127  # evaluations the ANE accepts in flight (ANE_NOTES section 1)


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


class Kernel(ABC):
    """A compiled program, ready to run.

    Call it with arrays (``k(x=a) -> {"y": ...}``), or fill ``input_buffer(name)``
    in place and call ``run()`` to avoid copies, or ``submit(**inputs)`` for many
    evaluations in flight. Close it (or use ``with``) to release the backend's
    resources.
    """

    backend: str = ""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.inputs = tuple(TensorSpec.of(v) for v in program.main.inputs)
        self.outputs = tuple(TensorSpec.of(v) for v in program.main.outputs)
        self._input_specs = {s.name: s for s in self.inputs}
        self._output_specs = {s.name: s for s in self.outputs}
        self._closed = False
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- what a backend implements -------------------------------------------------------------
    @abstractmethod
    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once on validated inputs; return fresh output arrays. Must be thread-safe."""

    @abstractmethod
    def run(self) -> None:
        """Run once reading ``input_buffer``s and writing ``output_buffer``s in place."""

    @abstractmethod
    def input_buffer(self, name: str) -> np.ndarray:
        """The array the backend reads input ``name`` from (zero-copy on the ANE)."""

    @abstractmethod
    def output_buffer(self, name: str) -> np.ndarray:
        """The array the backend writes output ``name`` to (zero-copy on the ANE)."""

    def _release(self) -> None:  # noqa: B027  (optional hook: most kernels hold nothing)
        """Free backend resources (called once by ``close``)."""

    def last_stats(self) -> dict[str, float] | None:
        """Hardware timing of the last evaluation where the backend can measure it, else None."""
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
        self._check_open()
        return self.evaluate(self.validate(inputs))

    def submit(self, **inputs: Any) -> Future[dict[str, np.ndarray]]:
        """Queue one evaluation; returns a Future of its outputs."""
        self._check_open()
        arrays = self.validate(inputs)
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_in_flight())
        return self._pool.submit(self.evaluate, arrays)

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
        """The spec of an input (or output) by name; KeyError lists the names there are."""
        specs = self._output_specs if output else self._input_specs
        try:
            return specs[name]
        except KeyError:
            kind = "output" if output else "input"
            raise KeyError(f"no {kind} {name!r}; {kind}s: {sorted(specs)}") from None

    def close(self) -> None:
        """Release the kernel; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._release()

    def _check_open(self) -> None:
        if self._closed:
            raise AnekitError("kernel is closed")

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
