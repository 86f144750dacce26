"""``anekit classes [PATTERN]``: the framework's ``_ANE*`` classes, methods and type encodings."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "pattern",
        nargs="?",
        help="case-insensitive glob or substring of class names (default: every _ANE* class)",
    )


def run(args: argparse.Namespace) -> int:
    from anekit.backends.ane import framework
    from anekit.doctor.report import class_listing, format_classes

    reason = framework.problem()
    if reason is not None:
        print(
            "anekit classes: error: it lists AppleNeuralEngine.framework's classes and needs "
            f"macOS with it: {reason}",
            file=sys.stderr,
        )
        return 1  # not available on this machine: not a usage error
    print(format_classes(class_listing(framework.load(), args.pattern)))
    return 0
