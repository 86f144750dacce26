"""Ctrl-C at a step boundary: the first SIGINT asks the loop to stop after the step it is in.

A step changes the data position, the loss scaler, the AdamW moments and the weights one
after another; an interrupt in between would leave a state no uninterrupted run ever has,
and a checkpoint of it would not resume the run. So the first SIGINT only sets a flag that
the loop reads once the step is whole (and checkpoints from there); a second SIGINT is
the user not wanting to wait, and stops at once without saving (the last checkpoint stays).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


class StopRequest:
    """A context that turns the first SIGINT into ``requested = True`` (main thread only).

    Outside the main thread Python delivers no signals, so there the context does nothing
    and ``requested`` stays False.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:  # the second Ctrl-C: stop now, the half step is not saved
            raise KeyboardInterrupt
        self.requested = True
