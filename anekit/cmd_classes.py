"""``anekit classes [PATTERN]``: the framework's ``_ANE*`` classes, methods and type encodings."""

from __future__ import annotations

import argparse
import sys

from anekit.backends.ane import framework
from anekit.doctor.report import class_listing, format_classes


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pattern",
        nargs="?",
        help="case-insensitive glob or substring of class names (default: every _ANE* class)",
    )


def run(args: argparse.Namespace) -> int:
    reason = framework.problem()
    if reason is not None:
        print(
            f"anekit classes lists AppleNeuralEngine.framework's classes and needs macOS with it: "
            f"{reason}",
            file=sys.stderr,
        )
        return 1
    print(format_classes(class_listing(framework.load(), args.pattern)))
    return 0
