"""The policy that turns a Python scalar, list or array into an inline const Value.

The Builder applies it to every argument that is not a Value, and the registry to
every declared default, so a literal gets the same dtype however it arrives.
"""

from __future__ import annotations

import re
import sys
from struct import pack_into as _pack_into
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.lexer import NUMBER
from anekit.mil.types import DType, TensorType, dtype_of, storage_loss
from anekit.mil.values import Value

if TYPE_CHECKING:
    from anekit.mil.ops.registry import Args, Param


def literal_value(raw: Any, p: Param, args: Args | None = None) -> Value:
    """Turn a Python scalar, list or array into an inline const Value for parameter ``p``.

    Floats take the dtype of the parameter's domain when another argument fixes
    it (``add(x=fp16, y=2.0)`` makes ``y`` fp16); integers become int32; values
    that would change when stored are rejected: 1e9 in int8, 0.5 in an int, 70000.0
    in fp16 (inf), 1e-9 in fp16 (0), 2049 in fp16 (2048). A float may round.
    """
    if isinstance(raw, Value):
        return raw
    if isinstance(raw, str):
        return Value("", TensorType(DType.string, ()), None, raw)
    arr = np.asarray(raw)
    if _is_typed(raw):
        return Value("", TensorType(dtype_of(arr.dtype), tuple(arr.shape)), None, arr)
    dtype = _choose_dtype(arr, p, args)
    if arr.dtype.kind == "f" and dtype.is_int:
        raise MilTypeError(f"expected an integer value, found {raw!r}", param=p.name)
    if arr.dtype.kind in "iuf":
        loss = storage_loss(arr, dtype)
        if loss is not None:
            raise MilTypeError(f"{_shown(raw)} does not fit in {dtype}: {loss}", param=p.name)
    converted = arr.astype(dtype.numpy)
    return Value("", TensorType(dtype, tuple(arr.shape)), None, converted)


def _shown(raw: Any) -> str:
    """A Python value as a message quotes it: whole if short, else its shape."""
    text = repr(raw)
    return text if len(text) <= 60 else f"a {type(raw).__name__} of shape {np.shape(raw)}"


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


# -- float literals read from MIL text, in one step (the parser's common case) ---------------

# one float token, as the token pattern spells it (NUMBER: one way to match, no backtracking)
FLOAT_TOKEN = re.compile(rf"{NUMBER}\Z", re.ASCII)
# magnitudes below the first are stored without overflow (to inf), and above the second
# (half the smallest subnormal) without underflow (to 0)
FLOAT_LIMITS = {DType.fp16: (65504.0, 2.0**-25), DType.fp32: (3.4e38, 2.0**-150)}
# struct's codes of the float dtypes, little-endian (its standard sizes, which check range:
# packing rounds to nearest even as NumPy's conversion does, and raises OverflowError where a
# value would be stored as inf); used where little-endian is NumPy's native order
PACK_CODES = {DType.fp16: "e", DType.fp32: "f"} if sys.byteorder == "little" else {}


def float_list(body: str, t: TensorType, code: str) -> np.ndarray | None:
    """A list token's fp16/fp32 array in one step, or None for the step-by-step reader.

    Exactly what that reader makes, where it makes no error: the same conversions (all
    decimal or all hex), packed by struct as ``checked_array`` packs; a zero, an infinity,
    a value that overflows or flushes to 0, a count that is not the type's, a mixed or an
    unconvertible list all take the step-by-step reader, which reports any error.
    """
    parts = body[1:-1].split(",")
    n = len(parts)
    if n != t.numel:
        return None
    hexes = body.count("x") + body.count("X")
    try:
        if hexes == 0:
            values = list(map(float, parts))
        elif hexes == n:
            values = list(map(float.fromhex, parts))
        else:
            return None
        total = sum(values)
        if total - total != 0.0:  # an inf among them (or a sum beyond float64: re-read)
            return None
        array = np.empty(t.shape, t.dtype.numpy)
        _pack_into(_PACK_FORMATS.get((code, n)) or f"<{n}{code}", array, 0, *values)
    except (ValueError, OverflowError):
        return None
    return array if np.count_nonzero(array) == n else None  # no 0, none flushed to 0


def float_scalar(body: str, t: TensorType) -> np.ndarray | None:
    """A nonzero fp16/fp32 scalar the dtype holds, in one step (None: the step-by-step reader)."""
    if t.shape or not FLOAT_TOKEN.match(body):
        return None
    try:
        v = float.fromhex(body) if "x" in body or "X" in body else float(body)
    except OverflowError:
        return None
    largest, smallest = FLOAT_LIMITS[t.dtype]
    if -largest < v < largest and not -smallest <= v <= smallest:
        return np.array(v, dtype=t.dtype.numpy)
    return None


_PACK_FORMATS = {(c, n): f"<{n}{c}" for c in "ef" for n in range(1, 65)}
