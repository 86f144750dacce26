"""``anekit fmt``: parse MIL text and print it normalised."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from anekit.cli._common import SHAPES_HELP, one_of


def _dialects() -> Iterable[str]:
    from anekit.mil.text import DIALECTS

    return sorted(DIALECTS)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help=SHAPES_HELP)
    parser.add_argument(
        "--dialect",
        type=one_of("dialect", _dialects),
        default="ios18",
        help="ios18: program(1.3) (default); legacy: program(1.0) with ios16 ops, for M1/M2",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not normalised")


def run(args: argparse.Namespace) -> int:
    from anekit.mil.loading import decode_mil, load_bytes, read_source

    data, file = read_source(args.path)  # read once: standard input cannot be read twice
    program = load_bytes(data, file, shapes_only=True)  # printing needs shapes, not weights
    text = program.to_text(args.dialect)
    if args.check:
        if text != decode_mil(data, file):
            print(f"{args.path}: not normalised", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0
