"""The worker protocol: JSON headers plus binary frames over a pipe, and errors that keep their class.

A message is one JSON object (``{"op": ..., ..., "frames": n}``) followed by ``n``
byte frames. A header that is not such an object raises :class:`EvaluationError`
at the receiver, which answers with an error instead of dying.

An exception crosses as its class (module and name), message and public fields,
and is rebuilt as the same class on the other side: a ``CompileBudgetExhausted``
raised in the worker is a ``CompileBudgetExhausted`` in the parent, with ``used``
and ``limit`` (and a ``CompileError`` with its NSError domain, code and userInfo).
Only anekit errors and a few built-in types are rebuilt; anything else arrives as
``EvaluationError`` naming the original type. The worker's traceback rides along
as ``worker_traceback``.
"""

from __future__ import annotations

import builtins
import importlib
import json
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from anekit.errors import AnekitError, EvaluationError

MAX_FRAMES = 1 << 16  # a program's MIL text plus its weight files
MAX_TRACEBACK_CHARS = 8000

# Built-in exceptions the parent rebuilds as themselves (the rest become EvaluationError).
BUILTIN_ERRORS = (
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "RuntimeError",
    "OverflowError",
    "MemoryError",
    "NotImplementedError",
)


def send(conn: Connection, header: dict[str, Any], frames: Sequence[bytes] = ()) -> None:
    """Send one message."""
    conn.send_bytes(json.dumps({**header, "frames": len(frames)}).encode())
    for frame in frames:
        conn.send_bytes(frame)


def recv(conn: Connection) -> tuple[dict[str, Any], list[bytes]]:
    """Receive one message; EvaluationError for a malformed header (EOFError if the pipe closed)."""
    raw = conn.recv_bytes()
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise EvaluationError(f"malformed message: {len(raw)} bytes that are not JSON") from None
    # a command names its "op", a reply says whether it is "ok"
    if not isinstance(header, dict) or not ("op" in header or "ok" in header):
        raise EvaluationError(
            f"malformed message: expected a JSON object with 'op' or 'ok', found {raw[:80]!r}"
        )
    count = header.pop("frames", 0)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_FRAMES:
        raise EvaluationError(
            f"malformed message: frame count {count!r} is not in [0, {MAX_FRAMES}]"
        )
    return header, [conn.recv_bytes() for _ in range(count)]


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def encode_error(e: BaseException) -> dict[str, Any]:
    """The reply that carries ``e`` to the other side."""
    fields = {
        k: v for k, v in vars(e).items() if not k.startswith("_") and _jsonable(v)
    }  # fmt: skip
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return {
        "ok": False,
        "kind": type(e).__name__,
        "module": type(e).__module__,
        "message": str(e),
        "fields": fields,
        "traceback": tb[-MAX_TRACEBACK_CHARS:],
    }


def _anekit_class(module: str, kind: str) -> type[AnekitError] | None:
    if not module.startswith("anekit.") or not kind.isidentifier():
        return None
    try:
        cls = getattr(importlib.import_module(module), kind, None)
    except ImportError:
        return None
    return cls if isinstance(cls, type) and issubclass(cls, AnekitError) else None


def rebuild_error(reply: dict[str, Any]) -> Exception:
    """The exception an error reply carries, as its own class where it can be rebuilt."""
    kind, message = str(reply.get("kind")), str(reply.get("message"))
    module = str(reply.get("module", ""))
    cls = _anekit_class(module, kind)
    if cls is not None:
        err: Exception = cls.__new__(cls)
        Exception.__init__(err, message)  # str(err) is the worker's message, as rendered there
        fields = reply.get("fields")
        for name, value in fields.items() if isinstance(fields, dict) else ():
            setattr(err, name, value)
    elif module == "builtins" and kind in BUILTIN_ERRORS:
        err = getattr(builtins, kind)(message)
    else:
        err = EvaluationError(f"worker raised {kind}: {message}")
    err.worker_traceback = reply.get("traceback")  # type: ignore[attr-defined]
    return err
