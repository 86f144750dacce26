"""The ``anekit`` command line: one table of commands, one module per command in this package.

A command ``NAME`` is the module ``anekit.cli.NAME`` with ``configure(parser)``, which adds
its arguments, and ``run(args) -> int``, which does the work; adding a command is that
module plus one row of :data:`COMMANDS`. A command module imports only the standard
library at module level and the toolkit inside ``run``, so ``anekit --help`` stays fast.

Exit codes: 0 success, 1 findings (``check`` errors, ``fmt --check`` differences), 2 usage
or input errors, 130 interrupted. An error is one line on stderr,
``anekit COMMAND: error: ...``, naming the path it is about.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import anekit
from anekit.cli._common import Parser
from anekit.errors import AnekitError, os_reason

# command -> one line of help; the command's code is the module anekit.cli.<command>
COMMANDS: dict[str, str] = {
    "fmt": "parse MIL text and print it normalised",
    "run": "run a MIL program on a backend and summarise its outputs",
    "diff": "run a MIL program under two numerics profiles; name the first op that differs",
    "check": "check a MIL program against a chip's known ANE constraints",
    "estimate": "predict a MIL program's run time on a chip, op by op",
    "convert": "convert a PyTorch ExportedProgram (.pt2) or an ONNX model to ANE-ready MIL",
    "export": "write a MIL program as a CoreML .mlpackage (Apple's public route to the ANE)",
    "compress": "compress a model's weights (int8, w8a8, lut6, lut4, auto) for a chip",
    "chips": "list the chip profiles and the source of every number",
    "bench": "measure the ANE experiments; compare with cost model and published",
    "train": "train a Llama-style transformer with ANE kernels; checkpoint, resume",
    "generate": "stream text from a model directory, llama2.c .bin or training checkpoint",
    "chat": "chat with a language model in the terminal (its chat template, streamed replies)",
    "serve": "serve a language model over an OpenAI-compatible HTTP API",
    "demo": "run the main demo on the best available backend",
    "inspect": "read compiled ANE binaries (hwx, E5), weight.bin and the compile cache",
    "doctor": "report what this machine offers for the ANE, with a smoke test",
    "classes": "list AppleNeuralEngine.framework's _ANE* classes; write or diff listings",
    "probe": "run the reverse-engineering experiments, each in its own process",
    "trace": "run a Python script with every ANE framework message recorded",
}


def command_module(name: str) -> Any:
    """The module implementing command ``name``."""
    return importlib.import_module(f"{__name__}.{name}")


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every command configured."""
    parser = Parser(
        prog="anekit",
        description="Program Apple's Neural Engine directly: build, check, cost, run and train.",
    )
    parser.add_argument("--version", action="version", version=f"anekit {anekit.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        command_module(name).configure(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already printed
        return done.code if isinstance(done.code, int) else 0
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    args.argv = list(argv) if argv is not None else sys.argv[1:]  # to start the same command
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _PipeGuard(sys.stdout), _PipeGuard(sys.stderr)
    try:
        code = int(command_module(args.command).run(args) or 0)
        sys.stdout.flush()
        return code
    except AnekitError as err:  # bad input: a message, no traceback
        return _fail(args.command, str(err))
    except OSError as err:  # a path that cannot be read or written
        where = f"{err.filename}: " if err.filename is not None else ""
        return _fail(args.command, where + os_reason(err))
    except KeyboardInterrupt:
        print(f"anekit {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout, sys.stderr = streams


def _fail(command: str, message: str) -> int:
    """Print ``message`` as ``anekit COMMAND: error: ...``; the exit code of an input error.

    A syntax error's source line and caret stay on the lines below, as compilers print them.
    """
    first, *context = message.split("\n")
    print(f"anekit {command}: error: {first}", *context, sep="\n", file=sys.stderr)
    return 2


class _PipeGuard:
    """stdout or stderr for one command: once the reader goes away (``| head``), output is dropped.

    The command still finishes and returns its own exit code. The real stream is pointed at
    /dev/null, as the Python docs advise for SIGPIPE, so the interpreter's final flush does
    not print "Exception ignored ... BrokenPipeError".
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._closed = False

    def write(self, text: str) -> int:
        if not self._closed:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_gone()
        return len(text)

    def flush(self) -> None:
        if not self._closed:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        self._closed = True
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError):  # not a file descriptor: nothing will flush it later
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...
        return getattr(self._stream, name)
