"""``anekit doctor``: say plainly what works on this machine; exits 0 everywhere."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from anekit.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    parser.add_argument(
        "--no-smoke", action="store_true", help="skip the compile/evaluate smoke test on the ANE"
    )


def run(args: argparse.Namespace) -> int:
    from anekit.doctor.report import format_report, report
    from anekit.files import write_atomic

    if args.json and Path(args.json).is_dir():
        raise UsageError(f"--json {args.json} is a directory; expected a file name")
    r = report(smoke=not args.no_smoke)
    print(format_report(r))
    if args.json:
        path = Path(args.json)
        write_atomic(path, (json.dumps(r, indent=1) + "\n").encode("utf-8"))
        print(f"report written to {path}")
    return 0
