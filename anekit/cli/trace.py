"""``anekit trace [--jsonl FILE] [--class NAME ...] [--json] -- python script.py ...``.

Runs a Python script (or ``python -m module``) with every message to the ANE classes
recorded (:mod:`anekit.probe.tracing`): the methods are replaced in the script's own
process for its whole run and restored at its end. Prints a readable timeline (or the
calls as JSON with ``--json``) and exits with the script's status. It needs macOS with
AppleNeuralEngine.framework; elsewhere it says so and exits 1.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from anekit.errors import UsageError

PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
MAX_TRACE_BYTES = 512 << 20  # of the JSON lines read back


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traced", nargs="*", metavar="COMMAND",
                        help="after --: python script.py ARGS, or python -m module ARGS")  # fmt: skip
    parser.add_argument("--jsonl", metavar="FILE",
                        help="keep the calls as JSON lines in FILE (default: a temporary file)")  # fmt: skip
    parser.add_argument("--class", dest="classes", action="append", metavar="NAME",
                        help="trace this class (repeatable; default: _ANEClient, "
                             "_ANEInMemoryModel, _ANEModel, _ANERequest)")  # fmt: skip
    parser.add_argument("--json", action="store_true",
                        help="print the calls as JSON instead of the timeline")  # fmt: skip


def target(command: list[str]) -> list[str]:
    """``python script.py ARGS`` or ``python -m module ARGS``; UsageError for anything else."""
    if not command:
        raise UsageError("expected the command to trace after --, e.g. "
                         "anekit trace -- python script.py")  # fmt: skip
    if not PYTHON.match(Path(command[0]).name) and command[0] != sys.executable:
        raise UsageError(f"expected a Python command after -- (python script.py or python -m "
                         f"module), found {command[0]!r}")  # fmt: skip
    rest = command[1:]
    if not rest or (rest[0] == "-m" and len(rest) < 2):
        raise UsageError("expected a script or -m module after the Python interpreter")
    if rest[0] != "-m" and rest[0].startswith("-"):
        raise UsageError(f"interpreter option {rest[0]!r} is not passed through; expected "
                         "python script.py or python -m module")  # fmt: skip
    if rest[0] != "-m" and not Path(rest[0]).is_file():
        raise UsageError("no such script", path=rest[0])
    return command


def run(args: argparse.Namespace) -> int:
    from anekit.backends.ane import framework
    from anekit.ladder.runner import child_env
    from anekit.probe import tracing

    command = target(args.traced)
    reason = framework.problem()
    if reason is not None:
        print("anekit trace: error: it replaces methods of AppleNeuralEngine.framework's classes "
              f"and needs macOS with it: {reason}", file=sys.stderr)  # fmt: skip
        return 1  # not available on this machine: not a usage error
    with tempfile.TemporaryDirectory(prefix="anekit-trace-") as scratch:
        jsonl = Path(args.jsonl) if args.jsonl else Path(scratch) / "trace.jsonl"
        classes = [a for c in (args.classes or []) for a in ("--class", c)]
        host = [command[0], "-m", "anekit.probe.tracehost", "--out", str(jsonl), *classes,
                "--", *command[1:]]  # fmt: skip
        code = subprocess.run(host, env=child_env(), check=False).returncode
        calls = tracing.read_jsonl(jsonl, MAX_TRACE_BYTES) if jsonl.is_file() else []
    if args.json:
        print(json.dumps([vars(c) for c in calls], indent=1, default=str))
    else:
        print(tracing.timeline(calls))
        if args.jsonl:
            print(f"calls written to {args.jsonl}", file=sys.stderr)
    return code
