"""IOSurfaces as the ANE wants them, and zero-copy NumPy views of their memory.

A surface for ``n`` bytes is one row of ``n`` one-byte elements: width = bytes per
row = allocation size = n, height 1, pixel format 0 (ANE_NOTES section 2.1). Its
memory is locked for CPU access whenever the host may touch it and unlocked only
while the ANE runs. A view holds its surface, so the memory outlives every view.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit.errors import EvaluationError

LOCK_READ_WRITE = 0  # IOSurfaceLock options: 0 = read/write (kIOSurfaceLockReadOnly is 1)


def surface_properties(nbytes: int, *, shared: bool = False) -> dict[str, int | bool]:
    """IOSurfaceCreate properties (``kIOSurface`` prefix dropped) for an ``nbytes`` I/O buffer."""
    props: dict[str, int | bool] = {
        "Width": nbytes,
        "Height": 1,
        "BytesPerElement": 1,
        "BytesPerRow": nbytes,
        "AllocSize": nbytes,
        "PixelFormat": 0,
    }
    if shared:
        # IOSurfaceLookup finds a surface from another process only if it is global.
        props["IsGlobal"] = True
    return props


class SurfaceView(np.ndarray):
    """A NumPy array on IOSurface memory; it (and every view of it) keeps the surface alive."""

    surface: Surface | None

    def __array_finalize__(self, obj: Any) -> None:
        self.surface = getattr(obj, "surface", None)


class Surface:
    """One IOSurface: its handle, size, lock state and views of its memory."""

    def __init__(self, framework: Any, handle: Any, nbytes: int) -> None:
        self._fw = framework
        self.handle = handle
        self.nbytes = nbytes
        self.locked = False
        self.lock()

    @classmethod
    def create(cls, framework: Any, nbytes: int, *, shared: bool = False) -> Surface:
        """A new surface for ``nbytes`` bytes, locked for CPU access."""
        if nbytes <= 0:
            raise ValueError(f"an IOSurface needs at least one byte, asked for {nbytes}")
        handle = framework.surface_create(surface_properties(nbytes, shared=shared))
        if handle is None:
            raise EvaluationError(f"IOSurfaceCreate failed for {nbytes} bytes")
        return cls(framework, handle, nbytes)

    @classmethod
    def lookup(cls, framework: Any, surface_id: int, nbytes: int) -> Surface:
        """Another process's global surface by ID, locked for CPU access."""
        handle = framework.surface_lookup(surface_id)
        if handle is None:
            raise EvaluationError(f"IOSurfaceLookup found no surface with ID {surface_id}")
        return cls(framework, handle, nbytes)

    @property
    def id(self) -> int:
        """The global ID another process looks this surface up by."""
        return self._fw.surface_id(self.handle)

    def view(self, shape: tuple[int, ...], dtype: np.dtype, offset: int = 0) -> SurfaceView:
        """A zero-copy array of ``shape`` and ``dtype`` at byte ``offset`` of the surface."""
        memory = self._fw.surface_memory(self.handle, self.nbytes)
        arr = np.ndarray(shape, dtype=dtype, buffer=memory, offset=offset).view(SurfaceView)
        arr.surface = self
        return arr

    def lock(self) -> None:
        """Lock for CPU access (the host reads and writes the views)."""
        if not self.locked:
            self._check(self._fw.surface_lock(self.handle, LOCK_READ_WRITE), "IOSurfaceLock")
            self.locked = True

    def unlock(self) -> None:
        """Unlock so the ANE may use the memory."""
        if self.locked:
            self._check(self._fw.surface_unlock(self.handle, LOCK_READ_WRITE), "IOSurfaceUnlock")
            self.locked = False

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            raise EvaluationError(
                f"{call} failed on a {self.nbytes}-byte surface: kern_return {status}"
            )
