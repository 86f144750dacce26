"""Timing one kernel: warm-up, then repetitions; the Python side kept out of the measurement.

Sequential timings call ``kernel.run()`` on inputs written once into the kernel's own
buffers (zero-copy IOSurfaces on the ANE), so no argument checking or copying is
timed. Queue timings submit ``n`` evaluations through ``kernel.submit`` and wait for
all of them. Calls shorter than ``min_sample_s`` are timed in batches so the clock's
resolution and the loop's own cost stay small against what is measured.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.backends import Kernel, compile
from anekit.bench.programs import floor_program


@dataclass(frozen=True)
class Settings:
    """How long to measure each case.

    Attributes:
        warmup: untimed calls first (compile caches, page faults, clocks ramping up).
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


QUICK = Settings(warmup=1, min_reps=3, max_reps=100, budget_s=0.25)
FULL = Settings(warmup=3, min_reps=7, max_reps=1000, budget_s=2.0)


@dataclass(frozen=True)
class Timing:
    """Seconds per evaluation, one sample per repetition of ``evaluations`` evaluations."""

    samples: tuple[float, ...]
    evaluations: int

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    def as_json(self) -> dict[str, Any]:
        """Median and spread (quartiles, extremes) over the repetitions."""
        s = np.asarray(self.samples)
        p25, p50, p75 = np.percentile(s, [25, 50, 75])
        return {
            "median_s": float(p50),
            "p25_s": float(p25),
            "p75_s": float(p75),
            "min_s": float(s.min()),
            "max_s": float(s.max()),
            "reps": len(self.samples),
            "evaluations_per_rep": self.evaluations,
        }


def random_inputs(kernel: Kernel, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs of the kernel's shapes and dtypes."""
    rng = np.random.default_rng(seed)
    return {s.name: rng.standard_normal(s.shape).astype(s.dtype.numpy) for s in kernel.inputs}


def load_buffers(kernel: Kernel, inputs: dict[str, np.ndarray]) -> None:
    """Write the inputs into the kernel's own input buffers, once, before timing ``run()``."""
    for name, value in inputs.items():
        np.copyto(kernel.input_buffer(name), value)


def time_run(kernel: Kernel, settings: Settings) -> Timing:
    """Time ``kernel.run()`` on the inputs already in its buffers."""
    return _time(kernel.run, 1, settings)


def time_queue(
    kernel: Kernel, inputs: dict[str, np.ndarray], in_flight: int, settings: Settings
) -> Timing:
    """Time ``in_flight`` evaluations submitted at once; samples are seconds per evaluation."""
    if in_flight < 1:
        raise ValueError(f"in_flight: expected at least 1 evaluation, found {in_flight}")

    def batch() -> None:
        futures = [kernel.submit(**inputs) for _ in range(in_flight)]
        for f in futures:
            f.result()

    return _time(batch, in_flight, settings)


def _time(fn: Callable[[], object], evaluations: int, settings: Settings) -> Timing:
    """Warm up, size the batches and repetitions to the budget, then sample."""
    for _ in range(settings.warmup):
        fn()
    first = max(_elapsed(fn, 1), 1e-9)
    batch = min(1000, max(1, math.ceil(settings.min_sample_s / first)))
    reps = int(settings.budget_s / (first * batch))
    reps = min(settings.max_reps, max(settings.min_reps, reps))
    per_eval = batch * evaluations
    samples = tuple(_elapsed(fn, batch) / per_eval for _ in range(reps))
    return Timing(samples, per_eval)


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
            "call_s": _time(lambda: kernel(**inputs), 1, settings).median,
            "submit_s": time_queue(kernel, inputs, 1, settings).median,
        }
