"""The server's scheduler: requests queue, at most ``max_sessions`` generate, one token each in turn.

One worker thread runs every generation. Each admitted request gets a session of the
model (:meth:`anekit.llm.Model.session`: its own KV cache over the shared weights), and
the worker takes one token from each active generation in turn (round robin), so a long
reply cannot starve a short one and every reply is exactly what it would be alone. The
rest wait in a FIFO queue of at most ``max_queue``; beyond that a request is refused
(429), and one that waits longer than ``queue_timeout`` for a session is refused (503),
each with a ``Retry-After``. A cancelled request (its client went away) stops at the next
token. Text goes back to the request's event loop as events: ``("text", piece)``, then
``("done", None)`` or ``("error", ApiError)``.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from anekit.errors import AnekitError
from anekit.llm.serve.protocol import ApiError, Request
from anekit.llm.stops import ReplyText

__all__ = ["Engine", "Job"]

IDLE_WAIT_S = 0.5  # the worker's wait for work when nothing runs (woken at once by a submit)


@dataclass
class Job:
    """One request in the engine: its prompt, its limits, and where its events go."""

    request: Request
    prompt_ids: list[int]
    max_tokens: int
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    id: int = 0
    cancelled: threading.Event = field(default_factory=threading.Event)
    reply: ReplyText | None = None
    finish_reason: str | None = None
    outcome: str = "queued"  # queued, running, completed, cancelled, refused, failed
    submitted: float = field(default_factory=time.perf_counter)
    started: float | None = None
    first_token: float | None = None
    finished: float | None = None
    tokens: Iterator[int] | None = None
    session: Any = None

    def cancel(self) -> None:
        """Stop this request at its next token (the client went away)."""
        self.cancelled.set()

    def emit(self, kind: str, value: Any = None) -> None:
        """Send an event to the request's coroutine (from the worker thread)."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the loop is closed: the server is shutting down
            pass

    @property
    def completion_tokens(self) -> int:
        return 0 if self.reply is None else len(self.reply.tokens)


class Engine:
    """Queues requests and runs their generations on a model, fairly, in one worker thread.

    Args:
        model: a loaded :class:`anekit.llm.Model`.
        tokenizer: its tokenizer (text of the replies).
        end_of_turn: token ids that end a reply.
        max_sessions: generations running at once (each holds a KV cache).
        max_queue: requests waiting for a session; more are refused with 429.
        queue_timeout: seconds a request may wait for a session before a 503.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        end_of_turn: tuple[int, ...],
        *,
        max_sessions: int = 1,
        max_queue: int = 16,
        queue_timeout: float = 60.0,
    ) -> None:
        self.model, self.tokenizer, self.end_of_turn = model, tokenizer, end_of_turn
        self.max_sessions, self.max_queue, self.queue_timeout = (
            max_sessions,
            max_queue,
            queue_timeout,
        )
        self._queue: collections.deque[Job] = collections.deque()
        self._active: list[Job] = []
        self._free: list[Any] = []  # sessions of finished requests, reused (memory stays bounded)
        self._wake = threading.Condition()
        self._ids = itertools.count(1)
        self._draining = False
        self._stopped = False
        self.counts = collections.Counter()
        self.generated_tokens = 0
        self._durations: collections.deque[float] = collections.deque(maxlen=32)
        self._thread = threading.Thread(target=self._work, name="anekit-serve-engine", daemon=True)

    # -- the request side ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue ``job``; ApiError 429 when the queue is full, 503 while draining."""
        with self._wake:
            if self._draining or self._stopped:
                self.counts["refused"] += 1
                raise ApiError(503, "the server is shutting down", kind="server_error",
                               code="shutting_down", retry_after=self.retry_after())  # fmt: skip
            free = max(self.max_sessions - len(self._active), 0)  # admitted at the next step
            if len(self._queue) - free >= self.max_queue:
                self.counts["refused"] += 1
                raise ApiError(
                    429,
                    f"the server is busy: {len(self._queue)} requests are waiting "
                    f"(--max-queue {self.max_queue}); retry later",
                    kind="rate_limit_error",
                    code="queue_full",
                    retry_after=self.retry_after(),
                )
            job.id = next(self._ids)
            self._queue.append(job)
            self._wake.notify()

    def retry_after(self) -> int:
        """Seconds until a session is likely free: the queue ahead times a recent request's length."""
        typical = sorted(self._durations)[len(self._durations) // 2] if self._durations else 1.0
        ahead = (len(self._queue) + 1) / max(self.max_sessions, 1)
        return max(1, math.ceil(typical * ahead))

    def status(self) -> dict[str, Any]:
        """What /health reports: running, waiting, and how requests ended so far."""
        with self._wake:
            return {
                "running": len(self._active),
                "queued": len(self._queue),
                "max_sessions": self.max_sessions,
                "max_queue": self.max_queue,
                "sessions": len(self._active) + len(self._free),
                "draining": self._draining,
                "requests": dict(self.counts),
                "generated_tokens": self.generated_tokens,
            }

    def drain(self) -> None:
        """Refuse new requests from now on; the running and queued ones finish."""
        with self._wake:
            self._draining = True

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel everything still running or queued and stop the worker."""
        with self._wake:
            self._draining = self._stopped = True
            for job in [*self._queue, *self._active]:
                job.cancel()
            self._wake.notify()
        self._thread.join(timeout)

    # -- the worker ---------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._wake:
                self._admit()
                if self._stopped and not self._active:
                    break
                if not self._active:
                    self._wake.wait(IDLE_WAIT_S)
                    continue
                running = list(self._active)
            for job in running:  # one token each, in turn
                self._step(job)

    def _admit(self) -> None:
        """Drop cancelled and timed-out waiters (503), then start queued jobs in order while
        sessions are free."""
        now, waiting = time.perf_counter(), collections.deque()
        for job in self._queue:
            if job.cancelled.is_set():
                self._end(job, "cancelled")
            elif now - job.submitted > self.queue_timeout:
                self._end(job, "refused")
                job.emit("error", ApiError(
                    503, f"no session became free within {self.queue_timeout:g} s; retry later",
                    kind="server_error", code="queue_timeout", retry_after=self.retry_after()))  # fmt: skip
            else:
                waiting.append(job)
        self._queue = waiting
        while self._queue and len(self._active) < self.max_sessions:
            self._begin(self._queue.popleft())

    def _begin(self, job: Job) -> None:
        job.session = self._free.pop() if self._free else self.model.session()
        job.reply = ReplyText(self.tokenizer, job.prompt_ids, job.request.stop)
        stop = () if job.request.ignore_eos else self.end_of_turn
        job.tokens = job.session.stream(
            job.prompt_ids, job.max_tokens, stop=stop, **job.request.sampling()
        )
        job.started, job.outcome = time.perf_counter(), "running"
        self._active.append(job)

    def _step(self, job: Job) -> None:
        """Take one token of ``job`` (or end it: cancelled, finished, stopped, failed)."""
        assert job.tokens is not None and job.reply is not None
        if job.cancelled.is_set():
            return self._end(job, "cancelled")
        try:
            token = next(job.tokens)
        except StopIteration:
            return self._finish(job)
        except AnekitError as e:
            self._end(job, "failed")
            return job.emit("error", ApiError(500, f"generation failed: {e}", kind="server_error"))
        if job.first_token is None:
            job.first_token = time.perf_counter()
        self.generated_tokens += 1
        piece = job.reply.push(token)
        if piece:
            job.emit("text", piece)
        if job.reply.stop is not None:
            self._finish(job)

    def _finish(self, job: Job) -> None:
        assert job.reply is not None
        tail = job.reply.finish()
        if tail:
            job.emit("text", tail)
        job.finish_reason = job.reply.finish_reason(job.max_tokens)
        self._end(job, "completed")
        job.emit("done")

    def _end(self, job: Job, outcome: str) -> None:
        """Release ``job``'s session for the next request and count how it ended."""
        if job.tokens is not None:
            job.tokens.close()  # type: ignore[attr-defined]
        job.outcome, job.finished = outcome, time.perf_counter()
        if outcome == "cancelled":
            job.emit("cancelled")
        with self._wake:
            if job in self._active:
                self._active.remove(job)
            if job.session is not None:
                self._free.append(job.session)
                job.session = None
            self.counts[outcome] += 1
            if job.started is not None:
                self._durations.append(job.finished - job.started)
