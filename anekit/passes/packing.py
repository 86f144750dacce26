"""Input packing for the device pipeline: several inputs become one packed tensor.

Multi-input requests are unreliable on the ANE (error 0x1d in one report, silent zeros
unless surface sizes ascend in another; one packed input always works, ANE_NOTES
section 2.4), so :func:`pack_inputs` rewrites a program with several inputs into one
with a single input and returns the :class:`InputPacking` that moves arrays between the
two forms on the host.

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

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.builder import Builder
from anekit.mil.program import Function, Program
from anekit.mil.rewrite import rebuild_ops, replace_main
from anekit.mil.types import DType
from anekit.mil.values import Value

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


# -- the layout and the rewrite -----------------------------------------------------------------------------------
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
    return replace_main(program, main)


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
