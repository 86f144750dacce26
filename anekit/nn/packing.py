"""Dynamic-weight packing: many 2-D arrays in one kernel input, and one output split in many.

A kernel compiled once must take its weights as inputs (ANE_NOTES sections 2.4 and 5),
and a single input tensor is the layout every ANE report agrees works. A
:class:`Packing` places several 2-D arrays side by side along the last axis of one
fp16 input ``[1, 1, C, W]``. That is the recipe's ``[1, C, 1, SEQ + OC]`` in the same
memory order, with the channel axis moved to position 2 so that every slice is
already a ``matmul`` operand (``[1, 1, M, K]``, a form the ANE runs) and no reshape
sits between a weight and its matmul.

* a field with ``C`` rows (activations ``[D, tokens]``, weights ``[D, n]``) occupies
  ``cols`` columns as it is;
* any other field is *folded*: its row-major elements fill a block of ``c <= C``
  rows (the largest divisor of ``rows * cols`` not above C; the rest of those
  columns is padding) and ``rows * cols / c`` columns, and the kernel reshapes the
  slice back. This carries taps with other channel counts (``[F, tokens]``) into a
  kernel whose weights fix C = D.

A :class:`Layout` describes the single output ``[1, 1, sum(C_i), W]``: results of
equal width stacked on the channel axis.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from anekit import fp16
from anekit.mil.builder import Builder
from anekit.mil.program import Value

CHANNEL_AXIS = 2  # activations are [1, 1, channels, tokens]


@dataclass(frozen=True)
class Field:
    """One array in a packed input: its shape and where it sits."""

    name: str
    rows: int
    cols: int
    offset: int  # first column
    width: int  # columns occupied
    block: int  # channels occupied: C, or fewer for a folded field
    folded: bool


class Packing:
    """The layout of one kernel input ``[1, 1, channels, width]`` holding several 2-D arrays."""

    def __init__(self, channels: int, fields: Iterable[tuple[str, int, int]]) -> None:
        self.channels = channels
        self.fields: dict[str, Field] = {}
        offset = 0
        for name, rows, cols in fields:
            if name in self.fields:
                raise ValueError(f"packing field {name!r} is declared twice")
            if rows < 1 or cols < 1:
                raise ValueError(f"packing field {name!r}: shape [{rows}, {cols}] is empty")
            folded = rows != channels
            block = _largest_divisor(rows * cols, channels) if folded else channels
            width = rows * cols // block
            self.fields[name] = Field(name, rows, cols, offset, width, block, folded)
            offset += width
        self.width = offset

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The kernel input's shape."""
        return (1, 1, self.channels, self.width)

    def empty(self) -> np.ndarray:
        """A zeroed fp16 buffer of the input's shape."""
        return np.zeros(self.shape, np.float16)

    def write(self, buffer: np.ndarray, name: str, array: np.ndarray) -> None:
        """Store ``array`` (shape ``[rows, cols]``) in its field of ``buffer``, converting to fp16."""
        f = self._field(name)
        if array.shape != (f.rows, f.cols):
            raise ValueError(
                f"packing field {name!r}: expected shape [{f.rows}, {f.cols}], "
                f"found {list(array.shape)}"
            )
        # fp32 values beyond the fp16 range become inf, as on the ANE; the loss scaler sees them
        fp16.cast_into(self._view(buffer, f), array.reshape(f.block, f.width))

    def pack(self, buffer: np.ndarray | None = None, **arrays: np.ndarray) -> np.ndarray:
        """Write every given field into ``buffer`` (a new zeroed one if None) and return it."""
        out = self.empty() if buffer is None else buffer
        for name, array in arrays.items():
            self.write(out, name, array)
        return out

    def read(self, buffer: np.ndarray, name: str) -> np.ndarray:
        """The ``[rows, cols]`` array a field holds (the inverse of ``write``)."""
        f = self._field(name)
        return self._view(buffer, f).reshape(f.rows, f.cols)

    def unpack(self, b: Builder, x: Value, names: Sequence[str] | None = None) -> dict[str, Value]:
        """Slice fields out of the input ``x`` inside a program: each becomes ``[1, 1, rows, cols]``."""
        return {name: self._slice(b, x, [name]) for name in names or self.fields}

    def unpack_as(self, b: Builder, x: Value, name: str, shape: Sequence[int]) -> Value:
        """Slice one field and reshape it straight to ``shape`` (its elements in row-major order)."""
        f = self._field(name)
        if math.prod(shape) != f.rows * f.cols:
            raise ValueError(
                f"packing field {name!r} has {f.rows * f.cols} elements; shape {list(shape)} "
                f"has {math.prod(shape)}"
            )
        return self._slice(b, x, [name], shape)

    def span(self, b: Builder, x: Value, names: Sequence[str]) -> Value:
        """One slice covering adjacent unfolded fields, e.g. ``wq, wk, wv`` as one ``[D, q+2kv]`` matrix."""
        return self._slice(b, x, names)

    def describe(self) -> str:
        """A table of the fields: name, columns, shape, folded or not."""
        lines = [f"input [1, 1, {self.channels}, {self.width}] fp16:"]
        for f in self.fields.values():
            how = f"[{f.rows}, {f.cols}]"
            if f.folded:
                how += f" folded row-major into channels 0:{f.block}"
            lines.append(f"  {f.name:<7} columns {f.offset}:{f.offset + f.width}  {how}")
        return "\n".join(lines)

    def _field(self, name: str) -> Field:
        try:
            return self.fields[name]
        except KeyError:
            raise KeyError(f"no packing field {name!r}; fields: {list(self.fields)}") from None

    @staticmethod
    def _view(buffer: np.ndarray, f: Field) -> np.ndarray:
        return buffer[0, 0, : f.block, f.offset : f.offset + f.width]

    def _slice(
        self, b: Builder, x: Value, names: Sequence[str], shape: Sequence[int] | None = None
    ) -> Value:
        fields = [self._field(n) for n in names]
        for a, c in zip(fields, fields[1:]):
            if c.offset != a.offset + a.width:
                raise ValueError(f"fields {a.name!r} and {c.name!r} are not adjacent")
        if len(fields) > 1 and any(f.folded for f in fields):
            raise ValueError(f"a span of fields {list(names)} cannot include folded fields")
        first = fields[0]
        label = "_".join(names)
        part = b.slice_by_size(
            x=x,
            begin=[0, 0, 0, first.offset],
            size=[1, 1, first.block, sum(f.width for f in fields)],
            name=label,
        )
        if shape is None:
            if not first.folded:
                return part
            shape = [1, 1, first.rows, first.cols]
        return b.reshape(x=part, shape=list(shape), name=f"{label}_unfold")


def _largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit``."""
    return next(d for d in range(min(n, limit), 0, -1) if n % d == 0)


class Layout:
    """The layout of one kernel output ``[1, 1, sum(channels), width]``: results stacked on channels."""

    def __init__(self, width: int, fields: Iterable[tuple[str, int]]) -> None:
        self.width = width
        self.fields: dict[str, tuple[int, int]] = {}
        start = 0
        for name, channels in fields:
            if name in self.fields:
                raise ValueError(f"output field {name!r} is declared twice")
            self.fields[name] = (start, start + channels)
            start += channels
        self.channels = start

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (1, 1, self.channels, self.width)

    def channels_of(self, name: str) -> int:
        """Channels of one output field."""
        lo, hi = self.fields[name]
        return hi - lo

    def concat(self, b: Builder, values: dict[str, Value], name: str) -> Value:
        """Stack the named results, in layout order, into the kernel's output."""
        if list(values) != list(self.fields):
            raise ValueError(
                f"output needs fields {list(self.fields)} in order, found {list(values)}"
            )
        for n, v in values.items():
            expected = (1, 1, self.channels_of(n), self.width)
            if tuple(v.shape) != expected:
                raise ValueError(
                    f"output field {n!r}: expected shape {list(expected)}, found {list(v.shape)}"
                )
        return b.concat(
            values=tuple(values.values()), axis=CHANNEL_AXIS, interleave=False, name=name
        )

    def split(self, output: np.ndarray) -> dict[str, np.ndarray]:
        """Views ``[channels_i, width]`` of each field of a kernel output."""
        if output.shape != self.shape:
            raise ValueError(
                f"expected output shape {list(self.shape)}, found {list(output.shape)}"
            )
        plane = output[0, 0]
        return {n: plane[lo:hi] for n, (lo, hi) in self.fields.items()}

    def describe(self) -> str:
        """A table of the output's fields and their channel ranges."""
        lines = [f"output [1, 1, {self.channels}, {self.width}] fp16:"]
        lines += [f"  {n:<7} channels {lo}:{hi}" for n, (lo, hi) in self.fields.items()]
        return "\n".join(lines)
