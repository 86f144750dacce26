"""The ``anekit`` command line: one table of subcommands, each loaded only when used."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import anekit
from anekit.errors import AnekitError

# Each subcommand lives in the module that owns the feature; that module exposes
# ``configure(parser)`` to add its arguments and ``run(args) -> int``. Importing
# lazily keeps ``anekit --help`` fast and free of optional dependencies.
COMMANDS: dict[str, tuple[str, str]] = {
    "fmt": ("anekit.mil.command", "parse MIL text and print it normalised"),
    "demo": ("anekit.demo", "run the main demo on the best available backend"),
    "inspect": (
        "anekit.inspect.command",
        "read compiled ANE binaries (hwx, E5), weight.bin and the compile cache",
    ),
    "run": ("anekit.backends.command", "run a MIL program on a backend and summarise its outputs"),
    "bench": (
        "anekit.bench.command",
        "measure the ANE experiments; compare with cost model and published",
    ),
    "chips": ("anekit.hw.cmd_chips", "list the chip profiles and the source of every number"),
    "check": ("anekit.hw.cmd_check", "check a MIL program against a chip's known ANE constraints"),
    "estimate": ("anekit.hw.cmd_estimate", "predict a MIL program's run time on a chip, op by op"),
    "doctor": (
        "anekit.cmd_doctor",
        "report what this machine offers for the ANE, with a smoke test",
    ),
    "classes": (
        "anekit.cmd_classes",
        "list AppleNeuralEngine.framework's _ANE* classes and methods",
    ),
    "train": (
        "anekit.train.command",
        "train a Llama-style transformer with ANE kernels; checkpoint, resume",
    ),
    "generate": ("anekit.train.generate_command", "sample text from a training checkpoint"),
}


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every subcommand configured."""
    parser = argparse.ArgumentParser(
        prog="anekit",
        description="Program Apple's Neural Engine directly: build, check, cost, run and train.",
    )
    parser.add_argument("--version", action="version", version=f"anekit {anekit.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module_name)
        importlib.import_module(module_name).configure(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except (AnekitError, OSError) as err:  # bad input, unreadable path: a message, no traceback
        print(f"anekit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"anekit {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
