"""``anekit compress IN OUT --scheme S``: compress a model's weights for a chip and say what it did.

Reads a model directory (or ``.mil`` file), compresses its weights with ``anekit.compress``
and writes the result to ``OUT`` (a new or empty directory); prints the per-layer report:
scheme, bytes before and after, predicted time on the chip before and after, and the
output error measured on the reference backend (on ``--calibration`` inputs, else random
ones). ``--max-error`` makes it a gate: layers fall back, largest error first, until the
error holds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from anekit.cli._common import (
    MODEL_HELP,
    add_chip,
    load_program,
    non_negative,
    one_of,
    resolve_chip,
)
from anekit.errors import UsageError


def _schemes() -> list[str]:
    from anekit.compression import CHOICES

    return list(CHOICES)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help=MODEL_HELP)
    parser.add_argument("out", help="directory to write the compressed model to (new or empty)")
    parser.add_argument(
        "--scheme",
        required=True,
        type=one_of("scheme", _schemes),
        help="int8, w8a8, lut6, lut4, or auto (per layer, what the cost model finds faster)",
    )
    add_chip(
        parser,
        "to choose schemes for (auto), check and predict on, and whose rules the output satisfies (M1 padding, M1/M2 dialect)",
    )
    parser.add_argument(
        "--granularity",
        help="per_channel, per_block, per_tensor or per_grouped_channel "
        "(default: the finest the program's opset has)",
    )
    parser.add_argument(
        "--max-error",
        type=non_negative(float),
        help="budget on the relative output error; layers fall back until it holds "
        "(auto: default 0.02)",
    )
    parser.add_argument(
        "--calibration",
        action="append",
        default=[],
        metavar="FILE.npz",
        help="inputs to measure on and calibrate W8A8 with, one sample per file (arrays "
        "named as the program's inputs); repeatable. Default: random inputs",
    )
    parser.add_argument(
        "--min-elements",
        type=non_negative(int),
        default=None,
        help="weights with fewer elements stay fp16 (default 4096)",
    )
    parser.add_argument(
        "--group-size",
        type=non_negative(int),
        default=16,
        help="output channels sharing one palette (default 16)",
    )
    parser.add_argument(
        "--seed", type=non_negative(int), default=0, help="random inputs and k-means"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from anekit.compression import MIN_ELEMENTS, compress_with_report
    from anekit.passes import for_chip, save_dialect

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError("the output must be a new or empty directory", path=str(out))
    if args.group_size < 1:
        raise UsageError(f"--group-size must be at least 1, found {args.group_size}")
    chip = resolve_chip(args.chip)
    program = load_program(args.path)
    calibration = [_sample(file) for file in args.calibration] or None
    result = compress_with_report(
        program,
        args.scheme,
        chip=chip,
        granularity=args.granularity,
        calibration=calibration,
        max_error=args.max_error,
        min_elements=MIN_ELEMENTS if args.min_elements is None else args.min_elements,
        group_size=args.group_size,
        seed=args.seed,
    )
    program = for_chip(result.program, chip)  # M1's padding, M1/M2's dialect, ...
    program.save(out, dialect=save_dialect(program))
    if args.json:
        print(json.dumps({"out": str(out), **result.report.record()}, indent=1))
    else:
        print("\n".join(result.report.lines()))
        print(f"wrote {out}")
    return 0


def _sample(file: str) -> dict[str, Any]:
    """The arrays of one ``--calibration`` .npz file, by name (bounded: see ``read_npz``)."""
    from anekit.config import read_limit
    from anekit.files import read_npz

    def error(message: str, path: str) -> UsageError:
        return UsageError(f"--calibration: {message}", path=path)

    return read_npz(file, limit=read_limit(), what="an .npz file of named arrays", error=error)
