"""What pausing the collector during a parse buys, measured per shape.

The parser has one grammar (``read_statement``) plus the whole-line const fast path
(``fast_const``). This compares, in one process, on the foreign shapes of
``benchmarks/toolchain.py`` (written as coremltools writes them), a cold parse:

- ``gc paused``: the collector paused during the parse (``pause_gc=True``, the CLI's choice);
- ``gc running``: the collector left running (the library's default).

Candidates run interleaved (the order rotates every round), one BLAS thread; each figure
is the median statements/s of the rounds, wall clock and this process's CPU time (the
machine may be shared). Run: ``python benchmarks/parse_paths.py [rounds]``.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(__file__))

from toolchain import SHAPES  # noqa: E402  (the shapes, written beside this file)

from anekit import mil  # noqa: E402
from anekit.mil import reader, verify  # noqa: E402

CANDIDATES = ("gc paused", "gc running")


def cold_parse(text: str, files: dict, *, pause_gc: bool) -> None:
    """One parse with the caches emptied, with or without the collector paused."""
    reader.clear_caches()
    verify.clear_cache()
    mil.parse(text, files, pause_gc=pause_gc)


def main(rounds: int = 7) -> None:
    shapes = {label: make() for label, make in SHAPES.items() if not label.startswith("ours")}
    runs: dict[str, Callable[[str, dict], None]] = {
        "gc paused": lambda t, f: cold_parse(t, f, pause_gc=True),
        "gc running": lambda t, f: cold_parse(t, f, pause_gc=False),
    }
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    with threadpool_limits(1):
        for r in range(rounds):
            order = CANDIDATES[r % 2 :] + CANDIDATES[: r % 2]
            for label, (text, files) in shapes.items():
                for name in order:
                    t0, c0 = time.perf_counter(), time.process_time()
                    runs[name](text, files)
                    c1, t1 = time.process_time(), time.perf_counter()
                    wall.setdefault((label, name), []).append(t1 - t0)
                    cpu.setdefault((label, name), []).append(c1 - c0)
    print(f"cold parse, statements/s, median of {rounds} interleaved rounds, one BLAS thread")
    print(f"{'shape':34} {'stmts':>6}  " + "  ".join(f"{c:>17}" for c in CANDIDATES))
    for label, (text, files) in shapes.items():
        n = sum(len(f.ops) for f in mil.parse(text, files).functions.values())
        cells = []
        for name in CANDIDATES:
            w = n / statistics.median(wall[(label, name)])
            c = n / statistics.median([max(x, 1e-9) for x in cpu[(label, name)]])
            cells.append(f"{w:8,.0f} ({c:7,.0f})")
        print(f"{label:34} {n:6d}  " + "  ".join(cells))
    print("each cell: wall clock (cpu time)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
