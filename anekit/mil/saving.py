"""Saving a model directory all or nothing: a fresh directory, switched into place in one step.

``Program.save(out)`` builds ``.out.<random>.new.tmp`` beside ``out`` (``model.mil``,
``weights/``, and hard links to any other entries the old directory holds), syncs it, and
then swaps it with ``out`` in one atomic exchange (renameat2 on Linux, renamex_np on macOS)
or, for a new ``out``, one rename. A kill at any point leaves ``out`` holding the old model
or the new one, never a mix. Where the file system cannot swap, the old directory is moved
aside first; a kill between the two renames leaves it as ``.out.<random>.old.tmp``, which the
next save moves back before it starts. Every save first sweeps what killed saves left.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from anekit.errors import UsageError, WeightFileError
from anekit.files import exchange, fsync_dir, write_synced
from anekit.mil.weights import check_weight_path

__all__ = ["MODEL_FILE", "WEIGHTS_DIR", "save_model", "sweep"]

MODEL_FILE = "model.mil"
WEIGHTS_DIR = "weights"


def save_model(directory: str | os.PathLike[str], text: bytes, files: dict[str, bytes]) -> Path:
    """Write ``text`` as ``model.mil`` and ``files`` (BLOBFILE path -> bytes) under ``weights/``.

    Returns the directory. Entries of an existing directory other than ``model.mil`` and
    ``weights/`` are kept. Raises WeightFileError when a BLOBFILE path would write through a
    symbolic link of the existing ``weights/`` (the fresh directory would replace the link).
    """
    given = Path(directory)
    out = Path(os.path.realpath(given))  # a link to a model directory: save into its target
    out.parent.mkdir(parents=True, exist_ok=True)
    sweep(out)
    names = {path: check_weight_path(path) for path in files}  # cannot leave weights/
    if out.is_dir():
        _refuse_links(out, names.values())
    elif out.exists():
        raise UsageError(
            "exists and is not a directory; expected a model directory", path=str(given)
        )
    tmp = out.with_name(f".{out.name}.{secrets.token_hex(6)}.new.tmp")
    os.mkdir(tmp)
    try:
        if out.is_dir():
            os.chmod(tmp, stat.S_IMODE(out.stat().st_mode))  # the directory keeps its mode
            _link_others(out, tmp)
        (tmp / WEIGHTS_DIR).mkdir()
        for path, data in files.items():
            target = tmp / WEIGHTS_DIR / names[path]
            target.parent.mkdir(parents=True, exist_ok=True)  # a parsed path may name a subdir
            write_synced(target, data)
        write_synced(tmp / MODEL_FILE, text)
        for d in {tmp, *(p.parent for p in (tmp / WEIGHTS_DIR).rglob("*"))}:
            fsync_dir(d)
        _switch(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)  # after a swap, it holds the old model
    return given


def sweep(out: Path) -> list[str]:
    """Clean up after saves of ``out`` that were killed; returns the names removed or restored.

    A ``.new.tmp`` directory is a save that never finished (or an old model already swapped
    out): removed. A ``.old.tmp`` directory is a model moved aside; restored when ``out`` is
    missing, else removed.
    """
    pattern = re.compile(rf"\.{re.escape(out.name)}\.[0-9a-f]{{12}}\.(new|old)\.tmp")
    if not out.parent.is_dir():
        return []
    done = []
    for p in sorted(out.parent.iterdir()):
        m = pattern.fullmatch(p.name)
        if m is None or p.is_symlink() or not p.is_dir():
            continue
        if m.group(1) == "old" and not out.exists():
            os.rename(p, out)
        else:
            shutil.rmtree(p, ignore_errors=True)
        done.append(p.name)
    return done


def _switch(new: Path, out: Path) -> None:
    """Put ``new`` at ``out`` in one step; afterwards ``new`` holds the old directory, if any."""
    if not out.exists():
        os.rename(new, out)
    elif not exchange(new, out):  # no atomic swap here: move the old one aside first
        aside = new.with_name(new.name.replace(".new.tmp", ".old.tmp"))
        os.rename(out, aside)
        os.rename(new, out)
        os.rename(aside, new)


def _refuse_links(out: Path, names: Iterable[str]) -> None:
    """WeightFileError if ``weights/``, or a directory in it that a file goes into, is a link."""
    for name in names:
        parts = Path(WEIGHTS_DIR, name).parts[:-1]
        for i in range(1, len(parts) + 1):
            p = out.joinpath(*parts[:i])
            if p.is_symlink():
                raise WeightFileError(
                    f"refusing to save through the symbolic link {p}: the save replaces "
                    f"{WEIGHTS_DIR}/ with a fresh directory; save elsewhere or remove the link",
                    file=str(p),
                )


def _link_others(old: Path, new: Path) -> None:
    """Carry the entries of ``old`` that the save does not write into ``new``, as hard links."""
    for entry in old.iterdir():
        if entry.name not in (MODEL_FILE, WEIGHTS_DIR):
            _link_tree(entry, new / entry.name)


def _link_tree(src: Path, dst: Path) -> None:
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        dst.mkdir(mode=stat.S_IMODE(src.stat().st_mode))
        for entry in src.iterdir():
            _link_tree(entry, dst / entry.name)
    elif src.is_file():
        try:
            os.link(src, dst)
        except OSError:  # a file system without hard links
            shutil.copy2(src, dst)
