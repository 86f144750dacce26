"""Programs the benchmarks measure, built with the Builder (never pasted text).

Layouts follow the ANE convention of ANE_NOTES section 3: activations are
``[1, C, 1, S]`` (channels, then sequence on the last axis), attention is
``[1, H, S, D]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from anekit.mil.builder import Builder
from anekit.mil.program import Program, Value


def chained_convs(
    depth: int, channels: int = 512, spatial: int = 64, dtype: str = "fp16", seed: int = 0
) -> Program:
    """``depth`` chained 1x1 convs on ``[1, C, spatial, spatial]`` (the peak-throughput experiment)."""
    rng = np.random.default_rng(seed)
    b = Builder()
    x = b.input("x", (1, channels, spatial, spatial), dtype)
    scale = 1.0 / np.sqrt(channels)  # keeps activations O(1) through the chain
    h = x
    for i in range(depth):
        w = (rng.standard_normal((channels, channels, 1, 1)) * scale).astype(np.float16)
        h = b.conv(x=h, weight=b.weight(f"w{i}", w), name=f"conv{i}")
    b.output(h, "y")
    return b.build()


@dataclass(frozen=True)
class TransformerShape:
    """Shape of a Llama-style decoder stack (no embedding or classifier)."""

    layers: int = 12
    dim: int = 256
    heads: int = 4
    hidden: int = 688
    seq: int = 64

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


def transformer_weights(shape: TransformerShape, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random fp16 weights per layer, as ``[out, in]`` matrices and RMSNorm gains."""
    rng = np.random.default_rng(seed)
    d, f = shape.dim, shape.hidden

    def mat(o: int, i: int) -> np.ndarray:
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float16)

    return [
        {
            "g1": np.ones(d, np.float16),
            "wq": mat(d, d),
            "wk": mat(d, d),
            "wv": mat(d, d),
            "wo": mat(d, d),
            "g2": np.ones(d, np.float16),
            "w1": mat(f, d),
            "w3": mat(f, d),
            "w2": mat(d, f),
        }
        for _ in range(shape.layers)
    ]


def transformer(shape: TransformerShape, seed: int = 0) -> Program:
    """A causal decoder stack: RMSNorm, attention with an additive mask, SwiGLU FFN, residuals."""
    weights = transformer_weights(shape, seed)
    b = Builder()
    x = b.input("x", (1, shape.dim, 1, shape.seq), "fp16")
    mask = np.triu(np.full((shape.seq, shape.seq), -1e4, np.float16), k=1)
    mask_v = b.weight("mask", mask.reshape(1, 1, shape.seq, shape.seq))
    h = x
    for i, w in enumerate(weights):
        h = _layer(b, h, w, mask_v, shape, f"l{i}")
    b.output(h, "y")
    return b.build()


def _rmsnorm(b: Builder, x: Value, gain: np.ndarray, name: str) -> Value:
    ms = b.reduce_mean(x=b.mul(x=x, y=x), axes=[1], keep_dims=True)
    inv = b.pow(x=b.add(x=ms, y=1e-5), y=-0.5)  # pow, not rsqrt: the form reported to compile
    g = b.weight(f"{name}_gain", gain.reshape(1, -1, 1, 1))
    return b.mul(x=b.mul(x=x, y=inv), y=g, name=name)


def _proj(b: Builder, x: Value, w: np.ndarray, name: str) -> Value:
    return b.conv(x=x, weight=b.weight(f"{name}_w", w.reshape(*w.shape, 1, 1)), name=name)


def _heads(b: Builder, x: Value, shape: TransformerShape) -> Value:
    r = b.reshape(x=x, shape=[1, shape.heads, shape.head_dim, shape.seq])
    return b.transpose(x=r, perm=[0, 1, 3, 2])


def _layer(b: Builder, x: Value, w: dict, mask: Value, shape: TransformerShape, name: str) -> Value:
    h = _rmsnorm(b, x, w["g1"], f"{name}_n1")
    q = _heads(b, _proj(b, h, w["wq"], f"{name}_q"), shape)
    k = _heads(b, _proj(b, h, w["wk"], f"{name}_k"), shape)
    v = _heads(b, _proj(b, h, w["wv"], f"{name}_v"), shape)
    scores = b.matmul(x=q, y=k, transpose_y=True)
    scores = b.add(x=b.mul(x=scores, y=1.0 / np.sqrt(shape.head_dim)), y=mask)
    attn = b.matmul(x=b.softmax(x=scores, axis=-1), y=v)
    merged = b.reshape(x=b.transpose(x=attn, perm=[0, 1, 3, 2]), shape=[1, shape.dim, 1, shape.seq])
    x = b.add(x=x, y=_proj(b, merged, w["wo"], f"{name}_o"))
    h = _rmsnorm(b, x, w["g2"], f"{name}_n2")
    gate = b.silu(x=_proj(b, h, w["w1"], f"{name}_w1"))
    up = _proj(b, h, w["w3"], f"{name}_w3")
    return b.add(x=x, y=_proj(b, b.mul(x=gate, y=up), w["w2"], f"{name}_w2"), name=f"{name}_out")
