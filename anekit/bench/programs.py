"""Programs the benchmarks measure, built with the Builder (never pasted text).

Layouts follow the ANE convention of ANE_NOTES section 3: activations are
``[1, C, 1, S]`` (channels, then sequence on the last axis), attention is
``[1, H, S, D]``. The decoder stack (:func:`transformer`) is built from the layer
generators the training kernels use (:mod:`anekit.nn.layers`), in their ``[1, 1, C, N]``
layout (the same memory order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.mil.builder import Builder
from anekit.mil.program import Program, Value
from anekit.nn import attention as A
from anekit.nn import layers as L
from anekit.nn.kernels import ATTENTION, FFN, kernel_weights, stacked
from anekit.nn.layers import FFN_IN_WEIGHTS, QKV_WEIGHTS
from anekit.nn.spec import BlockShape

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


@dataclass(frozen=True, kw_only=True)
class TransformerShape(BlockShape):
    """A Llama-style decoder stack of ``n_layers`` blocks of one shape, compiled for ``seq``
    tokens: a :class:`~anekit.nn.spec.BlockShape` (validated there), with the benchmark's
    sizes as defaults. It has no embedding or classifier (``vocab_size`` is unused)."""

    n_layers: int = 12
    vocab_size: int = 2
    dim: int = 256
    n_heads: int = 4
    n_kv_heads: int = 4
    head_dim: int = 64
    hidden_dim: int = 688
    seq: int = 64

    @property
    def owner(self) -> str:
        return "transformer shape"


def transformer_weights(shape: TransformerShape, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Random fp16 parameters per layer, by :data:`~anekit.nn.kernels.LAYER_PARAMETERS` name.

    Matrices have the model dimension first (``anekit.nn.kernels``) and a standard
    deviation of ``1/sqrt(fan_in)``; the RMSNorm gains are ones.
    """
    rng = np.random.default_rng(seed)
    s = shape

    def mat(cols: int, fan_in: int) -> np.ndarray:
        return (rng.standard_normal((s.dim, cols)) / np.sqrt(fan_in)).astype(np.float16)

    return [
        {
            "wq": mat(s.q_dim, s.dim),
            "wk": mat(s.kv_dim, s.dim),
            "wv": mat(s.kv_dim, s.dim),
            "wo": mat(s.q_dim, s.q_dim),
            "w1": mat(s.hidden_dim, s.dim),
            "w3": mat(s.hidden_dim, s.dim),
            "w2": mat(s.hidden_dim, s.hidden_dim),
            "attn_norm": np.ones(s.dim, np.float16),
            "ffn_norm": np.ones(s.dim, np.float16),
        }
        for _ in range(shape.n_layers)
    ]


def transformer(shape: TransformerShape, seed: int = 0) -> Program:
    """A causal decoder stack on ``x [1, 1, D, N]`` with constant weights.

    Each block is the training kernels' math (:func:`anekit.nn.attention.attention` and
    :func:`~anekit.nn.layers.ffn`: RMSNorm, RoPE, causal grouped-query attention, SwiGLU)
    with the residual adds; the weights are what :func:`~anekit.nn.kernels.kernel_weights`
    packs for the forward kernels, here as weight files.
    """
    s = shape
    b = Builder()
    h = b.input("x", (1, 1, s.dim, s.tokens), "fp16")
    tables = A.attention_tables(b, s)
    for i, layer in enumerate(transformer_weights(shape, seed)):
        weights = kernel_weights(s, layer)
        att, ffn = weights[ATTENTION.forward], weights[FFN.forward]
        p = f"l{i}_att_"
        gain, wo = _matrix(b, p + "gain", att["gain"]), _matrix(b, p + "wo", att["wo"])
        w_qkv = _matrix(b, p + "wqkv", stacked(att, QKV_WEIGHTS))
        attention = {"gain": gain, "w_qkv": w_qkv, "wo": wo}
        o = A.attention(b, s, h, attention, tables, prefix=p)["o"]
        h = b.add(x=h, y=o, name=f"{p}out")
        p = f"l{i}_ffn_"
        gain, w2 = _matrix(b, p + "gain", ffn["gain"]), _matrix(b, p + "w2", ffn["w2"])
        w13 = _matrix(b, p + "w13", stacked(ffn, FFN_IN_WEIGHTS))
        f = L.ffn(b, s, h, gain, w13, w2, p)["f"]
        h = b.add(x=h, y=f, name=f"{p}out")
    b.output(h, "y")
    return b.build()


def _matrix(b: Builder, name: str, array: np.ndarray) -> Value:
    """A 2-D weight as the ``[1, 1, rows, cols]`` fp16 operand a packed kernel slices out."""
    return b.weight(name, array.astype(np.float16)[None, None])
