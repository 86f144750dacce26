"""Toolchain speed: build, print and parse a 128-layer conv chain and a 12-layer transformer.

Prints statements per second for each stage. Target (issue 2): parse and print
at least 50,000 statements/s each.
"""

from __future__ import annotations

import time

from anekit import mil
from anekit.bench.programs import TransformerShape, chained_convs, transformer


def best_of(fn, repeat: int = 5) -> float:
    """Fastest of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure(label: str, build) -> None:
    program = build()
    text = program.to_text()
    weights = program.weight_files()
    statements = sum(len(fn.ops) for fn in program.functions.values())
    t_build = best_of(build, 3)
    t_print = best_of(program.to_text)
    t_parse = best_of(lambda: mil.parse(text, weights))
    print(f"{label}: {statements} statements, {len(text) / 1e3:.0f} kB of MIL text")
    for stage, t in (("build", t_build), ("print", t_print), ("parse", t_parse)):
        print(f"  {stage:6s} {t * 1e3:8.2f} ms  {statements / t:10,.0f} statements/s")


def main() -> None:
    measure("128 chained 1x1 convs (64 ch)", lambda: chained_convs(128, channels=64, spatial=8))
    measure("12-layer transformer (dim 256)", lambda: transformer(TransformerShape(layers=12)))


if __name__ == "__main__":
    main()
