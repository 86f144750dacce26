"""``anekit check FILE``: will this program compile and run correctly on a chip?"""

from __future__ import annotations

import argparse
import dataclasses
import json

from anekit.cli._common import SHAPES_HELP, add_chip, load_program, resolve_chip


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help=SHAPES_HELP)
    add_chip(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    from anekit.hw.compat import check
    from anekit.hw.kinds import Severity

    chip = resolve_chip(args.chip)
    program = load_program(args.path, shapes_only=True)  # shapes and dtypes, not weights
    diagnostics = check(program, chip)
    if args.json:
        print(json.dumps([dataclasses.asdict(d) for d in diagnostics], indent=1))
    else:
        for d in diagnostics:
            print(d.format(args.path))
        counts = {s: sum(d.severity == s for d in diagnostics) for s in Severity}
        print(
            f"{chip.name}: {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
        )
    return 1 if any(d.severity is Severity.ERROR for d in diagnostics) else 0
