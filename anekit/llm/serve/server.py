"""Running the server: a loaded model, its engine and app, on uvicorn, stopped cleanly by SIGTERM.

Why Starlette and uvicorn: the API is five routes whose validation is ours (each error an
OpenAI error object naming the field), so FastAPI's pydantic models and generated docs
would be a second schema to keep in step, and its 422 errors would have to be rewritten
into OpenAI's; Starlette is the small, well-kept ASGI toolkit FastAPI itself is built on
(routing, streaming responses with disconnect detection), and uvicorn is the reference
ASGI server (HTTP/1.1 in pure Python through h11, graceful shutdown on SIGTERM).
"""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path
from typing import Any

from anekit.errors import UsageError
from anekit.llm.serve.app import ServeSettings, create_app
from anekit.llm.serve.engine import Engine

__all__ = ["health_facts", "listen", "run_server"]


def health_facts(model: Any, path: str) -> dict[str, Any]:
    """What /health says about the model: name, chip, the backend each program runs on, fallbacks.

    A program's numerics profile and placement are reported once kernels say them
    (``Kernel.numerics``, ``Kernel.placement``); until then only the backend name.
    """
    programs = [
        {
            "program": i,
            "backend": kernel.backend,
            **{
                k: _plain(getattr(kernel, k))
                for k in ("numerics", "placement")
                if hasattr(kernel, k)
            },
        }
        for i, kernel in enumerate(model.runner.kernels())
    ]
    return {
        "model": str(path),
        "architecture": model.config.architecture,
        "chip": model.chip,
        "backend": model.backend,
        "compress": model.compress,
        "max_seq": model.max_seq,
        "programs": programs,
        "fallback": any(p["backend"] != model.backend for p in programs),
    }


def _plain(value: Any) -> Any:
    """A kernel fact as JSON: plain values as they are, anything else by its ``name`` or text."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "as_dict"):
        return value.as_dict()
    return getattr(value, "name", str(value))


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), before the server starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def run_server(
    engine: Engine,
    settings: ServeSettings,
    sock: socket.socket,
    *,
    drain_seconds: float = 10.0,
    announce: Any = sys.stderr,
) -> None:
    """Serve until SIGTERM or Ctrl-C: new requests are then refused (503), running ones get
    ``drain_seconds`` to finish, and whatever is left is cancelled."""
    import uvicorn

    app = create_app(engine, settings)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,  # the app writes its own line per request
        timeout_graceful_shutdown=max(int(drain_seconds), 1),
        lifespan="on",
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            engine.drain()
            super().handle_exit(sig, frame)
            captured = getattr(self, "_captured_signals", [])
            if sig == signal.SIGTERM and sig in captured:
                # uvicorn raises a captured signal again once it has shut down; a drained
                # SIGTERM is a clean stop (exit status 0), Ctrl-C still ends as interrupted
                captured.remove(sig)

    host, port = sock.getsockname()[:2]
    if announce is not None:
        print(f"anekit serve: {settings.model_name!r} on http://{host}:{port}/v1 "
              f"(health: /health)", file=announce, flush=True)  # fmt: skip
    Server(config).run(sockets=[sock])


def model_name(path: str | Path, given: str | None) -> str:
    """The name clients ask for: ``--served-model-name``, else the model's directory or file name."""
    return given or Path(path).resolve().name
