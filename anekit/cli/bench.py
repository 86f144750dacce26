"""``anekit bench``: the ANE experiments, measured on a backend and predicted for a chip."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anekit.cli._common import (
    add_backend,
    add_chip,
    add_threads,
    one_of,
    output_file,
    progress_bar,
    resolve_chip,
)
from anekit.errors import UsageError, os_reason

if TYPE_CHECKING:
    from anekit.bench.suites import Case

EPILOG = """\
Suites: anekit bench --list names them and what each measures.

Every row gives the measured time per evaluation (median, min and spread over rounds
after warm-up; cases a suite compares run interleaved in rotating order, and a row whose
slow rounds took over 2x its fastest is flagged NOISY), the program's FLOPs and bytes,
the cost model's prediction for --chip and, where one exists, a published measurement
of the same program on that chip with its source. BLAS threads are pinned (--threads).

The full sweeps are the sizes the experiments used on the ANE (up to 4096^3 matmuls
and 128-deep 512-channel conv chains). On the NumPy reference backend a full run takes
a long time; --quick runs small sweeps (benchmarks/bench_quick.py times them).
"""


def _suites() -> Iterable[str]:
    from anekit.bench.suites import SUITES

    return SUITES


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sweeps (benchmarks/bench_quick.py times them on the reference backend)",
    )
    parser.add_argument(
        "--suite",
        nargs="+",
        action="extend",
        type=one_of("suite", _suites),
        metavar="NAME",
        help="suites to run, in order (repeatable; default: all)",
    )
    add_backend(parser)
    add_chip(parser, "the profile to predict for")
    add_threads(parser)
    parser.add_argument(
        "--json", metavar="FILE", type=output_file, help="write the results as JSON"
    )
    parser.add_argument("--plot", metavar="DIR", help="write one PNG per suite (needs matplotlib)")
    parser.add_argument(
        "--report",
        metavar="FILE.md",
        type=output_file,
        help="write a Markdown report with tables and plots",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the suites and what each measures"
    )


def run(args: argparse.Namespace) -> int:
    from anekit.bench import plots, report, runner
    from anekit.bench.suites import SUITES

    if args.list:
        for name, suite in SUITES.items():
            print(f"{name:15s} {suite.question}")
        return 0
    if args.plot:
        missing = plots.matplotlib_missing()
        if missing is not None:
            raise UsageError(missing)
    chip = resolve_chip(args.chip)
    _prepare_outputs(args)
    total = sum(len(cases) for _, cases in runner.plan(args.suite, args.quick))
    with Progress(total) as progress:
        results = runner.run(
            args.suite,
            backend=args.backend,
            chip=chip,
            quick=args.quick,
            threads=args.threads,
            progress=progress,
        )
    sys.stdout.write(report.console(results))
    written = plots.write_plots(results, args.plot) if args.plot else {}
    for path in written.values():
        print(f"plot written to {path}")
    if args.json:
        print(f"results written to {report.write_json(results, args.json)}")
    if args.report:
        print(f"report written to {report.write_markdown(results, args.report, written)}")
    return 0


def _prepare_outputs(args: argparse.Namespace) -> None:
    """Create the output directories before measuring, so a long run cannot fail at the end."""
    dirs = [Path(f).parent for f in (args.json, args.report) if f]
    dirs += [Path(args.plot)] if args.plot else []
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create output directory {d}: {os_reason(e)}") from None


class Progress:
    """A progress bar (see ``progress_bar``) or, without one, one plain stderr line per case."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.bar = progress_bar(total, unit="case")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def __call__(self, suite: str, params: Case, row: dict[str, Any]) -> None:
        from anekit.bench.report import case_label, fmt_time

        self.done += 1
        what = f"{suite} {case_label(params)}"
        if self.bar is not None:
            self.bar.set_postfix_str(what, refresh=False)
            self.bar.update()
        else:
            took = fmt_time(row["measured"]["median_s"])
            print(f"[{self.done}/{self.total}] {what}: {took}", file=sys.stderr, flush=True)
