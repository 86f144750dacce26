"""Files on disk: written atomically, and read with suspicion.

Writing: :func:`write_atomic` leaves either the old or the new content, never a mix.

Reading: a path given by a user or named inside another file (a checkpoint's
``state.json``) can be a FIFO, which blocks ``open()`` forever, a device such as
``/dev/zero``, which never ends, or a sparse file of many GiB, which ``read()`` would pull
into memory whole. :func:`open_regular` refuses all three before reading a byte.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from anekit.errors import AnekitError, UsageError, os_reason

__all__ = [
    "ErrorFactory",
    "exchange",
    "file_kind",
    "fsync_dir",
    "open_regular",
    "read_regular",
    "resolve_inside",
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


def resolve_inside(
    root: str | os.PathLike[str], name: str, *, what: str, error: ErrorFactory = UsageError
) -> Path:
    """``root / name`` with links resolved; an error when that leaves ``root``.

    A link loop is not an error here (the path stays as far as it resolved); opening it then
    fails with "too many levels of symbolic links".
    """
    base = Path(os.path.realpath(root))
    target = Path(os.path.realpath(base / name))
    if target != base and base not in target.parents:
        raise error(f"{what} {name!r} resolves to {target}, outside {base}", path=str(root))
    return target


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file so a crash leaves either the old or the new content, never a mix."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:  # name the file asked for, not the temporary one
        raise OSError(e.errno, e.strerror, str(path)) from e
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp creates the file 0600; give it the mode an ordinary open() would.
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from e  # not the temporary name
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
