"""Helpers and MIL texts shared by the command-line tests (``tests/test_cli*.py``)."""

from __future__ import annotations

import builtins
import errno
import io
import os
from pathlib import Path

import numpy as np

from anekit import mil
from anekit.cli import main

CLEAN = """program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios18>(tensor<fp16, [1, 64, 1, 32]> x) {
        tensor<fp16, [1, 64, 1, 32]> y = relu(x = x)[name = string("y")];
        tensor<fp16, [1, 64, 1, 32]> z = sigmoid(x = y)[name = string("z")];
    } -> (z);
}
"""

BROKEN = CLEAN.replace("sigmoid(", "acos(")

# the smallest program: one relu in the legacy dialect
GOOD_MIL = """program(1.0)
[buildInfo = dict<string, string>({})]
{
    func main<ios17>(tensor<fp16, [1, 4]> x) {
        tensor<fp16, [1, 4]> y = relu(x = x)[name = string("y")];
    } -> (y);
}
"""


def write(tmp_path: Path, text: str) -> str:
    """Write ``text`` as ``model.mil`` in ``tmp_path``; returns the path."""
    path = tmp_path / "model.mil"
    path.write_text(text, encoding="utf-8")
    return str(path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the CLI in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def weighted_program(value: float = 2.0) -> mil.Program:
    """``y = x + w`` on [1, 4] fp16, with ``w`` (all ``value``) in a weight file."""
    b = mil.Builder()
    x = b.input("x", (1, 4), "fp16")
    b.output(b.add(x=x, y=b.weight("w", np.full((1, 4), value, np.float16))), "y")
    return b.build()


def refuse_reads(monkeypatch, path: Path) -> None:
    """Make opening ``path`` fail with EACCES, as mode 000 does for a user other than root."""
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):
        if isinstance(file, str | os.PathLike) and os.fspath(file) == str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(file, *args, **kwargs)

    real_os_open = os.open

    def refusing_os_open(file, *args, **kwargs):
        if os.fspath(file) == str(path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_os_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    monkeypatch.setattr(io, "open", refusing_open)
    monkeypatch.setattr(os, "open", refusing_os_open)
