"""Outputs never clobber: links are written through, devices and FIFOs written into (issue 23)."""

from __future__ import annotations

import json
import os
import select
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.cli import main
from anekit.errors import UsageError
from anekit.files import check_output, write_atomic
from tests.clitools import GOOD_MIL


def _null_device(where: Path) -> Path:
    """A character device of our own, the same as /dev/null (root only; else skip)."""
    device = where / "null"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with open(device, "wb") as f:  # a file system mounted nodev refuses to open it
            f.write(b"")
    except OSError as e:
        pytest.skip(f"cannot make a character device here: {e}")
    return device


def _run_out(tmp_path: Path, out: Path, capsys) -> int:
    model = mil.parse(GOOD_MIL).save(tmp_path / "model")
    code = main(["run", str(model), "--random", "--backend", "reference", "--out", str(out)])
    capsys.readouterr()
    return code


def test_a_character_device_survives_run_out(tmp_path: Path, capsys) -> None:
    device = _null_device(tmp_path)
    assert _run_out(tmp_path, device, capsys) == 0
    assert stat.S_ISCHR(os.lstat(device).st_mode)  # still the device, not a regular file


def test_a_symlink_survives_run_out_and_its_target_gets_the_outputs(tmp_path: Path, capsys) -> None:
    target = tmp_path / "real.npz"
    target.write_bytes(b"old")
    link = tmp_path / "link.npz"
    link.symlink_to(target.name)
    assert _run_out(tmp_path, link, capsys) == 0
    assert link.is_symlink() and os.readlink(link) == target.name
    with np.load(target) as data:
        assert data["y"].shape == (1, 4)


def test_a_dangling_link_creates_its_target(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("sub-target")
    write_atomic(tmp_path / "link", b"new")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "sub-target").read_bytes() == b"new"


def test_a_fifo_is_written_into_when_read_and_refused_when_not(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="No such device or address"):  # nobody reads: no hang
        write_atomic(fifo, b"x")
    got: list[bytes] = []
    reader_open = threading.Event()

    def read() -> None:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        reader_open.set()
        select.select([fd], [], [], 5)  # until the writer's bytes arrive (no writer yet: no EOF)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read)
    reader.start()
    reader_open.wait(5)
    write_atomic(fifo, b"through the pipe")
    reader.join(5)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("kind", ["directory", "loop", "unwritable parent"])
def test_outputs_that_cannot_be_written_are_refused_before_work(tmp_path: Path, kind: str) -> None:
    if kind == "directory":
        path, message = tmp_path, "is a directory; expected a file name"
    elif kind == "loop":
        (tmp_path / "a").symlink_to("b")
        (tmp_path / "b").symlink_to("a")
        path, message = tmp_path / "a", "too many levels of symbolic links"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        (tmp_path / "ro").mkdir(mode=0o555)
        path, message = tmp_path / "ro" / "x.json", "is not writable"
    with pytest.raises(UsageError, match=message):
        check_output(path)


@pytest.mark.parametrize(
    "argv",
    [
        ["doctor", "--no-smoke", "--json"],
        ["probe", "--list", "--json"],
        ["classes", "--json"],
        ["bench", "--quick", "--json"],
        ["bench", "--quick", "--report"],
        ["train", "--steps", "1", "--log"],
    ],
)
def test_every_command_checks_its_output_the_same_way(tmp_path: Path, capsys, argv) -> None:
    assert main([*argv, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"argument {argv[-1]}: {tmp_path}: is a directory; expected a file name" in err


def test_a_ladder_report_writes_the_home_directory_as_a_tilde(tmp_path: Path, monkeypatch) -> None:
    from anekit.ladder.runner import Context

    monkeypatch.setenv("HOME", "/Users/alice")
    ctx = Context({}, tmp_path / "log.jsonl", tmp_path)
    ctx.observe("executable", "/Users/alice/venv/bin/python")
    ctx.observe("modules", {"objc": ["/Users/alice/venv/objc/__init__.py", 3]})
    assert ctx.observed == {"executable": "~/venv/bin/python",
                            "modules": {"objc": ["~/venv/objc/__init__.py", 3]}}  # fmt: skip
    assert "alice" not in (tmp_path / "log.jsonl").read_text()


def test_the_doctor_environment_rung_records_no_interpreter_path(
    tmp_path: Path, monkeypatch
) -> None:
    import sys

    from anekit.doctor.ladder import environment
    from anekit.ladder.runner import Context

    monkeypatch.setattr(sys, "executable", "/Volumes/alice-work/envs/x/bin/python3.12")
    ctx = Context({}, None, tmp_path)
    environment(ctx)
    assert ctx.observed["executable"] == "python3.12"
    assert "alice" not in json.dumps(ctx.observed, default=str)
