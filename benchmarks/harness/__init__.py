"""Side-by-side timing that holds on a busy machine (shared by ``runtime.py`` and ``train.py``).

Candidates run in one process with BLAS and PyTorch pinned to the same thread count
(threadpoolctl, ``torch.set_num_threads``), interleaved: every round runs each candidate
once, in an order rotated from round to round, so load that comes and goes hits all of
them alike. Each reports the min and median over the rounds and the spread (max / min);
a spread above 2x means the machine was too busy for that row to mean much, and says so.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

SPREAD_WARNING = 2.0


@contextlib.contextmanager
def pinned(threads: int) -> Iterator[None]:
    """BLAS (every library threadpoolctl finds) and PyTorch limited to ``threads`` threads."""
    from threadpoolctl import threadpool_limits

    torch = _torch()
    before = torch.get_num_threads() if torch else None
    with threadpool_limits(limits=threads):
        if torch:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            if torch:
                torch.set_num_threads(before)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


@dataclass(frozen=True)
class Result:
    """Seconds per call of one candidate, one sample per round."""

    name: str
    samples: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def spread(self) -> float:
        return max(self.samples) / self.min if self.min > 0 else float("inf")


def interleave(
    candidates: dict[str, Callable[[], Any]],
    rounds: int = 5,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Result]:
    """Time each candidate once per round, rotating the order; ``warmup`` untimed rounds first.

    ``clock``: wall time by default; ``time.thread_time`` counts only this thread's CPU
    time, which load from other processes inflates far less (single-threaded candidates:
    BLAS and PyTorch pinned to one thread run in the calling thread).
    """
    names = list(candidates)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            start = clock()
            candidates[name]()
            elapsed = clock() - start
            if r >= warmup:
                samples[name].append(elapsed)
    return {n: Result(n, tuple(s)) for n, s in samples.items()}


def report(
    title: str,
    results: dict[str, Result],
    baseline: str,
    *,
    per: float = 1.0,
    unit: str = "ms",
    target: str = "",
) -> list[str]:
    """Lines of a table: min, median, spread and the ratio of each candidate to ``baseline``.

    ``per`` divides the times (e.g. tokens per call gives seconds per token); ``unit`` is
    "ms" (milliseconds per call) or "tokens/s" (``per`` tokens each call).
    """
    base = results[baseline]
    lines = [title]
    for r in results.values():
        if unit == "tokens/s":
            shown = f"{per / r.min:10,.0f} best {per / r.median:10,.0f} median tokens/s"
            ratio = f"{base.median / r.median:5.2f}x of {baseline}'s tokens/s (median)"
        else:
            shown = f"{r.min * 1e3:9.2f} min {r.median * 1e3:9.2f} median ms"
            ratio = f"{r.median / base.median:5.2f}x {baseline}'s time (median)"
        ratio_min = base.min / r.min if unit == "tokens/s" else r.min / base.min
        line = f"  {r.name:<28} {shown}  spread {r.spread:4.2f}x  {ratio}, {ratio_min:.2f}x (min)"
        if r.spread > SPREAD_WARNING:
            line += f"  WARNING: spread above {SPREAD_WARNING:g}x, the machine was busy"
        lines.append(line)
    if target:
        lines.append(f"  target: {target}")
    return lines
