"""Training throughput on ``tiny``: anekit (reference backend) vs PyTorch fp32 CPU; cost model vs published.

1. tokens/s of ``anekit.train`` on the reference backend (every kernel op rounded to fp16,
   the ANE's storage model) against the same model, batch and optimizer written in
   idiomatic PyTorch fp32 (fused SDPA). Target of issue 6: at least half PyTorch's speed.
2. The cost model's predicted ANE time per step for ``stories110m`` (batch 1, seq 256, the
   published run's shape) on m4, next to the published 91.8-111 ms/step
   (maderix/ANE, training/README.md: 106.7 static, 91.8 with ANE extras, 111 dynamic
   weights; those include the CPU work, the prediction does not).
"""

from __future__ import annotations

import time

import numpy as np

from anekit.train.config import get_config
from anekit.train.data import default_corpus
from anekit.train.loop import Trainer
from anekit.train.model import Model

WARMUP, STEPS = 3, 20


def anekit_tokens_per_s() -> tuple[float, float]:
    """(tokens/s by wall clock, CPU seconds per step) over STEPS steps after WARMUP."""
    named = get_config("tiny")
    trainer = Trainer(named.model, named.train, default_corpus(), backend="reference")
    try:
        for _ in range(WARMUP):
            trainer.train_step()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(STEPS):
            trainer.train_step()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        trainer.close()
    return trainer.tokens_per_step * STEPS / wall, cpu / STEPS


def torch_tokens_per_s() -> tuple[float, float]:
    """The same model trained by PyTorch fp32 on the CPU: (tokens/s, CPU seconds per step)."""
    import torch
    import torch.nn.functional as F

    named = get_config("tiny")
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

    for _ in range(WARMUP):
        step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(STEPS):
        step()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return c.batch_size * m.seq_len * STEPS / wall, cpu / STEPS


def predicted_ms(config: str, chip: str = "m4") -> float | None:
    """The cost model's ANE kernel time per step (batch 1), or None without the cost model."""
    with Model(get_config(config).model, batch=1, backend="reference") as model:
        seconds = model.predicted_ane_seconds(chip)
    return None if seconds is None else seconds * 1e3


def main() -> None:
    ours, ours_cpu = anekit_tokens_per_s()
    theirs, theirs_cpu = torch_tokens_per_s()
    print(
        f"tiny, {STEPS} steps: anekit reference backend {ours:,.0f} tokens/s "
        f"({ours_cpu * 1e3:.0f} ms CPU/step), PyTorch fp32 CPU {theirs:,.0f} tokens/s "
        f"({theirs_cpu * 1e3:.0f} ms CPU/step): {ours / theirs:.2f}x of PyTorch (target >= 0.5x)"
    )
    for config, published in (("stories110m", "91.8-111 ms (maderix/ANE training/README.md)"),
                              ("qwen3-0.6b", "412 ms (ANE_NOTES section 5)")):  # fmt: skip
        ms = predicted_ms(config)
        if ms is None:
            print(f"{config}: no cost model (anekit.hw) in this checkout")
        else:
            print(
                f"{config} on m4: cost model {ms:.1f} ms/step of ANE kernels; published {published}"
            )


if __name__ == "__main__":
    main()
