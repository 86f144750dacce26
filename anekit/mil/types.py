"""MIL value types: dtypes, and tensor types (a scalar is a rank-0 tensor)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from math import prod

import numpy as np

from anekit.errors import MilTypeError


class DType(str, Enum):
    """A MIL element type, named as it is spelled in MIL text."""

    fp16 = "fp16"
    fp32 = "fp32"
    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    uint16 = "uint16"
    int32 = "int32"
    uint32 = "uint32"
    bool = "bool"
    string = "string"
    # sub-byte integers (iOS18): one element per byte in NumPy, packed in weight files
    uint1 = "uint1"
    uint2 = "uint2"
    uint3 = "uint3"
    uint4 = "uint4"
    uint6 = "uint6"
    int4 = "int4"

    def __str__(self) -> str:
        return self.value

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype that stores this MIL dtype (object for strings)."""
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        """Bytes of one element as NumPy holds it (a sub-byte element takes a whole byte)."""
        return self.numpy.itemsize

    @property
    def bits(self) -> int:
        """Bits of one element as stored (in a weight file, on the engine)."""
        return _SUB_BYTE_BITS.get(self, 8 * self.numpy.itemsize)

    @property
    def packed_bits(self) -> int | None:
        """Bits of a sub-byte element (packed in weight files), or None for whole bytes."""
        return _SUB_BYTE_BITS.get(self)

    @property
    def int_range(self) -> tuple[int, int]:
        """The smallest and largest value of an integer dtype."""
        bits = _SUB_BYTE_BITS.get(self)
        if bits is None:
            info = np.iinfo(self.numpy)
            return int(info.min), int(info.max)
        return (
            (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
            if self is DType.int4
            else (0, (1 << bits) - 1)
        )

    @property
    def is_float(self) -> bool:
        return self in (DType.fp16, DType.fp32)

    @property
    def is_int(self) -> bool:
        return self.value.startswith(("int", "uint"))


_NUMPY: dict[DType, np.dtype] = {
    DType.fp16: np.dtype(np.float16),
    DType.fp32: np.dtype(np.float32),
    DType.int8: np.dtype(np.int8),
    DType.uint8: np.dtype(np.uint8),
    DType.int16: np.dtype(np.int16),
    DType.uint16: np.dtype(np.uint16),
    DType.int32: np.dtype(np.int32),
    DType.uint32: np.dtype(np.uint32),
    DType.bool: np.dtype(np.bool_),
    DType.string: np.dtype(object),
    DType.uint1: np.dtype(np.uint8),
    DType.uint2: np.dtype(np.uint8),
    DType.uint3: np.dtype(np.uint8),
    DType.uint4: np.dtype(np.uint8),
    DType.uint6: np.dtype(np.uint8),
    DType.int4: np.dtype(np.int8),
}
_SUB_BYTE_BITS: dict[DType, int] = {
    DType.uint1: 1,
    DType.uint2: 2,
    DType.uint3: 3,
    DType.uint4: 4,
    DType.uint6: 6,
    DType.int4: 4,
}
# a NumPy array is never a sub-byte tensor by itself: uint8 stays uint8
_FROM_NUMPY = {v: k for k, v in _NUMPY.items() if k is not DType.string and k not in _SUB_BYTE_BITS}

FLOATS = frozenset({DType.fp16, DType.fp32})
INTS = frozenset({DType.int8, DType.uint8, DType.int16, DType.uint16, DType.int32, DType.uint32})
NUMERIC = FLOATS | INTS
SUB_BYTE = frozenset(_SUB_BYTE_BITS)
UNSIGNED_SUB_BYTE = SUB_BYTE - {DType.int4}
ALL = NUMERIC | {DType.bool}


def dtype_of(value: object) -> DType:
    """Return the MIL dtype of a NumPy dtype or array; raises TypeError for unsupported ones."""
    np_dtype = np.asarray(value).dtype if not isinstance(value, np.dtype) else value
    try:
        return _FROM_NUMPY[np.dtype(np_dtype)]
    except KeyError:
        raise MilTypeError(f"NumPy dtype {np_dtype} has no MIL equivalent") from None


Dim = int | str  # an int, or a symbol for a dynamic dimension


@dataclass(frozen=True, slots=True)
class TensorType:
    """A tensor type: element dtype and shape; rank 0 is a scalar."""

    dtype: DType
    shape: tuple[Dim, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_scalar(self) -> bool:
        return not self.shape

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int | None:
        return prod(self.shape) if self.is_static else None  # type: ignore[arg-type]

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        if n is None or self.dtype is DType.string:
            return None
        return -(-n * self.dtype.bits // 8)  # sub-byte elements packed, the last byte padded

    def __str__(self) -> str:
        return type_text(self, legacy=False)


def type_text(t: TensorType, *, legacy: bool) -> str:
    """Spell a type as MIL text; legacy (program 1.0) spells scalars as rank-0 tensors."""
    if t.is_scalar and not legacy:
        return t.dtype.value
    dims = ", ".join(str(d) for d in t.shape)
    return f"tensor<{t.dtype.value}, [{dims}]>"


def scalar(dtype: DType | str) -> TensorType:
    """Return the rank-0 type of a dtype."""
    return TensorType(DType(dtype), ())
