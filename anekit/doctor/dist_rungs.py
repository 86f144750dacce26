"""The data-parallel rung: do two processes evaluating at once get two ANE dies' throughput?

An Ultra is two Max dies with an ANE each (``anekit chips``: 32 cores); alternating two
kernel sets in one process gave 3773 vs 2552 evaluations/s (ncdrone/rustane PR #12).
Whether two *processes* (two ranks of ``anekit train --nproc 2``) land on different dies
is unverified: nothing documents how the framework places a process's requests. This
rung measures it: one process evaluating a matmul for a fixed time alone, then two at once
(started at the same instant); the ratio of their summed evaluations/s to one process's
says whether a second rank adds a die (near 2) or shares one (near 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from anekit.errors import EvaluationError
from anekit.ladder.runner import Context

# Run in each measuring process: compile one matmul, evaluate it from START for SECONDS.
WORKER = """
import json, sys, time
import numpy as np
import anekit
from anekit.bench import programs
backend, seconds, start = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
m = int(sys.argv[4])
rng = np.random.default_rng(0)
inputs = {"x": rng.standard_normal((1, m, m)).astype(np.float16),
          "y": rng.standard_normal((1, m, m)).astype(np.float16)}
with anekit.compile(programs.matmul(m, m, m), backend=backend) as k:
    k(**inputs)
    time.sleep(max(0.0, start - time.time()))
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        k(**inputs)
        count += 1
    print(json.dumps({"evaluations": count, "seconds": time.perf_counter() - t0}))
"""
SIDE = 512  # a [512, 512] x [512, 512] fp16 matmul: ANE work well above the dispatch floor
TWO_DIES = 1.6  # summed throughput of two processes over one's above which a die was added


def _rates(count: int, backend: str, seconds: float, delay: float, side: int) -> list[float]:
    """Evaluations/s of ``count`` processes evaluating at the same time, ``delay`` s from now."""
    start = time.time() + delay  # every process has compiled by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, backend, str(seconds), str(start), str(side)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    rates = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=delay + seconds + 120)
            if p.returncode != 0:
                raise EvaluationError(f"a measuring process failed ({p.returncode}): {err[-500:]}")
            done = json.loads(out.strip().splitlines()[-1])
            rates.append(done["evaluations"] / done["seconds"])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return rates


def two_processes(ctx: Context) -> None:
    """One process's ANE evaluations/s, then two processes' at once: does the second add a die?"""
    backend = ctx.options.get("backend", "ane")
    seconds = float(ctx.options.get("seconds", 5.0))
    delay = float(ctx.options.get("start_delay", 15.0))
    side = int(ctx.options.get("side", SIDE))
    one = _rates(1, backend, seconds, delay, side)[0]
    two = _rates(2, backend, seconds, delay, side)
    ratio = sum(two) / one
    ctx.observe("one_process_per_s", one)
    ctx.observe("two_processes_per_s", two)
    ctx.observe("ratio", ratio)
    ctx.observe(
        "verdict",
        "two processes got about two dies' throughput"
        if ratio >= TWO_DIES
        else "two processes shared about one die's throughput",
    )
