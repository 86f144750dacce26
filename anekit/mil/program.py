"""The MIL IR: values, operations, functions and programs (SSA, immutable once built)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.ops import registry
from anekit.mil.ops.registry import Args, OpDef, Param
from anekit.mil.types import DType, TensorType, dtype_of

WEIGHTS_PREFIX = "@model_path/weights/"


@dataclass(frozen=True, slots=True)
class BlobRef:
    """Where a const's data lives: a weight file path (``@model_path/weights/...``) and offset."""

    path: str
    offset: int = 64


class Value:
    """An SSA value: a name, a type, the op that produces it, and its value if constant.

    ``producer`` is None for function inputs and for inline literals (a
    constant written in place, as in attribute-only ops).
    """

    __slots__ = ("name", "type", "producer", "const", "blob")

    def __init__(
        self,
        name: str,
        type: TensorType,
        producer: Operation | None = None,
        const: Any = None,
        blob: BlobRef | None = None,
    ) -> None:
        self.name = name
        self.type = type
        self.producer = producer
        self.const = const
        self.blob = blob  # where a constant is stored in a weight file, if not inline

    @property
    def shape(self) -> tuple[int | str, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return len(self.type.shape)

    @property
    def is_inline(self) -> bool:
        return self.producer is None and self.const is not None and not self.name

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.type})"


class Operation:
    """One op application: registry op, named inputs, output values, attributes, source line."""

    __slots__ = ("opdef", "inputs", "outputs", "attrs", "line")

    def __init__(
        self,
        opdef: OpDef,
        inputs: dict[str, Value | tuple[Value, ...]],
        outputs: tuple[Value, ...],
        attrs: dict[str, Any] | None = None,
        line: int | None = None,
    ) -> None:
        self.opdef = opdef
        self.inputs = inputs
        self.outputs = outputs
        self.attrs = attrs if attrs is not None else {}
        self.line = line

    @property
    def op_type(self) -> str:
        return self.opdef.name

    @property
    def name(self) -> str:
        return self.attrs.get("name") or self.outputs[0].name

    def args(self) -> Args:
        """This op's arguments, with defaults, as ``infer`` and ``cost`` see them."""
        return Args(self.opdef, self.inputs)

    def cost(self) -> registry.Cost:
        """This op's FLOPs and bytes moved."""
        return self.opdef.op_cost(self.args(), tuple(v.type for v in self.outputs))

    def input_values(self) -> Iterator[Value]:
        """Every input value, variadic tuples flattened."""
        for v in self.inputs.values():
            yield from v if isinstance(v, tuple) else (v,)

    def __repr__(self) -> str:
        return f"Operation({self.op_type!r}, {[v.name for v in self.outputs]})"


@dataclass(frozen=True)
class Function:
    """A MIL function: typed inputs, ops in SSA order, named outputs."""

    name: str
    inputs: tuple[Value, ...]
    ops: tuple[Operation, ...]
    outputs: tuple[Value, ...]
    opset: str = "ios18"


DEFAULT_BUILD_INFO: dict[str, str] = {
    "coremlc-component-MIL": "3510.2.1",
    "coremlc-version": "3505.4.1",
    "coremltools-component-milinternal": "",
    "coremltools-version": "9.0",
}


class Program:
    """A verified MIL program: one or more functions (``main`` is the entry point)."""

    def __init__(
        self,
        functions: dict[str, Function],
        *,
        version: str = "1.3",
        build_info: dict[str, Any] | None = None,
    ) -> None:
        self.functions = dict(functions)
        self.version = version
        self.build_info = dict(DEFAULT_BUILD_INFO if build_info is None else build_info)

    @property
    def main(self) -> Function:
        try:
            return self.functions["main"]
        except KeyError:
            raise MilTypeError(
                f"program has no function 'main' (functions: {sorted(self.functions)})"
            ) from None

    @property
    def ops(self) -> tuple[Operation, ...]:
        return self.main.ops

    @property
    def inputs(self) -> tuple[Value, ...]:
        return self.main.inputs

    @property
    def outputs(self) -> tuple[Value, ...]:
        return self.main.outputs

    def to_text(self, dialect: str = "ios18") -> str:
        """Print the program as MIL text (``dialect="legacy"``: program(1.0), ios16)."""
        from anekit.mil.text import print_program

        return print_program(self, dialect=dialect)

    def weight_files(self) -> dict[str, bytes]:
        """Return every weight file: ``"@model_path/weights/x.bin"`` -> MILBlob bytes."""
        from anekit.mil.weights import weight_files

        return weight_files(self)

    def save(self, directory: str | os.PathLike[str], dialect: str = "ios18") -> Path:
        """Write ``model.mil`` and ``weights/*.bin`` into ``directory`` (created if needed)."""
        # Everything that can fail on the program runs before the first write, so a
        # rejected save leaves an existing model directory as it was.
        text = self.to_text(dialect).encode("utf-8")
        files = self.weight_files()
        out = Path(directory)
        (out / "weights").mkdir(parents=True, exist_ok=True)
        for path, data in files.items():
            target = out / "weights" / path[len(WEIGHTS_PREFIX) :]
            target.parent.mkdir(parents=True, exist_ok=True)  # a parsed path may name a subdir
            write_atomic(target, data)
        write_atomic(out / "model.mil", text)
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        return self.to_text() == other.to_text() and _same_weights(self, other)

    def __hash__(self) -> int:
        return hash(self.to_text())

    def __str__(self) -> str:
        return self.to_text()


def _same_weights(a: Program, b: Program) -> bool:
    return a.weight_files() == b.weight_files()


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file so a crash leaves either the old or the new content, never a mix."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:  # name the file asked for, not the temporary one
        raise OSError(e.errno, e.strerror, str(path)) from e
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp creates the file 0600; give it the mode an ordinary open() would.
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from e  # not the temporary name
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask (reading it means setting it; the restrictive stand-in lasts a moment)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def literal_value(raw: Any, p: Param, args: Args | None = None) -> Value:
    """Turn a Python scalar, list or array into an inline const Value for parameter ``p``.

    Floats take the dtype of the parameter's domain when another argument fixes
    it (``add(x=fp16, y=2.0)`` makes ``y`` fp16); integers become int32; values
    that would change when stored (1e9 in int8, 0.5 in an int) are rejected.
    """
    if isinstance(raw, Value):
        return raw
    if isinstance(raw, str):
        return Value("", TensorType(DType.string, ()), None, raw)
    arr = np.asarray(raw)
    if _is_typed(raw):
        return Value("", TensorType(dtype_of(arr.dtype), tuple(arr.shape)), None, arr)
    dtype = _choose_dtype(arr, p, args)
    converted = arr.astype(dtype.numpy)
    if arr.dtype.kind in "iub" and dtype.is_int and not np.array_equal(converted, arr):
        raise MilTypeError(f"value {raw!r} does not fit in {dtype}", param=p.name)
    if arr.dtype.kind == "f" and dtype.is_int:
        raise MilTypeError(f"expected an integer value, found {raw!r}", param=p.name)
    return Value("", TensorType(dtype, tuple(arr.shape)), None, converted)


def _is_typed(raw: Any) -> bool:
    """A NumPy value whose dtype MIL can hold keeps it: converting it could lose data."""
    return (
        isinstance(raw, (np.ndarray, np.generic))
        and raw.dtype not in (np.float64, np.int64)
        and raw.dtype.kind in "fiub"
    )


def _choose_dtype(arr: np.ndarray, p: Param, args: Args | None) -> DType:
    allowed = p.dtypes
    domain_dtype = _domain_dtype(p, args)
    if arr.dtype.kind == "b":
        return DType.bool
    if domain_dtype is not None and (arr.dtype.kind in "fiu"):
        return domain_dtype
    if arr.dtype.kind == "f":
        if arr.dtype in (np.float16, np.float32) and (
            allowed is None or dtype_of(arr.dtype) in allowed
        ):
            return dtype_of(arr.dtype)
        for candidate in (DType.fp32, DType.fp16):
            if allowed is None or candidate in allowed:
                return candidate
    if arr.dtype.kind in "iu":
        if arr.dtype.itemsize < 8 and (allowed is None or dtype_of(arr.dtype) in allowed):
            return dtype_of(arr.dtype)
        for candidate in (
            DType.int32,
            DType.uint32,
            DType.int16,
            DType.uint8,
            DType.int8,
            DType.fp16,
        ):
            if allowed is None or candidate in allowed:
                return candidate
    raise MilTypeError(
        f"cannot make a constant of dtype {arr.dtype} for a parameter accepting "
        f"{sorted(d.value for d in allowed) if allowed else 'any type'}",
        param=p.name,
    )


def _domain_dtype(p: Param, args: Args | None) -> DType | None:
    if p.domain is None or args is None:
        return None
    for other in args.opdef.params:
        if other.domain != p.domain or other.name == p.name:
            continue
        given = args.given.get(other.name)
        first = given[0] if isinstance(given, (tuple, list)) and given else given
        if isinstance(first, Value) and first.type.dtype is not DType.string:
            return first.type.dtype
        if _is_typed(first):
            return dtype_of(first.dtype)
    return None
