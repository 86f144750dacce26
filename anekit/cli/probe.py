"""``anekit probe [NAME ...] [--json FILE] [--list]``: the reverse-engineering experiments.

Each experiment runs in its own process with a timeout; the report (``--json``) is
rewritten after every one. Exits 1 if an experiment failed, crashed or timed out, else 0
(off macOS every experiment is skipped with the reason, and it exits 0).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from anekit.cli._common import output_file


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="experiments to run (default: every one; --list names them)")  # fmt: skip
    parser.add_argument("--json", metavar="FILE", type=output_file,
                        help="write the report to FILE, rewritten after every experiment")  # fmt: skip
    parser.add_argument("--list", action="store_true",
                        help="list the experiments with the question each answers, and stop")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from anekit.files import write_atomic
    from anekit.probe import session

    experiments = session.select(args.names)
    if args.list:
        rows = session.describe(experiments)
        print(session.format_list(rows))
        if args.json:
            write_atomic(Path(args.json), (json.dumps(rows, indent=1) + "\n").encode("utf-8"))
        return 0
    _, code = session.run(experiments, Path(args.json) if args.json else None)
    return code
