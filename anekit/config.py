"""Environment variables anekit reads (all of them, here and nowhere else), and the machine's memory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_BACKEND = "ANEKIT_BACKEND"
ENV_CACHE_DIR = "ANEKIT_CACHE_DIR"


def env_backend() -> str | None:
    """The backend named by ``$ANEKIT_BACKEND``, or None when unset or empty."""
    value = os.environ.get(ENV_BACKEND, "").strip()
    return value or None


def cache_dir() -> Path:
    """Where anekit keeps what it caches between runs (self-check verdicts, compiled models).

    ``$ANEKIT_CACHE_DIR``, else ``~/Library/Caches/anekit`` on macOS, else
    ``$XDG_CACHE_HOME/anekit`` (``~/.cache/anekit``).
    """
    named = os.environ.get(ENV_CACHE_DIR, "").strip()
    if named:
        return Path(named)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "anekit"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "anekit"


# Where the system does not say (sysconf is POSIX; Windows has neither name).
FALLBACK_PHYSICAL_MEMORY = 8 * 2**30


def physical_memory() -> int:
    """This machine's physical memory in bytes (8 GiB assumed where the system does not say).

    Not an environment variable, but the other fact about the machine that bounds what
    anekit may allocate for an input before it allocates it.
    """
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return FALLBACK_PHYSICAL_MEMORY


def read_limit() -> int:
    """The most bytes anekit reads whole from one input file: half of physical memory.

    A larger file would leave no room to decode it; files that need not be read whole
    (training tokens) are memory-mapped instead.
    """
    return physical_memory() // 2
