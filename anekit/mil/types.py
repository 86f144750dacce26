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

    def __str__(self) -> str:
        return self.value

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype that stores this MIL dtype (object for strings)."""
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

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
}
_FROM_NUMPY = {v: k for k, v in _NUMPY.items() if k is not DType.string}

FLOATS = frozenset({DType.fp16, DType.fp32})
INTS = frozenset({DType.int8, DType.uint8, DType.int16, DType.uint16, DType.int32, DType.uint32})
NUMERIC = FLOATS | INTS
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
        return None if n is None or self.dtype is DType.string else n * self.dtype.itemsize

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
