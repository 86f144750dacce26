"""Ctrl-C (a real SIGINT to a training process) at a random step, then --resume: bit-exact losses."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("safetensors")

STEPS = 8
RUN = [sys.executable, "-m", "anekit", "train", "--steps", str(STEPS), "--batch-size", "1"]
RUN += ["--grad-accum", "2", "--backend", "reference", "--warmup", "1", "--sample-tokens", "0"]
RUN += ["--save-every", "3"]  # periodic checkpoints and the interrupt's own may both be latest
TIMEOUT = 120


def losses(log: Path) -> list[float]:
    if not log.exists():
        return []
    return [json.loads(line)["loss"] for line in log.read_text().splitlines() if line.strip()]


def start(out: Path, log: Path, *extra: str) -> subprocess.Popen:
    cmd = [*RUN, "--out", str(out), "--log", str(log), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def test_sigint_at_a_random_step_then_resume_repeats_every_loss(tmp_path: Path) -> None:
    at = random.randint(1, STEPS - 2)
    whole = start(tmp_path / "whole", tmp_path / "whole.jsonl")  # side by side: one wait
    cut_log = tmp_path / "cut.jsonl"
    cut = start(tmp_path / "cut", cut_log)
    deadline = time.monotonic() + TIMEOUT
    while len(losses(cut_log)) < at and cut.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    step_seconds = json.loads(cut_log.read_text().splitlines()[-1])["ms"] / 1e3
    time.sleep(random.uniform(0.1, 0.7) * step_seconds)  # a random point inside step at + 1
    cut.send_signal(signal.SIGINT)
    code, err = finish(cut)
    assert code == 130, f"SIGINT after step {at}: exit {code}\n{err}"
    done = len(losses(cut_log))
    assert at <= done < STEPS, f"SIGINT after step {at}: {done} steps logged"
    latest = (tmp_path / "cut" / "LATEST").read_text().strip()
    assert latest == f"ckpt-{done:06d}", f"SIGINT after step {at}\n{err}"
    assert f"interrupted: saved step {done}" in err

    code, err = finish(start(tmp_path / "cut", cut_log, "--resume"))
    assert code == 0, err
    assert finish(whole)[0] == 0
    expected = losses(tmp_path / "whole.jsonl")
    assert len(expected) == STEPS
    assert losses(cut_log) == expected, f"SIGINT after step {at}, saved step {done}"
    assert not [n for n in os.listdir(tmp_path / "cut") if n.startswith(".")]  # no temporaries
