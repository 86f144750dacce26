"""Reference-backend runtime: per-call overhead, and a 12-layer transformer forward vs PyTorch.

Targets (issue 3): under 30 us per call for a 3-op program; transformer forward at
most 1.5x the time of PyTorch CPU fp32 running the same math. The transformer is
``anekit.bench.programs.transformer``: the training kernels' blocks (``anekit.nn.layers``)
with constant weights.
"""

from __future__ import annotations

import time

import numpy as np

import anekit
from anekit import mil
from anekit.bench.programs import TransformerShape, transformer, transformer_weights


def per_call_us(kernel, inputs: dict, calls: int = 5000) -> float:
    """Median over 5 batches of the time per call, in microseconds."""
    for _ in range(100):
        kernel(**inputs)
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            kernel(**inputs)
        batches.append((time.perf_counter() - t0) / calls)
    return float(np.median(batches)) * 1e6


def three_op_program() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 16, 1, 16), "fp16")
    y = b.relu(x=b.mul(x=b.add(x=x, y=1.0), y=0.5))
    b.output(y, "y")
    return b.build()


def run_buffers_us(kernel, calls: int = 5000) -> float:
    for _ in range(100):
        kernel.run()
    t0 = time.perf_counter()
    for _ in range(calls):
        kernel.run()
    return (time.perf_counter() - t0) / calls * 1e6


def torch_forward(shape: TransformerShape, weights, x: np.ndarray):
    """The same decoder stack in PyTorch fp32 (token-major, the natural layout for torch).

    RMSNorm, rotate-half RoPE, causal attention (a KV head per query head: the benchmark
    shape has no grouping), SwiGLU; the weights have the model dimension first.
    """
    import torch

    s = shape.block
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
        return h * torch.rsqrt((h * h).mean(-1, keepdim=True) + s.eps) * g

    def heads(t):
        return t.reshape(s.seq, s.heads, s.head_dim).transpose(0, 1)

    def rope(t):
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin

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

    return torch, forward


def median_time(fn, repeat: int = 20) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    x16 = np.random.default_rng(0).standard_normal((1, 16, 1, 16)).astype(np.float16)
    with anekit.compile(three_op_program(), backend="reference") as k:
        print(f"3-op program, k(**inputs):       {per_call_us(k, {'x': x16}):7.1f} us per call")
        k.input_buffer("x")[:] = x16
        print(f"3-op program, buffers + k.run(): {run_buffers_us(k):7.1f} us per call")

    shape = TransformerShape()
    s = shape.block
    x = np.random.default_rng(1).standard_normal((1, 1, s.dim, s.tokens)).astype(np.float16)
    program = transformer(shape)
    with anekit.compile(program, backend="reference", storage="fp32") as k:
        fp32_storage = median_time(lambda: k(x=x))
    with anekit.compile(program, backend="reference") as k:
        ours = median_time(lambda: k(x=x))
        ours_out = k(x=x)["y"]
    torch, forward = torch_forward(shape, transformer_weights(shape), x)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with torch.no_grad():
        theirs = median_time(forward)
        ref = forward().T.reshape(x.shape).numpy()
    err = float(np.max(np.abs(ours_out.astype(np.float32) - ref)) / np.max(np.abs(ref)))
    print(
        f"{shape.layers}-layer transformer (dim {s.dim}, seq {s.seq}): anekit reference {ours * 1e3:.2f} ms, "
        f"PyTorch fp32 {theirs * 1e3:.2f} ms, ratio {ours / theirs:.2f}x (target <= 1.5x); "
        f"max relative difference {err:.2e} (fp16 storage vs fp32)"
    )
    print(
        f"  same program with storage='fp32' (no per-op fp16 rounding): {fp32_storage * 1e3:.2f} ms, "
        f"ratio {fp32_storage / theirs:.2f}x"
    )


if __name__ == "__main__":
    main()
