"""Placing constants in weight files: the layout the printer writes and the bytes save() writes."""

from __future__ import annotations

import math
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from anekit.config import read_limit
from anekit.errors import WeightFileError
from anekit.files import map_readonly, model_file, open_regular
from anekit.mil import blob
from anekit.mil.types import TensorType
from anekit.mil.values import WEIGHTS_PREFIX, Value

if TYPE_CHECKING:
    from anekit.mil.program import Program

# Weight files are memory-mapped, so their size is bounded only by the address space; what a
# parse copies out of them is bounded by read_limit().
MAX_WEIGHT_FILE_BYTES = 2**62


def stored_values(program: Program) -> Iterator[Value]:
    """Every constant of the program kept in a weight file, in program order."""
    for fn in program.functions.values():
        for op in fn.ops:
            for v in op.input_values():
                if v.blob is not None and v.producer is None:
                    yield v
            for v in op.outputs:
                if v.blob is not None:
                    yield v


def layout(program: Program) -> dict[int, tuple[str, int]]:
    """Map ``id(value)`` to its (path, record offset) in the files ``weight_files`` writes.

    Values keep their file; within a file they keep their original order, packed
    tightly, so a parsed program with a loose layout prints a normalised one.
    """
    cached = getattr(program, "_weight_layout", None)
    if cached is not None:
        return cached
    result: dict[int, tuple[str, int]] = {}
    for path, values in _by_file(program).items():
        for v, offset in zip(values, blob.layout(*_arrays(values))):
            result[id(v)] = (path, offset)
    program._weight_layout = result  # type: ignore[attr-defined]
    return result


def weight_files(program: Program) -> dict[str, bytes]:
    """Return ``"@model_path/weights/<file>"`` -> MILBlob bytes for every weight file."""
    return {
        path: blob.write_blob_file(*_arrays(values)) for path, values in _by_file(program).items()
    }


def _arrays(values: list[Value]) -> tuple[list, list[int | None]]:
    """The arrays of ``values`` and the bit width of each sub-byte one (None otherwise)."""
    return [v.const for v in values], [v.type.dtype.packed_bits for v in values]


def _by_file(program: Program) -> dict[str, list[Value]]:
    groups: dict[str, list[Value]] = {}
    seen: set[int] = set()
    for v in stored_values(program):
        if id(v) not in seen:
            seen.add(id(v))
            groups.setdefault(v.blob.path, []).append(v)  # type: ignore[union-attr]
    for values in groups.values():
        values.sort(key=lambda v: v.blob.offset)  # type: ignore[union-attr]
    return dict(sorted(groups.items()))


def check_weight_path(path: str) -> str:
    """Return the file name of a BLOBFILE path; reject anything outside ``@model_path/weights/``."""
    if not path.startswith(WEIGHTS_PREFIX):
        raise WeightFileError(f"BLOBFILE path must start with {WEIGHTS_PREFIX!r}", file=path)
    name = path[len(WEIGHTS_PREFIX) :]
    parts = Path(name).parts
    if not name or name.startswith("/") or ".." in parts or "\\" in name or "\0" in name:
        raise WeightFileError(
            "BLOBFILE path must name a file inside the weights directory (no '..', no absolute path)",
            file=path,
        )
    return name


class Placeholder(np.ndarray):
    """Zeros standing in for a weight that was never read (a shapes-only parse).

    A program holding one can be printed, checked and estimated, not run or saved
    (``Program.weightless``). NumPy keeps the subclass through ufuncs and views, so a
    constant folded from a placeholder is one too.
    """


class WeightSource:
    """Weight tensors for the parser: from a dict of files, from a directory, or shapes only.

    Files in a directory are memory-mapped, not read: a tensor is copied out of its file by
    offset and length, so a model's weight files are never read into memory whole. Only
    regular files inside the directory (links resolved) are opened, and the tensors one
    parse copies may total at most :func:`~anekit.config.read_limit` bytes.

    With ``shapes_only``, no file is opened: every weight is a read-only array of zeros of
    the declared dtype and shape that takes no memory, for the tools that need shapes, not
    values (``fmt``, ``check``, ``estimate``). Such a program must not be saved or run.
    """

    def __init__(
        self, weights: dict[str, bytes] | str | Path | None, *, shapes_only: bool = False
    ) -> None:
        self._files: dict[str, bytes | mmap.mmap] = {}
        self._directory: Path | None = None
        self.shapes_only = shapes_only
        self._copied = 0
        self._limit: int | None = None  # read_limit(), asked once (it asks the system)
        self._checked: set[str] = set()  # BLOBFILE paths check_weight_path accepted
        self._blobs: dict[str, blob.BlobFile] = {}  # path -> its file, header checked
        if isinstance(weights, dict):
            self._files = {k: bytes(v) for k, v in weights.items()}
        elif weights is not None:
            self._directory = Path(weights)

    def tensor(self, path: str, offset: int, t: TensorType) -> np.ndarray:
        """The tensor of type ``t`` whose MILBlob record is at ``offset`` of the weight file ``path``.

        A sub-byte tensor (uint4, ...) is unpacked to one element per byte. A parse reads
        thousands of tensors from one file: its path is checked, and the file opened and its
        header validated, once; each record is validated the first time it is named.
        """
        if path not in self._checked:
            check_weight_path(path)
            self._checked.add(path)
        dtype = t.dtype.numpy
        shape = t.shape if t.is_static else tuple(int(d) for d in t.shape)
        if self.shapes_only:
            return np.broadcast_to(np.zeros((), dtype), shape).view(Placeholder)
        nbytes = (t.numel if t.is_static else math.prod(shape)) * dtype.itemsize
        if self._limit is None:
            self._limit = read_limit()
        if self._copied + nbytes > self._limit:
            raise WeightFileError(
                f"the weights read so far and this {nbytes}-byte tensor exceed "
                f"{self._limit} bytes, half of this machine's memory",
                file=path,
                offset=offset,
            )
        reader = self._blobs.get(path)
        if reader is None:
            reader = self._blobs[path] = blob.BlobFile(self.read(path), path)
        array = reader.tensor(offset, dtype, shape, copy=False, bits=t.dtype.packed_bits)
        self._copied += nbytes
        return array

    def read(self, path: str) -> bytes | mmap.mmap:
        """The contents of a weight file named by its BLOBFILE path (a memory map for a file)."""
        name = check_weight_path(path)
        if path in self._files:
            return self._files[path]
        if self._directory is None:
            raise WeightFileError(
                "weight file not provided (pass weights=dict or directory)", file=path
            )

        def error(message: str, path: str = path) -> WeightFileError:
            return WeightFileError(message, file=path)

        target = model_file(self._directory, name, what="weight file", error=error)
        with open_regular(
            target, limit=MAX_WEIGHT_FILE_BYTES, what="a weight file", error=error
        ) as f:
            size = os.fstat(f.fileno()).st_size
            data = map_readonly(f, what="a weight file", path=path, error=error) if size else b""
        self._files[path] = data
        return data
