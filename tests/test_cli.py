"""The command line's conventions, for every command: one error line, exit codes, pipes, --help.

Each command's own behaviour is tested in ``tests/test_cli_<command>.py``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from anekit import cli, mil
from anekit.cli import COMMANDS, build_parser, main
from tests.clitools import GOOD_MIL as LEGACY_MIL
from tests.clitools import refuse_reads

ROOT = Path(__file__).resolve().parent.parent
GOOD_MIL = """program(1.3)
[buildInfo = dict<string, string>({})]
{
    func main<ios18>(tensor<fp16, [1, 4]> x) {
        tensor<fp16, [1, 4]> y = relu(x = x)[name = string("y")];
    } -> (y);
}
"""

# Each command that reads a file, as argv with {path} where the file goes. --chip and
# --backend are given so that nothing but the error reaches stderr.
FILE_COMMANDS = {
    "fmt": ["fmt", "{path}"],
    "run": ["run", "{path}", "--random", "--backend", "reference"],
    "run --input": ["run", "{model}", "--input", "x={path}", "--backend", "reference"],
    "check": ["check", "{path}", "--chip", "m4"],
    "estimate": ["estimate", "{path}", "--chip", "m4"],
    "inspect": ["inspect", "{path}"],
    "train --data": ["train", "--data", "{path}", "--steps", "1", "--backend", "reference"],
}
# Commands whose file argument may be a model directory: a directory is wrong when it
# holds no model.mil. For the others a directory is simply not a file.
MODEL_COMMANDS = {"fmt", "run", "check", "estimate"}


def argv_for(case: str, path: Path, tmp_path: Path) -> list[str]:
    model = mil.parse(GOOD_MIL).save(tmp_path / "model")
    return [a.format(path=path, model=model) for a in FILE_COMMANDS[case]]


def one_error_line(command: str | None, err: str) -> str:
    """The single stderr line, which must be ``anekit COMMAND: error: ...``."""
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, found {lines}"
    prog = f"anekit {command}" if command else "anekit"
    assert lines[0].startswith(f"{prog}: error: "), lines[0]
    assert "Traceback" not in err and "[Errno" not in err
    return lines[0]


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", FILE_COMMANDS)
def test_a_missing_file_is_one_line_naming_it(case: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "absent.mil"
    code, _, err = run_cli(capsys, argv_for(case, path, tmp_path))
    line = one_error_line(case.split()[0], err)
    assert code == 2 and str(path) in line


@pytest.mark.parametrize("case", FILE_COMMANDS)
def test_a_directory_is_one_line_naming_it(case: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "folder"
    path.mkdir()
    code, _, err = run_cli(capsys, argv_for(case, path, tmp_path))
    line = one_error_line(case.split()[0], err)
    assert code == 2 and str(path) in line
    if case in MODEL_COMMANDS:
        assert "without model.mil" in line


def _unreadable(tmp_path: Path) -> Path:
    path = tmp_path / "locked.mil"
    path.write_text(GOOD_MIL)
    path.chmod(0)
    return path


@pytest.mark.parametrize("case", FILE_COMMANDS)
def test_an_unreadable_file_is_one_line_naming_it(case: str, tmp_path: Path, capsys) -> None:
    path = _unreadable(tmp_path)
    if os.access(path, os.R_OK):
        pytest.skip("this user (root?) can read a file with mode 000")
    code, _, err = run_cli(capsys, argv_for(case, path, tmp_path))
    line = one_error_line(case.split()[0], err)
    assert code == 2 and str(path) in line and "permission denied" in line


@pytest.mark.parametrize("case", sorted(set(FILE_COMMANDS) - {"train --data"}))
def test_a_read_refused_by_the_os_is_one_line_naming_it(
    case: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    """As root, mode 000 does not stop a read; raise the PermissionError the OS would give.

    (``train --data`` reads through NumPy's C code, which this cannot intercept; the chmod
    test above covers it where it can run.)
    """
    path = _unreadable(tmp_path)
    argv = argv_for(case, path, tmp_path)
    refuse_reads(monkeypatch, path)
    code, _, err = run_cli(capsys, argv)
    line = one_error_line(case.split()[0], err)
    assert code == 2 and str(path) in line and "permission denied" in line


# what each command requires, so that the unknown flag is the only thing wrong
REQUIRED = {name: ["x.mil"] for name in ("fmt", "run", "diff", "check", "estimate")} | {
    "generate": ["--ckpt", "x"],
    "chat": ["--ckpt", "x"],
    "serve": ["--ckpt", "x"],
    "convert": ["x.pt2", "--out", "x"],
    "compress": ["x.mil", "out", "--scheme", "int8"],
    "export": ["x.mil", "--mlpackage", "x.mlpackage"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_flag_is_one_line(command: str, capsys) -> None:
    code, out, err = run_cli(capsys, [command, *REQUIRED.get(command, []), "--no-such-flag"])
    line = one_error_line(command, err)
    assert code == 2 and out == ""
    assert "--no-such-flag" in line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["check", "x.mil", "--chip", "m99"],
            "argument --chip: unknown chip 'm99'; expected one of",
        ),
        (["run", "x.mil", "--backend", "gpu"], "argument --backend: unknown backend 'gpu'"),
        (["fmt", "x.mil", "--dialect", "ios99"], "argument --dialect: unknown dialect 'ios99'"),
        (["bench", "--suite", "nonsense"], "argument --suite: unknown suite 'nonsense'"),
        (["train", "--config", "huge"], "argument --config: unknown config 'huge'"),
        (
            ["generate", "--ckpt", "x", "--tokens", "many"],
            "argument --max-tokens/--tokens: invalid int value",
        ),
        (["check"], "the following arguments are required: path"),
        (["nonsense"], "argument COMMAND: invalid choice: 'nonsense'"),
    ],
)
def test_bad_values_are_one_line_usage_errors(argv: list[str], message: str, capsys) -> None:
    code, _, err = run_cli(capsys, argv)
    line = one_error_line(argv[0] if argv[0] in COMMANDS else None, err)
    assert code == 2 and message in line


def test_top_level_errors_have_the_same_form(capsys) -> None:
    assert main(["--bogus"]) == 2
    assert capsys.readouterr().err.startswith("anekit: error: unrecognized arguments: --bogus")


def test_an_oserror_is_a_sentence_with_the_path(tmp_path: Path, capsys) -> None:
    out = tmp_path / "outputs.npz"
    out.mkdir()  # a directory where the outputs file should go
    model = mil.parse(GOOD_MIL).save(tmp_path / "model")
    code, _, err = run_cli(
        capsys, ["run", str(model), "--random", "--backend", "reference", "--out", str(out)]
    )
    assert code == 2
    assert one_error_line("run", err) == (
        f"anekit run: error: argument --out: {out}: is a directory; expected a file name to "
        "write (a file, a device, a FIFO)"
    )


def test_a_syntax_error_keeps_its_source_line_and_caret(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.mil"
    path.write_text(GOOD_MIL.replace("relu(x = x)", "relu(x = )"))
    code, _, err = run_cli(capsys, ["check", str(path), "--chip", "m4"])
    first, source, caret = err.splitlines()
    assert code == 2 and first.startswith(f"anekit check: error: {path}:5:")
    assert "relu(x = )" in source and caret.strip() == "^"


def _big_program(tmp_path: Path, *, error: bool = False) -> Path:
    """A program whose ``check --json`` is ~200 KB of notes: far over a pipe buffer."""
    b = mil.Builder()
    y = b.input("x", (1, 4, 1, 4), "fp16")
    if error:
        y = b.acos(x=y)  # did not compile in the one-op sweep: an error
    for _ in range(300):
        y = b.l2_norm(x=y)  # compiled in the sweep, results unchecked: one note per op
    b.output(y, "y")
    return b.build().save(tmp_path / ("failing" if error else "big"))


def _pipe_into_head(argv: str) -> subprocess.CompletedProcess:
    """Run ``python -m anekit ARGV | head -c 10`` in bash; stdout ends with anekit's status."""
    anekit = f"{sys.executable} -m anekit {argv}"
    script = f'{anekit} | head -c 10; echo " status=${{PIPESTATUS[0]}}"'
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_piping_into_head_exits_quietly_with_the_commands_status(tmp_path: Path) -> None:
    model = _big_program(tmp_path)
    done = _pipe_into_head(f"check {model} --json --chip m4")
    assert done.stdout.endswith(" status=0\n") and done.stdout.startswith("[\n {")
    assert done.stderr == ""  # no traceback, no "Exception ignored ... BrokenPipeError"
    # the exit code is still the command's verdict: errors are findings (1)
    failing = _pipe_into_head(f"check {_big_program(tmp_path, error=True)} --json --chip m4")
    assert failing.stdout.endswith(" status=1\n") and failing.stderr == ""


def test_help_imports_no_feature_package() -> None:
    code = (
        "import sys, runpy\n"
        "sys.argv = ['anekit', '--help']\n"
        "try:\n"
        "    runpy.run_module('anekit', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    loaded = set(done.stdout.split("\n")[-2].split())
    assert "anekit.cli.check" in loaded  # the parser was built, every command configured
    features = {"mil", "backends", "hw", "nn", "train", "bench", "inspect", "doctor"}
    leaked = sorted(m for m in loaded if m.startswith("anekit.") and m.split(".")[1] in features)
    assert leaked == [] and "numpy" not in loaded
    assert {m for m in loaded if m.startswith("anekit")} <= {
        "anekit",
        "anekit.errors",
        "anekit.cli",
        *(f"anekit.cli.{name}" for name in [*COMMANDS, "_common"]),
    }


def test_every_command_is_one_module_with_configure_and_run() -> None:
    for name in COMMANDS:
        module = cli.command_module(name)
        assert module.__name__ == f"anekit.cli.{name}"
        assert callable(module.configure) and callable(module.run)
    files = {p.stem for p in (ROOT / "anekit" / "cli").glob("*.py")}
    assert files == {"__init__", "_common", *COMMANDS}


def test_json_flags_print_parseable_json(tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.mil"
    path.write_text(GOOD_MIL)
    for argv in (["chips", "--json"], ["check", str(path), "--json", "--chip", "m4"]):
        code, out, _ = run_cli(capsys, argv)
        assert code == 0 and isinstance(json.loads(out), dict | list)
    x = np.ones((1, 4), np.float16)
    np.save(tmp_path / "x.npy", x)
    argv = ["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--backend", "reference"]
    code, out, _ = run_cli(capsys, [*argv, "--json"])
    assert code == 0 and json.loads(out)["outputs"][0]["max"] == 1.0


def usage_error(argv: list[str], capsys) -> str:
    """Parse ``argv``; it must be rejected as a usage error (exit 2). Returns stderr."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("command", ["check", "estimate"])
def test_binary_file_is_a_located_syntax_error(command, tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.mil"
    path.write_bytes(b"program(1.0)\n\xa0\x01junk")
    assert main([command, str(path), "--chip", "m4"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:2:1:" in err and "UTF-8" in err and "0xa0" in err


@pytest.mark.parametrize("command", ["check", "estimate", "train"])
def test_unknown_chip_is_a_usage_error(command, tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.mil"
    path.write_text(LEGACY_MIL)
    argv = [command, "--chip", "m99"] + ([] if command == "train" else [str(path)])
    err = usage_error(argv, capsys)
    assert "argument --chip: unknown chip 'm99'" in err and "m4-pro" in err


@pytest.mark.parametrize("command", ["train", "generate"])
def test_negative_seed_is_a_usage_error(command: str, capsys) -> None:
    ckpt = ["--ckpt", "x"] if command == "generate" else []
    err = usage_error([command, *ckpt, "--seed", "-1"], capsys)
    assert "argument --seed: expected a finite number >= 0, found '-1'" in err


def test_a_stream_whose_reader_left_is_pointed_at_devnull(tmp_path: Path) -> None:
    from anekit.cli import _PipeGuard

    class ClosedPipe(io.StringIO):
        """A text stream on a real descriptor whose writes fail as a closed pipe's do."""

        def __init__(self, fd: int) -> None:
            super().__init__()
            self.fd = fd

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return self.fd

    fd = os.open(tmp_path / "was-a-pipe", os.O_WRONLY | os.O_CREAT)
    try:
        guard = _PipeGuard(ClosedPipe(fd))
        assert guard.write("lost") == 4  # dropped, not raised
        guard.flush()
        assert guard.write("also lost") == 9
        assert os.path.samestat(os.fstat(fd), os.stat(os.devnull))
    finally:
        os.close(fd)
