"""Training checkpoints: safetensors files plus ``state.json``, written so a crash never loses the last good one.

Layout of an output directory::

    out/
      LATEST                 name of the newest complete checkpoint, replaced atomically
      ckpt-000300/
        model.safetensors    parameters (fp32)
        optimizer.safetensors
        state.json           format, step, config, RNG and data position, SHA-256 of each file

A save writes a hidden temporary directory, fsyncs every file and the directory,
renames it into place, and only then points ``LATEST`` at it. A save that fails
leaves ``LATEST`` and the checkpoint it names untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import CheckpointError
from anekit.files import write_atomic

FORMAT = "anekit-train-checkpoint/1"
LATEST = "LATEST"
STATE = "state.json"
_NAME = re.compile(r"ckpt-(\d+)")


def save_checkpoint(
    out_dir: str | Path,
    step: int,
    tensors: dict[str, dict[str, np.ndarray]],
    meta: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write ``tensors`` (file name -> named arrays) and ``meta`` as checkpoint ``step``; return its directory.

    Keeps the newest ``keep`` checkpoints (at least 1) and removes older ones once the
    new one is in place.
    """
    from safetensors.numpy import save as st_save  # the "train" extra

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    final = out / f"ckpt-{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=out))
    try:
        digests = {}
        for name, arrays in tensors.items():
            data = st_save({k: np.ascontiguousarray(v) for k, v in arrays.items()})
            _write_synced(tmp / name, data)
            digests[name] = hashlib.sha256(data).hexdigest()
        state = {"format": FORMAT, "step": step, "files": digests, **meta}
        _write_synced(tmp / STATE, json.dumps(state, indent=1, sort_keys=True).encode())
        _fsync_dir(tmp)
        if final.exists():  # an older run's checkpoint of the same step, never the one LATEST names
            if _latest_name(out) == final.name:
                raise CheckpointError(
                    f"refusing to replace {final.name}, the latest checkpoint", path=str(out)
                )
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_atomic(out / LATEST, (final.name + "\n").encode())
    _fsync_dir(out)
    _prune(out, keep=max(keep, 1))
    return final


def clear_checkpoints(out_dir: str | Path) -> None:
    """Remove every checkpoint (and ``LATEST``) from ``out_dir``; nothing else in it is touched."""
    out = Path(out_dir)
    if not out.is_dir():
        return
    (out / LATEST).unlink(missing_ok=True)
    for p in out.iterdir():
        if _NAME.fullmatch(p.name) and p.is_dir():
            shutil.rmtree(p)


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The checkpoint ``LATEST`` names in ``out_dir``, or None if there is none yet."""
    name = _latest_name(Path(out_dir))
    return None if name is None else Path(out_dir) / name


def read_state(path: str | Path) -> dict[str, Any]:
    """The ``state.json`` of a checkpoint (its directory, or an output directory with ``LATEST``).

    The result also holds ``"directory"``, the checkpoint directory it was read from.
    """
    directory = Path(path)
    if not (directory / STATE).is_file():
        named = latest_checkpoint(directory) if (directory / LATEST).is_file() else None
        if named is None:
            raise CheckpointError(
                "no checkpoint here (neither state.json nor LATEST)", path=str(directory)
            )
        directory = named
    try:
        state = json.loads((directory / STATE).read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {STATE}: {e}", path=str(directory)) from e
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"expected format {FORMAT!r}, found {found!r}", path=str(directory))
    if not isinstance(state.get("files"), dict):
        raise CheckpointError(f"{STATE} lists no files", path=str(directory))
    state["directory"] = str(directory)
    return state


def load_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Read a checkpoint (see :func:`read_state`) and verify every file against its SHA-256.

    Returns ``(state, tensors)``. Raises CheckpointError for anything missing, corrupt or
    of another format.
    """
    from safetensors.numpy import load as st_load  # the "train" extra

    state = read_state(path)
    directory = Path(state["directory"])
    tensors = {}
    for name, digest in state["files"].items():
        file = directory / name
        try:
            data = file.read_bytes()
        except OSError as e:
            raise CheckpointError(f"cannot read {name}: {e}", path=str(directory)) from e
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise CheckpointError(
                f"{name} is corrupt: SHA-256 {actual[:16]}..., state.json records {digest[:16]}...",
                path=str(directory),
            )
        try:
            tensors[name] = st_load(data)
        except Exception as e:  # safetensors raises its own error types
            raise CheckpointError(
                f"{name} is not a safetensors file: {e}", path=str(directory)
            ) from e
    return state, tensors


def _latest_name(out: Path) -> str | None:
    try:
        name = (out / LATEST).read_text().strip()
    except FileNotFoundError:
        return None
    if not _NAME.fullmatch(name):
        raise CheckpointError(f"{LATEST} names {name!r}, not a checkpoint directory", path=str(out))
    return name


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _prune(out: Path, keep: int) -> None:
    checkpoints = sorted(
        (int(m.group(1)), p) for p in out.iterdir() if (m := _NAME.fullmatch(p.name)) and p.is_dir()
    )
    latest = _latest_name(out)
    for _, p in checkpoints[:-keep]:
        if p.name != latest:
            shutil.rmtree(p, ignore_errors=True)
