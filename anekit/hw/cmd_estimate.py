"""``anekit estimate FILE``: how long one evaluation takes on a chip, op by op."""

from __future__ import annotations

import argparse
import dataclasses
import json

from anekit.hw.chips import chips, get_chip
from anekit.hw.command import add_program_arguments, estimate_table, load_program, resolve_chip
from anekit.hw.cost import Estimate


def configure(parser: argparse.ArgumentParser) -> None:
    add_program_arguments(parser)
    parser.add_argument("--all-chips", action="store_true", help="one line per chip profile")


def run(args: argparse.Namespace) -> int:
    from anekit.hw.cost import analyze, estimate_work

    program = load_program(args.path)
    if program is None:
        return 2
    work = analyze(program)
    if args.all_chips:
        estimates = [estimate_work(work, get_chip(name)) for name in chips()]
        if args.json:
            print(json.dumps([_summary(e) for e in estimates], indent=1))
            return 0
        print(f"{'chip':10} {'ms':>10} {'TFLOPS':>8}  bound by")
        for e in estimates:
            s = _summary(e)
            print(f"{e.chip:10} {e.seconds * 1e3:10.4f} {e.tflops:8.2f}  {s['bound']}")
        return 0
    est = estimate_work(work, resolve_chip(args.chip))
    print(json.dumps(dataclasses.asdict(est), indent=1) if args.json else estimate_table(est))
    return 0


def _summary(e: Estimate) -> dict:
    """Seconds, TFLOPS and the bound (compute / memory / overhead) taking most of the time."""
    by_bound: dict[str, float] = {}
    for r in e.rows:
        by_bound[r.bound] = by_bound.get(r.bound, 0.0) + r.seconds
    return {
        "chip": e.chip,
        "seconds": e.seconds,
        "tflops": e.tflops,
        "bound": max(by_bound, key=by_bound.get),
    }
