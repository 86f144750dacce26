"""A bound on every collective: a rank whose peers died or hung exits, naming them, instead of waiting.

Neither engine bounds a collective's wait (MLX's ring has no timeout at all; Gloo's
applies only to some failures), so a thread watches the clock: armed around each
collective, it prints one line and ends the process with exit code 2 when the collective
has not returned within the timeout. ``os._exit`` because the main thread is stuck inside
the engine and cannot unwind; checkpoints are atomic, so the last one stays whole.
It also ends a rank whose supervisor (``anekit train --nproc``) died.
"""

from __future__ import annotations

import os
import threading
import time

EXIT_CODE = 2  # as any other `anekit train: error: ...`
POLL_SECONDS = 0.1


class Watchdog:
    """Ends this process when an armed collective outlives ``timeout`` seconds."""

    def __init__(
        self, rank: int, timeout: float, peers: str, supervisor: int | None = None
    ) -> None:
        self.rank = rank
        self.timeout = timeout
        self.peers = peers  # who to blame: "rank 1", "one of ranks [1, 2, 3]"
        self.supervisor = supervisor
        self._lock = threading.Lock()
        self._what: str | None = None
        self._deadline = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="anekit-watchdog", daemon=True)
        self._thread.start()

    def arm(self, what: str) -> None:
        """Start the clock for collective ``what`` (a phrase for the message)."""
        with self._lock:
            self._what, self._deadline = what, time.monotonic() + self.timeout

    def disarm(self) -> None:
        with self._lock:
            self._what = None

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5 * POLL_SECONDS)

    def _watch(self) -> None:
        while not self._stopped.wait(POLL_SECONDS):
            if self.supervisor is not None and os.getppid() != self.supervisor:
                self._exit(f"the supervisor (pid {self.supervisor}) is gone; stopping")
            with self._lock:
                late = self._what is not None and time.monotonic() > self._deadline
                what = self._what
            if late:
                self._exit(
                    f"{what} got no answer within {self.timeout:g} s (--dist-timeout): "
                    f"{self.peers} died or hung"
                )

    def _exit(self, message: str) -> None:
        # straight to the descriptor: the main thread may hold sys.stderr's lock
        os.write(2, f"anekit train: error: rank {self.rank}: {message}\n".encode())
        os._exit(EXIT_CODE)
