"""POSIX shared memory for isolated kernels: regions, tensor offsets in them, and safe views.

A :class:`Region` is a ``multiprocessing.shared_memory`` segment the parent creates
and the worker attaches to by name, on every platform (the worker copies in and out
of its own kernel's buffers anyway). NumPy does not pin the memory it views: closing
a segment's mapping while an array still looks at it makes the next access a
segmentation fault. So every array handed out is a :class:`SharedView` that holds
its region, and the mapping is closed only when the region object is garbage, that
is, after the last view is gone. Unlinking (removing the name) happens at close.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from anekit.backends.base import TensorSpec

ALIGN = 64  # byte alignment of each tensor in a region


class SharedView(np.ndarray):
    """A NumPy array on shared memory; it (and every view of it) keeps the region mapped."""

    region: Region | None

    def __array_finalize__(self, obj: Any) -> None:
        self.region = getattr(obj, "region", None)


class Region:
    """One shared-memory segment: created by the parent (``owner``), attached by the worker."""

    def __init__(self, shm: SharedMemory, *, owner: bool) -> None:
        self.ref = shm.name
        self.buf = shm.buf
        self.owner = owner
        self._shm = shm
        self._unlinked = False
        # The mapping goes with this object, never earlier: views hold it (see module doc).
        finalizer = weakref.finalize(self, shm.close)
        finalizer.atexit = False

    @classmethod
    def create(cls, nbytes: int, *, collect: bool = False) -> Region:
        """A new segment of ``nbytes`` bytes that this process owns.

        ``collect``: remove its name when this object is garbage (no view, no buffer left),
        instead of at ``close()``.
        """
        region = cls(SharedMemory(create=True, size=nbytes), owner=True)
        if collect:
            weakref.finalize(region, _unlink, region._shm).atexit = True
        return region

    @classmethod
    def attach(cls, ref: str) -> Region:
        """Another process's segment by name."""
        return cls(SharedMemory(name=ref), owner=False)

    def __len__(self) -> int:
        return len(self.buf)

    def close(self) -> None:
        """The owner removes the segment's name; the memory stays mapped while views exist."""
        if self.owner and not self._unlinked:
            self._unlinked = True
            self._shm.unlink()

    def view(self, spec: TensorSpec, offset: int) -> SharedView:
        """A zero-copy array for ``spec`` at byte ``offset``."""
        arr = np.ndarray(spec.shape, spec.dtype.numpy, buffer=self.buf, offset=offset)
        arr = arr.view(SharedView)
        arr.region = self
        return arr


def _unlink(segment: SharedMemory) -> None:
    try:
        segment.unlink()
    except FileNotFoundError:
        pass  # already gone


def layout(specs: Sequence[TensorSpec]) -> tuple[dict[str, int], int]:
    """Byte offset of each tensor in a region (64-byte aligned) and the region's size."""
    offsets, end = {}, 0
    for s in specs:
        offsets[s.name] = end
        end += -(-s.nbytes // ALIGN) * ALIGN
    return offsets, max(end, ALIGN)


def views(region: Region, specs: Sequence[TensorSpec], base: int) -> dict[str, SharedView]:
    """Arrays on ``region`` for ``specs``, laid out by :func:`layout` from byte ``base``."""
    offsets, _ = layout(specs)
    return {s.name: region.view(s, base + offsets[s.name]) for s in specs}
