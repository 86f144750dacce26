"""Shared pieces of the ``anekit chips | check | estimate`` commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from anekit.hw.chips import Chip, Fact, chips, default_chip, get_chip
from anekit.hw.cost import Estimate
from anekit.mil.program import Program


def add_program_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the FILE and --chip / --json arguments shared by check and estimate."""
    parser.add_argument(
        "path", help="a model.mil file, or a model directory (model.mil + weights/)"
    )
    parser.add_argument(
        "--chip",
        type=chip_name,
        help=f"chip profile ({', '.join(chips())}); default: the host's, else m4",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def chip_name(text: str) -> str:
    """An argparse ``type`` for ``--chip``: an unknown name is a usage error, not a traceback."""
    try:
        return get_chip(text).name
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def load_program(path_text: str) -> Program | None:
    """Parse a MIL file (weights from its ``weights/`` folder) or load a model directory.

    Returns None, having said why on stderr, when the path does not exist.
    """
    from anekit.mil.parser import decode_mil, load, parse

    path = Path(path_text)
    if not path.exists():
        print(f"anekit: error: {path}: no such file or directory", file=sys.stderr)
        return None
    if path.is_dir():
        return load(path)
    weights = path.parent / "weights" if (path.parent / "weights").is_dir() else path.parent
    return parse(decode_mil(path.read_bytes(), str(path)), weights, file=str(path))


def resolve_chip(name: str | None) -> Chip:
    """The chip named on the command line, or the default (saying how it was chosen on stderr)."""
    if name is not None:
        return get_chip(name)
    chosen, how = default_chip()
    print(f"chip {chosen}: {how} (pass --chip to choose)", file=sys.stderr)
    return get_chip(chosen)


def show(value: object, fact: Fact | None = None, unit: str = "") -> str:
    """A table cell: '-' if unknown, '~' before an estimate, '!' after a value sources dispute."""
    if value is None:
        return "-"
    text = (
        f"{value:.4g}{unit}"
        if isinstance(value, int | float) and not isinstance(value, bool)
        else str(value)
    )
    if fact is None:
        return text
    return ("~" if fact.estimate else "") + text + ("!" if fact.conflict else "")


def estimate_table(est: Estimate) -> str:
    """The per-op breakdown of an estimate, followed by the totals."""
    lines = [
        f"{'op':28} {'name':24} {'line':>5} {'GFLOP':>9} {'MB':>9} {'ms':>9} {'share':>6}  bound"
    ]
    for r in est.rows:
        share = r.seconds / est.seconds if est.seconds else 0.0
        lines.append(
            f"{r.op:28.28} {r.name:24.24} {r.line if r.line is not None else '':>5} "
            f"{r.flops / 1e9:9.3f} {r.bytes / 1e6:9.3f} {r.seconds * 1e3:9.4f} {share:6.1%}  {r.bound}"
        )
    lines.append(
        f"total on {est.chip}: {est.seconds * 1e3:.4f} ms, {est.flops / 1e9:.3f} GFLOP, "
        f"{est.bytes / 1e6:.3f} MB moved, {est.tflops:.2f} TFLOPS"
    )
    return "\n".join(lines)
