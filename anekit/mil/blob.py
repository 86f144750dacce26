"""MILBlob v2 weight files (weight.bin): write arrays into one, read them back validated.

Format facts from coremltools, mlmodel/src/MILBlob/Blob/StorageFormat.hpp (commit
f391218) and StorageReader.cpp / StorageWriter.cpp (commit 85b7305):

- a 64-byte header: u32 blob count, u32 version (2), reserved zeros;
- per blob, at a 64-byte boundary, a 64-byte record: u32 sentinel 0xDEADBEEF,
  u32 dtype code, u64 data size in bytes, u64 absolute data offset,
  u64 padding_size_in_bits (sub-byte types only), 4 x u64 reserved;
- the data at the next 64-byte boundary (the writer puts it right after its record).

Integers and data are little endian. A MIL ``BLOBFILE`` offset points at the
record, not at the data. Reserved fields are not checked when reading: before
iOS 18 coremltools left them uninitialised (StorageFormat.hpp comment).

Sub-byte elements (uint1, uint2, uint3, uint4, uint6, int4) are packed as coremltools
packs them (mlmodel/src/MILBlob/SubByteTypes.cpp, StorageWriter.cpp, commit 85b7305):
element i occupies bits ``i * n .. i * n + n - 1`` of the data, least significant bit
first (an element may straddle two bytes), int4 in two's complement; the size is whole
bytes and ``padding_size_in_bits`` says how many bits of the last byte are unused. In
memory such a tensor is one element per byte (uint8, or int8 for int4).
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from anekit.errors import MilTypeError, WeightFileError

ALIGNMENT = 64  # DefaultStorageAlignment in StorageFormat.hpp
SENTINEL = 0xDEADBEEF  # BlobMetadataSentinel in StorageFormat.hpp
VERSION = 2
_HEADER = struct.Struct("<II56x")  # count, version, reserved
_RECORD = struct.Struct("<IIQQQ32x")  # sentinel, dtype code, size, data offset, padding bits

# BlobDataType in coremltools mlmodel/src/MILBlob/Blob/BlobDataType.hpp (commit f391218).
# The enum numbers its members 1, 2, 3, ... in this order.
_STORED_NAMES = ("fp16", "fp32", "uint8", "int8", "bf16", "int16", "uint16", "int4", "uint1")
_STORED_NAMES += ("uint2", "uint4", "uint3", "uint6", "int32", "uint32", "fp8e4m3fn", "fp8e5m2")
CODE_NAMES: dict[int, str] = dict(enumerate(_STORED_NAMES, start=1))
# The codes whose elements NumPy holds natively; sub-byte codes are read through
# SUB_BYTE_CODES; the others (bf16, fp8) are recognised by name but not read.
DTYPE_TO_CODE: dict[np.dtype, int] = {
    np.dtype(np.float16): 1,
    np.dtype(np.float32): 2,
    np.dtype(np.uint8): 3,
    np.dtype(np.int8): 4,
    np.dtype(np.int16): 6,
    np.dtype(np.uint16): 7,
    np.dtype(np.int32): 14,
    np.dtype(np.uint32): 15,
}
_CODE_TO_DTYPE = {code: dtype for dtype, code in DTYPE_TO_CODE.items()}
# (bits, signed) of a sub-byte element -> its code; the array holding it is uint8 (int8 if signed)
SUB_BYTE_CODES: dict[tuple[int, bool], int] = {
    (4, True): 8,
    (1, False): 9,
    (2, False): 10,
    (4, False): 11,
    (3, False): 12,
    (6, False): 13,
}
_SUB_BYTE_OF_CODE = {code: key for key, code in SUB_BYTE_CODES.items()}
_LITTLE = {dtype: dtype.newbyteorder("<") for dtype in DTYPE_TO_CODE}  # as stored
_NATIVE_IS_LITTLE = sys.byteorder == "little"


class BlobRecord(NamedTuple):
    """One blob's record: where it is, its element type, and where its data lies.

    A named tuple, not a dataclass: one is made per weight a parse reads, and a frozen
    dataclass costs several times as much to make.
    """

    offset: int  # of the record; what a MIL BLOBFILE offset names
    dtype: np.dtype  # the NumPy dtype holding one element (uint8/int8 for sub-byte elements)
    data_offset: int
    size: int  # in bytes
    bits: int | None = None  # bits of a sub-byte element; None for whole-byte elements
    padding_bits: int = 0  # unused bits of the last byte (sub-byte elements only)

    @property
    def count(self) -> int:
        """The number of elements the blob holds."""
        if self.bits is None:
            return self.size // self.dtype.itemsize
        return (8 * self.size - self.padding_bits) // self.bits


def packed_size(count: int, bits: int | None, itemsize: int) -> int:
    """Bytes of ``count`` elements stored ``bits`` wide (whole ``itemsize`` bytes if None)."""
    return count * itemsize if bits is None else -(-count * bits // 8)


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """``values`` as ``bits``-wide fields, least significant bit first, in ceil(n * bits / 8) bytes.

    Raises ValueError if a value does not fit: unsigned values must lie in [0, 2^bits),
    signed (int8) ones in [-2^(bits-1), 2^(bits-1)).
    """
    flat = values.reshape(-1)
    signed = flat.dtype.kind == "i"
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if flat.size and (int(flat.min()) < low or int(flat.max()) > high):
        bad = flat[(flat < low) | (flat > high)][0]
        kind = f"int{bits}" if signed else f"uint{bits}"
        raise ValueError(f"value {int(bad)} is outside the {kind} range [{low}, {high}]")
    # a chunk of a multiple of 8 values fills whole bytes: chunks pack one after another,
    # so the temporaries stay at one chunk's bits (not 40 bytes per value of the whole)
    wide = np.int64 if bits > 8 else np.uint8
    shifts = np.arange(bits, dtype=wide)
    parts = []
    for start in range(0, flat.size, _PACK_CHUNK):
        # two's complement low bits for int4 (astype wraps negative values)
        fields = flat[start : start + _PACK_CHUNK].astype(wide) & wide((1 << bits) - 1)
        planes = (fields[:, None] >> shifts) & wide(1)  # one row of bits per element, LSB first
        parts.append(np.packbits(planes.astype(np.uint8).reshape(-1), bitorder="little"))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


_PACK_CHUNK = 1 << 20  # values per chunk of pack_bits: a multiple of 8


def unpack_bits(data: np.ndarray, bits: int, count: int, signed: bool) -> np.ndarray:
    """The first ``count`` ``bits``-wide fields of ``data`` (see :func:`pack_bits`)."""
    planes = np.unpackbits(data.astype(np.uint8, copy=False), bitorder="little")[: count * bits]
    fields = planes.reshape(count, bits).astype(np.int64) @ (1 << np.arange(bits, dtype=np.int64))
    if signed:
        fields = np.where(fields >= 1 << (bits - 1), fields - (1 << bits), fields)
        return fields.astype(np.int8)
    return fields.astype(np.uint8)


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def _sub_byte_code(array: np.ndarray, bits: int, i: int) -> int:
    code = SUB_BYTE_CODES.get((bits, array.dtype.kind == "i"))
    if code is None or array.dtype.itemsize != 1:
        names = ", ".join(CODE_NAMES[c] for c in SUB_BYTE_CODES.values())
        raise TypeError(
            f"array {i}: {bits}-bit elements held as {array.dtype} cannot be stored; expected "
            f"one of {names} (held as uint8, int4 as int8)"
        )
    return code


def _bits_of(arrays: Sequence[np.ndarray], bits: Sequence[int | None] | None) -> list[int | None]:
    if bits is None:
        return [None] * len(arrays)
    if len(bits) != len(arrays):
        raise ValueError(f"{len(arrays)} arrays but {len(bits)} bit widths")
    return list(bits)


def _checked_dtypes(arrays: Sequence[np.ndarray]) -> list[np.dtype]:
    """Native-order dtype of every array; rejects what cannot be stored as a MILBlob."""
    dtypes = []
    for i, array in enumerate(arrays):
        if not isinstance(array, np.ndarray):
            raise MilTypeError(f"array {i}: expected numpy.ndarray, found {type(array).__name__}")
        dtype = array.dtype.newbyteorder("=")
        if dtype not in DTYPE_TO_CODE:
            names = ", ".join(str(d) for d in DTYPE_TO_CODE)
            raise MilTypeError(f"array {i}: dtype {array.dtype} cannot be stored; expected {names}")
        # coremltools' reader refuses zero-length data (Span::Slice requires size > 0).
        if array.size == 0:
            raise WeightFileError(
                f"array {i}: shape {array.shape} is empty; MILBlob cannot hold it"
            )
        dtypes.append(dtype)
    if len(dtypes) >= 2**32:
        raise WeightFileError(f"{len(dtypes)} arrays do not fit the u32 blob count")
    return dtypes


def _record_offsets(sizes: Sequence[int]) -> tuple[list[int], int]:
    """Record offsets of blobs of ``sizes`` data bytes, and the file size."""
    offsets, cursor = [], _HEADER.size
    for size in sizes:
        offsets.append(cursor)
        cursor = _align(cursor + _RECORD.size + size)
    end = offsets[-1] + _RECORD.size + sizes[-1] if sizes else _HEADER.size
    return offsets, end


def _sizes(arrays: Sequence[np.ndarray], bits: list[int | None]) -> list[int]:
    return [packed_size(a.size, n, a.dtype.itemsize) for a, n in zip(arrays, bits, strict=True)]


def layout(arrays: Sequence[np.ndarray], bits: Sequence[int | None] | None = None) -> list[int]:
    """Record offsets write_blob_file(arrays, bits) will use, computed without writing."""
    widths = _bits_of(arrays, bits)
    _checked_dtypes(arrays)
    return _record_offsets(_sizes(arrays, widths))[0]


def write_blob_file(
    arrays: Sequence[np.ndarray], bits: Sequence[int | None] | None = None
) -> bytes:
    """Return one MILBlob v2 file holding the arrays in order, as C-order little-endian data.

    ``bits[i]``, when given and not None, stores array ``i`` (uint8, or int8 for int4) as
    packed sub-byte elements of that width (module docstring).
    """
    widths = _bits_of(arrays, bits)
    dtypes = _checked_dtypes(arrays)
    codes = [
        DTYPE_TO_CODE[d] if n is None else _sub_byte_code(a, n, i)
        for i, (a, d, n) in enumerate(zip(arrays, dtypes, widths, strict=True))
    ]
    sizes = _sizes(arrays, widths)
    offsets, end = _record_offsets(sizes)
    # Like coremltools' writer, the file ends right after the last blob's data.
    out = bytearray(end)
    _HEADER.pack_into(out, 0, len(arrays), VERSION)
    for i, (array, dtype, offset) in enumerate(zip(arrays, dtypes, offsets, strict=True)):
        data_offset = offset + _RECORD.size
        n = widths[i]
        if n is None:
            data = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<")).tobytes()
            padding = 0
        else:
            try:
                data = pack_bits(array, n).tobytes()
            except ValueError as e:
                raise ValueError(f"array {i}: {e}") from None
            padding = (-array.size * n) % 8
        _RECORD.pack_into(out, offset, SENTINEL, codes[i], sizes[i], data_offset, padding)
        out[data_offset : data_offset + sizes[i]] = data
    return bytes(out)


def _check_header(data: bytes, file: str | None) -> int:
    """Validate the file header and return its blob count."""
    if len(data) < _HEADER.size:
        raise WeightFileError(
            f"truncated: expected a {_HEADER.size}-byte header, found {len(data)} bytes",
            file=file,
            offset=0,
        )
    count, version = _HEADER.unpack_from(data, 0)
    if version != VERSION:
        raise WeightFileError(
            f"expected MILBlob version {VERSION}, found version {version}", file=file, offset=0
        )
    return count


def _read_record(data: bytes, offset: int, file: str | None) -> BlobRecord:
    """Validate the record at `offset` and the extent of its data."""
    end = len(data)
    if offset >= _HEADER.size and not offset % ALIGNMENT and offset + _RECORD.size <= end:
        # the common record (whole-byte elements, everything in place) in one test; any
        # other is taken apart below, which says what is wrong
        sentinel, code, size, data_offset, _ = _RECORD.unpack_from(data, offset)
        dtype = _CODE_TO_DTYPE.get(code)
        if (
            sentinel == SENTINEL
            and dtype is not None
            and size > 0
            and not size % dtype.itemsize
            and not data_offset % ALIGNMENT
            and offset + _RECORD.size <= data_offset
            and data_offset + size <= end
        ):
            return _new_tuple(BlobRecord, (offset, dtype, data_offset, size, None, 0))
    return _checked_record(data, offset, file)


_new_tuple = tuple.__new__  # a BlobRecord made without its Python-level __new__ (4x the cost)


def _checked_record(data: bytes, offset: int, file: str | None) -> BlobRecord:
    """The record at `offset` validated step by step: the error names the first problem."""

    def fail(message: str) -> WeightFileError:
        return WeightFileError(message, file=file, offset=offset)

    if offset < _HEADER.size or offset % ALIGNMENT:
        raise fail(
            f"expected a record offset, a multiple of {ALIGNMENT} >= {_HEADER.size}, found {offset}"
        )
    if offset + _RECORD.size > len(data):
        raise fail(
            f"truncated: expected a {_RECORD.size}-byte record, found {len(data) - offset} bytes"
        )
    sentinel, code, size, data_offset, padding = _RECORD.unpack_from(data, offset)
    if sentinel != SENTINEL:
        raise fail(f"no blob record: expected sentinel 0x{SENTINEL:08X}, found 0x{sentinel:08X}")
    if code not in CODE_NAMES:
        raise fail(f"unknown dtype code {code}: expected one of 1..{max(CODE_NAMES)}")
    sub = _SUB_BYTE_OF_CODE.get(code)
    if code not in _CODE_TO_DTYPE and sub is None:
        names = ", ".join(CODE_NAMES[c] for c in (*_CODE_TO_DTYPE, *_SUB_BYTE_OF_CODE))
        raise fail(f"unsupported dtype code {code} ({CODE_NAMES[code]}): expected one of {names}")
    if data_offset % ALIGNMENT or data_offset < offset + _RECORD.size:
        raise fail(
            f"expected a data offset that is a multiple of {ALIGNMENT} and >= "
            f"{offset + _RECORD.size} (after the record), found {data_offset}"
        )
    bits: int | None = None
    if sub is None:
        dtype = _CODE_TO_DTYPE[code]
        padding = 0  # the field means nothing for whole-byte elements
        if size == 0 or size % dtype.itemsize:
            raise fail(
                f"expected a size that is a positive multiple of {dtype.itemsize} "
                f"({CODE_NAMES[code]}), found {size} bytes"
            )
    else:
        bits, signed = sub
        dtype = np.dtype(np.int8 if signed else np.uint8)
        # the padding bits only ever complete the last byte (coremltools WritePaddingBits)
        if size == 0 or padding >= 8 or (8 * size - padding) % bits:
            raise fail(
                f"{CODE_NAMES[code]} blob of {size} bytes with {padding} padding bits does not hold "
                f"a whole number of {bits}-bit elements (expected a positive size, padding < 8)"
            )
    if data_offset + size > len(data):
        raise fail(
            f"truncated: expected {size} data bytes at offset {data_offset}, found "
            f"{max(len(data) - data_offset, 0)} (file size {len(data)})"
        )
    return BlobRecord(offset, dtype, data_offset, size, bits, padding)


def read_records(data: bytes, *, file: str | None = None) -> list[BlobRecord]:
    """Validate a whole MILBlob v2 file and return its records in file order."""
    count = _check_header(data, file)
    records, cursor = [], _HEADER.size
    for i in range(count):
        if cursor >= len(data):
            raise WeightFileError(
                f"truncated: expected {count} blobs (header count), found {i} before the end",
                file=file,
                offset=cursor,
            )
        record = _read_record(data, cursor, file)
        records.append(record)
        # The next record follows this blob's data (coremltools' GetAllOffsets walks so).
        cursor = _align(record.data_offset + record.size)
    if len(data) > cursor:
        found = struct.unpack_from("<I", data, cursor)[0] if len(data) >= cursor + 4 else None
        message = (
            f"expected {count} blobs (header count), found another blob record after them"
            if found == SENTINEL
            else f"expected the file to end after {count} blobs, found {len(data) - cursor} more bytes"
        )
        raise WeightFileError(message, file=file, offset=cursor)
    return records


def read_blob(
    data: bytes, offset: int, *, file: str | None = None, copy: bool = True
) -> np.ndarray:
    """Return the 1-D array whose record is at `offset` (native-endian; sub-byte unpacked).

    With ``copy=False`` and immutable ``bytes`` on a little-endian machine, the result is a
    read-only view of ``data`` (no copy of large weights); otherwise a writable copy.
    """
    reader = BlobFile(data, file)
    return reader.array(reader.record(offset), copy)


def read_tensor(
    data: bytes,
    offset: int,
    dtype: np.dtype,
    shape: tuple[int, ...],
    *,
    file: str | None = None,
    copy: bool = True,
    bits: int | None = None,
) -> np.ndarray:
    """Read the blob at `offset` as the declared MIL dtype and shape, or say how they differ.

    ``bits`` declares a sub-byte element of that width held in ``dtype`` (uint8, int8 for
    int4); the blob must store exactly that sub-byte type.
    """
    return BlobFile(data, file).tensor(offset, np.dtype(dtype), shape, copy=copy, bits=bits)


class BlobFile:
    """A MILBlob file read blob by blob: its header checked once, each record once.

    A parse reads thousands of blobs from one file; this reads each record's 64 bytes
    and validates them the first time its offset is named, and never rereads the header.
    """

    __slots__ = ("data", "file", "_count", "_records", "_views")

    def __init__(self, data: bytes, file: str | None = None) -> None:
        self.data = data
        self.file = file
        self._count = _check_header(data, file)
        # offset -> its validated record: at most one per 64 bytes of the file
        self._records: dict[int, BlobRecord] = {}
        self._views: dict[np.dtype, np.ndarray] = {}  # dtype -> the whole file as that dtype

    def record(self, offset: int) -> BlobRecord:
        """The validated record at ``offset`` (see _read_record)."""
        record = self._records.get(offset)
        if record is None:
            if self._count == 0:
                raise WeightFileError(
                    "expected a file holding blobs, found header count 0",
                    file=self.file,
                    offset=offset,
                )
            record = self._records[offset] = _read_record(self.data, offset, self.file)
        return record

    def array(self, record: BlobRecord, copy: bool) -> np.ndarray:
        """The 1-D array of a record (a read-only view of immutable bytes if not ``copy``)."""
        data = self.data
        if record.bits is None and not copy and _NATIVE_IS_LITTLE and isinstance(data, bytes):
            # a slice of the whole file seen as the record's dtype (records are 64-byte
            # aligned): cheaper than a np.frombuffer per record
            whole = self._views.get(record.dtype)
            if whole is None:
                whole = self._whole(record.dtype)
            start = record.data_offset // record.dtype.itemsize
            return whole[start : start + record.size // record.dtype.itemsize]
        if record.bits is not None:
            raw = np.frombuffer(data, dtype=np.uint8, count=record.size, offset=record.data_offset)
            return unpack_bits(raw, record.bits, record.count, signed=record.dtype.kind == "i")
        stored = np.frombuffer(
            data,
            dtype=_LITTLE[record.dtype],
            count=record.size // record.dtype.itemsize,
            offset=record.data_offset,
        )
        return stored.astype(record.dtype)  # a copy, or the native order (views returned above)

    def _whole(self, dtype: np.dtype) -> np.ndarray:
        """The whole file seen as ``dtype``, made once per dtype (see array)."""
        whole = self._views[dtype] = np.frombuffer(
            self.data, dtype=dtype, count=len(self.data) // dtype.itemsize
        )
        return whole

    def tensor(
        self,
        offset: int,
        dtype: np.dtype,
        shape: tuple[int, ...],
        *,
        copy: bool = True,
        bits: int | None = None,
    ) -> np.ndarray:
        """The blob at ``offset`` as ``dtype`` and ``shape`` (see :func:`read_tensor`).

        The record is checked against the declaration before any data is read.
        """
        record = self._records.get(offset) or self.record(offset)
        stored = record.dtype
        if (
            bits is None
            and not copy
            and record.bits is None
            and (stored is dtype or stored == dtype)
            and _NATIVE_IS_LITTLE
            and self.data.__class__ is bytes
        ):  # the common weight, whole-byte elements: a slice of the file's view (see array)
            numel = math.prod(shape)
            itemsize = stored.itemsize
            if record.size // itemsize == numel:
                whole = self._views.get(stored)
                if whole is None:
                    whole = self._whole(stored)
                start = record.data_offset // itemsize
                array = whole[start : start + numel]
                return array if len(shape) == 1 else array.reshape(shape)
        if (stored is not dtype and stored != dtype) or record.bits != bits:
            raise WeightFileError(
                f"expected the declared dtype {_name(dtype, bits)}, found "
                f"{_name(record.dtype, record.bits)} in the blob",
                file=self.file,
                offset=offset,
            )
        numel = math.prod(shape)
        count = record.size // record.dtype.itemsize if bits is None else record.count
        if count != numel:
            raise WeightFileError(
                f"expected the declared shape {tuple(shape)} ({numel} elements), found {count} "
                "elements in the blob",
                file=self.file,
                offset=offset,
            )
        array = self.array(record, copy)
        return array if len(shape) == 1 else array.reshape(shape)


def _name(dtype: np.dtype, bits: int | None = None) -> str:
    if bits is None:
        code = DTYPE_TO_CODE.get(dtype)
    else:
        code = SUB_BYTE_CODES.get((bits, dtype.kind == "i"))
    return CODE_NAMES[code] if code is not None else str(dtype)
