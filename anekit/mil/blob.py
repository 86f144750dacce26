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
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from anekit.errors import MilTypeError, WeightFileError

ALIGNMENT = 64  # DefaultStorageAlignment in StorageFormat.hpp
SENTINEL = 0xDEADBEEF  # BlobMetadataSentinel in StorageFormat.hpp
VERSION = 2
_HEADER = struct.Struct("<II56x")  # count, version, reserved
_RECORD = struct.Struct("<IIQQ40x")  # sentinel, dtype code, size, data offset, padding + reserved

# BlobDataType in coremltools mlmodel/src/MILBlob/Blob/BlobDataType.hpp (commit f391218).
# The enum numbers its members 1, 2, 3, ... in this order.
_STORED_NAMES = ("fp16", "fp32", "uint8", "int8", "bf16", "int16", "uint16", "int4", "uint1")
_STORED_NAMES += ("uint2", "uint4", "uint3", "uint6", "int32", "uint32", "fp8e4m3fn", "fp8e5m2")
CODE_NAMES: dict[int, str] = dict(enumerate(_STORED_NAMES, start=1))
# The codes whose elements NumPy holds natively; the others (bf16, fp8, sub-byte) are
# recognised by name but not read.
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


@dataclass(frozen=True)
class BlobRecord:
    """One blob's record: where it is, its element type, and where its data lies."""

    offset: int  # of the record; what a MIL BLOBFILE offset names
    dtype: np.dtype
    data_offset: int
    size: int  # in bytes


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


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


def _record_offsets(arrays: Sequence[np.ndarray]) -> tuple[list[int], int]:
    """Record offsets of every array and the file size, for arrays already checked."""
    offsets, cursor = [], _HEADER.size
    for array in arrays:
        offsets.append(cursor)
        cursor = _align(cursor + _RECORD.size + array.nbytes)
    end = offsets[-1] + _RECORD.size + arrays[-1].nbytes if arrays else _HEADER.size
    return offsets, end


def layout(arrays: Sequence[np.ndarray]) -> list[int]:
    """Record offsets write_blob_file(arrays) will use, computed without writing."""
    _checked_dtypes(arrays)
    return _record_offsets(arrays)[0]


def write_blob_file(arrays: Sequence[np.ndarray]) -> bytes:
    """Return one MILBlob v2 file holding the arrays in order, as C-order little-endian data."""
    dtypes = _checked_dtypes(arrays)
    offsets, end = _record_offsets(arrays)
    # Like coremltools' writer, the file ends right after the last blob's data.
    out = bytearray(end)
    _HEADER.pack_into(out, 0, len(arrays), VERSION)
    for array, dtype, offset in zip(arrays, dtypes, offsets, strict=True):
        data_offset = offset + _RECORD.size
        _RECORD.pack_into(out, offset, SENTINEL, DTYPE_TO_CODE[dtype], array.nbytes, data_offset)
        little = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<"))
        out[data_offset : data_offset + array.nbytes] = little.tobytes()
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
    sentinel, code, size, data_offset = _RECORD.unpack_from(data, offset)
    if sentinel != SENTINEL:
        raise fail(f"no blob record: expected sentinel 0x{SENTINEL:08X}, found 0x{sentinel:08X}")
    if code not in CODE_NAMES:
        raise fail(f"unknown dtype code {code}: expected one of 1..{max(CODE_NAMES)}")
    if code not in _CODE_TO_DTYPE:
        names = ", ".join(CODE_NAMES[c] for c in _CODE_TO_DTYPE)
        raise fail(f"unsupported dtype code {code} ({CODE_NAMES[code]}): expected one of {names}")
    dtype = _CODE_TO_DTYPE[code]
    if data_offset % ALIGNMENT or data_offset < offset + _RECORD.size:
        raise fail(
            f"expected a data offset that is a multiple of {ALIGNMENT} and >= "
            f"{offset + _RECORD.size} (after the record), found {data_offset}"
        )
    if size == 0 or size % dtype.itemsize:
        raise fail(
            f"expected a size that is a positive multiple of {dtype.itemsize} "
            f"({CODE_NAMES[code]}), found {size} bytes"
        )
    if data_offset + size > len(data):
        raise fail(
            f"truncated: expected {size} data bytes at offset {data_offset}, found "
            f"{max(len(data) - data_offset, 0)} (file size {len(data)})"
        )
    return BlobRecord(offset=offset, dtype=dtype, data_offset=data_offset, size=size)


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
    """Return the 1-D array whose record is at `offset` (native-endian).

    With ``copy=False`` and immutable ``bytes`` on a little-endian machine, the result is a
    read-only view of ``data`` (no copy of large weights); otherwise a writable copy.
    """
    if _check_header(data, file) == 0:
        raise WeightFileError(
            "expected a file holding blobs, found header count 0", file=file, offset=offset
        )
    record = _read_record(data, offset, file)
    stored = np.frombuffer(
        data,
        dtype=record.dtype.newbyteorder("<"),
        count=record.size // record.dtype.itemsize,
        offset=record.data_offset,
    )
    if not copy and isinstance(data, bytes) and stored.dtype == record.dtype:
        return stored
    return stored.astype(record.dtype)


def read_tensor(
    data: bytes,
    offset: int,
    dtype: np.dtype,
    shape: tuple[int, ...],
    *,
    file: str | None = None,
    copy: bool = True,
) -> np.ndarray:
    """Read the blob at `offset` as the declared MIL dtype and shape, or say how they differ."""
    array = read_blob(data, offset, file=file, copy=copy)
    declared = np.dtype(dtype)
    if array.dtype != declared:
        raise WeightFileError(
            f"expected the declared dtype {_name(declared)}, found {_name(array.dtype)} in the blob",
            file=file,
            offset=offset,
        )
    numel = math.prod(shape)
    if array.size != numel:
        raise WeightFileError(
            f"expected the declared shape {tuple(shape)} ({numel} elements), found {array.size} "
            "elements in the blob",
            file=file,
            offset=offset,
        )
    return array.reshape(shape)


def _name(dtype: np.dtype) -> str:
    code = DTYPE_TO_CODE.get(dtype)
    return CODE_NAMES[code] if code is not None else str(dtype)
