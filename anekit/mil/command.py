"""``anekit fmt``: parse MIL text and print it normalised."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from anekit.mil.parser import decode_mil, load, parse
from anekit.mil.text import DIALECTS


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path", help="a model.mil file, or a model directory (model.mil + weights/)"
    )
    parser.add_argument(
        "--dialect",
        choices=sorted(DIALECTS),
        default="ios18",
        help="ios18: program(1.3) (default); legacy: program(1.0) with ios16 ops, for M1/M2",
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not normalised")


def run(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if path.is_dir():
        program = load(path)
        original = (path / "model.mil").read_text(encoding="utf-8")
    else:
        original = decode_mil(path.read_bytes(), str(path))
        weights = path.parent / "weights" if (path.parent / "weights").is_dir() else path.parent
        program = parse(original, weights, file=str(path))
    text = program.to_text(args.dialect)
    if args.check:
        if text != original:
            print(f"{path}: not normalised", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0
