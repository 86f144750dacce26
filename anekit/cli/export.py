"""``anekit export``: write a MIL program as a CoreML ``.mlpackage`` (Apple's public route)."""

from __future__ import annotations

import argparse
import json

from anekit.cli._common import SHAPES_HELP


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help=SHAPES_HELP)
    parser.add_argument("--weights", help="the program's weights directory (default: beside it)")
    parser.add_argument("--mlpackage", required=True, metavar="OUT",
                        help="the package to write (a name ending in .mlpackage)")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args: argparse.Namespace) -> int:
    from anekit.cli._common import load_program
    from anekit.passes.coreml import export_mlpackage

    program = load_program(args.path, args.weights)
    out = export_mlpackage(program, args.mlpackage, overwrite=args.force)
    fn = program.main
    record = {
        "mlpackage": str(out),
        "inputs": [f"{v.name}: {v.type}" for v in fn.inputs],
        "outputs": [f"{v.name}: {v.type}" for v in fn.outputs],
        "ops": len(fn.ops),
        "opset": fn.opset,
    }
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        print(f"wrote {out}: {record['ops']} ops, opset {fn.opset}, inputs "
              f"{', '.join(record['inputs'])}; outputs {', '.join(record['outputs'])}")  # fmt: skip
    return 0
