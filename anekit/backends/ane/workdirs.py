"""The compiler's ``NSTemporaryDirectory()/<hexStringIdentifier>/`` directories.

The in-memory compiler reads ``model.mil`` and ``weights/`` from a directory named
by the model's hex identifier (ANE_NOTES 2.1 step 3). Kernels of identical programs
share one; the last to close removes it. Two rules keep that safe:

- a directory nobody alive uses (left by a crashed process) is cleared before
  anything is written into it, so stale files never mix with new ones;
- a directory in use (by this process or another live one) is reused only if its
  files hold exactly the bytes this program needs; a mismatch raises CompileError,
  since the identifier would then name two different programs. The exception is the
  files named in ``rewrite`` (the weight files, with ``workdir_weights="rewrite"``):
  whether the identifier covers the weight bytes is contested (Orion and maderix
  disagree), and if it does not, two kernels of one text with different weights share
  a directory; the hardware-tested clients write the weights before every compile,
  and so does anekit (the compiler reads them at compile time; weights are frozen then).

Which processes use a directory is recorded in marker files beside it
(``<hex>.anekit-<pid>``), not inside it, so the compiler sees only its own files.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from anekit.errors import CompileError
from anekit.files import write_atomic

MARKER = ".anekit-"


class WorkDirs:
    """Reference-counted work directories, shared by kernels of identical programs."""

    def __init__(self) -> None:
        # re-entrant: a kernel collected while this thread holds it releases its directory
        self._lock = threading.RLock()
        self._users: dict[Path, int] = {}

    def acquire(
        self, path: Path, files: dict[str, bytes], rewrite: frozenset[str] = frozenset()
    ) -> Path:
        """Make ``path`` hold ``files`` (relative path -> bytes) for one more user; returns it.

        A directory in use must hold the same bytes, except the files named in ``rewrite``,
        which are written again.
        """
        with self._lock:
            if path in self._users or _live_owners(path):
                _verify(path, {k: v for k, v in files.items() if k not in rewrite})
                _write(path, {k: v for k, v in files.items() if k in rewrite})
            else:
                if path.exists():  # left behind by a process that is gone
                    shutil.rmtree(path)
                _write(path, files)
            _marker(path, os.getpid()).touch()
            self._users[path] = self._users.get(path, 0) + 1
        return path

    def release(self, path: Path) -> None:
        """Forget one user of ``path``; the last user of the last live process removes it."""
        with self._lock:
            self._users[path] -= 1
            if self._users[path]:
                return
            del self._users[path]
            _marker(path, os.getpid()).unlink(missing_ok=True)
            if not _live_owners(path):
                shutil.rmtree(path, ignore_errors=True)

    def users(self, path: Path) -> int:
        """How many kernels of this process use ``path``."""
        with self._lock:
            return self._users.get(path, 0)


def _marker(path: Path, pid: int) -> Path:
    return path.with_name(f"{path.name}{MARKER}{pid}")


def _live_owners(path: Path) -> list[int]:
    """Processes other than this one whose marker says they use ``path``; stale markers go."""
    owners = []
    for marker in path.parent.glob(f"{path.name}{MARKER}*"):
        pid_text = marker.name[len(path.name) + len(MARKER) :]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        if _alive(int(pid_text)):
            owners.append(int(pid_text))
        else:
            marker.unlink(missing_ok=True)
    return owners


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _target(path: Path, name: str) -> Path:
    """``path/name``, refusing names that would escape ``path``."""
    target = (path / name).resolve()
    if not target.is_relative_to(path.resolve()):
        raise CompileError(f"weight file name {name!r} escapes the work directory {path}")
    return target


def _write(path: Path, files: dict[str, bytes]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "weights").mkdir(exist_ok=True)
    for name, data in files.items():
        target = _target(path, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, data)


def _verify(path: Path, files: dict[str, bytes]) -> None:
    """CompileError unless every file under ``path`` holds exactly the bytes given."""
    for name, data in files.items():
        target = _target(path, name)
        try:
            same = target.stat().st_size == len(data) and target.read_bytes() == data
        except OSError:
            same = False
        if not same:
            raise CompileError(
                f"{path} is in use by another kernel but its {name} differs from this program's: "
                f"the framework's hexStringIdentifier {path.name!r} names two different programs; "
                "refusing to share the directory"
            )


WORKDIRS = WorkDirs()
