"""``anekit check FILE``: will this program compile and run correctly on a chip?

A program made by the convert pipeline records what the converter chose
(:mod:`anekit.passes.provenance`); findings about those choices are counted as converter
facts, apart from the advice (``--facts`` lists them; ``--json`` marks each row's
``converter`` with the reason, null for advice)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from anekit.cli._common import SHAPES_HELP, add_chip, load_program, resolve_chip
from anekit.errors import UsageError

if TYPE_CHECKING:
    from anekit.hw.ranges import Ranges
    from anekit.mil.program import Program


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help=SHAPES_HELP)
    add_chip(parser)
    parser.add_argument(
        "--range", action="append", default=[], metavar="NAME=LO:HI", dest="ranges",
        help="bound an input and run the range rules on static bounds (loads the weights; repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--calibrate", action="append", default=[], metavar="NAME=FILE.npy",
        help="sample inputs (one, or a stack along a new first axis): the range rules use the "
        "ranges the golden model observes on them (loads the weights; repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--facts", action="store_true",
        help="list each finding about what the converter chose (recorded in a converted "
        "model: not advice), not only their count",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    from anekit.hw.compat import check
    from anekit.hw.kinds import Severity
    from anekit.passes.provenance import split

    if args.ranges and args.calibrate:
        raise UsageError("give --range or --calibrate, not both")
    chip = resolve_chip(args.chip)
    needs_weights = bool(args.ranges or args.calibrate)  # bounds depend on the weights
    program = load_program(args.path, shapes_only=not needs_weights)
    observed = calibrated(program, args.calibrate) if args.calibrate else None
    input_ranges = dict(parse_range(spec) for spec in args.ranges) if args.ranges else None
    diagnostics = check(program, chip, input_ranges, observed=observed)
    advice, facts = split(program, diagnostics)
    if args.json:
        rows = [{**dataclasses.asdict(d), "converter": None} for d in advice]
        rows += [{**dataclasses.asdict(f.diagnostic), "converter": f.reason} for f in facts]
        print(json.dumps(rows, indent=1))
    else:
        for d in advice:
            print(d.format(args.path))
        for f in facts if args.facts else ():
            print(f.format(args.path))
        counts = {s: sum(d.severity == s for d in advice) for s in Severity}
        print(
            f"{chip.name}: {counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
            + (f"; {len(facts)} converter fact(s)" if facts else "")
        )
        if facts and not args.facts:
            print(
                f"({len(facts)} finding(s) about what the converter chose, recorded in the model "
                "when it was converted: facts, not advice; --facts lists them with the reasons)"
            )
    return 1 if any(d.severity is Severity.ERROR for d in diagnostics) else 0


def parse_range(spec: str) -> tuple[str, tuple[float, float]]:
    """``NAME=LO:HI`` as (name, (lo, hi)); a UsageError quotes the argument."""
    name, sep, bounds = spec.partition("=")
    lo, colon, hi = bounds.rpartition(":")
    try:
        if not (sep and colon and name):
            raise ValueError
        return name, (float(lo), float(hi))
    except ValueError:
        raise UsageError(f"--range expects NAME=LO:HI (e.g. x=-4:4), found {spec!r}") from None


def calibrated(program: Program, specs: list[str]) -> Ranges:
    """The ranges the golden model (IEEE fp16, no chip cliffs) observes on the sample inputs."""
    import anekit
    from anekit.backends.base import TensorSpec, convert_input
    from anekit.cli.run import read_npy
    from anekit.hw.ranges import observed

    stacks: dict[str, Any] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or name in stacks:
            raise UsageError(f"--calibrate expects NAME=FILE.npy once per input, found {spec!r}")
        stacks[name] = read_npy(file, spec)
    samples = [_samples(v, stacks, TensorSpec.of(v).shape) for v in program.inputs]
    counts = {len(s) for s in samples}
    if len(counts) != 1:
        raise UsageError(f"--calibrate: the inputs give different numbers of samples {counts}")
    kernel = anekit.compile(program, backend="reference", numerics="ideal")
    specs_of = {v.name: TensorSpec.of(v) for v in program.inputs}

    def one(inputs: dict[str, Any]) -> Any:
        inputs = {k: convert_input(specs_of[k], a) for k, a in inputs.items()}
        yield from inputs.items()
        for _, outs in kernel.taps(inputs):
            yield from outs.items()

    names = [v.name for v in program.inputs]
    return observed(one(dict(zip(names, row))) for row in zip(*samples))


def _samples(value: Any, stacks: dict[str, Any], shape: tuple[int, ...]) -> list[Any]:
    """The samples of one input: its array, or each entry of a stack along a new first axis."""
    if value.name not in stacks:
        raise UsageError(f"--calibrate: no samples for input {value.name!r}; give every input")
    array = stacks[value.name]
    if tuple(array.shape) == tuple(shape):
        return [array]
    if tuple(array.shape[1:]) == tuple(shape):
        return list(array)
    raise UsageError(
        f"--calibrate {value.name}: expected shape {list(shape)} or [N, *{list(shape)}], "
        f"found {list(array.shape)}"
    )
