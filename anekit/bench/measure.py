"""Timing kernels: warm-up, then rounds; candidates interleaved; the Python side kept out.

Sequential timings call ``kernel.run()`` on inputs written once into the kernel's own
buffers (zero-copy IOSurfaces on the ANE), so no argument checking or copying is
timed. Queue timings submit ``n`` evaluations through ``kernel.submit`` and wait for
all of them. Calls shorter than ``min_sample_s`` are timed in batches so the clock's
resolution and the loop's own cost stay small against what is measured.

Candidates that are compared are timed in the same rounds: each round takes one sample
of every candidate, in an order that rotates from round to round, so a burst of load
on a shared machine falls on all of them rather than on whichever ran last. A timing
keeps every round's sample; its spread (the slow rounds over the fastest) says how far the
machine's state moved while it was measured (:data:`NOISY_SPREAD`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.backends import Kernel, compile
from anekit.bench.programs import floor_program


@dataclass(frozen=True)
class Settings:
    """How long to measure each case.

    Attributes:
        warmup: calls before the rounds (compile caches, page faults, clocks ramping up);
            the first is timed alone and reported apart (``Timing.first_s``).
        min_reps: repetitions at least, however slow a call is.
        max_reps: repetitions at most, however fast.
        budget_s: time to aim for per case; repetitions are fitted to it.
        min_sample_s: a repetition lasts at least this long (fast calls are batched).
    """

    warmup: int
    min_reps: int
    max_reps: int
    budget_s: float
    min_sample_s: float = 1e-3


QUICK = Settings(warmup=1, min_reps=5, max_reps=100, budget_s=0.25)
FULL = Settings(warmup=3, min_reps=7, max_reps=1000, budget_s=2.0)

# A timing whose slow rounds took more than this many times its fastest measured a
# machine that changed under it (other work, clocks, contention): its median means little.
NOISY_SPREAD = 2.0


@dataclass(frozen=True)
class Timing:
    """Seconds per evaluation, one sample per round of ``evaluations`` evaluations.

    ``first_s`` is the very first call (lazy imports, allocations, caches filled), kept apart
    from the samples; None when no call came before the rounds.
    """

    samples: tuple[float, ...]
    evaluations: int
    first_s: float | None = None

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def min(self) -> float:
        return float(min(self.samples))

    @property
    def spread(self) -> float:
        """The slow rounds (90th percentile) over the fastest (1.0: a perfectly steady machine).

        The 90th percentile rather than the slowest round, so that one stray pause among
        many rounds does not condemn a steady measurement.
        """
        slow = float(np.percentile(self.samples, 90))
        return slow / self.min if self.min > 0 else float("inf")

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD

    def as_json(self) -> dict[str, Any]:
        """Min, median, quartiles and extremes over the rounds, the spread and its flag."""
        s = np.asarray(self.samples)
        p25, p50, p75 = np.percentile(s, [25, 50, 75])
        return {
            "median_s": float(p50),
            "p25_s": float(p25),
            "p75_s": float(p75),
            "min_s": float(s.min()),
            "max_s": float(s.max()),
            "spread": self.spread,
            "noisy": self.noisy,
            "reps": len(self.samples),
            "evaluations_per_rep": self.evaluations,
            "first_call_s": self.first_s,
        }


@dataclass(frozen=True)
class Candidate:
    """One thing to time: ``fn`` performs ``evaluations`` evaluations per call."""

    fn: Callable[[], object]
    evaluations: int = 1


def random_inputs(kernel: Kernel, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs of the kernel's shapes and dtypes."""
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(s.shape).astype(s.dtype.numpy) for s in kernel.inputs}


def load_buffers(kernel: Kernel, inputs: dict[str, np.ndarray]) -> None:
    """Write the inputs into the kernel's own input buffers, once, before timing ``run()``."""
    for name, value in inputs.items():
        np.copyto(kernel.input_buffer(name), value)


def run_candidate(kernel: Kernel) -> Candidate:
    """``kernel.run()`` on the inputs already in its buffers."""
    return Candidate(kernel.run)


def queue_candidate(kernel: Kernel, inputs: dict[str, np.ndarray], in_flight: int) -> Candidate:
    """``in_flight`` evaluations submitted at once, then waited for."""
    if in_flight < 1:
        raise ValueError(f"in_flight: expected at least 1 evaluation, found {in_flight}")

    def batch() -> None:
        futures = [kernel.submit(**inputs) for _ in range(in_flight)]
        for f in futures:
            f.result()

    return Candidate(batch, in_flight)


def time_run(kernel: Kernel, settings: Settings) -> Timing:
    """Time ``kernel.run()`` on the inputs already in its buffers."""
    return time_interleaved([run_candidate(kernel)], settings)[0]


def time_queue(
    kernel: Kernel, inputs: dict[str, np.ndarray], in_flight: int, settings: Settings
) -> Timing:
    """Time ``in_flight`` evaluations submitted at once; samples are seconds per evaluation."""
    return time_interleaved([queue_candidate(kernel, inputs, in_flight)], settings)[0]


def time_interleaved(candidates: Sequence[Candidate], settings: Settings) -> list[Timing]:
    """Time every candidate in the same rounds, rotating their order from round to round.

    Each candidate is warmed up and its batch sized to ``min_sample_s``; the number of
    rounds is fitted to ``budget_s`` per candidate. Round ``r`` starts at candidate
    ``r mod n``, so each runs first, last and in between equally often.
    """
    if not candidates:
        return []
    first_calls: list[float | None] = []  # each one's first call: one-time costs, apart
    for c in candidates:
        first_calls.append(_elapsed(c.fn, 1) / c.evaluations if settings.warmup else None)
        for _ in range(settings.warmup - 1):
            c.fn()
    firsts = [max(_elapsed(c.fn, 1), 1e-9) for c in candidates]
    batches = [min(1000, max(1, math.ceil(settings.min_sample_s / f))) for f in firsts]
    round_s = sum(f * b for f, b in zip(firsts, batches, strict=True)) / len(candidates)
    reps = min(settings.max_reps, max(settings.min_reps, int(settings.budget_s / round_s)))
    samples: list[list[float]] = [[] for _ in candidates]
    n = len(candidates)
    for r in range(reps):
        for i in (*range(r % n, n), *range(r % n)):
            c, batch = candidates[i], batches[i]
            samples[i].append(_elapsed(c.fn, batch) / (batch * c.evaluations))
    return [
        Timing(tuple(s), b * c.evaluations, first)
        for s, b, c, first in zip(samples, batches, candidates, first_calls, strict=True)
    ]


def _elapsed(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - t0


def per_call_overhead(backend: str, settings: Settings) -> dict[str, float]:
    """Seconds one evaluation of the smallest program costs through each calling path.

    ``run_s``: ``kernel.run()`` on its buffers; ``call_s``: ``kernel(**arrays)`` (checks and
    copies included); ``submit_s``: one ``submit`` waited on at a time.
    """
    with compile(floor_program(), backend=backend) as kernel:
        inputs = random_inputs(kernel)
        load_buffers(kernel, inputs)
        return {
            "run_s": time_run(kernel, settings).median,
            "call_s": time_interleaved([Candidate(lambda: kernel(**inputs))], settings)[0].median,
            "submit_s": time_queue(kernel, inputs, 1, settings).median,
        }
