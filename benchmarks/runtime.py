"""Reference-backend runtime vs PyTorch fp32, pinned and interleaved (see ``harness``).

1. Per-call overhead of a 3-op program.
2. fp16 rounding of float32 arrays: the PyTorch cast, the NumPy-only magic add, and
   NumPy's own ``astype(float16).astype(float32)``, on normal and subnormal-heavy data.
3. A 12-layer transformer forward (dim 256) at seq 64, 256 and 1024: anekit under the
   default numerics profile (m4: ties away, flush, saturation, issue 25) and under
   "ideal" (IEEE fp16 storage), each with the PyTorch cast and NumPy-only
   (``fp16.use_torch(False)``, the path taken where PyTorch is not installed), and the same
   math in PyTorch fp32. Targets: at most 1.5x PyTorch's time at seq 64 and 256 (issue 13);
   the default profile at most 1.3x "ideal" (issue 25).
4. Peak memory of one forward at seq 1024, each side in a fresh process: the rise of the
   resident set (``VmHWM`` after resetting it, Linux) and, for anekit, tracemalloc's peak
   (NumPy reports its buffers to it). Target: within 1.5x PyTorch's.

Usage: ``python benchmarks/runtime.py [--threads N] [--rounds R] [--seqs 64 256]
[--forward-only] [--no-torch] [--cpu-time] [--json FILE]``. ``--json`` writes the forward
tables with the load (``benchmarks/results/runtime.json`` is what docs/backends.md and
docs/numerics.md quote). ``--no-torch`` runs as where PyTorch is not installed
(``import torch`` fails): the anekit rows only, m4 against "ideal".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
from harness import interleave, pinned, report

import anekit
from anekit import fp16, mil
from anekit.bench.programs import TransformerShape, transformer, transformer_weights

SEQS = (64, 256, 1024)
CLOCK = [time.perf_counter]  # --cpu-time: time.thread_time


def three_op_program() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 16, 1, 16), "fp16")
    b.output(b.relu(x=b.mul(x=b.add(x=x, y=1.0), y=0.5)), "y")
    return b.build()


def per_call_us(fn, calls: int = 2000) -> float:
    """Median over 5 batches of the time per call, in microseconds."""
    for _ in range(100):
        fn()
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        batches.append((time.perf_counter() - t0) / calls)
    return float(np.median(batches)) * 1e6


def shape_at(seq: int) -> TransformerShape:
    """The benchmark's 12-layer stack (``anekit.bench.programs``) at sequence length ``seq``."""
    return TransformerShape(seq=seq)


def example_input(shape: TransformerShape) -> np.ndarray:
    s = shape
    return np.random.default_rng(1).standard_normal((1, 1, s.dim, s.tokens)).astype(np.float16)


def torch_forward(shape: TransformerShape, weights, x: np.ndarray):
    """The same decoder stack in PyTorch fp32 (token-major, the natural layout for torch).

    RMSNorm, rotate-half RoPE, causal attention (a KV head per query head: the benchmark
    shape has no grouping), SwiGLU; the weights have the model dimension first.
    """
    import torch

    s = shape
    if s.group != 1:
        raise ValueError(f"torch_forward writes attention without GQA, found group {s.group}")
    tw = [{k: torch.from_numpy(v.astype(np.float32)) for k, v in w.items()} for w in weights]
    h0 = torch.from_numpy(x.astype(np.float32)).reshape(s.dim, s.tokens).T.contiguous()
    mask = torch.triu(torch.full((s.seq, s.seq), -1e4), diagonal=1)
    half = s.head_dim // 2
    inv_freq = s.rope_theta ** (-torch.arange(half, dtype=torch.float64) * 2 / s.head_dim)
    angle = torch.arange(s.seq, dtype=torch.float64)[:, None] * inv_freq[None]
    cos, sin = (torch.cat([f(angle)] * 2, -1).float() for f in (torch.cos, torch.sin))

    def rms(h, g):
        return h * torch.rsqrt((h * h).mean(-1, keepdim=True) + s.norm_eps) * g

    def heads(t):
        return t.reshape(s.seq, s.n_heads, s.head_dim).transpose(0, 1)

    def rope(t):
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

    @torch.no_grad()
    def forward():
        h = h0
        for w in tw:
            n = rms(h, w["attn_norm"])
            q, k, v = rope(heads(n @ w["wq"])), rope(heads(n @ w["wk"])), heads(n @ w["wv"])
            scores = q @ k.transpose(-1, -2) / s.head_dim**0.5 + mask
            a = (torch.softmax(scores, -1) @ v).transpose(0, 1).reshape(s.seq, s.q_dim)
            h = h + a @ w["wo"].T
            n = rms(h, w["ffn_norm"])
            h = h + (torch.nn.functional.silu(n @ w["w1"]) * (n @ w["w3"])) @ w["w2"].T
        return h

    return forward


def anekit_call(kernel, x: np.ndarray, use_torch: bool):
    def call() -> None:
        fp16.use_torch(use_torch)
        kernel(x=x)

    return call


def rounding_call(x: np.ndarray, use_torch: bool):
    """Copy ``x`` into a buffer and round it there with anekit.fp16 (one path)."""
    y, r = np.empty_like(x), fp16.Rounder()

    def call() -> None:
        fp16.use_torch(use_torch)
        np.copyto(y, x)
        r(y)

    return call


def have_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def rounding(rounds: int) -> None:
    rng = np.random.default_rng(0)
    for n in (1 << 10, 1 << 16, 1 << 22):
        for label, scale in (("normal", 1.0), ("subnormal-heavy", 1e-6)):
            x = (rng.standard_normal(n) * scale).astype(np.float32)
            candidates = {
                "PyTorch cast": rounding_call(x, True),
                "NumPy magic add": rounding_call(x, False),
                "astype f16 -> f32": lambda x=x: x.astype(np.float16).astype(np.float32),
            }
            if not have_torch():
                del candidates["PyTorch cast"]
            results = interleave(candidates, rounds=rounds)
            for line in report(
                f"fp16 rounding of {n:,} float32 ({label}, copy included)",
                results,
                "astype f16 -> f32",
            ):
                print(line)


def forward(seq: int, rounds: int) -> dict[str, dict[str, float]]:
    """Print the forward table at ``seq``; return each candidate's min, median (ms), spread."""
    shape = shape_at(seq)
    x = example_input(shape)
    program = transformer(shape)
    torch = have_torch()
    paths = ("PyTorch cast", "NumPy only") if torch else ("NumPy only",)
    with (
        anekit.compile(program, backend="reference", numerics="m4") as k,
        anekit.compile(program, backend="reference", numerics="ideal") as ideal,
    ):
        candidates = {}
        for path in paths:
            candidates[f"anekit m4 ({path})"] = anekit_call(k, x, path == "PyTorch cast")
        for path in paths:
            candidates[f"anekit ideal ({path})"] = anekit_call(ideal, x, path == "PyTorch cast")
        if torch:
            fn = torch_forward(shape, transformer_weights(shape), x)
            candidates["PyTorch fp32"] = fn
        results = interleave(candidates, rounds=rounds, clock=CLOCK[0])
        planned = k.planned_bytes
        if torch:
            fp16.use_torch(True)
            ours, ref = k(x=x)["y"].astype(np.float32), fn().T.reshape(x.shape).numpy()
            err = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
    title = (
        f"{shape.n_layers}-layer transformer forward, dim {shape.dim}, seq {seq} "
        f"(anekit plans {planned / 2**20:.1f} MiB of buffers"
    )
    if torch:
        title += f"; max relative difference from PyTorch {err:.1e}, fp16 storage vs fp32)"
    else:
        title += "; PyTorch not installed: anekit's NumPy-only paths)"
    baseline = "PyTorch fp32" if torch else "anekit ideal (NumPy only)"
    target = "<= 1.5x PyTorch fp32" if torch and seq <= 256 else ""
    for line in report(title, results, baseline, target=target):
        print(line)
    for path in paths:  # issue 25: the default profile costs at most 1.3x "ideal"
        m4, ieee = results[f"anekit m4 ({path})"], results[f"anekit ideal ({path})"]
        ratio = m4.median / ieee.median
        print(
            f"  default profile (m4) / ideal, {path}: {ratio:.2f}x (median), "
            f"{m4.min / ieee.min:.2f}x (min); target <= 1.3x: {_met(ratio <= 1.3)}"
        )
    if torch and seq <= 256:  # the NumPy-only forward within 1.5x PyTorch, both profiles
        base = results["PyTorch fp32"]
        for profile in ("m4", "ideal"):
            r = results[f"anekit {profile} (NumPy only)"]
            ratio = r.median / base.median
            rule = "target <= 1.5x: " + _met(ratio <= 1.5) if profile == "m4" else "(reported)"
            print(
                f"  NumPy-only {profile} / PyTorch fp32: {ratio:.2f}x (median), "
                f"{r.min / base.min:.2f}x (min); {rule}"
            )
    return {name: {"min_ms": round(r.min * 1e3, 3), "median_ms": round(r.median * 1e3, 3),
                   "spread": round(r.spread, 3)} for name, r in results.items()}  # fmt: skip


def _met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def memory_child(side: str, seq: int, threads: int) -> None:
    """One forward in this (fresh) process; prints the peak memory rise as JSON."""
    shape = shape_at(seq)
    x = example_input(shape)
    with pinned(threads):
        if side == "torch":
            fn = torch_forward(shape, transformer_weights(shape), x)
        else:
            fp16.use_torch(side == "anekit")
            kernel = anekit.compile(transformer(shape), backend="reference")
            fn = anekit_call(kernel, x, side == "anekit")
        Path("/proc/self/clear_refs").write_text("5")  # reset the resident-set high-water mark
        before = _rss_kib("VmRSS")
        tracemalloc.start()
        fn()
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        peak = _rss_kib("VmHWM")
    print(json.dumps({"rss_rise": (peak - before) * 1024, "traced": traced}))


def memory(seq: int, threads: int) -> dict[str, Any] | None:
    """Print each side's peak memory rise in a fresh process; return it (None: not Linux)."""
    if not Path("/proc/self/clear_refs").exists():
        print(f"peak memory at seq {seq}: needs Linux's /proc/self/clear_refs; skipped")
        return None
    rows = {}
    for side in ("anekit", "anekit-numpy", "torch"):
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", side, str(seq), str(threads)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows[side] = json.loads(out.stdout.strip().splitlines()[-1])
    torch_rise = rows["torch"]["rss_rise"]
    print(f"peak memory of one forward at seq {seq} (fresh process each; target <= 1.5x PyTorch)")
    for side, r in rows.items():
        traced = f", tracemalloc peak {r['traced'] / 2**20:.1f} MiB" if side != "torch" else ""
        print(
            f"  {side:<14} resident set rise {r['rss_rise'] / 2**20:7.1f} MiB "
            f"({r['rss_rise'] / max(torch_rise, 1):.2f}x PyTorch){traced}"
        )
    return {"seq": seq, "sides": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--seqs", type=int, nargs="+", default=SEQS, help="forward sequence lengths"
    )
    parser.add_argument(
        "--no-torch",
        action="store_true",
        help="run as where PyTorch is not installed (import torch fails): anekit rows only",
    )
    parser.add_argument("--forward-only", action="store_true", help="only the forward tables")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="forward tables in this thread's CPU time, not wall time (a shared, busy machine)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the forward tables, with the load, "
                        "as JSON (benchmarks/results/runtime.json is what the docs quote)")  # fmt: skip
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.no_torch:
        sys.modules["torch"] = None  # every later `import torch` raises ImportError
    if args.cpu_time:
        CLOCK[0] = time.thread_time
    if args.memory_child:
        side, seq, threads = args.memory_child
        memory_child(side, int(seq), int(threads))
        return
    load_before = [round(v, 2) for v in os.getloadavg()]
    forwards = {}
    print(
        f"threads pinned to {args.threads} (BLAS and torch), {args.rounds} interleaved rounds "
        f"({'thread CPU' if args.cpu_time else 'wall'} time); "
        f"PyTorch {'installed' if have_torch() else 'NOT installed (or hidden)'}; "
        f"load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}"
    )
    with pinned(args.threads):
        if not args.forward_only:
            x16 = np.random.default_rng(0).standard_normal((1, 16, 1, 16)).astype(np.float16)
            with anekit.compile(three_op_program(), backend="reference") as k:
                print(f"3-op program, k(**inputs):       {per_call_us(lambda: k(x=x16)):7.1f} us")
                k.input_buffer("x")[:] = x16
                print(f"3-op program, buffers + k.run(): {per_call_us(k.run):7.1f} us")
            rounding(args.rounds)
        for seq in args.seqs:
            rounds = args.rounds if seq < 1024 else max(3, args.rounds // 2)
            forwards[str(seq)] = {"rounds": rounds, "candidates": forward(seq, rounds)}
    print(f"load average after: {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    peak = memory(1024, args.threads) if not args.forward_only and have_torch() else None
    if args.json:
        record = {
            "threads": args.threads,
            "clock": "thread CPU" if args.cpu_time else "wall",
            "torch": have_torch(),
            "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores",
            "load_before": load_before,
            "load_after": [round(v, 2) for v in os.getloadavg()],
            "forward": forwards,
            "memory": peak,
        }
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
