"""What the host machine is, as far as the ANE backend cares; no framework, no PyObjC.

Virtual machines (CI runners, UTM and Tart guests) ship AppleNeuralEngine.framework
without an ANE, and a Python running under Rosetta 2 reports ``x86_64`` on an
Apple-silicon Mac (ANE_NOTES 2.5): both must be told apart from "no ANE at all",
because each has its own remedy. macOS answers through ``sysctlbyname``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anekit.hw.chips import chip_from_brand

FRAMEWORK_PATH = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework"
SYSCTL_MAX_BYTES = 256  # every value read here is a short string or a 32-bit int


@dataclass(frozen=True)
class HostFacts:
    """The facts availability depends on (None: the OS did not say)."""

    platform: str  # sys.platform
    machine: str  # platform.machine() of this Python process
    macos: str | None  # product version, e.g. "15.3.1"
    translated: bool | None  # sysctl.proc_translated: a Rosetta 2 process
    virtual_machine: bool | None  # kern.hv_vmm_present
    brand: str | None  # machdep.cpu.brand_string, e.g. "Apple M4 Pro"
    chip: str | None  # the matching profile in hw/data/chips.json


def facts() -> HostFacts:
    """Read the host's facts now (cheap; nothing is loaded)."""
    if sys.platform != "darwin":
        return HostFacts(sys.platform, platform.machine(), None, None, None, None, None)
    brand = sysctl_text("machdep.cpu.brand_string")
    translated = sysctl_int("sysctl.proc_translated")
    vmm = sysctl_int("kern.hv_vmm_present")
    return HostFacts(
        platform=sys.platform,
        machine=platform.machine(),
        macos=macos_version(),
        translated=None if translated is None else translated == 1,
        virtual_machine=None if vmm is None else vmm == 1,
        brand=brand,
        chip=chip_from_brand(brand) if brand else None,
    )


def problem(h: HostFacts) -> str | None:
    """Why this host cannot run the ANE backend, judged before loading anything; None if it may."""
    if h.platform != "darwin":
        return f"needs macOS on Apple silicon; this is {h.platform} ({h.machine})"
    if h.translated:
        return (
            f"this Python runs under Rosetta 2 as {h.machine} on an Apple-silicon Mac; "
            "install an arm64 (native) Python to use the ANE"
        )
    if h.machine != "arm64":
        return f"needs Apple silicon; this Mac is {h.machine}"
    if h.virtual_machine:
        return (
            "this Mac is a virtual machine (kern.hv_vmm_present = 1); virtual machines (CI "
            "runners, UTM and Tart guests) ship AppleNeuralEngine.framework without an ANE"
        )
    if not Path(FRAMEWORK_PATH).is_dir():
        return f"{FRAMEWORK_PATH} is missing on this macOS {h.macos}"
    return None


def macos_version() -> str | None:
    """The macOS product version (None elsewhere); the sysctl first, since a Python built
    against an old SDK reads "10.16" from ``platform.mac_ver()``."""
    if sys.platform != "darwin":
        return None
    return sysctl_text("kern.osproductversion") or platform.mac_ver()[0] or None


def version_tuple(version: str) -> tuple[int, ...]:
    """ "15.3.1" -> (15, 3, 1); parts that are not numbers end the tuple."""
    parts = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


@functools.cache
def _sysctlbyname() -> Any:
    """libc's ``sysctlbyname`` (macOS), or None."""
    if sys.platform != "darwin":
        return None
    path = ctypes.util.find_library("c")
    return None if path is None else getattr(ctypes.CDLL(path), "sysctlbyname", None)


def _sysctl(name: str) -> bytes | None:
    """Raw ``sysctlbyname`` bytes, or None where the name or the call does not exist."""
    call = _sysctlbyname()
    if call is None:
        return None
    size = ctypes.c_size_t(SYSCTL_MAX_BYTES)
    buf = ctypes.create_string_buffer(SYSCTL_MAX_BYTES)
    if call(name.encode(), buf, ctypes.byref(size), None, ctypes.c_size_t(0)) != 0:
        return None
    return buf.raw[: size.value]


def sysctl_int(name: str) -> int | None:
    """A 32-bit integer sysctl (e.g. ``sysctl.proc_translated``), or None."""
    raw = _sysctl(name)
    if raw is None or len(raw) not in (4, 8):
        return None
    return int.from_bytes(raw, sys.byteorder, signed=True)


def sysctl_text(name: str) -> str | None:
    """A string sysctl (e.g. ``kern.osproductversion``), or None."""
    raw = _sysctl(name)
    if not raw:
        return None
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip() or None
