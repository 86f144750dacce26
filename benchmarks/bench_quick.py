"""`anekit bench --quick` on the reference backend: how long it takes against its target.

Target (issue 7): every suite of ``--quick`` finishes in under two minutes on 2 cores.
Prints each suite's time and the per-call overhead the run measured.
"""

from __future__ import annotations

import time

from anekit.bench import report, runner
from anekit.bench.suites import SUITES

TARGET_S = 120.0


def main() -> None:
    start = time.perf_counter()
    results = runner.run(backend="reference", chip="m4", quick=True)
    total = time.perf_counter() - start
    print(report.overhead_sentence(results))
    for name in SUITES:
        rows = results["suites"][name]["rows"]
        measured = sum(r["measured"]["median_s"] for r in rows)
        print(f"  {name:15s} {len(rows):2d} cases, sum of medians {report.fmt_time(measured)}")
    verdict = "within" if total < TARGET_S else "OVER"
    print(f"anekit bench --quick (reference): {total:.1f} s, {verdict} the {TARGET_S:.0f} s target")


if __name__ == "__main__":
    main()
