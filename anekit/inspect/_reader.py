"""Bounds-checked little-endian reads over a byte buffer, failing with InspectError."""

from __future__ import annotations

import struct

from anekit.errors import InspectError


class ByteReader:
    """Read integers and strings from ``data``; every out-of-range read names its offset."""

    def __init__(self, data: bytes, *, file: str | None = None) -> None:
        self.data = bytes(data)
        self.file = file

    def __len__(self) -> int:
        return len(self.data)

    def error(self, message: str, offset: int | None = None) -> InspectError:
        """Build an InspectError located in this buffer."""
        return InspectError(message, offset=offset, file=self.file)

    def need(self, offset: int, size: int, what: str) -> None:
        """Raise unless ``size`` bytes of ``what`` fit at ``offset``."""
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise self.error(
                f"expected {what} ({size} bytes) at 0x{max(offset, 0):x}, "
                f"but the data is {len(self.data)} bytes long",
                offset=max(offset, 0),
            )

    def _unpack(self, fmt: str, offset: int, what: str) -> int:
        size = struct.calcsize(fmt)
        self.need(offset, size, what)
        return struct.unpack_from(fmt, self.data, offset)[0]

    def u8(self, offset: int, what: str = "u8") -> int:
        return self._unpack("<B", offset, what)

    def u16(self, offset: int, what: str = "u16") -> int:
        return self._unpack("<H", offset, what)

    def u32(self, offset: int, what: str = "u32") -> int:
        return self._unpack("<I", offset, what)

    def i32(self, offset: int, what: str = "i32") -> int:
        return self._unpack("<i", offset, what)

    def u64(self, offset: int, what: str = "u64") -> int:
        return self._unpack("<Q", offset, what)

    def words(self, offset: int, count: int, what: str) -> tuple[int, ...]:
        """Read ``count`` little-endian u32 words."""
        self.need(offset, 4 * count, what)
        return struct.unpack_from(f"<{count}I", self.data, offset)

    def raw(self, offset: int, size: int, what: str) -> bytes:
        self.need(offset, size, what)
        return self.data[offset : offset + size]

    def cstring(self, offset: int, end: int, what: str) -> str:
        """Read a NUL-terminated string that must end before ``end``."""
        self.need(offset, 1, what)
        stop = self.data.find(b"\0", offset, min(end, len(self.data)))
        if stop < 0:
            raise self.error(
                f"{what} at 0x{offset:x} has no NUL terminator before 0x{end:x}", offset
            )
        return self.data[offset:stop].decode("utf-8", errors="replace")


def fixed_name(raw: bytes) -> str:
    """Decode a NUL-padded fixed-width name field (Mach-O segment and section names)."""
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")
