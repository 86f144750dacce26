"""``anekit diff``: run a program under two numerics profiles (or the golden model against the
Neural Engine, ``--b ane``) and name the first op that differs."""

from __future__ import annotations

import argparse
import json
import sys

from anekit.cli._common import MODEL_HELP, load_program, non_negative


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help=MODEL_HELP)
    parser.add_argument(
        "--weights", help="directory holding the weight files (default: beside the model)"
    )
    parser.add_argument(
        "--input", action="append", default=[], metavar="NAME=FILE.npy",
        help="an input array (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--random", action="store_true", help="fill inputs not given with random values"
    )
    parser.add_argument(
        "--seed", type=non_negative(int), default=0, help="seed for --random (default 0)"
    )
    parser.add_argument(
        "--a", default=None, help="the golden model's numerics profile (default ideal; with "
        "--b ane the device chip's)",
    )  # fmt: skip
    parser.add_argument(
        "--b", default=None, help="the second profile: a chip, family, file or CHIP:precise "
        "(default: the default chip's); 'ane': the Neural Engine itself (a Mac)",
    )  # fmt: skip
    parser.add_argument(
        "--per-program", type=non_negative(int), default=None, metavar="N",
        help="with --b ane: values tapped per compiled program (default 16)",
    )  # fmt: skip
    parser.add_argument(
        "--tolerance", type=non_negative(float), default=None,
        help="relative error above which an op differs (default 0.01)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from anekit.backends.base import TensorSpec, convert_input
    from anekit.backends.reference.compare import TOLERANCE, diff
    from anekit.cli.run import gather_inputs
    from anekit.errors import UsageError

    program = load_program(args.model, args.weights)
    inputs = gather_inputs(program, args.input, args.random, args.seed)
    try:
        inputs = {v.name: convert_input(TensorSpec.of(v), inputs[v.name]) for v in program.inputs}
    except ValueError as e:  # wrong shape, or a dtype that would lose data
        raise UsageError(str(e)) from e
    tolerance = TOLERANCE if args.tolerance is None else args.tolerance
    report = diff(
        program, inputs, a=args.a, b=args.b, tolerance=tolerance, per_program=args.per_program
    )
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        print()
        return 0
    print(report.summary())
    for row in report.rows[1:]:
        print(f"  then {row.describe()}")
    return 0
