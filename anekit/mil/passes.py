"""Program rewrites for the ANE's input rules: pack many inputs into one; order I/O by size.

Multi-input requests are unreliable on the ANE (error 0x1d in one report, silent
zeros unless surface sizes ascend in another); one packed input always works
(ANE_NOTES section 2.4). :func:`pack_inputs` rewrites a program with several inputs
into one with a single input, and returns the :class:`Packing` that moves arrays
between the two forms on the host.

The packing rule:

- if every input has the same rank (at least 1) and the same dims on all axes
  but the last, they are concatenated along the last axis as they are, the
  layout of the dynamic-weight recipe (``[1, C, 1, S + O]``, ANE_NOTES section 5);
  inside, each is ``slice_by_size``'d back out;
- otherwise each input is flattened to ``[1, 1, 1, n]`` and those are
  concatenated; inside, each is sliced out and ``reshape``'d back.

Either way, each input occupies ``packed[..., offset:offset + width]``, so the
host can fill it through a view without copying. All inputs must share one dtype.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.builder import Builder
from anekit.mil.parser import parse
from anekit.mil.program import Function, Program, Value
from anekit.mil.types import DType
from anekit.mil.verify import check_function


@dataclass(frozen=True)
class Segment:
    """Where one original input lives in the packed tensor."""

    name: str
    shape: tuple[int, ...]  # the original input's shape
    packed_shape: tuple[int, ...]  # its shape inside the packed tensor
    offset: int  # along the packed tensor's last axis

    @property
    def width(self) -> int:
        return self.packed_shape[-1]


@dataclass(frozen=True)
class Packing:
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
            view = packed[..., s.offset : s.offset + s.width]
            if s.packed_shape != s.shape:
                # reshape, not ``view.shape = ...`` (deprecated in NumPy 2.5); flat segments are
                # contiguous, so it never copies: a copy would silently detach the view
                view = view.reshape(s.shape)
                if not np.may_share_memory(view, packed):
                    raise ValueError(f"input {s.name!r} cannot be a view of the packed array")
            result[s.name] = view
        return result

    def pack(self, inputs: Mapping[str, Any]) -> np.ndarray:
        """A new packed array holding ``inputs`` (name -> array of the original shape)."""
        names = {s.name for s in self.segments}
        if set(inputs) != names:
            raise ValueError(
                f"pack() needs exactly the inputs {sorted(names)}, found {sorted(inputs)}"
            )
        packed = np.empty(self.shape, dtype=self.dtype.numpy)
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


def pack_inputs(program: Program, name: str = "packed") -> tuple[Program, Packing | None]:
    """Rewrite ``main`` to take one packed input; returns the program unchanged and None if it has < 2."""
    inputs = program.main.inputs
    if len(inputs) < 2:
        return program, None
    dtype = _common_dtype(inputs)
    shapes = [_static_shape(v) for v in inputs]
    packed_shapes = _packed_shapes(shapes)
    offsets = np.cumsum([0] + [s[-1] for s in packed_shapes]).tolist()
    packed_shape = packed_shapes[0][:-1] + (offsets[-1],)
    names = _all_names(program)
    prefix = _fresh_prefix(name, names)
    segments = tuple(
        Segment(v.name, shape, pshape, offset)
        for v, shape, pshape, offset in zip(inputs, shapes, packed_shapes, offsets)
    )
    packing = Packing(prefix, packed_shape, dtype, segments)
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
    main = dataclasses.replace(fn, inputs=inputs, outputs=outputs)
    return Program(
        {**program.functions, fn.name: main}, version=program.version, build_info=program.build_info
    )


# -- internals -----------------------------------------------------------------------------------
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


def _packed_shapes(shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Each input's shape inside the packed tensor (see the module docstring)."""
    lead = shapes[0][:-1]
    if all(len(s) >= 1 and s[:-1] == lead for s in shapes):
        return shapes
    return [(1, 1, 1, int(np.prod(s, dtype=np.int64))) for s in shapes]


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


def _rewrite(program: Program, packing: Packing) -> Program:
    """The program with ``main``'s inputs replaced by slices of the packed input."""
    fn = program.main
    unpacked = _unpack_ops(packing, fn.opset)
    # Parse a private copy so rewiring its ops cannot touch the caller's program.
    copy = parse(program.to_text(), weights=program.weight_files()).main
    replace = {id(old): unpacked.outputs[i] for i, old in enumerate(copy.inputs)}
    for op in copy.ops:
        op.inputs = {k: _replaced(v, replace) for k, v in op.inputs.items()}
    main = Function(
        fn.name,
        unpacked.inputs,
        unpacked.ops + copy.ops,
        tuple(_replaced(v, replace) for v in copy.outputs),
        fn.opset,
    )
    check_function(main)
    return Program(
        {**program.functions, fn.name: main}, version=program.version, build_info=program.build_info
    )


def _unpack_ops(packing: Packing, opset: str) -> Function:
    """A function from the packed input to the original inputs, each under its original name."""
    b = Builder(opset=opset)
    packed = b.input(packing.name, packing.shape, packing.dtype)
    rank = len(packing.shape)
    for i, s in enumerate(packing.segments):
        part = b.slice_by_size(
            name=f"{packing.name}_{i}",
            x=packed,
            begin=[0] * (rank - 1) + [s.offset],
            size=list(s.packed_shape),
        )
        if s.packed_shape != s.shape:
            # an int32 array, not a list: a rank-0 input's shape is empty and has no dtype
            shape = np.array(s.shape, dtype=np.int32)
            part = b.reshape(name=f"{packing.name}_{i}_r", x=part, shape=shape)
        b.output(part, s.name)
    return b.build().main


def _replaced(v: Any, replace: dict[int, Value]) -> Any:
    if isinstance(v, tuple):
        return tuple(replace.get(id(x), x) for x in v)
    return replace.get(id(v), v)
