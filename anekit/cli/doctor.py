"""``anekit doctor``: say plainly what works on this machine; exits 0 everywhere.

``--ladder`` runs the experiments of :mod:`anekit.doctor.ladder` (exit 1 if a rung fails);
``--bisect PROGRAM`` finds the ops that make a program fail to compile (:mod:`anekit.doctor.bisect`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from anekit.cli._common import output_file
from anekit.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", metavar="FILE", type=output_file, help="also write the report as JSON to FILE"
    )
    parser.add_argument(
        "--no-smoke", action="store_true", help="skip the compile/evaluate smoke test on the ANE"
    )
    parser.add_argument(
        "--ladder",
        action="store_true",
        help="run the ladder of experiments, each rung in its own process (first thing on a Mac)",
    )
    parser.add_argument(
        "--bisect",
        metavar="PROGRAM",
        help="find the ops that make PROGRAM fail to compile on the ANE (a fresh process per "
        "compile); --json FILE writes the record to attach to a report",
    )
    parser.add_argument(
        "--budget",
        action="store_true",
        help="with --ladder: also compile until the framework fails, to measure the real limit",
    )
    parser.add_argument(
        "--numerics-out",
        metavar="FILE.json",
        help="with --ladder: where the numerics rung writes the measured profile (default: "
        "the cache directory's numerics/CHIP.json); numerics=FILE reads it back",
    )


def run(args: argparse.Namespace) -> int:
    from anekit.doctor.report import format_report, report
    from anekit.files import write_atomic

    if args.budget and not args.ladder:
        raise UsageError("--budget needs --ladder")
    if args.numerics_out and not args.ladder:
        raise UsageError("--numerics-out needs --ladder")
    if args.ladder:
        from anekit.doctor.ladder import main as ladder

        return ladder(json_path=args.json, budget=args.budget, numerics_out=args.numerics_out)
    if args.bisect:
        return _bisect(args.bisect, args.json)
    r = report(smoke=not args.no_smoke)
    print(format_report(r))
    if args.json:
        path = Path(args.json)
        write_atomic(path, (json.dumps(r, indent=1) + "\n").encode("utf-8"))
        print(f"report written to {path}")
    return 0


def _bisect(path: str, json_path: str | None) -> int:
    """Print the culprits of PROGRAM's compile failure; the record as JSON to ``json_path``."""
    from anekit.cli._common import load_program
    from anekit.doctor.bisect import bisect
    from anekit.files import write_atomic

    found = bisect(load_program(path))
    print("\n".join(found.lines()))
    if json_path:
        write_atomic(Path(json_path), (json.dumps(found.as_dict(), indent=1) + "\n").encode())
        print(f"record written to {json_path}: attach it to your report")
    return 0
