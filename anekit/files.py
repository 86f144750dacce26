"""Files on disk: written atomically, and read with suspicion.

Writing: :func:`write_atomic` leaves either the old or the new content, never a mix; it writes
through a symbolic link to its target, and into a character device or FIFO as a stream, never
replacing either with a regular file. :func:`check_output` refuses a path it could not write
before a command starts its work.

Reading: a path given by a user or named inside another file (a checkpoint's
``state.json``) can be a FIFO, which blocks ``open()`` forever, a device such as
``/dev/zero``, which never ends, or a sparse file of many GiB, which ``read()`` would pull
into memory whole. :func:`open_regular` refuses all three before reading a byte.

Model files: a name read inside a model's files (a shard in an index, a MIL weight path) must
be a relative name without ``..`` (:func:`model_file`); a symbolic link placed in the directory,
as the Hugging Face hub cache places its files (into ``../../blobs``), is followed to a regular
file. Untrusted JSON goes through :func:`parse_json`, which refuses deep nesting before parsing.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from anekit.errors import AnekitError, UsageError, os_reason

__all__ = [
    "MAX_JSON_DEPTH",
    "ErrorFactory",
    "check_output",
    "exchange",
    "file_kind",
    "fsync_dir",
    "map_readonly",
    "model_file",
    "open_regular",
    "parse_json",
    "read_json",
    "read_npz",
    "read_regular",
    "write_atomic",
    "write_synced",
]

# Builds the error to raise: ``error(message, path=...)``, as UsageError and CheckpointError do.
ErrorFactory = Callable[..., AnekitError]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What an ``st_mode`` is, in words: "a regular file", "a FIFO (named pipe)", ..."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_regular(
    path: str | os.PathLike[str], *, limit: int, what: str, error: ErrorFactory = UsageError
) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file (links followed) of at most ``limit`` bytes.

    Args:
        path (str | PathLike): the file.
        limit (int): the largest size accepted, in bytes.
        what (str): what the file should be, for messages ("a checkpoint file").
        error (callable): builds the error, ``error(message, path=str(path))``. Default:
            :class:`~anekit.errors.UsageError`.

    Raises:
        AnekitError (from ``error``): the path is missing, unreadable, not a regular file, or
            larger than ``limit``.
    """
    where = str(path)
    try:
        # stat first: a device is refused without opening it (opening some has side effects)
        _check(os.stat(path), limit, what, where, error)
        # O_NONBLOCK: a FIFO swapped in after the stat must not block the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise error(f"cannot read {what}: {os_reason(e)}", path=where) from None
    try:
        _check(os.fstat(fd), limit, what, where, error)  # the file actually opened
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def map_readonly(
    f: BinaryIO, *, what: str, path: str | os.PathLike[str], error: ErrorFactory = UsageError
) -> Any:
    """A read-only memory map of the whole of an open regular file (see :func:`open_regular`).

    Mapping needs address space, not memory: a huge sparse file under an address-space limit
    (``ulimit -v``) fails with ENOMEM, which is ``error`` here, not a bare OSError.
    """
    import mmap

    try:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:  # ValueError: an empty file
        reason = os_reason(e) if isinstance(e, OSError) else "the file is empty"
        raise error(f"cannot map {what} into memory: {reason}", path=str(path)) from None


def read_regular(
    path: str | os.PathLike[str], *, limit: int, what: str, error: ErrorFactory = UsageError
) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (see :func:`open_regular`)."""
    with open_regular(path, limit=limit, what=what, error=error) as f:
        # read(n) allocates n bytes up front: ask for the file's size, not the limit
        size = min(os.fstat(f.fileno()).st_size, limit)
        try:
            data = f.read(size + 1)  # one more: a file that grew since the check shows
        except OSError as e:
            raise error(f"cannot read {what}: {os_reason(e)}", path=str(path)) from None
    if len(data) > size:
        raise error(f"grew past {size} bytes while being read; expected {what}", path=str(path))
    return data


def _check(info: os.stat_result, limit: int, what: str, where: str, error: ErrorFactory) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise error(f"is {file_kind(info.st_mode)}; expected {what}", path=where)
    if info.st_size > limit:
        raise error(f"{info.st_size} bytes; expected {what} of at most {limit} bytes", path=where)


def read_npz(
    path: str | os.PathLike[str], *, limit: int, what: str, error: ErrorFactory = UsageError
) -> dict[str, Any]:
    """The named arrays of an ``.npz`` file, each header checked against its member first.

    An ``.npz`` is a zip of ``.npy`` files; a header may declare any shape, and a compressed
    member may inflate to any size. Refused before anything is allocated: a file over
    ``limit`` bytes, members inflating past ``limit`` in all, a header declaring more data
    than its member holds, object (pickled) arrays. Every failure is ``error``.
    """
    import zipfile
    import zlib

    where = str(path)
    try:
        with open_regular(path, limit=limit, what=what, error=error) as f, zipfile.ZipFile(f) as z:
            members = z.infolist()
            inflated = sum(m.file_size for m in members)
            if inflated > limit:
                raise error(f"its arrays inflate to {inflated} bytes; expected {what} of at most "
                            f"{limit}", path=where)  # fmt: skip
            return {m.filename.removesuffix(".npy"): _npz_member(z, m, error, where)
                    for m in members}  # fmt: skip
    except AnekitError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as e:
        raise error(f"not a readable .npz file ({e}); expected {what}", path=where) from None


def _npz_member(z: Any, member: Any, error: ErrorFactory, where: str) -> Any:
    """One member's array, its header's size checked against the member's."""
    import numpy as np

    fmt = np.lib.format
    with z.open(member) as f:
        version = fmt.read_magic(f)
        read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read_header(f)
        if dtype.hasobject:
            raise error(f"array {member.filename!r} holds Python objects (a pickle); "
                        "expected numbers", path=where)  # fmt: skip
        declared = math.prod(shape) * dtype.itemsize
        if declared > member.file_size:
            raise error(f"array {member.filename!r} declares {list(shape)} {dtype} "
                        f"({declared} bytes), its member holds {member.file_size}", path=where)  # fmt: skip
    with z.open(member) as f:
        return fmt.read_array(f, allow_pickle=False)


def model_file(
    directory: str | os.PathLike[str], name: object, *, what: str, error: ErrorFactory = UsageError
) -> Path:
    """``directory / name`` for a ``name`` read inside a model's files: relative, without ``..``.

    The name is judged as written, not where links lead: a link placed in the directory is
    the directory's owner's choice (the Hugging Face hub cache links every file into
    ``../../blobs``), so it is followed; opening through :func:`open_regular` then refuses
    anything that is not a regular file.
    """
    bad = not isinstance(name, str) or not name or name.startswith("/")
    if bad or "\\" in name or "\0" in name or ".." in Path(name).parts or name.strip(".") == "":
        raise error(
            f"{what} {name!r} is not a relative file name inside the directory (no '..', "
            "no absolute path)",
            path=str(directory),
        )
    return Path(directory) / name


MAX_JSON_DEPTH = 64  # the deepest nesting any JSON file anekit reads has is under 10
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_PAIR = re.compile(r"\[\]|\{\}")


def _too_deep(text: str, depth: int) -> str | None:
    """Why ``text`` cannot be parsed within ``depth`` levels of nesting, or None.

    Each pass removes the innermost pairs of brackets (strings removed first), so a document
    nested ``n`` deep empties in ``n`` passes; every pass is one regular-expression scan.
    """
    rest = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if re.search(f"[\\[{{]{{{depth + 1}}}", rest):  # a run of openers: too deep in one scan
        return f"it is nested deeper than {depth} levels"
    for _ in range(depth):
        if not rest:
            return None
        rest, pairs = _BRACKET_PAIR.subn("", rest)
        if not pairs:
            return "its brackets do not balance"
    return f"it is nested deeper than {depth} levels" if rest else None


def parse_json(
    text: bytes | str,
    *,
    what: str,
    path: str,
    error: ErrorFactory = UsageError,
    depth: int = MAX_JSON_DEPTH,
) -> Any:
    """The values of untrusted JSON text; nesting past ``depth`` refused before parsing.

    Raises:
        AnekitError (from ``error``): not UTF-8, not JSON, or nested too deep. The message
            says where the text stops being JSON, never quoting it.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise error(f"not UTF-8 text at byte {e.start}; expected {what}", path=path) from None
    problem = _too_deep(text, depth)
    if problem is not None:
        raise error(f"not readable JSON: {problem}; expected {what}", path=path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(
            f"not JSON ({e.msg} at line {e.lineno} column {e.colno}); expected {what}", path=path
        ) from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise error(f"not readable JSON ({e}); expected {what}", path=path) from None


def read_json(
    path: str | os.PathLike[str], *, limit: int, what: str, error: ErrorFactory = UsageError
) -> Any:
    """The JSON values of a regular file of at most ``limit`` bytes (see :func:`parse_json`)."""
    data = read_regular(path, limit=limit, what=what, error=error)
    return parse_json(data, what=what, path=str(path), error=error)


_STREAMS = (stat.S_ISCHR, stat.S_ISFIFO)  # written into as they are, never replaced


def _output_target(path: str | os.PathLike[str]) -> tuple[Path, os.stat_result | None]:
    """Where writing ``path`` lands (links followed) and what is there now (None: nothing)."""
    target = Path(os.path.realpath(path))
    try:
        return target, os.stat(target)
    except FileNotFoundError:
        if target.is_symlink():  # realpath stops inside a loop of links
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path)) from None
        return target, None


def _not_writable(info: os.stat_result | None) -> str | None:
    """Why an existing file cannot be written as an output, or None."""
    if info is None or stat.S_ISREG(info.st_mode) or any(t(info.st_mode) for t in _STREAMS):
        return None
    return f"is {file_kind(info.st_mode)}; expected a file name to write (a file, a device, a FIFO)"


def check_output(path: str | os.PathLike[str], *, what: str = "output") -> Path:
    """Refuse an output path that :func:`write_atomic` could not write, before any work starts.

    Links are followed; an existing regular file, character device or FIFO is fine; a new
    file needs its nearest existing ancestor to be a writable directory (commands create the
    missing directories below it).

    Raises:
        UsageError: naming the path and what is wrong with it.
    """
    try:
        target, info = _output_target(path)
    except OSError as e:
        raise UsageError(f"cannot write the {what}: {os_reason(e)}", path=str(path)) from None
    problem = _not_writable(info)
    if problem is not None:
        raise UsageError(problem, path=str(path))
    if info is not None and not stat.S_ISREG(info.st_mode):
        where: Path = target
    else:
        where = target.parent
        while not where.exists() and where != where.parent:
            where = where.parent
        if not where.is_dir():
            raise UsageError(f"cannot write the {what}: {where} is not a directory", path=str(path))
    if not os.access(where, os.W_OK):
        raise UsageError(f"cannot write the {what}: {where} is not writable", path=str(path))
    return target


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file so a crash leaves either the old or the new content, never a mix.

    A symbolic link stays and its target receives the content; a character device or a FIFO
    is written into as it is (``/dev/null``, ``/dev/stdout``); a FIFO nobody reads, a
    directory or a block device is an OSError naming ``path``.
    """
    target, info = _output_target(path)
    problem = _not_writable(info)
    if problem is not None:
        raise OSError(errno.EINVAL, problem, str(path))
    if info is not None and any(t(info.st_mode) for t in _STREAMS):
        _write_stream(target, data, str(path))
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as e:  # name the file asked for, not the temporary one
        raise OSError(e.errno, e.strerror, str(path)) from e
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp creates the file 0600; give it the mode an ordinary open() would.
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from e  # not the temporary name
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_stream(target: Path, data: bytes, name: str) -> None:
    """Write ``data`` into a device or FIFO; a FIFO without a reader is an error, not a hang."""
    try:
        # O_NONBLOCK on open only: a FIFO nobody reads fails with ENXIO instead of blocking
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise OSError(e.errno, e.strerror, name) from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as e:
        raise OSError(e.errno, e.strerror, name) from None
    finally:
        os.close(fd)


def _umask() -> int:
    """The process umask (reading it means setting it; the restrictive stand-in lasts a moment)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


# renameat2(2) flag (Linux 3.15+, glibc 2.28+) and renamex_np(2) flag (macOS 10.12+)
_RENAME_EXCHANGE = 2
_RENAME_SWAP = 2
_AT_FDCWD = -100


def exchange(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Swap two existing paths in one atomic step; False where the system or file system cannot.

    Linux has ``renameat2(RENAME_EXCHANGE)``, macOS ``renamex_np(RENAME_SWAP)``; either swaps
    two directories so that every observer sees one or the other, never neither.
    """
    import ctypes  # only here: most of anekit never swaps anything

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    src, dst = os.fsencode(a), os.fsencode(b)
    if hasattr(libc, "renameat2"):
        result = libc.renameat2(_AT_FDCWD, src, _AT_FDCWD, dst, _RENAME_EXCHANGE)
    elif hasattr(libc, "renamex_np"):
        result = libc.renamex_np(src, dst, _RENAME_SWAP)
    else:
        return False
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # this file system cannot swap
    raise OSError(code, os.strerror(code), os.fsdecode(b))


def write_synced(path: Path, data: bytes) -> None:
    """Write a new file and flush it to the disk (a directory built to be renamed into place)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to the disk, so a rename in it survives a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
