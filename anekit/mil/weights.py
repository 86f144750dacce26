"""Placing constants in weight files: the layout the printer writes and the bytes save() writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from anekit.errors import WeightFileError
from anekit.mil import blob
from anekit.mil.values import WEIGHTS_PREFIX, Value

if TYPE_CHECKING:
    from anekit.mil.program import Program


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
        for v, offset in zip(values, blob.layout([v.const for v in values])):
            result[id(v)] = (path, offset)
    program._weight_layout = result  # type: ignore[attr-defined]
    return result


def weight_files(program: Program) -> dict[str, bytes]:
    """Return ``"@model_path/weights/<file>"`` -> MILBlob bytes for every weight file."""
    return {
        path: blob.write_blob_file([v.const for v in values])
        for path, values in _by_file(program).items()
    }


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


class WeightSource:
    """Weight file bytes for the parser: from a dict of paths, or read lazily from a directory."""

    def __init__(self, weights: dict[str, bytes] | str | Path | None) -> None:
        self._files: dict[str, bytes] = {}
        self._directory: Path | None = None
        if isinstance(weights, dict):
            self._files = {k: bytes(v) for k, v in weights.items()}
        elif weights is not None:
            self._directory = Path(weights)

    def read(self, path: str) -> bytes:
        """Return the bytes of a weight file named by its BLOBFILE path."""
        name = check_weight_path(path)
        if path in self._files:
            return self._files[path]
        if self._directory is None:
            raise WeightFileError(
                "weight file not provided (pass weights=dict or directory)", file=path
            )
        root = self._directory.resolve()
        target = (root / name).resolve()
        if root not in target.parents:
            raise WeightFileError(f"resolves outside the weights directory {root}", file=path)
        try:
            data = target.read_bytes()
        except OSError as e:
            raise WeightFileError(f"cannot read {target}: {e.strerror}", file=path) from e
        self._files[path] = data
        return data
