"""Training throughput: anekit (reference backend) vs PyTorch fp32 CPU, pinned and interleaved.

1. tokens/s of ``anekit.train`` on the reference backend (every kernel op rounded to fp16,
   the ANE's storage model), with the PyTorch cast and NumPy only (``fp16.use_torch(False)``,
   the path taken where PyTorch is not installed), against the same model, batch and
   optimizer written in idiomatic PyTorch fp32 (fused SDPA), for ``tiny`` and
   ``stories15m``. The PyTorch model starts from anekit's initialisation: PyTorch's
   default init runs into denormals on ``stories15m`` and makes its step about 15x
   slower, which would flatter anekit. Steps of the three candidates are interleaved
   (``harness``); target of issue 13: at least 0.5x PyTorch's tokens/s.
2. The predicted step (``anekit.train.cost``: kernels and host work) next to every
   published step in ``anekit/train/published.json`` (Stories110M 91 and 111 ms,
   Qwen3-0.6B 412 ms on M4, maderix/ANE's dynamic pipeline).

Data-parallel scaling (tokens/s at 1 and 2 ranks on MLX and Gloo, the all-reduce's share)
is ``benchmarks/train_scaling.py``: it runs whole multi-process jobs, not steps in one process.

Usage: ``python benchmarks/train.py [--threads N] [--rounds R] [--configs tiny,stories15m]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import numpy as np
from harness import interleave, pinned, report

from anekit import fp16
from anekit.train.config import get_config
from anekit.train.data import default_corpus
from anekit.train.loop import Trainer
from anekit.train.params import init_params


def anekit_step(trainer: Trainer, use_torch: bool):
    def step() -> None:
        fp16.use_torch(use_torch)
        trainer.train_step()

    return step


def torch_step(config: str):
    """One training step of the same model in PyTorch fp32, from anekit's initial weights."""
    import torch
    import torch.nn.functional as F

    named = get_config(config)
    m, c = named.model, named.train
    q_dim, kv_dim = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = (
                torch.nn.RMSNorm(m.dim, m.norm_eps),
                torch.nn.RMSNorm(m.dim, m.norm_eps),
            )
            self.qkv = torch.nn.Linear(m.dim, q_dim + 2 * kv_dim, bias=False)
            self.o = torch.nn.Linear(q_dim, m.dim, bias=False)
            self.w13 = torch.nn.Linear(m.dim, 2 * m.hidden_dim, bias=False)
            self.w2 = torch.nn.Linear(m.hidden_dim, m.dim, bias=False)

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.n1(x)).split([q_dim, kv_dim, kv_dim], -1)
            q = q.view(b, s, m.n_heads, m.head_dim).transpose(1, 2)
            k = k.view(b, s, m.n_kv_heads, m.head_dim).transpose(1, 2)
            v = v.view(b, s, m.n_kv_heads, m.head_dim).transpose(1, 2)

            def rope(t):
                lo, hi = t.chunk(2, -1)
                return t * cos + torch.cat([-hi, lo], -1) * sin

            a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True, enable_gqa=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, q_dim))
            h1, h3 = self.w13(self.n2(x)).chunk(2, -1)
            return x + self.w2(F.silu(h1) * h3)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(m.vocab_size, m.dim)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(m.n_layers))
            self.norm = torch.nn.RMSNorm(m.dim, m.norm_eps)

        def forward(self, tokens, cos, sin):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x, cos, sin)
            return self.norm(x) @ self.embed.weight.T

    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.AdamW(
        net.parameters(), lr=c.lr, betas=(c.beta1, c.beta2), weight_decay=c.weight_decay
    )
    inv = m.rope_theta ** (-torch.arange(0, m.head_dim, 2).float() / m.head_dim)
    angle = torch.arange(m.seq_len).float()[:, None] * inv[None]
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    corpus = torch.from_numpy(default_corpus()[: 1 << 20].astype(np.int64))
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        starts = torch.randint(0, len(corpus) - m.seq_len - 1, (c.batch_size,), generator=gen)
        batch = torch.stack([corpus[s : s + m.seq_len + 1] for s in starts])
        opt.zero_grad(set_to_none=True)
        logits = net(batch[:, :-1], cos, sin)
        F.cross_entropy(logits.reshape(-1, m.vocab_size), batch[:, 1:].reshape(-1)).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), c.grad_clip)
        opt.step()

    load_anekit_init(net, named)
    return step


def load_anekit_init(net, named) -> None:
    """Copy ``init_params`` (the Trainer's seed) into the PyTorch model's weights."""
    import torch

    m = named.model
    p = init_params(m, np.random.default_rng(named.train.seed))
    with torch.no_grad():
        net.embed.weight.copy_(torch.from_numpy(p["embed"]))
        for i, block in enumerate(net.blocks):
            w = p.layer(i)
            block.qkv.weight.copy_(
                torch.from_numpy(np.concatenate([w["wq"], w["wk"], w["wv"]], 1).T)
            )
            block.o.weight.copy_(torch.from_numpy(w["wo"]))  # o = wo @ a
            block.w13.weight.copy_(torch.from_numpy(np.concatenate([w["w1"], w["w3"]], 1).T))
            block.w2.weight.copy_(torch.from_numpy(w["w2"]))  # f = w2 @ (silu(h1) * h3)


def throughput(config: str, rounds: int) -> dict:
    named = get_config(config)
    trainer = Trainer(named.model, named.train, default_corpus(), backend="reference")
    tokens = trainer.tokens_per_step
    try:
        results = interleave(
            {
                "anekit (PyTorch cast)": anekit_step(trainer, True),
                "anekit (NumPy only)": anekit_step(trainer, False),
                "PyTorch fp32": torch_step(config),
            },
            rounds=rounds,
            warmup=2,
        )
    finally:
        trainer.close()
        fp16.use_torch(True)
    for line in report(
        f"training {config}: {tokens} tokens per step",
        results,
        "PyTorch fp32",
        per=tokens,
        unit="tokens/s",
        target=">= 0.5x PyTorch fp32's tokens/s",
    ):
        print(line)
    return {
        "tokens_per_step": tokens,
        "median_ms": {name: round(r.median * 1e3, 2) for name, r in results.items()},
        "min_ms": {name: round(r.min * 1e3, 2) for name, r in results.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--configs", default="tiny,stories15m")
    parser.add_argument("--json", metavar="FILE", help="write the medians, with the load, as JSON "
                        "(benchmarks/results/train.json is what docs/training.md quotes)")  # fmt: skip
    args = parser.parse_args()
    print(f"threads pinned to {args.threads} (BLAS and torch), {args.rounds} interleaved rounds")
    load_before = _load()
    with pinned(args.threads):
        measured = {config: throughput(config, args.rounds) for config in args.configs.split(",")}
    if args.json:
        record = {"threads": args.threads, "rounds": args.rounds, "machine": _machine(),
                  "load_before": load_before, "load_after": _load(), "configs": measured}  # fmt: skip
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", "utf-8")
    from anekit.train.cost import compare_published

    for r in compare_published():
        print(f"{r['model']} on {r['chip']}: predicted {r['predicted_ms']} ms/step (ANE {r['ane_ms']} "
              f"ms; anekit's serial schedule {r['serial_ms']} ms), published {r['published_ms']} ms "
              f"({r['source']})")  # fmt: skip


def _load() -> list[float]:
    """The 1, 5 and 15 minute load averages (the machine is shared)."""
    return [round(x, 2) for x in os.getloadavg()]


def _machine() -> str:
    return f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores"


if __name__ == "__main__":
    main()
