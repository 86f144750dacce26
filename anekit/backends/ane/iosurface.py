"""IOSurfaces laid out as the compiled model reads them, and zero-copy NumPy views of them.

A tensor's surface follows its :class:`~anekit.backends.ane.layout.TensorLayout`:
width W, height C*H, the element size, bytes per row = the row stride, allocation
size = C * plane stride, pixel format 0 (ANE_NOTES 2.5, as tmc/apple's x/ane makes
them). Its memory is locked for CPU access whenever the host may touch it and
unlocked only while the ANE runs. A view holds its surface, so the memory outlives
every view.

One surface may serve several slots (a buffer bound into other buffer sets, of this
kernel or another): each slot *holds* it, and it is unlocked for good when the last
holder lets go; while any of them runs it is unlocked, and locked again when the last
run using it ends.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from anekit.backends.ane.layout import TensorLayout
from anekit.errors import EvaluationError

LOCK_READ_WRITE = 0  # IOSurfaceLock options: 0 = read/write (kIOSurfaceLockReadOnly is 1)


class SurfaceView(np.ndarray):
    """A NumPy array on IOSurface memory; it (and every view of it) keeps the surface alive."""

    surface: Surface | None

    def __array_finalize__(self, obj: Any) -> None:
        self.surface = getattr(obj, "surface", None)


class Surface:
    """One IOSurface: its handle, layout, lock state and views of its memory."""

    def __init__(self, framework: Any, handle: Any, layout: TensorLayout) -> None:
        self._fw = framework
        self.handle = handle
        self.layout = layout
        self.nbytes = layout.alloc_size
        self.locked = False
        self.holders = 0  # slots using this surface
        self.running = 0  # evaluations using it on the device now
        self._guard = threading.Lock()
        self.lock()

    @property
    def framework(self) -> Any:
        """The framework seam that made this surface."""
        return self._fw

    @classmethod
    def create(cls, framework: Any, layout: TensorLayout) -> Surface:
        """A new surface for one tensor of ``layout``, locked for CPU access."""
        if layout.alloc_size <= 0:
            raise ValueError(f"an IOSurface needs at least one byte, asked for {layout.alloc_size}")
        handle = framework.surface_create(layout.surface_properties())
        if handle is None:
            raise EvaluationError(
                f"IOSurfaceCreate failed for {layout.alloc_size} bytes "
                f"({layout.channels}x{layout.height} rows of {layout.row_stride} bytes)"
            )
        return cls(framework, handle, layout)

    def view(self, shape: tuple[int, ...], dtype: np.dtype) -> SurfaceView:
        """A zero-copy array of ``shape`` over the surface, with the layout's row and plane strides."""
        memory = self._fw.surface_memory(self.handle, self.nbytes)
        strides = self.layout.strides(shape)
        arr = np.ndarray(shape, dtype=dtype, buffer=memory, strides=strides).view(SurfaceView)
        arr.surface = self
        return arr

    def hold(self) -> None:
        """One more slot uses this surface."""
        with self._guard:
            self.holders += 1

    def drop(self) -> None:
        """A slot is done with this surface; the last one unlocks it (the kernel is released)."""
        with self._guard:
            self.holders -= 1
            if self.holders == 0 and self.running == 0:
                self.unlock()

    def device_begin(self) -> None:
        """An evaluation starts using the surface: unlock it for the ANE (the first one does)."""
        with self._guard:
            if self.running == 0:
                self.unlock()
            self.running += 1

    def device_end(self) -> None:
        """An evaluation is done with it: the last one locks it again for the host."""
        with self._guard:
            self.running -= 1
            if self.running == 0 and self.holders > 0:
                self.lock()

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
