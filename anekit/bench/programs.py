"""Programs the benchmarks measure, built with the Builder (never pasted text).

Layouts follow the ANE convention of ANE_NOTES section 3: activations are
``[1, C, 1, S]`` (channels, then sequence on the last axis), attention is
``[1, H, S, D]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.mil.builder import Builder
from anekit.mil.program import Program, Value

IO_DTYPES = ("fp16", "fp32")

# W8A8 activation step: activations stay O(1) through a chain (weights scaled by 1/sqrt(C)),
# so int8 codes of 1/32 cover about +-4 standard deviations.
ACTIVATION_SCALE = np.float16(1.0 / 32.0)


def chained_convs(
    depth: int,
    channels: int = 512,
    spatial: int | tuple[int, int] = 64,
    dtype: str = "fp16",
    seed: int = 0,
    *,
    w8a8: bool = False,
) -> Program:
    """``depth`` chained 1x1 convs C->C on ``[1, C, H, W]`` (the peak-throughput experiment).

    Args:
        depth (int): number of convs.
        channels (int): C. Default: 512.
        spatial (int or (int, int)): H = W, or (H, W). Default: 64.
        dtype (str): the program's I/O dtype; "fp32" adds edge casts around the fp16 chain.
        seed (int): seed of the random weights.
        w8a8 (bool): int8 weights (``constexpr_affine_dequantize``) and int8 activations
            between layers (``quantize`` / ``dequantize``), the W8A8 recipe of maderix/ANE.
    """
    height, width = (spatial, spatial) if isinstance(spatial, int) else spatial
    rng = np.random.default_rng(seed)
    b = Builder()
    h = _edge_input(b, "x", (1, channels, height, width), dtype)
    scale = np.float32(1.0 / np.sqrt(channels))  # keeps activations O(1) through the chain
    for i in range(depth):
        w = rng.standard_normal((channels, channels, 1, 1), np.float32) * scale
        weight = _int8_weight(b, f"w{i}", w) if w8a8 else b.weight(f"w{i}", w.astype(np.float16))
        h = b.conv(x=h, weight=weight, name=f"conv{i}")
        if w8a8 and i + 1 < depth:
            q = b.quantize(input=h, scale=ACTIVATION_SCALE, output_dtype="int8", name=f"q{i}")
            h = b.dequantize(input=q, scale=ACTIVATION_SCALE, name=f"dq{i}")
    _edge_output(b, h, "y", dtype)
    return b.build()


def matmul(m: int, k: int, n: int, dtype: str = "fp16", seed: int = 0) -> Program:
    """One matmul of two runtime inputs ``[1, M, K] x [1, K, N]`` (the matmul-scaling experiment).

    ``dtype`` is the I/O dtype; "fp32" adds edge casts around the fp16 matmul.
    """
    del seed  # both operands are inputs; the signature matches the other builders
    b = Builder()
    x = _edge_input(b, "x", (1, m, k), dtype)
    y = _edge_input(b, "y", (1, k, n), dtype)
    _edge_output(b, b.matmul(x=x, y=y, name="mm"), "z", dtype)
    return b.build()


PROJECTION_FORMS = ("conv", "matmul", "matmul_input")


def projection(channels: int, seq: int, form: str = "conv", seed: int = 0) -> Program:
    """One C->C projection of ``seq`` tokens, written three ways with equal FLOPs (2 C^2 S).

    Forms: "conv" is a 1x1 conv on ``[1, C, 1, S]`` with a constant weight; "matmul" is
    ``W @ X`` on ``[1, C, S]`` with a constant ``W``; "matmul_input" passes ``W`` as a
    second input (the dynamic-weight form training uses).
    """
    if form not in PROJECTION_FORMS:
        raise ValueError(f"projection form: expected one of {PROJECTION_FORMS}, found {form!r}")
    rng = np.random.default_rng(seed)
    w = (
        rng.standard_normal((channels, channels), np.float32) / np.float32(np.sqrt(channels))
    ).astype(np.float16)
    b = Builder()
    if form == "conv":
        x = b.input("x", (1, channels, 1, seq), "fp16")
        y = b.conv(x=x, weight=b.weight("w", w.reshape(channels, channels, 1, 1)), name="proj")
    else:
        x = b.input("x", (1, channels, seq), "fp16")
        if form == "matmul":
            wv = b.weight("w", w.reshape(1, channels, channels))
        else:
            wv = b.input("w", (1, channels, channels), "fp16")
        y = b.matmul(x=wv, y=x, name="proj")
    b.output(y, "y")
    return b.build()


def floor_program(shape: tuple[int, ...] = (1, 16, 1, 16)) -> Program:
    """One relu on a small fp16 tensor: the cheapest real evaluation, for the per-call floor."""
    b = Builder()
    b.output(b.relu(x=b.input("x", shape, "fp16"), name="relu"), "y")
    return b.build()


def build(description: dict[str, Any]) -> Program:
    """Build a program from its description (``{"kind": ..., ...}``).

    Kinds ``conv_chain`` and ``matmul`` use the fields of ``anekit/bench/data/published.json``
    (``program_kinds``), so a benchmark case and a published measurement of the same
    program have equal descriptions; ``projection`` is ``projection()``'s arguments.
    """
    d = dict(description)
    kind = d.pop("kind", None)
    if kind == "conv_chain":
        return chained_convs(
            d["depth"], d["channels"], (d["height"], d["width"]), d["io_dtype"], w8a8=d["w8a8"]
        )
    if kind == "matmul":
        return matmul(d["m"], d["k"], d["n"], d["io_dtype"])
    if kind == "projection":
        return projection(d["channels"], d["seq"], d["form"])
    raise ValueError(
        f"program description: expected kind conv_chain, matmul or projection, found {kind!r}"
    )


def _edge_input(b: Builder, name: str, shape: tuple[int, ...], dtype: str) -> Value:
    """An input of the I/O dtype, cast to fp16 for the engine when it is fp32."""
    if dtype not in IO_DTYPES:
        raise ValueError(f"I/O dtype: expected one of {IO_DTYPES}, found {dtype!r}")
    x = b.input(name, shape, dtype)
    return x if dtype == "fp16" else b.cast(x=x, dtype="fp16", name=f"{name}_fp16")


def _edge_output(b: Builder, v: Value, name: str, dtype: str) -> None:
    b.output(v if dtype == "fp16" else b.cast(x=v, dtype=dtype, name=f"{name}_cast"), name)


def _int8_weight(b: Builder, name: str, w: np.ndarray) -> Value:
    """A weight stored as int8 with one scale per output channel, dequantized at load time."""
    step = np.abs(w).reshape(w.shape[0], -1).max(axis=1) / 127.0
    q = np.clip(np.round(w / step.reshape(-1, 1, 1, 1)), -127, 127).astype(np.int8)
    return b.constexpr_affine_dequantize(
        quantized_data=b.weight(f"{name}_q", q),
        zero_point=np.int8(0),
        scale=step.astype(np.float16),
        axis=0,
        name=name,
    )


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
