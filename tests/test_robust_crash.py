"""kill -9 during checkpoint writes and Program.save: afterwards the old or the new state, never a mix.

Each trial forks a child that saves in a loop and is killed with SIGKILL, either at a given
step of the save protocol (every file write, fsync, rename and removal, counted in the
child) or after a random delay. The parent then loads what is on disk and checks that it is
one whole save, and that the next save leaves no temporary behind.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")

from anekit import mil  # noqa: E402
from anekit.mil import saving  # noqa: E402
from anekit.train import checkpoint as ck  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

# the calls a save makes that change or flush the disk, by module
STEPS = {
    ck: ("write_synced", "fsync_dir", "write_atomic"),
    saving: ("write_synced", "fsync_dir", "exchange"),
}
OS_CALLS = ("rename", "replace", "mkdir", "unlink", "rmdir")


def run_killed(work: Callable[[], None], kill_at: int | None, delay: float, patch) -> None:
    """Fork; the child runs ``work`` forever and dies by SIGKILL at step ``kill_at`` (or after ``delay``)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            if kill_at is not None:
                patch(kill_at)
            while True:
                work()
        finally:
            os._exit(1)
    if kill_at is None:
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def kill_at_step(module, n: int) -> None:
    """In the child: SIGKILL itself just before the ``n``-th disk-changing call of a save."""
    count = [0]

    def counted(real):
        def call(*args, **kwargs):
            count[0] += 1
            if count[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return call

    for name in STEPS[module]:
        setattr(module, name, counted(getattr(module, name)))
    for name in OS_CALLS:
        setattr(os, name, counted(getattr(os, name)))


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ---- checkpoints ----------------------------------------------------------------------------


def tensors(step: int) -> dict[str, dict[str, np.ndarray]]:
    value = np.full((64, 64), step, np.float32)
    return {"a.safetensors": {"w": value}, "b.safetensors": {"w": value, "v": value[:3]}}


def checkpoint_saver(out: Path) -> Callable[[], None]:
    step = [int(ck.latest_checkpoint(out).name[5:]) if ck.latest_checkpoint(out) else 0]

    def work() -> None:
        step[0] += 1
        ck.save_checkpoint(out, step[0], tensors(step[0]), {"note": step[0]}, keep=2)

    return work


def assert_whole_checkpoint(out: Path) -> int:
    state, files = ck.load_checkpoint(out)
    step = state["step"]
    assert state["note"] == step
    for name, arrays in files.items():
        for array in arrays.values():
            assert np.all(array == step), (name, step)
    return step


@pytest.mark.parametrize("kill_at", [*range(1, 21), None, None, None, None])
def test_a_killed_checkpoint_write_leaves_the_old_or_the_new(tmp_path: Path, kill_at) -> None:
    out = tmp_path / "run"
    ck.save_checkpoint(out, 1, tensors(1), {"note": 1})
    delay = random.Random(kill_at).uniform(0.0, 0.15) if kill_at is None else 0.0
    run_killed(checkpoint_saver(out), kill_at, delay, lambda n: kill_at_step(ck, n))
    step = assert_whole_checkpoint(out)
    ck.save_checkpoint(out, step + 1, tensors(step + 1), {"note": step + 1})
    assert temporaries(out) == []
    assert assert_whole_checkpoint(out) == step + 1


# ---- Program.save -----------------------------------------------------------------------------


def program(value: float) -> mil.Program:
    """Two weight files, both filled with ``value``: a save that mixes two programs shows."""
    b = mil.Builder()
    x = b.input("x", (1, 64, 1, 64), "fp16")
    w1 = b.weight("w1", np.full((1, 64, 1, 64), value, np.float16))
    w2 = b.weight("w2", np.full((1, 64, 1, 64), -value, np.float16))
    b.output(b.add(x=b.mul(x=x, y=w1), y=w2), "y")
    return b.build()


PROGRAMS = {1.0: program(1.0), 2.0: program(2.0)}


def program_saver(out: Path) -> Callable[[], None]:
    turn = [0]

    def work() -> None:
        turn[0] += 1
        PROGRAMS[2.0 if turn[0] % 2 else 1.0].save(out)

    return work


def assert_whole_program(out: Path) -> float:
    loaded = mil.load(out)
    matches = [v for v, p in PROGRAMS.items() if loaded == p]
    assert len(matches) == 1, "the directory mixes two saves"
    return matches[0]


@pytest.mark.parametrize("kill_at", [*range(1, 21), None, None, None, None])
def test_a_killed_program_save_leaves_the_old_or_the_new(tmp_path: Path, kill_at) -> None:
    out = tmp_path / "model"
    PROGRAMS[1.0].save(out)
    (out / "README").write_text("kept across saves")
    delay = random.Random(kill_at).uniform(0.0, 0.15) if kill_at is None else 0.0
    run_killed(program_saver(out), kill_at, delay, lambda n: kill_at_step(saving, n))
    assert_whole_program(out)
    PROGRAMS[2.0].save(out)
    assert temporaries(tmp_path) == []
    assert assert_whole_program(out) == 2.0
    assert (out / "README").read_text() == "kept across saves"


def test_a_save_killed_between_the_renames_of_the_fallback_is_restored(tmp_path, monkeypatch):
    """Where the file system cannot swap, the old directory is moved aside: the next save restores it."""
    out = tmp_path / "model"
    PROGRAMS[1.0].save(out)
    aside = tmp_path / f".model.{'0' * 12}.old.tmp"
    os.rename(out, aside)  # the state a kill between the two renames leaves
    (tmp_path / f".model.{'1' * 12}.new.tmp").mkdir()
    assert saving.sweep(out) == [aside.name, f".model.{'1' * 12}.new.tmp"]
    assert assert_whole_program(out) == 1.0
    monkeypatch.setattr(saving, "exchange", lambda a, b: False)
    PROGRAMS[2.0].save(out)
    assert assert_whole_program(out) == 2.0 and temporaries(tmp_path) == []


def test_save_refuses_a_symlinked_weights_directory(tmp_path: Path) -> None:
    from anekit.errors import WeightFileError

    out = tmp_path / "model"
    PROGRAMS[1.0].save(out)
    elsewhere = tmp_path / "shared-weights"
    os.rename(out / "weights", elsewhere)
    (out / "weights").symlink_to(elsewhere)
    with pytest.raises(WeightFileError, match="refusing to save through the symbolic link"):
        PROGRAMS[2.0].save(out)
    assert (out / "weights").is_symlink() and mil.load(out) == PROGRAMS[1.0]  # untouched


def test_saved_files_and_directories_get_the_umask_modes(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        PROGRAMS[1.0].save(tmp_path / "m")
        ck.save_checkpoint(tmp_path / "c", 1, tensors(1), {})
    finally:
        os.umask(old)
    modes = {
        p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")
    }
    assert {m for p, m in modes.items() if (tmp_path / p).is_dir()} == {0o750}, modes
    assert {m for p, m in modes.items() if (tmp_path / p).is_file()} == {0o640}, modes
