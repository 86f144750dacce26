"""A bounded reader of GGUF headers: every count, length and offset checked before use.

GGUF (llama.cpp's format, versions 2 and 3) is a little-endian header — magic ``GGUF``,
version, tensor and key/value counts, the key/value metadata, one record per tensor
(name, dims, ggml type, offset) — then the tensor data at an aligned start. The header is
untrusted input: a count of 2^60 or a string length past the end of the file must be an
error, not an allocation. This reader works on the bytes of a memory-mapped file and
allocates nothing a check has not bounded first:

- counts: no more records than the remaining bytes could hold, and below fixed caps;
- strings: a length within the remaining bytes and :data:`MAX_STRING` (UTF-8 checked);
- arrays: element type known, ``count * element size`` within the remaining bytes, no
  arrays of arrays;
- tensors: 1-4 dims each >= 1, a known ggml type whose block divides the row, the byte
  size within :data:`MAX_TENSOR_BYTES`, the offset aligned to ``general.alignment`` (a
  power of two), the range inside the file, no two tensors overlapping, no name twice.

Entry point: :func:`parse_header` (bytes-like) and :func:`read_header` (a file path).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ModelError
from anekit.files import map_readonly, open_regular

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_FILE_BYTES = 1 << 40
MAX_TENSORS = 1 << 16
MAX_KEYS = 1 << 16
MAX_STRING = 1 << 20  # one key or string value
MAX_ARRAY = 1 << 24  # elements of one metadata array (vocabularies are ~2^17-2^18)
MAX_TENSOR_BYTES = 1 << 36
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32

# GGUF value types: id -> (name, struct format or None for string/array)
_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
    10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
# ggml tensor types this reader accepts: id -> (name, elements per block, bytes per block);
# gguf.GGML_QUANT_SIZES holds the same sizes (a test checks they agree)
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    30: ("BF16", 1, 2),
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor record: ``dims`` in ggml order (``dims[0]`` is the row, the fastest axis)."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute, in the file
    nbytes: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.ggml_type][0]

    @property
    def shape(self) -> tuple[int, ...]:
        """The NumPy (row-major) shape: ggml's dims reversed."""
        return tuple(reversed(self.dims))


@dataclass(frozen=True)
class GgufHeader:
    """A checked GGUF header: its metadata, its tensors by name, where the data starts."""

    version: int
    metadata: dict[str, Any]
    tensors: dict[str, TensorInfo]
    data_start: int
    alignment: int


class _Cursor:
    """Reads little-endian values from ``buf``, never past its end."""

    def __init__(self, buf: Any, source: str) -> None:
        self.buf = buf
        self.size = len(buf)
        self.at = 0
        self.source = source

    def error(self, message: str) -> ModelError:
        return ModelError(f"GGUF header at byte {self.at}: {message}", path=self.source)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.at + n > self.size:
            raise self.error(f"{what} needs {n} bytes, {self.size - self.at} remain")

    def scalar(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.at)
        self.at += n
        return value

    def string(self, what: str) -> str:
        n = self.scalar("<Q", f"{what}'s length")
        if n > MAX_STRING:
            raise self.error(f"{what} is {n} bytes long, more than {MAX_STRING}")
        self.need(n, what)
        raw = bytes(self.buf[self.at : self.at + n])
        self.at += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"{what} is not UTF-8 ({e})") from None

    def count(self, fmt: str, cap: int, least_bytes: int, what: str) -> int:
        """A count that the remaining bytes (``least_bytes`` per item at least) can hold."""
        n = self.scalar(fmt, what)
        if n > cap or n * least_bytes > self.size - self.at:
            raise self.error(
                f"{what} {n} exceeds what {self.size - self.at} remaining bytes can hold "
                f"(or the limit {cap})"
            )
        return n


def _value(cur: _Cursor, kind: int, key: str, in_array: bool = False) -> Any:
    if kind in _SCALARS:
        return cur.scalar(_SCALARS[kind], f"value of {key!r}")
    if kind == _STRING:
        return cur.string(f"string value of {key!r}")
    if kind == _ARRAY and not in_array:
        elem = cur.scalar("<I", f"element type of {key!r}")
        if elem not in _SCALARS and elem != _STRING:
            raise cur.error(f"{key!r}: array element type {elem} is not a GGUF scalar or string")
        size = struct.calcsize(_SCALARS[elem]) if elem in _SCALARS else 8
        n = cur.count("<Q", MAX_ARRAY, size, f"length of array {key!r}")
        if elem == _STRING:
            return [cur.string(f"element {i} of {key!r}") for i in range(n)]
        fmt = _SCALARS[elem]
        values = np.frombuffer(cur.buf, np.dtype(fmt), n, cur.at).copy()
        cur.at += n * size
        return values.tolist()
    raise cur.error(f"{key!r}: value type {kind} is not a GGUF type (or a nested array)")


def _tensor_info(cur: _Cursor, index: int) -> tuple[str, tuple[int, ...], int, int]:
    name = cur.string(f"name of tensor {index}")
    n_dims = cur.scalar("<I", f"dimension count of {name!r}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.error(f"tensor {name!r} has {n_dims} dimensions; expected 1 to {MAX_DIMS}")
    dims = tuple(cur.scalar("<Q", f"dimension of {name!r}") for _ in range(n_dims))
    kind = cur.scalar("<I", f"type of {name!r}")
    offset = cur.scalar("<Q", f"offset of {name!r}")
    return name, dims, kind, offset


def _checked_tensor(
    name: str, dims: tuple[int, ...], kind: int, offset: int, data_start: int, alignment: int,
    size: int, source: str,
) -> TensorInfo:  # fmt: skip
    def fail(message: str) -> ModelError:
        return ModelError(f"GGUF tensor record: {message}", path=source, tensor=name)

    if kind not in GGML_TYPES:
        raise fail(f"ggml type {kind} is not one this reader knows ({sorted(GGML_TYPES)})")
    type_name, block, block_bytes = GGML_TYPES[kind]
    if any(d < 1 for d in dims):
        raise fail(f"dimensions {list(dims)} must all be >= 1")
    count = 1
    for d in dims:
        count *= d
        if count > MAX_TENSOR_BYTES:
            raise fail(f"dimensions {list(dims)} declare more than {MAX_TENSOR_BYTES} elements")
    if dims[0] % block:
        raise fail(f"{type_name} stores rows in blocks of {block}; the row has {dims[0]}")
    nbytes = count // block * block_bytes
    if offset % alignment:
        raise fail(f"offset {offset} is not a multiple of the alignment {alignment}")
    start = data_start + offset
    if start + nbytes > size:
        raise fail(f"bytes {start}..{start + nbytes} of {type_name}{list(dims)} pass the "
                   f"end of the file ({size} bytes)")  # fmt: skip
    return TensorInfo(name, dims, kind, start, nbytes)


def parse_header(buf: Any, source: str = "<gguf>") -> GgufHeader:
    """Parse and check the GGUF header at the start of ``buf`` (bytes, mmap or memoryview)."""
    cur = _Cursor(buf, source)
    cur.need(4, "the magic")
    if bytes(buf[:4]) != MAGIC:
        raise cur.error(f"magic {bytes(buf[:4])!r}; expected {MAGIC!r} (not a GGUF file)")
    cur.at = 4
    version = cur.scalar("<I", "the version")
    if version not in VERSIONS:
        raise cur.error(f"version {version}; this reader reads GGUF {VERSIONS}")
    n_tensors = cur.scalar("<Q", "the tensor count")
    n_keys = cur.count("<Q", MAX_KEYS, 8 + 4 + 1, "key/value count")
    if n_tensors > MAX_TENSORS:
        raise cur.error(f"tensor count {n_tensors} exceeds the limit {MAX_TENSORS}")
    metadata: dict[str, Any] = {}
    for i in range(n_keys):
        key = cur.string(f"key {i}")
        if key in metadata:
            raise cur.error(f"key {key!r} appears twice")
        metadata[key] = _value(cur, cur.scalar("<I", f"type of {key!r}"), key)
    if n_tensors * (8 + 4 + 8 + 4 + 8) > cur.size - cur.at:
        raise cur.error(f"{n_tensors} tensor records cannot fit in {cur.size - cur.at} bytes")
    records = [_tensor_info(cur, i) for i in range(n_tensors)]
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise cur.error(f"general.alignment {alignment!r} is not a power of two")
    data_start = -(-cur.at // alignment) * alignment
    tensors: dict[str, TensorInfo] = {}
    for name, dims, kind, offset in records:
        if name in tensors:
            raise ModelError("GGUF tensor record: the name appears twice", path=source, tensor=name)
        tensors[name] = _checked_tensor(
            name, dims, kind, offset, data_start, alignment, cur.size, source
        )
    _check_overlaps(tensors, source)
    return GgufHeader(version, metadata, tensors, data_start, alignment)


def _check_overlaps(tensors: dict[str, TensorInfo], source: str) -> None:
    ordered = sorted(tensors.values(), key=lambda t: t.offset)
    for a, b in zip(ordered, ordered[1:]):
        if a.offset + a.nbytes > b.offset:
            raise ModelError(
                f"GGUF tensor data overlaps {a.name!r} (bytes {a.offset}..{a.offset + a.nbytes})",
                path=source,
                tensor=b.name,
            )


def open_gguf(path: str | os.PathLike[str]) -> tuple[Any, GgufHeader]:
    """Map a GGUF file read-only and parse its header: ``(mapping, header)``."""
    with open_regular(path, limit=MAX_FILE_BYTES, what="a GGUF file", error=ModelError) as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ModelError("empty file; expected a GGUF file", path=str(path))
        mapped = map_readonly(f, what="a GGUF file", path=path, error=ModelError)
    try:
        return mapped, parse_header(mapped, str(Path(path)))
    except BaseException:
        mapped.close()
        raise


def read_header(path: str | os.PathLike[str]) -> GgufHeader:
    """The checked header of a GGUF file (the file is mapped, read, and unmapped)."""
    mapped, header = open_gguf(path)
    mapped.close()
    return header
