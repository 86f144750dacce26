"""Starting ``anekit serve`` in a subprocess on a free loopback port, and always stopping it."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 15


class ServerProcess:
    """A running ``anekit serve``: its base URL and the lines it wrote to stderr so far."""

    def __init__(self, process: subprocess.Popen, url: str, lines: queue.Queue) -> None:
        self.process, self.url, self._lines = process, url, lines
        self.log: list[str] = []

    def stderr(self) -> list[str]:
        """Every stderr line so far (the access log among them)."""
        while True:
            try:
                self.log.append(self._lines.get_nowait())
            except queue.Empty:
                return self.log


@contextlib.contextmanager
def serve(model: Path, *flags: str) -> Iterator[ServerProcess]:
    """Run ``anekit serve --model MODEL --port 0 FLAGS``; yields once it listens; stops it."""
    argv = [sys.executable, "-m", "anekit", "serve", "--model", str(model), "--port", "0", *flags]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ))  # fmt: skip
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    try:
        url = _wait_for_url(process, lines)
        server = ServerProcess(process, url, lines)
        yield server
    finally:
        stop(process)


def _wait_for_url(process: subprocess.Popen, lines: queue.Queue) -> str:
    deadline, seen = time.monotonic() + START_TIMEOUT_S, []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        seen.append(line)
        found = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", line)
        if found:
            return found.group(1)
    raise RuntimeError("anekit serve did not start:\n" + "\n".join(seen))


def stop(process: subprocess.Popen) -> None:
    """SIGTERM (the server drains), then SIGKILL if it has not exited in time."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT_S)
