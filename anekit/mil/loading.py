"""Reading MIL programs from disk: a model directory or a ``.mil`` file, with its weights.

One loader for every tool (the CLI commands, ``inspect``, the ANE client), so the
weights-directory rule, BOM and line-ending handling and the error messages are the
same everywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

from anekit.errors import MilSyntaxError, UsageError
from anekit.files import read_regular
from anekit.mil.parser import parse
from anekit.mil.program import Program
from anekit.mil.weights import WeightSource

__all__ = [
    "MAX_MIL_BYTES",
    "decode_mil",
    "load",
    "load_bytes",
    "load_path",
    "read_mil",
    "read_mil_bytes",
    "read_source",
    "read_stdin",
]

MODEL_FILE = "model.mil"
WEIGHTS_DIR = "weights"
# Weights live in weight files, so MIL text stays small (a 7B-parameter model is a few MB);
# the cap keeps a wrong path (a disk image, a pipe) from being read into memory whole.
MAX_MIL_BYTES = 256 * 2**20
STDIN = "-"  # the path that names standard input
STDIN_NAME = "<stdin>"  # its name in messages
_BOM = b"\xef\xbb\xbf"  # editors on Windows start UTF-8 files with a byte-order mark


def load_path(
    path: str | Path,
    weights: str | Path | None = None,
    *,
    shapes_only: bool = False,
    pause_gc: bool = False,
) -> Program:
    """Load a program from a model directory (``model.mil`` + ``weights/``), a ``.mil`` file or ``-``.

    Args:
        path (str | Path): a model directory, a MIL text file, or ``-`` for standard input.
        weights (str | Path): the directory holding the weight files. Default: for a model
            directory its ``weights/``; for a file, ``weights/`` beside it if there is one,
            else the file's own directory; for standard input, none.
        shapes_only (bool): read no weight file; every weight is zeros of its declared
            shape (see ``WeightSource``). For tools that need shapes, not values: the
            program is ``weightless``, and compiling or saving it is a UsageError.
        pause_gc (bool): pause the garbage collector during the parse (``mil.parse``).

    Raises:
        UsageError: the path (or ``weights``) is missing, of the wrong kind or unreadable.
        MilSyntaxError: the text is not UTF-8 (at the byte's line and column) or not MIL.
    """
    data, mil_path = read_source(path, weights)
    if weights is None and str(path) != STDIN and Path(path).is_dir():
        weights = Path(path) / WEIGHTS_DIR
    return load_bytes(data, mil_path, weights, shapes_only=shapes_only, pause_gc=pause_gc)


def read_source(path: str | Path, weights: str | Path | None = None) -> tuple[bytes, str]:
    """The bytes of the MIL text ``load_path`` reads for ``path``, and the file they came from.

    The file is ``path`` itself, the ``model.mil`` of a model directory, or ``"<stdin>"``
    for ``-``. Raises UsageError as :func:`load_path` does.
    """
    if str(path) == STDIN:
        return read_stdin(), STDIN_NAME
    given = Path(path)
    if weights is not None and not Path(weights).is_dir():
        found = "a file" if Path(weights).exists() else "nothing"
        raise UsageError(f"expected a weights directory, found {found}", path=str(weights))
    if given.is_dir():
        mil_path = given / MODEL_FILE
        if not mil_path.exists():
            raise UsageError(
                f"directory without {MODEL_FILE}; expected a model directory "
                f"({MODEL_FILE} + {WEIGHTS_DIR}/) or a .mil file",
                path=str(given),
            )
    elif not given.exists():
        raise UsageError(
            f"no such file or directory; expected a .mil file or a model directory "
            f"({MODEL_FILE} + {WEIGHTS_DIR}/)",
            path=str(given),
        )
    else:
        mil_path = given
    return read_mil_bytes(mil_path), str(mil_path)


def read_stdin() -> bytes:
    """Standard input as bytes, at most :data:`MAX_MIL_BYTES` of them."""
    chunks, size = [], 0
    while size <= MAX_MIL_BYTES:  # in pieces: read(n) would allocate n bytes at once
        chunk = sys.stdin.buffer.read(min(2**20, MAX_MIL_BYTES + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    if len(data) > MAX_MIL_BYTES:
        raise UsageError(f"more than {MAX_MIL_BYTES} bytes of MIL text", path=STDIN_NAME)
    return data


def load_bytes(
    data: bytes,
    file: str | Path,
    weights: str | Path | None = None,
    *,
    shapes_only: bool = False,
    pause_gc: bool = False,
) -> Program:
    """Parse the bytes of the MIL file ``file``; weights as for a file in :func:`load_path`.

    ``file`` is ``"<stdin>"`` for standard input, which has no weights directory by default.
    """
    name = str(file)
    if weights is None and name != STDIN_NAME:
        beside = Path(file).parent / WEIGHTS_DIR
        weights = beside if beside.is_dir() else Path(file).parent
    source = WeightSource(None if weights is None else Path(weights), shapes_only=shapes_only)
    return parse(decode_mil(data, name), source, file=name, pause_gc=pause_gc)


def load(directory: str | Path) -> Program:
    """Load a program saved with ``Program.save``: ``model.mil`` and ``weights/``."""
    root = Path(directory)
    if not root.is_dir():
        found = "a file (mil.load_path reads .mil files)" if root.exists() else "nothing"
        raise UsageError(
            f"expected a model directory ({MODEL_FILE} + {WEIGHTS_DIR}/), found {found}",
            path=str(root),
        )
    return load_path(root)


def read_mil(path: str | Path) -> str:
    """The text of one MIL file (see :func:`read_mil_bytes` and :func:`decode_mil`)."""
    return decode_mil(read_mil_bytes(path), str(path))


def read_mil_bytes(path: str | Path) -> bytes:
    """The bytes of one MIL file: a regular file (links followed) of at most MAX_MIL_BYTES."""
    return read_regular(path, limit=MAX_MIL_BYTES, what="a MIL text file")


def decode_mil(data: bytes, file: str) -> str:
    """The UTF-8 text of a MIL file with ``\\n`` newlines; a bad byte is a located syntax error.

    A leading byte-order mark is dropped; CRLF and lone CR become LF. The error names the
    bad byte, its offset in the file, and its line and column as the parser counts them.
    """
    body = data[len(_BOM) :] if data.startswith(_BOM) else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(data, len(data) - len(body) + e.start, file) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _not_utf8(data: bytes, offset: int, file: str) -> MilSyntaxError:
    """The error for the byte at ``offset`` of ``data`` (BOM included), located like the parser."""
    start = len(_BOM) if data.startswith(_BOM) else 0
    before = data[start:offset].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    line_start = before.rfind(b"\n") + 1
    return MilSyntaxError(
        f"expected UTF-8 text, found byte 0x{data[offset]:02x} at file offset {offset}",
        line=before.count(b"\n") + 1,
        column=len(before[line_start:].decode("utf-8", "replace")) + 1,
        file=file,
    )
