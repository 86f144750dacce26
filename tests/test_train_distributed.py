"""Data-parallel ``anekit train`` on loopback: both engines, 2 and 4 ranks, failures, Ctrl-C, resume.

Every run is a real group of processes (MLX's ring or Gloo over 127.0.0.1, free ports),
bounded by timeouts and stopped by the test whatever happens.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")

from anekit.errors import DistributedError  # noqa: E402
from anekit.train.config import get_config  # noqa: E402
from anekit.train.data import default_corpus  # noqa: E402
from anekit.train.distributed import Communicator, buckets  # noqa: E402
from anekit.train.loop import Trainer  # noqa: E402

STEPS = 10
TIMEOUT = 15  # --dist-timeout of every run: a broken test fails within it, never hangs
WAIT = 180  # a whole run on a loaded 2-core machine
ARGS = ["--steps", str(STEPS), "--batch-size", "1", "--backend", "reference", "--warmup", "1"]
ARGS += ["--sample-tokens", "0", "--dist-timeout", str(TIMEOUT)]
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def engine_usable(engine: str) -> bool:
    try:
        if engine == "mlx":
            import mlx.core as mx

            return mx.distributed.is_available()
        import torch.distributed as dist

        return dist.is_available() and dist.is_gloo_available()
    except ImportError:
        return False


def needs(engine: str):
    return pytest.mark.skipif(not engine_usable(engine), reason=f"engine {engine} not installed")


def losses(log: Path) -> list[float]:
    if not log.exists():
        return []
    return [json.loads(line)["loss"] for line in log.read_text().splitlines() if line.strip()]


def start(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "anekit", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, **ONE_THREAD, **(env or {})},
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float = WAIT) -> tuple[int, str]:
    """The exit code and stderr; whatever is left of the process group is killed."""
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # ranks of a launcher live in their own sessions
        except ProcessLookupError:
            pass
        for child in children(proc.pid):
            kill(child)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return proc.returncode, err


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_for_steps(log: Path, count: int, *procs: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT
    while len(losses(log)) < count:
        assert time.monotonic() < deadline, f"{log} never reached step {count}"
        assert all(p.poll() is None for p in procs), "a process ended early"
        time.sleep(0.02)


@functools.cache
def single_process(grad_accum: int) -> list[float]:
    """The losses one process makes with the same flags and ``grad_accum`` micro-batches a step."""
    tiny = get_config("tiny")
    cfg = dataclasses.replace(
        tiny.train, steps=STEPS, batch_size=1, warmup=1, grad_accum=grad_accum
    )
    trainer = Trainer(tiny.model, cfg, default_corpus(), backend="reference")
    try:
        return [trainer.train_step().loss for _ in range(STEPS)]
    finally:
        trainer.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Uninterrupted 2-rank runs of each usable engine, started side by side: their --out."""
    root = tmp_path_factory.mktemp("runs")
    procs = {
        e: start(
            "--distributed",
            e,
            "--nproc",
            "2",
            *ARGS,
            "--out",
            str(root / e),
            "--log",
            str(root / f"{e}.jsonl"),
        )  # fmt: skip
        for e in ("mlx", "torch")
        if engine_usable(e)
    }
    for engine, proc in procs.items():
        code, err = finish(proc)
        assert code == 0, f"{engine}: {err}"
    return {e: root / e for e in procs}


@pytest.mark.parametrize("engine", [pytest.param(e, marks=needs(e)) for e in ("mlx", "torch")])
def test_two_ranks_repeat_one_process_with_twice_the_accumulation(runs, engine, capsys) -> None:
    got = losses(runs[engine].with_suffix(".jsonl"))
    expected = single_process(grad_accum=2)
    assert len(got) == STEPS
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    assert got[-1] < 0.9 * got[0]  # it trains
    # rank 0 wrote one checkpoint, whole, and generate loads it
    out = runs[engine]
    assert sorted(p.name for p in out.iterdir()) == ["LATEST", f"ckpt-{STEPS:06d}"]
    state = json.loads((out / f"ckpt-{STEPS:06d}" / "state.json").read_text())
    assert state["world_size"] == 2 and state["train"]["grad_accum"] == 1
    from anekit.cli import main

    assert main(["generate", "--ckpt", str(out), "--prompt", "def ", "--tokens", "4"]) == 0
    assert capsys.readouterr().out.startswith("def ")


@needs("torch")
def test_four_ranks_repeat_one_process_with_four_times_the_accumulation(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    proc = start("--distributed", "torch", "--nproc", "4", *ARGS, "--out", str(tmp_path / "o"),
                 "--log", str(log), "--bucket-mb", "0.25", "--check-every", "3")  # fmt: skip
    code, err = finish(proc)
    assert code == 0, err
    np.testing.assert_allclose(losses(log), single_process(grad_accum=4), rtol=1e-4)


@pytest.mark.parametrize("engine", [pytest.param(e, marks=needs(e)) for e in ("mlx", "torch")])
def test_ctrl_c_on_the_launcher_stops_every_rank_and_resumes_exactly(
    runs, engine: str, tmp_path: Path
) -> None:
    at = random.randint(1, STEPS - 3)
    log, out = tmp_path / "log.jsonl", tmp_path / "o"
    run = ["--distributed", engine, "--nproc", "2", *ARGS, "--out", str(out), "--log", str(log)]
    proc = start(*run)
    wait_for_steps(log, at, proc)
    step_seconds = json.loads(log.read_text().splitlines()[-1])["ms"] / 1e3
    time.sleep(random.uniform(0.1, 0.7) * step_seconds)
    ranks = children(proc.pid)
    proc.send_signal(signal.SIGINT)  # to the launcher alone, as a terminal's Ctrl-C reaches it
    code, err = finish(proc)
    assert code == 130, f"SIGINT after step {at}: {err}"
    assert not [p for p in ranks if Path(f"/proc/{p}").exists()]  # every rank stopped
    done = len(losses(log))
    assert (out / "LATEST").read_text().strip() == f"ckpt-{done:06d}", err
    code, err = finish(start(*run, "--resume"))
    assert code == 0, err
    assert losses(log) == losses(runs[engine].with_suffix(".jsonl")), f"SIGINT after step {at}"


@pytest.mark.parametrize("engine", [pytest.param(e, marks=needs(e)) for e in ("mlx", "torch")])
def test_sigkill_of_the_whole_job_then_resume_repeats_the_run(
    runs, engine: str, tmp_path: Path
) -> None:
    """Ranks started with the engine's launcher variables, each in its own directory."""
    from anekit.config import ENV_SUPERVISOR
    from anekit.train.distributed.launch import rank_environments

    dirs = [tmp_path / "rank0", tmp_path / "rank1"]
    for d in dirs:
        d.mkdir()
    run = ["--distributed", engine, *ARGS, "--out", "o", "--log", "log.jsonl", "--save-every", "3"]

    def job(*extra: str) -> list[subprocess.Popen]:
        envs = rank_environments(engine, 2, tmp_path)  # fresh ports, as mlx.launch or torchrun
        for env in envs:
            del env[ENV_SUPERVISOR]  # an external launcher's ranks
        return [start(*run, *extra, cwd=d, env=env) for d, env in zip(dirs, envs)]

    procs = job()
    try:
        wait_for_steps(dirs[0] / "log.jsonl", 4, *procs)
    finally:
        for p in procs:
            kill(p.pid)
    for p in procs:
        finish(p)
    assert (dirs[0] / "o" / "LATEST").read_text().strip() == "ckpt-000003"
    assert not (dirs[1] / "o").exists() and not (dirs[1] / "log.jsonl").exists()  # rank 0 alone
    log = dirs[0] / "log.jsonl"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:3]))  # back to the checkpoint
    resumed = job("--resume")  # rank 1 has no checkpoint: rank 0 sends it the state
    for p in resumed:
        code, err = finish(p)
        assert code == 0, err
    assert losses(log) == losses(runs[engine].with_suffix(".jsonl"))


@pytest.mark.parametrize("engine", [pytest.param(e, marks=needs(e)) for e in ("mlx", "torch")])
def test_a_killed_rank_makes_the_others_stop_with_its_name(engine: str, tmp_path: Path) -> None:
    timeout = 3
    log = tmp_path / "log.jsonl"
    proc = start("--distributed", engine, "--nproc", "2", *ARGS, "--out", str(tmp_path / "o"),
                 "--log", str(log), "--dist-timeout", str(timeout),
                 env={"TMPDIR": str(tmp_path)})  # fmt: skip
    wait_for_steps(log, 1, proc)
    ranks = children(proc.pid)
    assert len(ranks) == 2
    kill(ranks[1])
    killed_at = time.monotonic()
    code, err = finish(proc)
    took = time.monotonic() - killed_at
    assert code == 2, err
    assert "rank 1 failed first: it was killed by SIGKILL; then rank 0 exited with code 2" in err
    assert "anekit train: error: rank 0:" in err and "rank 1 died" in err
    assert took < timeout + 5, f"{took:.1f} s"  # rank 0 stopped on its own, within its timeout
    (kept,) = tmp_path.glob("anekit-ranks-*")  # each rank's stderr, named in the message
    assert str(kept) in err and "rank 1 died" in (kept / "rank0.stderr").read_text()


def test_resuming_with_another_global_batch_is_refused(tmp_path: Path, capsys) -> None:
    from anekit.cli import main

    out = tmp_path / "o"
    base = ["train", *ARGS[:-2], "--steps", "1", "--out", str(out)]
    assert main([*base, "--grad-accum", "2"]) == 0
    capsys.readouterr()
    assert main([*base, "--steps", "2", "--resume", "--grad-accum", "1"]) == 2
    err = capsys.readouterr().err
    assert "global batch is 1 x 1 x 2 = 2 sequences" in err and "1 x 1 x 1 = 1" in err
    assert "pass --grad-accum 2" in err


def test_buckets_cut_large_arrays_and_share_small_ones() -> None:
    arrays = [np.arange(n, dtype=np.float32) for n in (5, 2, 1, 9)]
    got = [[len(p) for p in b] for b in buckets(arrays, 4)]
    assert got == [[4], [1, 2, 1], [4], [4], [1]]
    assert np.array_equal(np.concatenate([p for b in buckets(arrays, 4) for p in b]),
                          np.concatenate(arrays))  # fmt: skip


def test_a_world_of_one_and_bad_arrays() -> None:
    comm = Communicator()
    grads = np.ones(3, np.float32)
    comm.all_reduce([grads])
    assert grads.tolist() == [1, 1, 1] and comm.calls == 0
    with pytest.raises(DistributedError, match="float32"):
        comm.all_reduce([np.ones(3)])
    with pytest.raises(DistributedError, match="rank 2 is outside a world of 2"):
        Communicator(2, 2)


def test_nproc_needs_an_engine_and_no_launcher_is_a_clear_error(capsys, monkeypatch) -> None:
    from anekit.cli import main

    assert main(["train", "--nproc", "2"]) == 2
    assert "pass --distributed mlx or torch" in capsys.readouterr().err
    for name in ("RANK", "MLX_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert main(["train", "--distributed", "torch", *ARGS]) == 2
    assert "start the ranks with torchrun" in capsys.readouterr().err


@needs("torch")
def test_a_checkpoint_rank_0_cannot_load_stops_every_rank_at_once(tmp_path: Path) -> None:
    from anekit.cli import main

    out = tmp_path / "o"
    assert main(["train", *ARGS[:-2], "--steps", "1", "--grad-accum", "2", "--out", str(out)]) == 0
    weights = out / "ckpt-000001" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # the SHA-256 in state.json no longer matches
    weights.write_bytes(bytes(data))
    run = ["--distributed", "torch", "--nproc", "2", *ARGS, "--grad-accum", "1", "--resume"]
    start_time = time.monotonic()
    code, err = finish(start(*run, "--out", str(out), "--dist-timeout", "600",
                             env={"TMPDIR": str(tmp_path)}))  # fmt: skip
    assert code == 2, err
    # rank 0's own error, and rank 1 naming it (which of the two exits first is a race)
    assert "anekit train: error:" in err and "sha" in err.lower()
    assert "[rank 1] anekit train: error: rank 0 refused the run" in err
    assert "failed first: it exited with code 2" in err
    assert time.monotonic() - start_time < 120  # not the 600 s timeout
