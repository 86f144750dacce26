"""Does the parser's statement fast path pay, and does pausing the collector? Measured per shape.

The parser has one grammar (``any_statement``) plus two fast paths: whole-line const
statements (``fast_const``) and ``plain_statement``, a second reading of the common
statement by indexing the token list. This compares, in one process, on the foreign
shapes of ``benchmarks/toolchain.py`` (written as coremltools writes them), a cold parse:

- ``plain+gc``: both fast paths, the collector paused during the parse;
- ``plain``: both fast paths, the collector left running;
- ``grammar``: the const fast path only (``plain_statement`` switched off), collector running.

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
from anekit.mil import parser, reader, verify  # noqa: E402

CANDIDATES = ("plain+gc", "plain", "grammar")


def cold_parse(text: str, files: dict, *, plain: bool, pause_gc: bool) -> None:
    """One parse with the caches emptied, with or without the plain fast path and the pause."""
    reader.clear_caches()
    verify.clear_cache()
    saved = parser._Parser.plain_statement
    if not plain:
        parser._Parser.plain_statement = lambda self, start, opset: None  # the grammar alone
    try:
        mil.parse(text, files, pause_gc=pause_gc)
    finally:
        parser._Parser.plain_statement = saved


def main(rounds: int = 7) -> None:
    shapes = {label: make() for label, make in SHAPES.items() if not label.startswith("ours")}
    runs: dict[str, Callable[[str, dict], None]] = {
        "plain+gc": lambda t, f: cold_parse(t, f, plain=True, pause_gc=True),
        "plain": lambda t, f: cold_parse(t, f, plain=True, pause_gc=False),
        "grammar": lambda t, f: cold_parse(t, f, plain=False, pause_gc=False),
    }
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    with threadpool_limits(1):
        for r in range(rounds):
            order = CANDIDATES[r % 3 :] + CANDIDATES[: r % 3]
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
