"""``anekit train --nproc N``: start N local ranks and supervise them.

Each rank is ``python -m anekit train ...`` (the same arguments, without ``--nproc``) with
the variables its engine's own launcher would set (MLX_RANK and a loopback hostfile;
torchrun's RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), on free loopback ports. The
supervisor forwards each rank's stderr (others' lines marked ``[rank r]``) and keeps it in
a private directory; it names the first rank that fails, waits up to the collective timeout
for the others to stop on their own, then kills what is left. Ctrl-C is forwarded: every
rank stops after its current step, rank 0 checkpoints it. The ranks run in sessions of
their own, so the terminal's Ctrl-C reaches them once, through here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from anekit import config
from anekit.errors import DistributedError

LOOPBACK = "127.0.0.1"
# Seconds the supervisor adds to the collective timeout before it kills a rank that has
# not stopped after another failed: its own watchdog should have ended it by then.
GRACE_SECONDS = 10.0
INTERRUPTED = 130


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on the loopback interface right now."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def rank_environments(engine: str, nproc: int, workdir: Path) -> list[dict[str, str]]:
    """The environment of each local rank: its engine's launcher variables on loopback."""
    base = dict(os.environ)
    threads = str(max(1, (os.cpu_count() or 1) // nproc))
    for name in config.THREAD_VARIABLES:  # ranks share the cores, not oversubscribe them
        base.setdefault(name, threads)
    base[config.ENV_SUPERVISOR] = str(os.getpid())
    if nproc == 1:  # a world of one needs no group (MLX's ring cannot form one of one)
        return [{**base, config.MLX_RANK: "0", config.MLX_WORLD_SIZE: "1"}
                if engine == "mlx" else
                {**base, config.TORCH_RANK: "0", config.TORCH_WORLD_SIZE: "1"}]  # fmt: skip
    if engine == "mlx":
        hostfile = workdir / "hostfile.json"
        hostfile.write_text(json.dumps([[f"{LOOPBACK}:{p}"] for p in free_ports(nproc)]))
        return [
            {**base, config.MLX_RANK: str(r), config.MLX_HOSTFILE: str(hostfile)}
            for r in range(nproc)
        ]
    base.setdefault(config.GLOO_SOCKET_IFNAME, "lo0" if sys.platform == "darwin" else "lo")
    base.update(
        {
            config.TORCH_WORLD_SIZE: str(nproc),
            config.TORCH_MASTER_ADDR: LOOPBACK,
            config.TORCH_MASTER_PORT: str(free_ports(1)[0]),
        }
    )
    return [{**base, config.TORCH_RANK: str(r), "LOCAL_RANK": str(r)} for r in range(nproc)]


def describe_exit(code: int) -> str:
    """``exited with code 2``, ``was killed by SIGKILL``."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class _Rank:
    rank: int
    process: subprocess.Popen
    log: IO[bytes]
    reader: threading.Thread | None = None
    code: int | None = None
    killed: bool = False  # by the supervisor, after the others failed or stopped
    exited_at: float = field(default=0.0)


def supervise(command: list[str], engine: str, nproc: int, timeout: float) -> int:
    """Run ``command`` as ``nproc`` ranks of ``engine``; 0 when all succeed.

    Raises DistributedError naming the first rank that failed, KeyboardInterrupt after a
    forwarded Ctrl-C once every rank has stopped.
    """
    workdir = Path(tempfile.mkdtemp(prefix="anekit-ranks-"))  # mode 0700
    ranks: list[_Rank] = []
    interrupts = 0

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        for r in ranks:
            if r.process.poll() is None:
                r.process.send_signal(signal.SIGINT)

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise DistributedError("the supervisor was terminated (SIGTERM); it stopped every rank")

    previous = signal.signal(signal.SIGINT, forward)
    previous_term = signal.signal(signal.SIGTERM, terminated)
    try:
        for rank, env in enumerate(rank_environments(engine, nproc, workdir)):
            ranks.append(_start(rank, command, env, workdir))
        failed = _wait(ranks, timeout, lambda: interrupts > 0)
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
        for r in ranks:
            _stop(r)
    if failed is None:
        shutil.rmtree(workdir, ignore_errors=True)
        if interrupts:
            raise KeyboardInterrupt
        return 0
    raise DistributedError(_failure_report(ranks, failed, workdir), rank=failed.rank)


def _start(rank: int, command: list[str], env: dict[str, str], workdir: Path) -> _Rank:
    log = open(workdir / f"rank{rank}.stderr", "wb")  # noqa: SIM115 (closed by _stop)
    process = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=None if rank == 0 else subprocess.DEVNULL,  # rank 0 alone reports
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    r = _Rank(rank, process, log)
    r.reader = threading.Thread(target=_forward_stderr, args=(r,), daemon=True)
    r.reader.start()
    return r


def _forward_stderr(r: _Rank) -> None:
    """Copy a rank's stderr to its file and to ours (marked with the rank but for rank 0)."""
    prefix = b"" if r.rank == 0 else f"[rank {r.rank}] ".encode()
    stream = r.process.stderr
    assert stream is not None
    out = getattr(sys.__stderr__, "buffer", None)
    for line in iter(stream.readline, b""):
        r.log.write(line)
        r.log.flush()
        if out is not None:
            out.write(prefix + line)
            out.flush()


def _wait(ranks: list[_Rank], timeout: float, interrupted) -> _Rank | None:
    """Wait for every rank; the first that failed (None if none did). Kills ranks left hanging."""
    first: _Rank | None = None
    deadline = None
    while any(r.code is None for r in ranks):
        for r in ranks:
            if r.code is None and (code := r.process.poll()) is not None:
                r.code, r.exited_at = code, time.monotonic()
                expected = code == 0 or (code == INTERRUPTED and interrupted())
                if not expected and first is None:
                    first = r
        if (first is not None or interrupted()) and deadline is None:
            deadline = time.monotonic() + timeout + GRACE_SECONDS
        if deadline is not None and time.monotonic() > deadline:
            for r in ranks:
                if r.code is None:
                    r.process.kill()
                    r.killed = True
                    r.code = r.process.wait()
                    first = first or r
        time.sleep(0.05)
    return first


def _stop(r: _Rank) -> None:
    if r.process.poll() is None:
        r.process.kill()
        r.killed = True
        r.process.wait()
    if r.reader is not None:
        r.reader.join(timeout=5)
    r.log.close()


def _failure_report(ranks: list[_Rank], failed: _Rank, workdir: Path) -> str:
    what = "hung and was killed" if failed.killed else describe_exit(failed.process.returncode)
    others = [
        f"rank {r.rank} " + ("hung and was killed" if r.killed else describe_exit(r.code or 0))
        for r in ranks
        if r is not failed
    ]
    then = f"then {', '.join(others)}; " if others else ""
    return (
        f"rank {failed.rank} failed first: it {what}; {then}each rank's stderr is kept in {workdir}"
    )
