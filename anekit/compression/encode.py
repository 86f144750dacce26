"""Weight encoders: a dense weight to the operands of the constexpr op that decodes it.

Every encoder returns an :class:`Encoded`: the constexpr op and its operands, chosen so
that the op's reference semantics (``anekit.mil.ops.constexpr``), which the reference
backend runs and the ANE decodes, give the values the encoder meant:

- ``affine_int8``: symmetric int8, ``q = clip(rint(w / s), -127, 127)`` with ``s`` the
  largest magnitude of each output channel (or of the tensor) over 127, rounded to the
  weight's dtype first so that ``q * s`` is what the device multiplies;
  ``constexpr_affine_dequantize`` (iOS16). Per block: one ``s`` per block of
  ``block_size`` elements along the axis next to the output axis,
  ``constexpr_blockwise_shift_scale`` (iOS18).
- ``palette``: ``2^bits`` values per group of ``group_size`` output channels found by
  k-means (``anekit.compression.kmeans``), rounded to the weight's dtype, each element the
  index of its nearest value; ``constexpr_lut_to_dense`` with indices of the weight's
  rank (iOS18), or one table for the whole tensor with packed indices (iOS16).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anekit.compression.kmeans import kmeans_1d, nearest
from anekit.errors import UsageError
from anekit.mil.blob import pack_bits
from anekit.mil.types import DType, dtype_of

INT8_LEVELS = 127  # symmetric: -127..127, so the scale is the same for both signs
_INDICES = {1: DType.uint1, 2: DType.uint2, 3: DType.uint3, 4: DType.uint4, 6: DType.uint6}
_INDICES[8] = DType.uint8


@dataclass(frozen=True)
class Encoded:
    """A weight's compressed form.

    Attributes:
        op_type: the constexpr op that decodes it.
        operands: parameter -> (array, MIL dtype) for every operand of that op.
        granularity: what one scale or table covers ("per_channel", "per_block",
            "per_tensor", "per_grouped_channel").
        opset: the first opset that has this form.
    """

    op_type: str
    operands: dict[str, tuple[np.ndarray, DType]]
    granularity: str
    opset: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def stored_bytes(self) -> int:
        """Bytes of the operands as stored (sub-byte indices packed)."""
        return sum(-(-a.size * t.bits // 8) for a, t in self.operands.values())


def _scales(magnitude: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """max|w| / 127 in the weight's dtype, never 0 (an all-zero channel gets scale 1)."""
    scale = (magnitude / INT8_LEVELS).astype(dtype)
    tiny = np.finfo(dtype).smallest_subnormal
    return np.where(magnitude > 0, np.maximum(scale, tiny), np.ones((), dtype)).astype(dtype)


def _quantize(w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    q = np.rint(w.astype(np.float32) / scale.astype(np.float32))
    return np.clip(q, -INT8_LEVELS, INT8_LEVELS).astype(np.int8)


def block_axis(shape: tuple[int, ...], axis: int) -> int:
    """The axis per-block scales split: the nearest axis to ``axis`` longer than 1, after first."""
    order = [*range(axis + 1, len(shape)), *range(axis - 1, -1, -1)]
    for a in order:
        if shape[a] > 1:
            return a
    raise UsageError(f"a weight of shape {list(shape)} has no axis to split into blocks")


def affine_int8(w: np.ndarray, axis: int, granularity: str, block_size: int = 32) -> Encoded:
    """Symmetric int8 with one scale per output channel, per block, or per tensor."""
    dtype = w.dtype
    wt = dtype_of(dtype)
    magnitude = np.abs(w.astype(np.float32))
    if granularity == "per_block":
        along = block_axis(w.shape, axis)
        size = w.shape[along]
        if size % block_size:
            raise UsageError(
                f"per_block int8: axis {along} of the weight {list(w.shape)} ({size}) is not a "
                f"multiple of block_size {block_size}"
            )
        shape = [1] * w.ndim
        shape[axis] = w.shape[axis]
        shape[along] = size // block_size
        blocks = list(w.shape)
        blocks[along : along + 1] = [size // block_size, block_size]
        reduce = tuple(i for i in range(len(blocks)) if i not in (axis, along))
        scale = _scales(magnitude.reshape(blocks).max(axis=reduce).reshape(shape), dtype)
        q = _quantize(w, np.repeat(scale, block_size, axis=along))
        operands = {"data": (q, DType.int8), "scale": (scale, wt)}
        return Encoded("constexpr_blockwise_shift_scale", operands, granularity, "ios18")
    if granularity == "per_channel":
        others = tuple(i for i in range(w.ndim) if i != axis)
        scale = _scales(magnitude.max(axis=others), dtype)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = _quantize(w, scale.reshape(shape))
    elif granularity == "per_tensor":
        scale = _scales(magnitude.max(keepdims=False), dtype)
        q = _quantize(w, scale)
    else:
        raise UsageError(
            f"int8 granularity {granularity!r} is not per_channel, per_block or per_tensor"
        )
    operands = {
        "quantized_data": (q, DType.int8),
        "zero_point": (np.zeros((), np.int8), DType.int8),
        "scale": (np.asarray(scale, dtype=dtype), wt),
        "axis": (np.array(axis, dtype=np.int32), DType.int32),
    }
    return Encoded("constexpr_affine_dequantize", operands, granularity, "ios16")


def group_of(channels: int, group_size: int) -> int:
    """The largest group size at most ``group_size`` that divides ``channels``."""
    return max(g for g in range(1, min(group_size, channels) + 1) if channels % g == 0)


def palette(
    w: np.ndarray,
    axis: int,
    bits: int,
    granularity: str,
    *,
    group_size: int = 16,
    seed: int = 0,
) -> Encoded:
    """``2^bits`` values per group of output channels (or per tensor) and an index per element."""
    if bits not in _INDICES:
        raise UsageError(
            f"a palette of {bits} bits is not storable; expected one of {sorted(_INDICES)}"
        )
    dtype, k = w.dtype, 1 << bits
    moved = np.moveaxis(w, axis, 0)
    if granularity == "per_grouped_channel":
        group = group_of(w.shape[axis], group_size)
    elif granularity == "per_tensor":
        group = w.shape[axis]
    else:
        raise UsageError(
            f"palette granularity {granularity!r} is not per_grouped_channel or per_tensor"
        )
    rows = moved.reshape(w.shape[axis] // group, -1)  # its dtype: k-means works a chunk at a time
    centroids = kmeans_1d(rows, k, seed=seed)
    table = np.sort(centroids.astype(dtype), axis=1)  # the values the device holds
    labels = nearest(rows, table.astype(np.float64), dtype=np.uint8)
    indices = np.moveaxis(labels.reshape(moved.shape), 0, axis)
    detail = {"group_size": group}
    if granularity == "per_tensor":
        operands = {
            "indices": (pack_bits(indices, bits), DType.uint8),
            "lut": (table[0], dtype_of(dtype)),
            "shape": (np.array(w.shape, dtype=np.uint32), DType.uint32),
        }
        return Encoded("constexpr_lut_to_dense", operands, granularity, "ios16", detail)
    lut_shape = [1] * w.ndim + [k, 1]
    lut_shape[axis] = table.shape[0]
    operands = {
        "indices": (indices, _INDICES[bits]),
        "lut": (table.reshape(lut_shape), dtype_of(dtype)),
    }
    return Encoded("constexpr_lut_to_dense", operands, granularity, "ios18", detail)
