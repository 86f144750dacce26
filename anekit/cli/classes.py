"""``anekit classes [PATTERN] [--json FILE] | --diff A.json B.json``: the framework's classes.

Lists the ``_ANE*`` classes with their methods and type encodings; ``--json FILE`` writes
the full listing (with the macOS version and build) for sharing; ``--diff A B`` compares
two such files from different macOS versions, exiting 1 when they differ (0 when not),
and works on any machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from anekit.cli._common import output_file
from anekit.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pattern",
        nargs="?",
        help="case-insensitive glob or substring of class names (default: every _ANE* class)",
    )
    parser.add_argument("--json", metavar="FILE", type=output_file,
                        help="write the listing (with --diff: the differences) as JSON to FILE")  # fmt: skip
    parser.add_argument("--diff", nargs=2, metavar=("A.json", "B.json"),
                        help="what changed from listing A to listing B (exit 1 if anything did)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from anekit.doctor import classes

    if args.diff:
        if args.pattern:
            raise UsageError("--diff compares whole listings; it takes no PATTERN")
        d = classes.diff(*(classes.read_listing(p) for p in args.diff))
        print(classes.format_diff(d))
        _write(args.json, d)
        return 0 if classes.is_empty(d) else 1
    from anekit.backends.ane import framework, host
    from anekit.doctor.report import class_listing, format_classes

    reason = framework.problem()
    if reason is not None:
        print(
            "anekit classes: error: it lists AppleNeuralEngine.framework's classes and needs "
            f"macOS with it: {reason}",
            file=sys.stderr,
        )
        return 1  # not available on this machine: not a usage error
    found = class_listing(framework.load(), args.pattern)
    if args.json:
        names = [name for name, _ in found]
        data = classes.listing(framework.load(), names, macos=host.macos_version(),
                               build=host.sysctl_text("kern.osversion"))  # fmt: skip
        _write(args.json, data)
        methods = sum(len(m) for m in data["classes"].values())
        print(f"{len(names)} classes, {methods} methods written to {args.json}")
        return 0
    print(format_classes(found))
    return 0


def _write(path: str | None, data: dict) -> None:
    from anekit.files import write_atomic

    if path:
        write_atomic(Path(path), (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
