"""Safetensors weights, memory-mapped and converted to fp16 one tensor at a time.

A safetensors file is an 8-byte little-endian header length, a JSON header (name ->
dtype, shape, byte range) and the raw data. We read the format ourselves rather than
through the ``safetensors`` package because its NumPy interface has no bfloat16, the
dtype most checkpoints are published in. Every header field is checked before it is
used: sizes against the file, byte ranges against the shapes, names against the index.

fp16 tensors are zero-copy views of the mapped file; bf16 and fp32 tensors are
converted, and a value that would overflow fp16 (|x| >= 65520 rounds to inf) is an
error naming the tensor, never a silent inf. Pages of a converted tensor are released
right away (``madvise``), so loading holds the fp16 weights plus one tensor in flight.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ModelError, os_reason
from anekit.files import map_readonly, model_file, open_regular, parse_json, read_json
from anekit.fp16 import FP16_MAX

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 << 20  # the format's own limit (safetensors' MAX_HEADER_SIZE)
MAX_SHARD_BYTES = 1 << 42  # 4 TiB: above any real shard, below what a sparse file can claim
_DTYPES = {"F16": np.float16, "BF16": np.uint16, "F32": np.float32}  # bf16 read as its bits


class SafetensorsFile:
    """One memory-mapped ``.safetensors`` file: its tensor table and typed views of the data."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        what = "a safetensors file"
        with open_regular(self.path, limit=MAX_SHARD_BYTES, what=what, error=ModelError) as f:
            try:
                size = os.fstat(f.fileno()).st_size
                if size < 8:
                    raise self._error(f"{size} bytes is too short for a safetensors file")
                (n,) = struct.unpack("<Q", f.read(8))
                if n > min(MAX_HEADER_BYTES, size - 8):  # the length is not shown: may be text
                    raise self._error(
                        f"its header length field exceeds the file ({size} bytes) or the "
                        f"{MAX_HEADER_BYTES}-byte limit; expected {what}"
                    )
                text = f.read(n)
            except OSError as e:
                raise self._error(f"cannot read: {os_reason(e)}") from None
            self._map = (
                map_readonly(f, what=what, path=self.path, error=ModelError)
                if size > 8 + n
                else None
            )
        header = parse_json(
            text, what=f"{what}'s JSON header", path=str(self.path), error=ModelError
        )
        if not isinstance(header, dict):
            raise self._error(f"the header must be a JSON object, found {type(header).__name__}")
        self._base = 8 + n
        self._size = size
        self.metadata = header.pop("__metadata__", None) or {}
        self.tensors: dict[str, tuple[str, tuple[int, ...], int, int]] = {
            name: self._entry(name, info) for name, info in header.items()
        }

    def _error(self, message: str, tensor: str | None = None) -> ModelError:
        return ModelError(message, path=str(self.path), tensor=tensor)

    def _entry(self, name: str, info: Any) -> tuple[str, tuple[int, ...], int, int]:
        """Validate one header entry: (dtype, shape, absolute start, end)."""
        try:
            dtype, shape, (start, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        except (TypeError, KeyError, ValueError) as e:
            raise self._error(
                "malformed header entry: expected dtype, shape, data_offsets", name
            ) from e
        if dtype not in _DTYPES:
            raise self._error(
                f"dtype {dtype} is not supported; expected one of {list(_DTYPES)}", name
            )
        ints = all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        if not ints or not all(isinstance(o, int) for o in (start, end)):
            raise self._error(
                f"shape {list(shape)} / offsets {[start, end]} are not whole numbers", name
            )
        nbytes = math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
        if not 0 <= start <= end or end - start != nbytes or self._base + end > self._size:
            raise self._error(
                f"byte range [{start}, {end}) does not hold {dtype}{list(shape)} ({nbytes} bytes) "
                f"inside the {self._size - self._base}-byte data section",
                name,
            )
        return dtype, shape, self._base + start, self._base + end

    def raw(self, name: str) -> np.ndarray:
        """The stored array, zero-copy (bf16 as ``uint16`` bits), read-only."""
        dtype, shape, start, end = self.tensors[name]
        if start == end:
            return np.zeros(shape, _DTYPES[dtype])
        count = (end - start) // np.dtype(_DTYPES[dtype]).itemsize
        return np.frombuffer(self._map, _DTYPES[dtype], count, start).reshape(shape)

    def fp16(self, name: str) -> np.ndarray:
        """The tensor as a new fp16 array (see :meth:`read_into`)."""
        shape = self.tensors[name][1]
        out = np.empty(shape, np.float16)
        self.read_into(name, out.reshape(-1))
        return out

    def read_into(self, name: str, out: np.ndarray) -> None:
        """Convert the tensor into the flat array ``out`` (fp16 or float32) block by block.

        Each block's mapped pages are released once read, so a load holds its results and
        one block in flight, however large the tensor.
        """
        dtype, _, start, _ = self.tensors[name]
        raw = self.raw(name).reshape(-1)
        item = raw.itemsize

        def done(lo: int, hi: int) -> None:
            self._release_bytes(start + lo * item, start + hi * item)

        convert_into(
            raw, out, bf16=dtype == "BF16", path=str(self.path), tensor=name, on_block=done
        )

    def release(self, name: str) -> None:
        """Drop the mapped pages of a tensor from this process (they are re-read if used again)."""
        _, _, start, end = self.tensors[name]
        self._release_bytes(start, end)

    def _release_bytes(self, start: int, end: int) -> None:
        if self._map is not None:
            release_pages(self._map, start, end)


def release_pages(mapped: mmap.mmap, start: int, end: int) -> None:
    """Drop the pages covering bytes ``[start, end)`` of a read-only file mapping from this process.

    Rounded outward to whole pages: the mapping is never written, so a dropped page a
    neighbour also uses is simply read from the file again when touched.
    """
    page = mmap.PAGESIZE
    lo, hi = start // page * page, min(-(-end // page) * page, len(mapped))
    if hi > lo and hasattr(mapped, "madvise"):  # Python 3.8+ on POSIX
        mapped.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


BLOCK = 1 << 18  # elements converted at a time: ~3 MB of temporaries for any tensor size


def convert_into(
    raw: np.ndarray,
    out: np.ndarray,
    *,
    bf16: bool = False,
    path: str,
    tensor: str,
    on_block: Callable[[int, int], None] | None = None,
) -> None:
    """Write the flat ``raw`` (fp16, fp32, or bf16 bits as uint16) into ``out`` as fp16 values.

    ModelError naming the tensor where a value is inf or NaN, or would overflow fp16
    (|x| >= 65520 rounds to inf): never a silent inf.
    """
    if raw.size != out.size:
        raise ModelError(
            f"expected {out.size} elements, found {raw.size}", path=path, tensor=tensor
        )
    for lo in range(0, raw.size, BLOCK):
        hi = min(lo + BLOCK, raw.size)
        part = raw[lo:hi]
        if bf16:
            part = (part.astype(np.uint32) << 16).view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            half = part if part.dtype == np.float16 else part.astype(np.float16)
        if not np.isfinite(half).all():
            raise _non_finite(part, half, path, tensor)
        out[lo:hi] = half
        if on_block is not None:
            on_block(lo, hi)


def _non_finite(part: np.ndarray, half: np.ndarray, path: str, tensor: str) -> ModelError:
    if part.dtype != np.float16 and np.isfinite(part).all():
        big = float(np.abs(part).max())
        count = int(np.count_nonzero(~np.isfinite(half)))
        return ModelError(
            f"{count} value(s) overflow fp16 (largest magnitude {big:.6g}, fp16 max {FP16_MAX:g}); "
            "converting would give inf",
            path=path,
            tensor=tensor,
        )
    return ModelError("holds inf or NaN values", path=path, tensor=tensor)


def to_fp16(data: np.ndarray, *, path: str, tensor: str) -> np.ndarray:
    """``data`` (fp16 or fp32, any shape) as a new checked fp16 array (see :func:`convert_into`)."""
    out = np.empty(data.shape, np.float16)
    convert_into(np.ascontiguousarray(data).reshape(-1), out.reshape(-1), path=path, tensor=tensor)
    return out


def _present(path: Path) -> bool:
    """Something is at ``path``: a file, or a link (even a broken one, which opening reports)."""
    return path.exists() or path.is_symlink()


class WeightStore:
    """A model directory's safetensors weights: ``model.safetensors`` or a sharded index."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._files: dict[str, SafetensorsFile] = {}
        self._where: dict[str, str] = {}
        index = self.directory / INDEX
        if _present(index):
            for name, file in self._read_index(index).items():
                self._where[name] = file
        elif _present(self.directory / SINGLE):
            for name in self._open(SINGLE).tensors:
                self._where[name] = SINGLE
        else:
            pickles = [p.name for p in self.directory.glob("*.bin")] + [
                p.name for p in self.directory.glob("*.pt")
            ]
            hint = (
                f" ({', '.join(pickles)} are pickles, which anekit never loads)" if pickles else ""
            )
            raise ModelError(f"no {SINGLE} or {INDEX}{hint}", path=str(self.directory))
        for name, file in self._where.items():
            if name not in self._open(file).tensors:
                raise ModelError(
                    f"the index places it in {file}, which lacks it", path=str(index), tensor=name
                )

    def _read_index(self, index: Path) -> dict[str, str]:
        raw = read_json(index, limit=MAX_HEADER_BYTES, what="a shard index", error=ModelError)
        weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
        if not isinstance(weight_map, dict):
            raise ModelError("expected an object with a weight_map object", path=str(index))
        for name, file in weight_map.items():

            def error(message: str, path: str, name: str = name) -> ModelError:
                return ModelError(message, path=str(index), tensor=name)

            model_file(self.directory, file, what="shard", error=error)
        return weight_map

    def _open(self, file: str) -> SafetensorsFile:
        if file not in self._files:
            self._files[file] = SafetensorsFile(self.directory / file)
        return self._files[file]

    @property
    def path(self) -> Path:
        """The model directory (for messages)."""
        return self.directory

    def names(self) -> list[str]:
        """Every tensor name."""
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...] | None:
        """A tensor's stored shape (None: not in the checkpoint)."""
        if name not in self._where:
            return None
        return self._open(self._file(name)).tensors[name][1]

    def dtypes(self) -> set[str]:
        """The stored dtypes present (``"BF16"``, ``"F16"``, ``"F32"``)."""
        return {self._open(f).tensors[n][0] for n, f in self._where.items()}

    def fp16(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A tensor as fp16 (see :meth:`SafetensorsFile.fp16`), checked against ``shape`` if given."""
        f = self._open(self._file(name))
        if shape is not None:
            self._check_shape(f, name, shape)
        return f.fp16(name)

    @staticmethod
    def _check_shape(f: SafetensorsFile, name: str, shape: tuple[int, ...]) -> None:
        found = f.tensors[name][1]
        if tuple(found) != tuple(shape):
            raise ModelError(
                f"expected shape {list(shape)} (from config.json), found {list(found)}",
                path=str(f.path),
                tensor=name,
            )

    def read_into(self, name: str, shape: tuple[int, ...], out: np.ndarray) -> None:
        """Convert a tensor of the expected ``shape`` into the flat array ``out``."""
        f = self._open(self._file(name))
        self._check_shape(f, name, shape)
        f.read_into(name, out)

    def _file(self, name: str) -> str:
        try:
            return self._where[name]
        except KeyError:
            raise ModelError(
                "missing from the checkpoint", path=str(self.directory), tensor=name
            ) from None
