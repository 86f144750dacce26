"""The traced process of ``anekit trace -- python script.py``: trace, run the target, restore.

``python -m anekit.probe.tracehost --out FILE [--class NAME ...] -- script.py ARGS`` (or
``-- -m module ARGS``) installs the tracer (:func:`anekit.probe.tracing.trace`), streams
every call to ``FILE`` as JSON lines, runs the target as ``__main__`` in this process (so
its framework calls, and CoreML's, go through the wrapped methods), restores the methods
and exits with the target's status.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from collections.abc import Sequence
from typing import Any

from anekit.probe.tracing import DEFAULT_CLASSES, trace


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split ``--out FILE [--class NAME ...] -- TARGET...``."""
    if "--" not in argv:
        raise SystemExit("tracehost: expected -- before the script to run")
    cut = list(argv).index("--")
    parser = argparse.ArgumentParser(prog="anekit.probe.tracehost")
    parser.add_argument("--out", required=True)
    parser.add_argument("--class", dest="classes", action="append")
    return parser.parse_args(argv[:cut]), list(argv[cut + 1 :])


def run_target(target: list[str]) -> int:
    """Run ``script.py ARGS`` or ``-m module ARGS`` as ``__main__``; its exit status."""
    saved = sys.argv[:]
    try:
        if target[0] == "-m":
            sys.argv = [target[1], *target[2:]]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(target)
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as done:
        code = done.code
        if code is None or isinstance(code, int):
            return int(code or 0)
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved
    return 0


def host(argv: Sequence[str], *, runtime: Any = None) -> int:
    """Trace while running the target; the target's exit status."""
    args, target = parse(argv)
    with trace(args.classes or DEFAULT_CLASSES, jsonl=args.out, runtime=runtime) as tracer:
        print(
            f"anekit trace: {len(tracer.traced)} methods traced, {len(tracer.skipped)} left alone",
            file=sys.stderr,
        )
        return run_target(target)


if __name__ == "__main__":
    sys.exit(host(sys.argv[1:]))
