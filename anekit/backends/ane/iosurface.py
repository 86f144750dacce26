"""IOSurfaces laid out as the compiled model reads them, and zero-copy NumPy views of them.

A tensor's surface follows its :class:`~anekit.backends.ane.layout.TensorLayout`:
width W, height C*H, the element size, bytes per row = the row stride, allocation
size = C * plane stride, pixel format 0 (ANE_NOTES 2.5, as tmc/apple's x/ane makes
them). Its memory is locked for CPU access whenever the host may touch it and
unlocked only while the ANE runs. A view holds its surface, so the memory outlives
every view.

``view.metal_buffer(device=None)`` makes an ``MTLBuffer`` over the same memory
(``newBufferWithBytesNoCopy:``, never a copy: the buffer's contents must start at the
surface's base address, or it is refused) and says where the tensor lies in it: the
byte offset of its first element and the strides, rows padded as the layout says.

One surface may serve several slots (a buffer bound into other buffer sets, of this
kernel or another): each slot *holds* it, and it is unlocked for good when the last
holder lets go; while any of them runs it is unlocked, and locked again when the last
run using it ends.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.backends.ane.layout import TensorLayout
from anekit.errors import EvaluationError

LOCK_READ_WRITE = 0  # IOSurfaceLock options: 0 = read/write (kIOSurfaceLockReadOnly is 1)


@dataclass(frozen=True)
class MetalBuffer:
    """An ``MTLBuffer`` over a tensor's IOSurface memory (no copy), and where the tensor lies in it.

    Attributes:
        buffer: the ``id<MTLBuffer>``, spanning the whole surface; bind it with ``offset``
            (``setBuffer:offset:atIndex:``).
        offset: bytes from the buffer's start to the tensor's first element.
        shape: the tensor's shape.
        strides: bytes per step along each axis; the last axis is dense, rows are padded.
        dtype: the element type (NumPy name, e.g. ``"float16"``).
        length: bytes the buffer spans (the surface's allocation, whole pages).
        row_stride: bytes from one row (last axis) to the next in the surface.
        surface: the IOSurface; keep this object alive while the GPU uses the buffer.
    """

    buffer: Any
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str
    length: int
    row_stride: int
    surface: Surface


class SurfaceView(np.ndarray):
    """A NumPy array on IOSurface memory; it (and every view of it) keeps the surface alive."""

    surface: Surface | None

    def __array_finalize__(self, obj: Any) -> None:
        self.surface = getattr(obj, "surface", None)

    def metal_buffer(self, device: Any = None) -> MetalBuffer:
        """An ``MTLBuffer`` over this array's IOSurface memory (no copy), with its offset and strides.

        Args:
            device: the ``MTLDevice``. Default: ``MTLCreateSystemDefaultDevice()``.
        Returns:
            MetalBuffer: needs ``pyobjc-framework-Metal`` (``pip install 'anekit[metal]'``).
        """
        if self.surface is None:
            raise EvaluationError(
                "this array is not a view of an IOSurface, so it has no MTLBuffer"
            )
        return self.surface.metal_buffer(device, view=self)


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

    def metal_buffer(self, device: Any = None, *, view: np.ndarray | None = None) -> MetalBuffer:
        """An ``MTLBuffer`` over this surface's memory; refused if Metal would copy it.

        ``view`` (an array on this surface) fixes the offset, shape and strides reported;
        without it the buffer is described as the surface's bytes.
        """
        fw = self._fw
        device = device if device is not None else fw.metal_device()
        base = address(self._fw.surface_memory(self.handle, self.nbytes))
        buffer, contents = fw.metal_buffer(self.handle, device)
        if address(contents) != base:
            raise EvaluationError(
                f"the MTLBuffer's contents are at 0x{address(contents):x}, not the surface's "
                f"memory at 0x{base:x}: Metal copied it, so GPU writes would not reach the ANE"
            )
        if len(contents) < self.nbytes:
            raise EvaluationError(
                f"the MTLBuffer spans {len(contents)} bytes, the surface {self.nbytes}"
            )
        if view is None:
            shape, strides, offset, dtype = (self.nbytes,), (1,), 0, "uint8"
        else:
            shape, strides, dtype = tuple(view.shape), tuple(view.strides), view.dtype.name
            offset = int(view.__array_interface__["data"][0]) - base
            if not 0 <= offset < self.nbytes:
                raise EvaluationError(f"the array starts {offset} bytes into a {self.nbytes}-byte "
                                      "surface: it is not a view of this surface")  # fmt: skip
        return MetalBuffer(buffer, offset, shape, strides, dtype, len(contents),
                           self.layout.row_stride, self)  # fmt: skip

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


def address(memory: memoryview) -> int:
    """The address of a writable buffer's first byte (how "the same memory" is checked)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(memory))
