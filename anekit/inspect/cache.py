"""The ANE compiler's E5 bundle cache: list the bundles it holds.

On macOS the compiler caches its output under
``~/Library/Caches/<app>/com.apple.e5rt.e5bundlecache/<build>/<hash>/.../H16G.bundle/``
(ANE_NOTES section 6); a bundle holds ``H16G.e5`` and ``main/main_ane/model.hwx``.
Any directory can be listed: bundles are the directories named ``*.bundle``.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from anekit.errors import InspectError

__all__ = ["CACHE_DIR_NAME", "Bundle", "default_cache_dirs", "list_bundles", "no_cache_message"]

CACHE_DIR_NAME = "com.apple.e5rt.e5bundlecache"
_GENERATION = re.compile(r"^(H\d+)[A-Za-z]*$")  # "H16G" -> "H16"
_HASH = re.compile(r"^[0-9A-Fa-f]{16,}$")


@dataclass(frozen=True)
class Bundle:
    path: Path
    build: str | None  # the directory above the hash (an OS build in the real cache)
    hash: str | None  # the first long-hex directory on its path, else its parent's name
    generation: str | None  # from the bundle's name, "H16G.bundle" -> "H16"
    size: int  # bytes in all its files
    files: int
    age: float  # seconds since its newest file was written

    @property
    def name(self) -> str:
        return self.path.name


def default_cache_dirs(home: Path | None = None) -> list[Path]:
    """Every ``~/Library/Caches/*/com.apple.e5rt.e5bundlecache`` that exists (macOS only)."""
    if sys.platform != "darwin":
        return []
    caches = (home or Path.home()) / "Library" / "Caches"
    return sorted(p for p in caches.glob(f"*/{CACHE_DIR_NAME}") if p.is_dir())


def no_cache_message() -> str:
    """Why there is nothing to list by default here, and what to do instead."""
    where = f"~/Library/Caches/<app>/{CACHE_DIR_NAME}"
    if sys.platform != "darwin":
        return (
            f"no compile cache on {sys.platform}: the ANE compiler's E5 bundle cache exists only "
            f"on macOS ({where}); pass a copied cache directory: anekit inspect --cache DIR"
        )
    return f"no E5 bundle cache found under {where}; compile a program first, or pass --cache DIR"


def list_bundles(root: str | Path, *, now: float | None = None) -> list[Bundle]:
    """Every ``*.bundle`` directory under ``root``, sorted by path."""
    root = Path(root)
    if not root.is_dir():
        found = "a file" if root.exists() else "nothing (it does not exist)"
        raise InspectError(f"expected a cache directory, found {found}", file=str(root))
    now = time.time() if now is None else now
    bundles = []
    for path in sorted(p for p in root.rglob("*.bundle") if p.is_dir()):
        files = [f for f in path.rglob("*") if f.is_file()]
        stats = [f.stat() for f in files]
        newest = max((s.st_mtime for s in stats), default=path.stat().st_mtime)
        build, digest = _build_and_hash(path.relative_to(root).parts[:-1])
        match = _GENERATION.match(path.name.removesuffix(".bundle"))
        bundles.append(
            Bundle(
                path=path,
                build=build,
                hash=digest,
                generation=match.group(1) if match else None,
                size=sum(s.st_size for s in stats),
                files=len(files),
                age=max(now - newest, 0.0),
            )
        )
    return bundles


def _build_and_hash(parts: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(build, hash) from the directories between the listed root and a bundle."""
    for i, part in enumerate(parts):
        if _HASH.match(part):
            return (parts[i - 1] if i else None), part
    return None, (parts[-1] if parts else None)
