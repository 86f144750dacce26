"""Program rewrites before the ANE compiles a program: fold constants, pack inputs, order I/O.

:func:`prepare_for_device` is the pass list the ANE backend runs, in order:

1. :func:`fold_constants` replaces every op whose inputs are all constants by the
   constant its reference computes (coremltools' value inference);
2. :func:`pack_inputs` rewrites a program with several inputs into one with a single
   input, because multi-input requests are unreliable on the ANE (error 0x1d in one
   report, silent zeros unless surface sizes ascend in another; one packed input always
   works, ANE_NOTES section 2.4), and returns the :class:`InputPacking` that moves arrays
   between the two forms on the host;
3. :func:`order_by_size` orders the remaining inputs by ascending and outputs by
   descending size.

A rewrite never mutates the program it is given: :func:`substitute` rebuilds each op
that reads a replaced value, so both programs stay valid side by side.

The packing rule, for inputs sharing one dtype:

- if every input has the same rank (at least 1) and the same dims on all axes but the
  last, they are concatenated along the last axis as they are, the layout of the
  dynamic-weight recipe (``[1, C, 1, S + O]``, ANE_NOTES section 5); inside, each is
  ``slice_by_size``'d back out;
- otherwise each input is flattened to ``[1, 1, 1, n]`` and those are concatenated;
  inside, each is sliced out and ``reshape``'d back;
- if that would make a dimension longer than the chip allows (``max_dim``), each input
  of ``n`` elements is folded into rows ``[1, n / W, 1, W]`` for one row width ``W``
  that divides every input, and the rows are stacked along axis 1;
- if no such ``W`` keeps both ``W`` and the row count within ``max_dim``, the program
  is left unpacked.

Either way, each input occupies one contiguous slice of the packed tensor along one
axis, so the host can fill it through a view without copying.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.builder import Builder
from anekit.mil.ops import registry
from anekit.mil.ops.traits import COMPILE_TIME
from anekit.mil.program import Function, Operation, Program
from anekit.mil.types import DType
from anekit.mil.values import WEIGHTS_PREFIX, BlobRef, Value
from anekit.mil.verify import check_function
from anekit.mil.weights import Placeholder

__all__ = [
    "InputPacking",
    "Segment",
    "fold_constants",
    "order_by_size",
    "pack_inputs",
    "prepare_for_device",
    "substitute",
]

MAX_DIM = 65536  # the largest dimension of every chip profile today (hw/data/chips.json)


@dataclass(frozen=True)
class Segment:
    """Where one original input lives in the packed tensor: a slice along one axis."""

    name: str
    shape: tuple[int, ...]  # the original input's shape
    packed_shape: tuple[int, ...]  # its block's shape inside the packed tensor
    offset: int  # where the block starts along ``axis``
    axis: int = -1  # the packed tensor's axis the blocks are stacked along

    @property
    def width(self) -> int:
        return self.packed_shape[self.axis]


@dataclass(frozen=True)
class InputPacking:
    """The packed input of a rewritten program, and how the original inputs map into it."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    segments: tuple[Segment, ...]

    def views(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """Each original input as a view into ``packed`` (writing a view fills the packed array)."""
        if packed.shape != self.shape:
            raise ValueError(
                f"packed array has shape {list(packed.shape)}, expected {list(self.shape)}"
            )
        result = {}
        for s in self.segments:
            index = [slice(None)] * packed.ndim
            index[s.axis] = slice(s.offset, s.offset + s.width)
            result[s.name] = _view_as(packed[tuple(index)], s.shape)
        return result

    def pack(self, inputs: Mapping[str, Any]) -> np.ndarray:
        """A new packed array holding ``inputs`` (name -> array of the original shape)."""
        names = {s.name for s in self.segments}
        if set(inputs) != names:
            raise ValueError(
                f"pack() needs exactly the inputs {sorted(names)}, found {sorted(inputs)}"
            )
        packed = np.empty(self.shape, dtype=self.dtype.numpy)  # the blocks tile it
        for name, view in self.views(packed).items():
            value = np.asarray(inputs[name])
            if value.shape != view.shape:
                raise ValueError(
                    f"input {name!r}: expected shape {list(view.shape)}, found {list(value.shape)}"
                )
            view[...] = value
        return packed

    def unpack(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """The original inputs as new arrays, taken from ``packed``."""
        return {name: view.copy() for name, view in self.views(packed).items()}


def _view_as(block: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``block`` reshaped without a copy (flattened and folded blocks are contiguous)."""
    if block.shape == shape:
        return block
    view = block.reshape(shape)
    if not np.may_share_memory(view, block):  # a copy would detach the view from the packed array
        raise ValueError(f"a block of shape {list(block.shape)} cannot be viewed as {list(shape)}")
    return view


def prepare_for_device(
    program: Program, *, pack: bool = True, order: bool = True, max_dim: int = MAX_DIM
) -> tuple[Program, InputPacking | None]:
    """The pass list of the ANE backend: fold constants, pack the inputs, order I/O by size."""
    device = fold_constants(program)
    device, packing = pack_inputs(device, max_dim=max_dim) if pack else (device, None)
    return (order_by_size(device) if order else device), packing


def pack_inputs(
    program: Program, name: str = "packed", *, max_dim: int = MAX_DIM
) -> tuple[Program, InputPacking | None]:
    """Rewrite ``main`` to take one packed input; returns it unchanged and None if it cannot.

    A program with fewer than two inputs needs no packing; one whose inputs cannot be
    laid out with every dimension at most ``max_dim`` stays unpacked (module docstring).
    """
    inputs = program.main.inputs
    if len(inputs) < 2:
        return program, None
    dtype = _common_dtype(inputs)
    shapes = [_static_shape(v) for v in inputs]
    layout = _layout(shapes, max_dim)
    if layout is None:
        return program, None
    packed_shapes, axis = layout
    offsets = np.cumsum([0] + [s[axis] for s in packed_shapes]).tolist()
    packed_shape = list(packed_shapes[0])
    packed_shape[axis] = offsets[-1]
    prefix = _fresh_prefix(name, _all_names(program))
    segments = tuple(
        Segment(v.name, shape, pshape, offset, axis)
        for v, shape, pshape, offset in zip(inputs, shapes, packed_shapes, offsets)
    )
    packing = InputPacking(prefix, tuple(packed_shape), dtype, segments)
    return _rewrite(program, packing), packing


def order_by_size(program: Program) -> Program:
    """``main`` with inputs in ascending and outputs in descending byte size (ties keep their order).

    One report finds multi-input ANE requests give silent zeros unless input
    surfaces ascend in size and outputs descend (ANE_NOTES section 2.4); equal
    sizes cannot be made strictly ascending and stay in program order.
    """
    fn = program.main
    inputs = tuple(sorted(fn.inputs, key=lambda v: v.type.nbytes or 0))
    outputs = tuple(sorted(fn.outputs, key=lambda v: -(v.type.nbytes or 0)))
    if inputs == fn.inputs and outputs == fn.outputs:
        return program
    return _replace_main(program, dataclasses.replace(fn, inputs=inputs, outputs=outputs))


def substitute(op: Operation, replace: Mapping[int, Value]) -> Operation:
    """A new op like ``op`` reading ``replace[id(v)]`` for each input ``v`` found there.

    Its outputs are new Values (same names and types) produced by the new op, so the
    program that holds ``op`` is left as it was. A replacement must have the type of
    the value it replaces: the op's inference and its consumers depend on it.
    """

    def new(v: Value) -> Value:
        w = replace.get(id(v), v)
        if w.type != v.type:
            raise MilTypeError(
                f"cannot substitute {w.name or 'a literal'!r} ({w.type}) for {v.name!r} ({v.type})",
                op=op.op_type,
                line=op.line,
            )
        return w

    inputs = {
        k: tuple(map(new, v)) if isinstance(v, tuple) else new(v) for k, v in op.inputs.items()
    }
    outputs = tuple(Value(v.name, v.type, None, v.const, v.blob) for v in op.outputs)
    rebuilt = Operation(op.opdef, inputs, outputs, dict(op.attrs), op.line)
    for v in outputs:
        v.producer = rebuilt
    return rebuilt


def rebuild_ops(ops: tuple[Operation, ...], replace: dict[int, Value]) -> tuple[Operation, ...]:
    """``ops`` with every op that reads a replaced value rebuilt (its outputs join ``replace``)."""
    result = []
    for op in ops:
        new = _rebuilt(op, replace)
        replace.update((id(old), out) for old, out in zip(op.outputs, new.outputs) if new is not op)
        result.append(new)
    return tuple(result)


def _rebuilt(op: Operation, replace: Mapping[int, Value]) -> Operation:
    """``op`` itself if it reads no replaced value, else its substitute."""
    return substitute(op, replace) if any(id(v) in replace for v in op.input_values()) else op


def rename_io(program: Program, inputs: Mapping[str, str], outputs: Mapping[str, str]) -> Program:
    """``program`` with ``main``'s inputs and outputs renamed (old -> new), ops rebuilt.

    An output that is also an input gets an ``identity`` op, so each interface name names
    one value.
    """
    fn = program.main
    new_inputs = tuple(Value(inputs.get(v.name, v.name), v.type) for v in fn.inputs)
    replace: dict[int, Value] = {id(old): new for old, new in zip(fn.inputs, new_inputs)}
    input_ids = set(replace)
    renamed = {id(v): outputs[v.name] for v in fn.outputs if id(v) not in input_ids}
    ops = []
    for op in fn.ops:
        if any(id(v) in renamed for v in op.outputs):
            new = substitute(op, replace)
            for old, out in zip(op.outputs, new.outputs):
                out.name = renamed.get(id(old), out.name)  # a fresh Value: nothing else holds it
        else:
            new = _rebuilt(op, replace)
        replace.update((id(old), out) for old, out in zip(op.outputs, new.outputs) if new is not op)
        ops.append(new)
    returned = []
    for old in fn.outputs:
        v = replace.get(id(old), old)
        if id(old) in input_ids:
            v = _identity(v, outputs.get(old.name, old.name), fn.opset)
            ops.append(v.producer)
        returned.append(v)
    main = Function(fn.name, new_inputs, tuple(ops), tuple(returned), fn.opset)
    return _replace_main(program, main)


def _identity(v: Value, name: str, opset: str) -> Value:
    out = Value(name, v.type)
    out.producer = Operation(registry.get("identity", opset), {"x": v}, (out,), {"name": name})
    return out


# -- constant folding ----------------------------------------------------------------------------
FOLD_MAX_BYTES = 1 << 16  # a folded result made from small literals stays under this size
FOLD_INLINE_ELEMENTS = 64  # a larger folded result goes to a weight file, not into the text


def fold_constants(program: Program, *, max_bytes: int = FOLD_MAX_BYTES) -> Program:
    """Replace each op whose inputs are all constants by the constants its reference computes.

    The values are those the reference backend would compute at run time (inputs as
    stored, fp16 held in fp32, each result rounded to its declared dtype), so the folded
    program gives the same outputs. Skipped: constexpr ops (the device decompresses them
    and their weights stay compressed), ops without a reference, results larger than both
    ``max_bytes`` and the constants they are made from (a rearranged weight may be folded,
    a ``tile`` of a scalar into megabytes may not), and results that the dtype cannot hold
    (an fp16 overflow stays an op). A result made from a weight, or of more than
    ``FOLD_INLINE_ELEMENTS`` elements, goes to a weight file of its own; a smaller one is
    written inline. Consts that only folded ops read are dropped.
    """
    functions = {name: _fold_function(fn, max_bytes) for name, fn in program.functions.items()}
    if all(functions[name] is fn for name, fn in program.functions.items()):
        return program
    for fn in functions.values():
        check_function(fn)
    return Program(functions, version=program.version, build_info=program.build_info)


def _fold_function(fn: Function, max_bytes: int) -> Function:
    replace: dict[int, Value] = {}
    ops: list[Operation] = []
    folded: list[Operation] = []
    files = {v.blob.path for op in fn.ops for v in op.input_values() if v.blob is not None}
    returned = {id(v) for v in fn.outputs}
    for original in fn.ops:
        op = _rebuilt(original, replace)
        # an op writing a program output stays: each output surface needs an op to fill it
        writes_output = any(id(v) in returned for v in original.outputs)
        consts = None if writes_output else _fold(op, max_bytes)
        if consts is None:
            ops.append(op)
            news = op.outputs
        else:
            folded.append(op)
            news = tuple(_const_value(v, array, fn.opset, files, op) for v, array in consts)
            ops.extend(v.producer for v in news if v.producer is not None)
        replace.update((id(old), new) for old, new in zip(original.outputs, news) if old is not new)
    if not folded:
        return fn
    outputs = tuple(replace.get(id(v), v) for v in fn.outputs)
    return Function(fn.name, fn.inputs, _live(ops, folded, outputs), outputs, fn.opset)


def _fold(op: Operation, max_bytes: int) -> list[tuple[Value, np.ndarray]] | None:
    """Each output of ``op`` with its computed value, or None if the op is not folded."""
    inputs = list(op.input_values())
    if op.opdef.traits & COMPILE_TIME or op.opdef.reference is None:
        return None  # constexpr ops stay compressed; const ops are folded already
    if any(v.const is None for v in inputs) or any(not v.type.is_static for v in op.outputs):
        return None
    if any(isinstance(v.const, Placeholder) for v in inputs):
        return None  # zeros standing in for unread weights: folding them would hide that
    size = sum(v.type.nbytes or 0 for v in op.outputs)
    if size > max(max_bytes, sum(v.type.nbytes or 0 for v in inputs)):
        return None
    try:
        with np.errstate(all="ignore"):  # inf and NaN are results, as in the reference backend
            result = op.opdef.reference(**_reference_args(op))
    except Exception:  # the same failure at run time is the backend's to report, with its op
        return None
    results = result if len(op.outputs) > 1 else (result,)
    stored = [_stored(op, v, r) for v, r in zip(op.outputs, results)]
    if any(a is None for a in stored):
        return None
    return list(zip(op.outputs, stored))  # type: ignore[arg-type]


def _reference_args(op: Operation) -> dict[str, Any]:
    """The keyword arguments of ``op``'s reference, as the reference backend passes them."""
    return {
        name: tuple(_held(x) for x in v) if isinstance(v, tuple) else _held(v)
        for name, v in op.arguments()
    }


def _held(v: Value) -> Any:
    """A constant as a reference receives it: fp16 held in float32, strings as str."""
    if isinstance(v.const, str):
        return v.const
    array = np.asarray(v.const)
    return array.astype(np.float32) if array.dtype == np.float16 else array


def _stored(op: Operation, out: Value, result: Any) -> np.ndarray | None:
    """``result`` stored in ``out``'s dtype, or None when the dtype cannot hold it exactly."""
    if out.type.dtype is DType.string:
        return None
    computed = np.asarray(result)
    if computed.shape != out.type.shape:
        raise MilTypeError(
            f"reference gives shape {list(computed.shape)}, type inference {list(out.type.shape)}",
            op=op.op_type,
            line=op.line,
        )
    with np.errstate(all="ignore"):
        array = computed.astype(out.type.dtype.numpy)
    if out.type.dtype.is_float:
        overflow = np.isfinite(computed) & ~np.isfinite(array)
        return None if overflow.any() else array
    return array if np.array_equal(array, computed) else None


def _const_value(
    out: Value, array: np.ndarray, opset: str, files: set[str], source: Operation
) -> Value:
    """A const op's output holding ``array`` as ``out``; in a weight file if large or from one."""
    blob = None
    if array.size > FOLD_INLINE_ELEMENTS or any(_stored_in_file(v) for v in source.input_values()):
        blob = BlobRef(_fresh_weight_file(out.name, files), 64)
    literal = Value("", out.type, None, array, blob)
    value = Value(out.name, out.type, None, array)
    const = registry.get("const", opset)
    value.producer = Operation(const, {"val": literal}, (value,), {"name": out.name}, source.line)
    return value


def _stored_in_file(v: Value) -> bool:
    """The value is a weight: a BLOBFILE literal, or the output of a const op holding one."""
    producer = v.producer
    return v.blob is not None or (
        producer is not None and any(x.blob is not None for x in producer.input_values())
    )


def _fresh_weight_file(stem: str, files: set[str]) -> str:
    path, i = f"{WEIGHTS_PREFIX}{stem}.bin", 1
    while path in files:
        path, i = f"{WEIGHTS_PREFIX}{stem}_{i}.bin", i + 1
    files.add(path)
    return path


def _live(
    ops: list[Operation], folded: list[Operation], outputs: tuple[Value, ...]
) -> tuple[Operation, ...]:
    """``ops`` without the const ops that only folded ops read (nothing reads them now)."""
    freed = {id(v) for op in folded for v in op.input_values()}
    used = {id(v) for op in ops for v in op.input_values()} | {id(v) for v in outputs}
    return tuple(
        op
        for op in ops
        if not (
            op.opdef.traits & COMPILE_TIME
            and all(id(v) in freed and id(v) not in used for v in op.outputs)
        )
    )


# -- internals -----------------------------------------------------------------------------------
def _replace_main(program: Program, main: Function) -> Program:
    check_function(main)
    return Program(
        {**program.functions, main.name: main},
        version=program.version,
        build_info=program.build_info,
    )


def _common_dtype(inputs: tuple[Value, ...]) -> DType:
    dtypes = {v.type.dtype for v in inputs}
    if len(dtypes) != 1:
        found = ", ".join(f"{v.name}: {v.type.dtype}" for v in inputs)
        raise MilTypeError(f"cannot pack inputs of different dtypes into one tensor ({found})")
    return dtypes.pop()


def _static_shape(v: Value) -> tuple[int, ...]:
    if not v.type.is_static:
        raise MilTypeError(f"cannot pack input {v.name!r} of dynamic shape {v.type}")
    return tuple(int(d) for d in v.type.shape)


def _layout(
    shapes: list[tuple[int, ...]], max_dim: int
) -> tuple[list[tuple[int, ...]], int] | None:
    """Each input's block in the packed tensor and the axis they stack along (module docstring)."""
    lead = shapes[0][:-1]
    if all(len(s) >= 1 and s[:-1] == lead for s in shapes):
        if sum(s[-1] for s in shapes) <= max_dim and all(d <= max_dim for d in lead):
            return shapes, -1
    sizes = [math.prod(s) for s in shapes]
    if sum(sizes) <= max_dim:
        return [(1, 1, 1, n) for n in sizes], -1
    width = _row_width(sizes, max_dim)
    if width is None:
        return None
    return [(1, n // width, 1, width) for n in sizes], 1


def _row_width(sizes: list[int], max_dim: int) -> int | None:
    """The widest row that divides every size and keeps rows and width within ``max_dim``."""
    common = math.gcd(*sizes)
    total = sum(sizes)
    for width in range(min(common, max_dim), 0, -1):
        if common % width == 0:
            return width if total // width <= max_dim else None
    return None


def _all_names(program: Program) -> set[str]:
    names: set[str] = set()
    for fn in program.functions.values():
        names.update(v.name for v in fn.inputs)
        for op in fn.ops:
            names.update(v.name for v in op.outputs)
    return names


def _fresh_prefix(base: str, names: set[str]) -> str:
    """A name no existing name starts with, so every name derived from it is new."""
    prefix = base
    while any(n.startswith(prefix) for n in names):
        prefix += "_"
    return prefix


def _rewrite(program: Program, packing: InputPacking) -> Program:
    """The program with ``main``'s inputs replaced by slices of the packed input."""
    fn = program.main
    unpacked = _unpack_ops(packing, fn.opset)
    replace = {id(old): unpacked.outputs[i] for i, old in enumerate(fn.inputs)}
    ops = rebuild_ops(fn.ops, replace)
    outputs = tuple(replace.get(id(v), v) for v in fn.outputs)
    main = Function(fn.name, unpacked.inputs, unpacked.ops + ops, outputs, fn.opset)
    return _replace_main(program, main)


def _unpack_ops(packing: InputPacking, opset: str) -> Function:
    """A function from the packed input to the original inputs, each under its original name."""
    b = Builder(opset=opset)
    packed = b.input(packing.name, packing.shape, packing.dtype)
    rank = len(packing.shape)
    for i, s in enumerate(packing.segments):
        begin = [0] * rank
        begin[s.axis] = s.offset
        part = b.slice_by_size(
            name=f"{packing.name}_{i}", x=packed, begin=begin, size=list(s.packed_shape)
        )
        if s.packed_shape != s.shape:
            # an int32 array, not a list: a rank-0 input's shape is empty and has no dtype
            shape = np.array(s.shape, dtype=np.int32)
            part = b.reshape(name=f"{packing.name}_{i}_r", x=part, shape=shape)
        b.output(part, s.name)
    return b.build().main
