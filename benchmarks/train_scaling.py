"""Data-parallel scaling of ``anekit train``: tokens/s at 1 and 2 ranks on each engine.

Each measurement is a real run, ``anekit train --distributed ENGINE --nproc W`` on
loopback, every rank pinned to one BLAS/OpenMP thread; the per-step times come from rank
0's ``--log`` (``ms``: the whole step, waiting for the other rank included; ``comm_ms``:
the time inside the gradient all-reduce). The first ``--warmup`` steps of each run are
dropped. Runs alternate (1 rank, 2 ranks, each engine) round after round so load that
comes and goes hits all of them; the figures are medians over every kept step of every
round. Scaling efficiency is tokens/s at 2 ranks / (2 x tokens/s at 1 rank); the target of
issue 24 is >= 0.8 on ``stories15m``.

The data are synthetic llama2.c tokens with a 32000-piece tokenizer (the config's real
vocabulary, so the classifier costs what it does on TinyStories; no download).

``--predict`` prints instead what the cost model predicts per step for W Macs: one rank's
step (``anekit.train.cost``: kernels and CPU work; the kernels alone on a chip without a
published CPU rate), plus a ring all-reduce of the fp32 gradients, ``2 (W - 1) / W x 4 x parameters`` bytes
through each Mac's link, at the link rates in :data:`LINKS` (nominal, with their sources).

Usage: ``python benchmarks/train_scaling.py [--config stories15m] [--rounds 3] [--steps 6]``,
``python benchmarks/train_scaling.py --predict [--config stories110m] [--chip m4]``.
It also measures the all-reduce alone (a gradient-sized buffer between 2 local ranks).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ENGINES = ("mlx", "torch")
# Nominal link rates in bytes/s; TCP over them delivers less (unmeasured here).
LINKS = {
    # Intel's Thunderbolt 5 announcement (2023-09-12): 80 Gb/s bi-directional
    "Thunderbolt 5 (80 Gb/s)": 80e9 / 8,
    # Intel's Thunderbolt 4 specification: 40 Gb/s
    "Thunderbolt 4 (40 Gb/s)": 40e9 / 8,
    # the 10 Gb Ethernet option of Mac mini and Mac Studio (Apple's technical specifications)
    "10 Gb Ethernet": 10e9 / 8,
}
ONE_THREAD = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
VOCAB = 32000


def synthetic_data(directory: Path, tokens: int, seed: int = 0) -> Path:
    """A llama2.c ``.bin`` of random token ids and a ``tokenizer.bin`` of ``VOCAB`` pieces."""
    pieces = [f"<{i}>".encode() for i in range(VOCAB)]
    table = struct.pack("<i", max(map(len, pieces)))
    table += b"".join(struct.pack("<fi", 0.0, len(p)) + p for p in pieces)
    (directory / "tokenizer.bin").write_bytes(table)
    ids = np.random.default_rng(seed).integers(0, VOCAB, tokens, dtype=np.uint16)
    path = directory / "data.bin"
    ids.astype("<u2").tofile(path)
    return path


def one_run(engine: str, world: int, args, data: Path, workdir: Path) -> list[dict]:
    """Rank 0's log records of one run of ``world`` ranks."""
    tag = f"{engine}-{world}-{time.monotonic_ns()}"
    log = workdir / f"{tag}.jsonl"
    command = [sys.executable, "-m", "anekit", "train", "--config", args.config,
               "--data", str(data), "--steps", str(args.steps), "--backend", "reference",
               "--sample-tokens", "0", "--save-every", "0", "--out", str(workdir / tag),
               "--log", str(log), "--distributed", engine, "--nproc", str(world),
               "--bucket-mb", str(args.bucket_mb)]  # fmt: skip
    env = {**os.environ, **{name: "1" for name in ONE_THREAD}}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{engine} x {world} failed ({done.returncode}):\n{done.stderr}")
    return [json.loads(line) for line in log.read_text().splitlines()][args.warmup :]


def step_ms(config: str, chip: str) -> tuple[float, str]:
    """One rank's predicted step (ms, at the config's batch and grad-accum) and what it holds:
    the whole step (``anekit.train.cost``: kernels and CPU work, the published schedule), or
    the kernels alone on a chip without a published CPU matrix rate."""
    from anekit.errors import UsageError
    from anekit.train.config import get_config
    from anekit.train.cost import estimate_step, kernel_seconds

    named = get_config(config)
    cfg, accum = named.model, named.train.grad_accum
    try:
        return estimate_step(cfg, chip).seconds * 1e3 * accum, "whole step"
    except UsageError:
        kernels = cfg.n_layers * sum(kernel_seconds(cfg, chip).values())
        return kernels * 1e3 * accum, "ANE kernels only (no published CPU rate)"


def scaling(config: str, chip: str, link: str, worlds: tuple[int, ...] = (1, 2, 4, 8),
            accum: int = 1) -> list[tuple[int, float, float]]:  # fmt: skip
    """(W, step ms, efficiency) per world size: the step plus a ring all-reduce of the fp32
    gradients over ``link`` (``accum`` micro-batches per step)."""
    from anekit.train.config import get_config

    compute = step_ms(config, chip)[0] * accum
    grads = 4 * get_config(config).model.n_params()
    rows = []
    for w in worlds:
        reduce_ms = 2 * (w - 1) / w * grads / LINKS[link] * 1e3
        rows.append((w, compute + reduce_ms, compute / (compute + reduce_ms)))
    return rows


def predict(config: str, chip: str, worlds: tuple[int, ...] = (1, 2, 4, 8)) -> None:
    """The cost model's step time for W Macs: one rank's step + ring all-reduce."""
    from anekit.train.config import get_config

    compute, what = step_ms(config, chip)
    grads = 4 * get_config(config).model.n_params()
    print(f"{config} on {chip}: {compute:.0f} ms per rank and step ({what}, batch 1); "
          f"fp32 gradients {grads / 1e6:.0f} MB")  # fmt: skip
    for link in LINKS:
        row = [f"W={w}: {ms:.0f} ms ({eff:.2f} efficiency)" for w, ms, eff in
               scaling(config, chip, link, worlds)]  # fmt: skip
        print(f"  {link}: " + "; ".join(row))


# One rank of the all-reduce measurement: the communicator sums a gradient-sized buffer.
ALLREDUCE_RANK = """
import json, sys, time
import numpy as np
from anekit.train.distributed.engines import connect
engine, elements, repeats, bucket = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
comm = connect(engine, 120.0, bucket)
grads = np.ones(elements, np.float32)
comm.all_reduce([grads])  # connections warmed up
times = []
for _ in range(repeats):
    comm.barrier()
    start = time.perf_counter()
    comm.all_reduce([grads])
    times.append(time.perf_counter() - start)
if comm.rank == 0:
    print(json.dumps(times))
comm.close()
"""


def allreduce_seconds(engine: str, elements: int, repeats: int, bucket_mb: float) -> list[float]:
    """Rank 0's times of a 2-rank all-reduce of ``elements`` float32 (barrier before each)."""
    from anekit.train.distributed.launch import rank_environments

    with tempfile.TemporaryDirectory(prefix="anekit-allreduce-") as tmp:
        envs = rank_environments(engine, 2, Path(tmp))
        args = [engine, str(elements), str(repeats), str(int(bucket_mb * 2**20))]
        procs = [
            subprocess.Popen([sys.executable, "-c", ALLREDUCE_RANK, *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for env in envs
        ]  # fmt: skip
        try:
            outs = [p.communicate(timeout=600) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        if any(p.returncode for p in procs):
            raise SystemExit(f"{engine} all-reduce failed: {[o[1][-300:] for o in outs]}")
        return json.loads(outs[0][0].strip().splitlines()[-1])


def median(records: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="default: stories15m; with --predict, stories110m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6, help="steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="first steps of a run dropped")
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--predict", action="store_true", help="the cost model for W Macs")
    parser.add_argument("--chip", default="m4", help="with --predict")
    args = parser.parse_args()
    if args.predict:
        predict(args.config or "stories110m", args.chip)
        return
    args.config = args.config or "stories15m"
    engines = args.engines.split(",")
    runs: dict[tuple[str, int], list[dict]] = {(e, w): [] for e in engines for w in (1, 2)}
    with tempfile.TemporaryDirectory(prefix="anekit-scaling-") as tmp:
        workdir = Path(tmp)
        data = synthetic_data(workdir, 2_000_000)
        print(f"load before: {os.getloadavg()[0]:.2f} (1-minute average, {os.cpu_count()} cores)")
        for round_ in range(args.rounds):
            order = list(runs)
            order = order[round_ % len(order) :] + order[: round_ % len(order)]
            for engine, world in order:
                runs[engine, world] += one_run(engine, world, args, data, workdir)
        print(f"load after: {os.getloadavg()[0]:.2f}")
    from anekit.train.config import get_config

    elements = get_config(args.config).model.n_params()
    for engine in engines:
        times = allreduce_seconds(engine, elements, 5 * args.rounds, args.bucket_mb)
        print(f"{engine}: all-reduce alone of {4 * elements / 1e6:.0f} MB on 2 local ranks: "
              f"median {statistics.median(times) * 1e3:.0f} ms, min {min(times) * 1e3:.0f} ms "
              f"({len(times)} repeats)")  # fmt: skip
    print(f"{args.config}, one BLAS thread per rank, {args.rounds} rounds x "
          f"{args.steps - args.warmup} steps kept per configuration, medians")  # fmt: skip
    for engine in engines:
        one, two = runs[engine, 1], runs[engine, 2]
        tps1 = one[0]["tokens_per_s"] * one[0]["ms"] / median(one, "ms")
        tps2 = two[0]["tokens_per_s"] * two[0]["ms"] / median(two, "ms")
        comm = median(two, "comm_ms")
        step = median(two, "ms")
        efficiency = tps2 / (2 * tps1)
        verdict = "reached" if efficiency >= 0.8 else "NOT reached"
        print(f"{engine}: 1 rank {tps1:,.0f} tokens/s ({median(one, 'ms'):.0f} ms/step); "
              f"2 ranks {tps2:,.0f} tokens/s ({step:.0f} ms/step, all-reduce {comm:.0f} ms = "
              f"{comm / step:.0%} of the step); scaling efficiency {efficiency:.2f} "
              f"(target >= 0.8: {verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
