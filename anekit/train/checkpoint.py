"""Training checkpoints: safetensors files plus ``state.json``, written so a crash never loses the last good one.

Layout of an output directory::

    out/
      LATEST                 name of the newest complete checkpoint, replaced atomically
      ckpt-000300/
        model.safetensors    parameters (fp32)
        optimizer.safetensors
        tokenizer.bin        the run's tokenizer, when it is not byte-level
        state.json           format, step, config, RNG and data position, SHA-256 of each file

A save writes a hidden temporary directory, fsyncs every file and the directory,
renames it into place, and only then points ``LATEST`` at it. A save that fails
leaves ``LATEST`` and the checkpoint it names untouched; the temporaries a killed save
leaves behind are swept by the next save (:func:`sweep_temporaries`).

A checkpoint is untrusted input: ``state.json`` may name any file and claim any shape. A
file name must be a plain name inside the checkpoint directory (links resolved), every
file a regular one, and a file whose tensors are known in advance (``expected``) must have
exactly the size its header and those tensors imply, all checked before the body is read.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shutil
import stat
from pathlib import Path
from typing import Any

import numpy as np

from anekit.config import read_limit
from anekit.errors import CheckpointError
from anekit.files import (
    file_kind,
    fsync_dir,
    model_file,
    open_regular,
    read_regular,
    write_atomic,
    write_synced,
)

FORMAT = "anekit-train-checkpoint/1"
LATEST = "LATEST"
STATE = "state.json"
_NAME = re.compile(r"ckpt-(\d+)")
# What this module and write_atomic name their temporaries: ".ckpt-000300.k2j3.tmp", ".LATEST.x.tmp"
_TEMPORARY = re.compile(r"\.(ckpt-\d+|LATEST)\..+\.tmp")
# A file a checkpoint holds: a plain name, no directory part, not hidden
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
MAX_STATE_BYTES = 4 * 2**20  # configs, RNG state and digests: a few KB in practice
MAX_LATEST_BYTES = 64
MAX_HEADER_BYTES = 100 * 2**20  # the safetensors format's own limit on its JSON header
# safetensors dtype names -> NumPy (little-endian, as the format stores them)
_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
    "I8": "i1", "U8": "u1", "BOOL": "?",
}  # fmt: skip

# A file's expected tensors: name -> shape, all float32
Expected = dict[str, tuple[int, ...]]


def save_checkpoint(
    out_dir: str | Path,
    step: int,
    tensors: dict[str, dict[str, np.ndarray]],
    meta: dict[str, Any],
    keep: int = 2,
    files: dict[str, bytes] | None = None,
) -> Path:
    """Write ``tensors`` (file name -> named arrays), ``files`` (name -> bytes) and ``meta`` as checkpoint ``step``.

    Returns its directory. Keeps the newest ``keep`` checkpoints (at least 1) and removes
    older ones once the new one is in place; first sweeps the temporaries of killed saves.
    """
    from safetensors.numpy import save as st_save  # the "train" extra

    contents = {name: st_save({k: np.ascontiguousarray(v) for k, v in arrays.items()})
                for name, arrays in tensors.items()}  # fmt: skip
    contents |= files or {}
    for name in contents:
        if not _FILE_NAME.fullmatch(name) or name == STATE:
            raise CheckpointError(f"cannot store a file named {name!r} in a checkpoint")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sweep_temporaries(out)
    final = out / f"ckpt-{step:06d}"
    # os.mkdir, not mkdtemp: the directory gets the umask's mode, as every other one does
    tmp = out / f".{final.name}.{secrets.token_hex(6)}.tmp"
    os.mkdir(tmp)
    try:
        digests = {}
        for name, data in contents.items():
            write_synced(tmp / name, data)
            digests[name] = hashlib.sha256(data).hexdigest()
        state = {"format": FORMAT, "step": step, "files": digests, **meta}
        write_synced(tmp / STATE, json.dumps(state, indent=1, sort_keys=True).encode())
        fsync_dir(tmp)
        if final.exists():  # an older run's checkpoint of the same step, never the one LATEST names
            if _latest_name(out) == final.name:
                raise CheckpointError(
                    f"refusing to replace {final.name}, the latest checkpoint", path=str(out)
                )
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_atomic(out / LATEST, (final.name + "\n").encode())
    fsync_dir(out)
    _prune(out, keep=max(keep, 1))
    return final


def sweep_temporaries(out_dir: str | Path) -> list[str]:
    """Remove what killed saves left in ``out_dir`` (hidden ``*.tmp`` entries); returns their names.

    Only names this module and ``write_atomic`` give their temporaries are touched. One run
    writes to an output directory at a time (``anekit train`` refuses a second one).
    """
    out = Path(out_dir)
    if not out.is_dir():
        return []
    swept = []
    for p in out.iterdir():
        if _TEMPORARY.fullmatch(p.name):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            swept.append(p.name)
    return sorted(swept)


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

    The result also holds ``"directory"``, the checkpoint directory it was read from. Its
    format, step and file list are validated; the rest is for the caller to check.
    """
    directory = Path(path)
    if not (directory / STATE).exists():
        named = latest_checkpoint(directory) if (directory / LATEST).exists() else None
        if named is None:
            raise CheckpointError(
                "no checkpoint here (neither state.json nor LATEST)", path=str(directory)
            )
        directory = named
    where = str(directory)
    data = read_regular(
        directory / STATE, limit=MAX_STATE_BYTES, what=f"a {STATE}", error=CheckpointError
    )
    state = _json(data, f"cannot read {STATE}", where)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"expected format {FORMAT!r}, found {found!r}", path=where)
    step = state.get("step")
    if not is_count(step):
        raise CheckpointError(f"{STATE}: step must be an integer >= 0, found {step!r}", path=where)
    files = state.get("files")
    if not isinstance(files, dict):
        raise CheckpointError(f"{STATE} lists no files", path=where)
    for name, digest in files.items():
        if not _FILE_NAME.fullmatch(name) or name == STATE:
            raise CheckpointError(
                f"{STATE} names the file {name!r}; expected a plain file name in the checkpoint",
                path=where,
            )
        if not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
            raise CheckpointError(
                f"{STATE}: the SHA-256 of {name} is {digest!r}, not 64 hex digits", path=where
            )
    state["directory"] = where
    return state


def load_checkpoint(
    path: str | Path, expected: dict[str, Expected] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read a checkpoint (see :func:`read_state`) and its files; see :func:`load_files`."""
    state = read_state(path)
    return state, load_files(state, expected)


def load_files(
    state: dict[str, Any], expected: dict[str, Expected] | None = None
) -> dict[str, Any]:
    """The files ``state`` lists, each verified against its SHA-256: arrays or bytes by name.

    A ``.safetensors`` file becomes ``{tensor name: array}`` (read-only), any other file its
    bytes. ``expected`` gives, per file, the float32 tensors it must hold: their names,
    dtypes and shapes and the file's exact size are checked before its body is read.
    Raises CheckpointError for anything missing, corrupt, too large or of another format.
    """
    where = state["directory"]
    expected = expected or {}
    missing = sorted(set(expected) - set(state["files"]))
    if missing:
        raise CheckpointError(f"missing {', '.join(missing)}", path=where)
    loaded = {}
    for name, digest in state["files"].items():
        target = model_file(where, name, what="the file", error=CheckpointError)
        if name in expected:
            data = _read_expected(target, name, expected[name], where)
        else:
            data = read_regular(target, limit=read_limit(), what=name, error=CheckpointError)
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise CheckpointError(
                f"{name} is corrupt: SHA-256 {actual[:16]}..., state.json records {digest[:16]}...",
                path=where,
            )
        loaded[name] = (
            read_safetensors(data, name, where) if name.endswith(".safetensors") else data
        )
    return loaded


def check_size(state: dict[str, Any], name: str, body: int, tensors: int) -> None:
    """CheckpointError unless file ``name`` can hold ``tensors`` tensors of ``body`` bytes in all.

    Only the file's size is looked at, so a config claiming a huge model is refused before
    anything as long as the model is built (a list of its parameters, say).
    """
    where = state["directory"]
    if name not in state["files"]:
        raise CheckpointError(f"missing {name}", path=where)
    target = model_file(where, name, what="the file", error=CheckpointError)
    try:
        info = os.stat(target)
    except OSError as e:
        raise CheckpointError(f"cannot read {name}: {e.strerror}", path=where) from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(f"{name} is {file_kind(info.st_mode)}; expected a file", path=where)
    size = info.st_size
    low, high = 8 + body, 8 + body + _header_limit(tensors, 0) + 64 * tensors  # names ~64 bytes
    if not low <= size <= high:
        raise CheckpointError(
            f"{name} is {size} bytes; the model config implies {low} to {high}", path=where
        )


def _header_limit(tensors: int, name_bytes: int) -> int:
    """Bytes a safetensors header of ``tensors`` 2-D entries may take (about 100 each, plus names)."""
    return 4096 + tensors * (128 + 24 * 2) + name_bytes


def safetensors_bytes(shapes: Expected) -> int:
    """Bytes of the float32 tensors ``shapes`` (the body of their safetensors file)."""
    return 4 * sum(math.prod(shape) for shape in shapes.values())


def read_safetensors(data: bytes, name: str, where: str) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file, as read-only views of ``data``; CheckpointError if malformed."""
    header, start = _safetensors_header(data[:8], data, name, where)
    body = len(data) - start
    arrays, spans = {}, []
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        dtype, shape, (begin, end) = _tensor_entry(key, entry, name, where)
        if not 0 <= begin <= end <= body or end - begin != dtype.itemsize * math.prod(shape):
            raise CheckpointError(
                f"{name}: tensor {key!r} ({dtype}{list(shape)}) claims bytes [{begin}, {end}) "
                f"of a {body}-byte body",
                path=where,
            )
        arrays[key] = np.frombuffer(data, dtype, math.prod(shape), start + begin).reshape(shape)
        spans.append((begin, end))
    covered = 0
    for begin, end in sorted(spans):  # the format lays tensors end to end, no gaps or overlaps
        if begin != covered:
            raise CheckpointError(
                f"{name}: tensor data is not contiguous at body byte {covered}", path=where
            )
        covered = end
    if covered != body:
        raise CheckpointError(
            f"{name}: {body - covered} bytes after the last tensor's data", path=where
        )
    return arrays


def is_count(value: Any) -> bool:
    """Whether ``value`` is an int (not a bool) in [0, 2**63)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _read_expected(target: Path, name: str, shapes: Expected, where: str) -> bytes:
    """A safetensors file holding exactly ``shapes`` (float32): header and size checked first."""
    body = safetensors_bytes(shapes)
    # JSON of about 100 bytes a tensor ("name": {"dtype": "F32", "shape": [...], ...})
    header_limit = _header_limit(len(shapes), sum(len(k) + 24 * len(s) for k, s in shapes.items()))
    limit = 8 + header_limit + body
    with open_regular(target, limit=limit, what=name, error=CheckpointError) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        count = int.from_bytes(head, "little") if len(head) == 8 else 0
        if count > header_limit:
            raise CheckpointError(
                f"{name}: a header of {count} bytes; {len(shapes)} tensors need at most "
                f"{header_limit}",
                path=where,
            )
        header, start = _safetensors_header(head, head + f.read(count), name, where)
        found = {
            k: _tensor_entry(k, v, name, where) for k, v in header.items() if k != "__metadata__"
        }
        missing, extra = sorted(set(shapes) - set(found))[:5], sorted(set(found) - set(shapes))[:5]
        if missing or extra:
            raise CheckpointError(
                f"{name}: tensors do not match the model: missing {missing}, unexpected {extra}",
                path=where,
            )
        for key, shape in shapes.items():
            dtype, got, _ = found[key]
            if dtype != np.float32 or got != tuple(shape):
                raise CheckpointError(
                    f"{name}: tensor {key}: expected float32{list(shape)}, found {dtype}{list(got)}",
                    path=where,
                )
        if size != start + body:
            raise CheckpointError(
                f"{name} is {size} bytes; its header and the model's tensors make {start + body}",
                path=where,
            )
        f.seek(0)
        data = f.read(start + body + 1)
    if len(data) != start + body:
        raise CheckpointError(f"{name} changed size while being read", path=where)
    return data


def _safetensors_header(head: bytes, data: bytes, name: str, where: str) -> tuple[dict, int]:
    """The JSON header of a safetensors file and where its body starts."""
    if len(head) < 8:
        raise CheckpointError(
            f"{name}: {len(head)} bytes; a safetensors file starts with an 8-byte length",
            path=where,
        )
    count = int.from_bytes(head, "little")
    if count > min(len(data) - 8, MAX_HEADER_BYTES):
        raise CheckpointError(
            f"{name}: header of {count} bytes runs past the end of the file "
            f"({len(data)} bytes) or the format's limit ({MAX_HEADER_BYTES})",
            path=where,
        )
    header = _json(data[8 : 8 + count], f"{name} is not a safetensors file", where)
    if not isinstance(header, dict):
        raise CheckpointError(f"{name}: the header is not a JSON object", path=where)
    return header, 8 + count


def _tensor_entry(
    key: str, entry: Any, name: str, where: str
) -> tuple[np.dtype, tuple[int, ...], tuple[int, int]]:
    """(dtype, shape, data offsets) of one header entry, each of the expected type."""
    ok = isinstance(entry, dict) and entry.get("dtype") in _DTYPES
    shape, offsets = (entry.get("shape"), entry.get("data_offsets")) if ok else (None, None)
    ok = ok and isinstance(shape, list) and all(is_count(d) for d in shape)
    ok = ok and isinstance(offsets, list) and len(offsets) == 2 and all(map(is_count, offsets))
    if not ok:
        raise CheckpointError(
            f"{name}: tensor {key!r} has a malformed entry {str(entry)[:200]}; expected dtype, "
            "shape and data_offsets",
            path=where,
        )
    return np.dtype(_DTYPES[entry["dtype"]]), tuple(shape), (offsets[0], offsets[1])


def _json(data: bytes, what: str, where: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than the stack
        raise CheckpointError(f"{what}: {str(e)[:200]}", path=where) from None


def _latest_name(out: Path) -> str | None:
    if not (out / LATEST).exists() and not (out / LATEST).is_symlink():
        return None
    data = read_regular(
        out / LATEST, limit=MAX_LATEST_BYTES, what="a LATEST file", error=CheckpointError
    )
    name = data.decode("utf-8", "replace").strip()
    if not _NAME.fullmatch(name):
        raise CheckpointError(f"{LATEST} names {name!r}, not a checkpoint directory", path=str(out))
    return name


def _prune(out: Path, keep: int) -> None:
    checkpoints = sorted(
        (int(m.group(1)), p) for p in out.iterdir() if (m := _NAME.fullmatch(p.name)) and p.is_dir()
    )
    latest = _latest_name(out)
    for _, p in checkpoints[:-keep]:
        if p.name != latest:
            shutil.rmtree(p, ignore_errors=True)
