"""Dynamic-weight packing: many 2-D arrays in one kernel input, and one output split in many.

A kernel compiled once must take its weights as inputs (ANE_NOTES sections 2.4 and 5),
and a single input tensor is the layout every ANE report agrees works. A
:class:`Packing` places several 2-D arrays side by side on the last axis of one
``[1, C, 1, W]`` fp16 input:

* a field with ``C`` rows (activations ``[D, tokens]``, weights ``[D, n]``) occupies
  ``cols`` columns as it is;
* any other field is *folded*: its row-major elements fill ``rows * cols / C``
  columns of the C channels, and the kernel reshapes the slice back to
  ``[1, rows, 1, cols]``. This carries taps with other channel counts (``[F, tokens]``)
  into a kernel whose weights fix C = D.

A :class:`Layout` describes the single output: results of equal width concatenated
on the channel axis.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from anekit.mil.builder import Builder
from anekit.mil.program import Value


@dataclass(frozen=True)
class Field:
    """One array in a packed input: its shape and the columns it occupies."""

    name: str
    rows: int
    cols: int
    offset: int
    width: int
    folded: bool


class Packing:
    """The layout of one kernel input ``[1, channels, 1, width]`` holding several 2-D arrays."""

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
            if folded and (rows * cols) % channels:
                raise ValueError(
                    f"packing field {name!r} [{rows}, {cols}] cannot fold into {channels} "
                    f"channels: {rows * cols} elements is not a multiple of {channels}"
                )
            width = rows * cols // channels
            self.fields[name] = Field(name, rows, cols, offset, width, folded)
            offset += width
        self.width = offset

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The kernel input's shape."""
        return (1, self.channels, 1, self.width)

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
        # fp32 values beyond fp16 range become inf, as on the ANE; the loss scaler detects them
        with np.errstate(over="ignore"):
            buffer[0, :, 0, f.offset : f.offset + f.width] = array.reshape(self.channels, f.width)

    def pack(self, buffer: np.ndarray | None = None, **arrays: np.ndarray) -> np.ndarray:
        """Write every given field into ``buffer`` (a new zeroed one if None) and return it."""
        out = self.empty() if buffer is None else buffer
        for name, array in arrays.items():
            self.write(out, name, array)
        return out

    def read(self, buffer: np.ndarray, name: str) -> np.ndarray:
        """The ``[rows, cols]`` array a field holds (the inverse of ``write``)."""
        f = self._field(name)
        block = buffer[0, :, 0, f.offset : f.offset + f.width]
        return block.reshape(f.rows, f.cols) if f.folded else block

    def unpack(self, b: Builder, x: Value, names: Sequence[str] | None = None) -> dict[str, Value]:
        """Slice fields out of the input ``x`` inside a program: each becomes ``[1, rows, 1, cols]``."""
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
        """A table of the fields: name, shape, columns, folded or not."""
        lines = [f"input [1, {self.channels}, 1, {self.width}] fp16:"]
        for f in self.fields.values():
            how = f"folded {f.rows}x{f.cols} row-major" if f.folded else f"[{f.rows}, {f.cols}]"
            lines.append(f"  {f.name:<6} columns {f.offset}:{f.offset + f.width}  {how}")
        return "\n".join(lines)

    def _field(self, name: str) -> Field:
        try:
            return self.fields[name]
        except KeyError:
            raise KeyError(f"no packing field {name!r}; fields: {list(self.fields)}") from None

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
        width = sum(f.width for f in fields)
        label = "_".join(names)
        part = b.slice_by_size(
            x=x, begin=[0, 0, 0, first.offset], size=[1, self.channels, 1, width], name=label
        )
        if shape is None:
            if not first.folded:
                return part
            shape = [1, first.rows, 1, first.cols]
        return b.reshape(x=part, shape=list(shape), name=f"{label}_unfold")


class Layout:
    """The layout of one kernel output ``[1, sum(channels), 1, width]``: results on the channel axis."""

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
        return (1, self.channels, 1, self.width)

    def concat(self, b: Builder, values: dict[str, Value], name: str = "y") -> Value:
        """Concatenate the named results, in layout order, into the kernel's output."""
        missing = [n for n in self.fields if n not in values]
        if missing or len(values) != len(self.fields):
            raise ValueError(f"output needs fields {list(self.fields)}, found {list(values)}")
        for n, (lo, hi) in self.fields.items():
            expected = (1, hi - lo, 1, self.width)
            if tuple(values[n].shape) != expected:
                raise ValueError(
                    f"output field {n!r}: expected shape {list(expected)}, "
                    f"found {list(values[n].shape)}"
                )
        parts = tuple(values[n] for n in self.fields)
        return b.concat(values=parts, axis=1, interleave=False, name=name)

    def channels_of(self, name: str) -> int:
        """Channels of one output field."""
        lo, hi = self.fields[name]
        return hi - lo

    def split(self, output: np.ndarray) -> dict[str, np.ndarray]:
        """Views ``[channels_i, width]`` of each field of a kernel output."""
        if output.shape != self.shape:
            raise ValueError(f"expected output shape {list(self.shape)}, found {list(output.shape)}")
        plane = output[0, :, 0, :]
        return {n: plane[lo:hi] for n, (lo, hi) in self.fields.items()}

    def rows(self, output: np.ndarray, first: str, last: str) -> np.ndarray:
        """A view of adjacent fields ``first`` through ``last`` as one ``[channels, width]`` block."""
        lo, hi = self.fields[first][0], self.fields[last][1]
        if hi < lo:
            raise ValueError(f"field {first!r} comes after {last!r}")
        return output[0, lo:hi, 0, :]

    def describe(self) -> str:
        """A table of the output's fields and their channel ranges."""
        lines = [f"output [1, {self.channels}, 1, {self.width}] fp16:"]
        lines += [f"  {n:<6} channels {lo}:{hi}" for n, (lo, hi) in self.fields.items()]
        return "\n".join(lines)
