"""MIL value types: dtypes, and tensor types (a scalar is a rank-0 tensor)."""

from __future__ import annotations

from enum import Enum
from itertools import repeat
from math import prod

import numpy as np

from anekit.errors import MilTypeError


class DType(str, Enum):
    """A MIL element type, named as it is spelled in MIL text.

    Attributes:
        numpy: the NumPy dtype that stores it (object for strings).
        itemsize: bytes per element.
        is_float, is_int: the kind of number it holds.
        bits: bits of one element as stored (in a weight file, on the engine).
        packed_bits: bits of a sub-byte element (packed in weight files), None for bytes.
    """

    # plain attributes of each member, set below: read for every literal and every op
    # verified, where a property costs several times as much
    numpy: np.dtype
    itemsize: int
    is_float: bool
    is_int: bool
    bits: int  # of one element as stored (in a weight file, on the engine)
    packed_bits: int | None  # of a sub-byte element (packed in weight files), None for bytes

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
for _d in DType:
    _d.numpy = _NUMPY[_d]
    _d.itemsize = _NUMPY[_d].itemsize
    _d.is_float = _d in (DType.fp16, DType.fp32)
    _d.is_int = _d.value.startswith(("int", "uint"))
    _d.packed_bits = _SUB_BYTE_BITS.get(_d)
    _d.bits = _SUB_BYTE_BITS.get(_d, 8 * _d.itemsize)
del _d
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


class TensorType:
    """A tensor type: element dtype and shape; rank 0 is a scalar. Immutable and hashable.

    Attributes:
        dtype: the element type.
        shape: the dimensions, ints or symbols (str) for dynamic ones.
        is_static: every dimension is an int.
        numel: the element count of a static shape, else None.
    """

    __slots__ = ("dtype", "shape", "is_static", "numel", "_hash")
    dtype: DType
    shape: tuple[Dim, ...]
    is_static: bool
    numel: int | None

    def __init__(self, dtype: DType, shape: tuple[Dim, ...] = ()) -> None:
        # Types are compared and hashed for every op verified (the inference cache): the
        # facts are computed once here, not on every use.
        if type(shape) is not tuple:
            shape = tuple(shape)
        static = all(map(isinstance, shape, repeat(int, len(shape))))
        init = object.__setattr__
        init(self, "dtype", dtype)
        init(self, "shape", shape)
        init(self, "is_static", static)
        init(self, "numel", prod(shape) if static else None)  # type: ignore[arg-type]
        init(self, "_hash", hash((str.__hash__(dtype), shape)))  # not Enum's Python-level hash

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"TensorType is immutable: cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not TensorType:
            return NotImplemented
        return self.dtype is other.dtype and self.shape == other.shape  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return (TensorType, (self.dtype, self.shape))

    def __repr__(self) -> str:
        return f"TensorType(dtype={self.dtype!r}, shape={self.shape!r})"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_scalar(self) -> bool:
        return not self.shape

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


# The smallest magnitude that rounds to infinity (half an ulp above the largest finite value)
# and the smallest nonzero magnitude (a subnormal) of each float dtype.
_FLOAT_RANGE = {
    DType.fp16: (65520.0, 2.0**-24),
    DType.fp32: (2.0**128 * (1 - 2.0**-25), 2.0**-149),
}


def float_range_text(dtype: DType) -> str:
    """What ``dtype`` represents, for messages: ``fp16 holds 0 and magnitudes 5.96e-08 to 65504``."""
    finfo = np.finfo(dtype.numpy)
    return f"{dtype} holds 0 and magnitudes {_FLOAT_RANGE[dtype][1]:.3g} to {float(finfo.max):.6g}"


def storage_loss(values: np.ndarray, dtype: DType) -> str | None:
    """Why storing ``values`` as ``dtype`` would change them, or None if it would not lose them.

    Floats may round (that is what a float literal means), but a finite value must not
    become inf and a nonzero one must not become 0. Integers must be stored exactly, in
    an int or a float dtype. The message names the first offending value.
    """
    values = np.asarray(values)
    if dtype is DType.string or dtype is DType.bool or values.size == 0:
        return None
    if dtype.is_int:
        low, high = dtype.int_range
        if values.dtype.kind == "f":
            bad = ~np.isfinite(values) | (values != np.trunc(np.nan_to_num(values)))
            if bad.any():
                return f"value {values[bad].flat[0].item()!r} is not an integer ({dtype})"
        with np.errstate(invalid="ignore"):
            out = (values < low) | (values > high)
        if out.any():
            return (
                f"value {values[out].flat[0].item()!r} is out of range for {dtype} ({low}..{high})"
            )
        return None
    if values.dtype.kind in "iu":
        wide = values.astype(np.float64)
        overflow = np.abs(wide) >= _FLOAT_RANGE[dtype][0]
        if overflow.any():
            return f"value {values[overflow].flat[0]} overflows {dtype}: {float_range_text(dtype)}"
        stored = wide.astype(dtype.numpy).astype(np.float64)
        changed = stored != wide
        if changed.any():
            first = np.flatnonzero(changed)[0]
            return (
                f"integer {values.flat[first]} is not exactly representable in {dtype} "
                f"(it would be stored as {stored.flat[first]:g})"
            )
        return None
    if values.dtype.kind != "f":
        return None
    wide = values.astype(np.float64)
    magnitude = np.abs(wide)
    overflow = np.isfinite(wide) & (magnitude >= _FLOAT_RANGE[dtype][0])
    if overflow.any():
        return f"value {wide[overflow].flat[0]:g} overflows {dtype}: {float_range_text(dtype)}"
    # at or below half the smallest subnormal a value rounds to zero (exactly half: to even, 0)
    underflow = (magnitude > 0) & (magnitude <= _FLOAT_RANGE[dtype][1] / 2)
    if underflow.any():
        return (
            f"value {wide[underflow].flat[0]:g} would be stored as 0 in {dtype}: "
            f"{float_range_text(dtype)}"
        )
    return None
