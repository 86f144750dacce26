"""MIL building blocks the kernel generators share: projections, RMSNorm, RoPE, head layouts, attention.

Activations are ``[1, 1, C, N]``: C channels by N = batch * seq tokens (sequence-major),
the memory order of ANE_NOTES' ``[1, C, 1, S]`` with the channels where ``matmul``
wants its rows (see :mod:`anekit.nn.packing`). Attention works on rank-4 head layouts;
the GQA head pairing lives here, once, for the forward and the backward kernels alike.
"""

from __future__ import annotations

import math

import numpy as np

from anekit.mil.builder import Builder
from anekit.mil.program import Value
from anekit.nn.packing import CHANNEL_AXIS
from anekit.nn.spec import BlockShape

# Added to the scores of future positions. exp() of it underflows to exactly 0 in fp32 for
# any score range training produces (|score| < 1e3), and score + MASK_VALUE stays finite in
# fp16 (max 65504), so a softmax that does not subtract the row max never sees inf - inf.
MASK_VALUE = -1e4


def project(b: Builder, w: Value, x: Value, name: str, *, transpose_w: bool) -> Value:
    """``w^T @ x`` (``transpose_w``) or ``w @ x``, for a packed weight ``[1, 1, D, n]`` and x ``[1, 1, C, N]``."""
    return b.matmul(x=w, y=x, transpose_x=transpose_w, name=name)


def channels(b: Builder, x: Value, start: int, count: int, name: str) -> Value:
    """Channels ``start : start + count`` of an activation."""
    n = x.shape[3]
    return b.slice_by_size(x=x, begin=[0, 0, start, 0], size=[1, 1, count, n], name=name)


def stack(b: Builder, values: tuple[Value, ...], name: str) -> Value:
    """Activations of equal width, one on top of the other on the channel axis."""
    return b.concat(values=values, axis=CHANNEL_AXIS, interleave=False, name=name)


def rmsnorm(b: Builder, x: Value, gain: Value, eps: float, name: str) -> tuple[Value, Value]:
    """RMSNorm over channels: returns ``x * rstd * gain`` and ``rstd = (mean(x^2) + eps)^-1/2``.

    ``reduce_sum_square`` never stores the squares in fp16 (where they would overflow
    above 256 and lose their precision below 2^-14 ~ 6e-5); ``x`` is first scaled by the
    power of two nearest ``1/sqrt(D)`` (exact in fp16) so that the sum itself stays
    near ``mean(x^2)`` and far from the fp16 limit.
    """
    d = x.shape[CHANNEL_AXIS]
    shift = round(math.log2(math.sqrt(d)))
    xs = b.mul(x=x, y=2.0**-shift, name=f"{name}_xs")
    ss = b.reduce_sum_square(x=xs, axes=[CHANNEL_AXIS], keep_dims=True, name=f"{name}_ss")
    ms = b.mul(x=ss, y=4.0**shift / d, name=f"{name}_ms")
    # pow(., -0.5), not rsqrt: the form reported to compile (ANE_NOTES section 2.4)
    rstd = b.pow(x=b.add(x=ms, y=eps, name=f"{name}_eps"), y=-0.5, name=f"{name}_rstd")
    xn = b.mul(x=b.mul(x=x, y=rstd, name=f"{name}_unit"), y=gain, name=name)
    return xn, rstd


def rope_swap(heads: int, head_dim: int) -> np.ndarray:
    """The channel permutation that swaps the two halves of every head (an involution)."""
    i = np.arange(heads * head_dim)
    return (i // head_dim) * head_dim + (i % head_dim + head_dim // 2) % head_dim


def rope_tables(shape: BlockShape) -> tuple[np.ndarray, np.ndarray]:
    """RoPE factors for the stacked ``[q; k]`` channels, each ``[1, 1, H*hd + KV*hd, N]`` (fp16).

    Rotate-half convention (Hugging Face Llama/Qwen): channel ``i`` of a head pairs with
    channel ``i + hd/2`` and turns by ``pos * theta^(-2i/hd)``; token ``n`` is at position
    ``n % seq``. The query rows also carry the attention scale ``1/sqrt(hd)``, so the
    kernels never scale scores separately.

    Returns:
        (cos, sin): ``rope(x) = x * cos + x[swap] * sin`` with ``swap`` from :func:`rope_swap`;
        ``sin`` holds ``-sin`` on the first half of each head and ``+sin`` on the second.
    """
    half = shape.head_dim // 2
    inv_freq = shape.rope_theta ** (-np.arange(half, dtype=np.float64) * 2 / shape.head_dim)
    angle = inv_freq[:, None] * (np.arange(shape.tokens, dtype=np.float64) % shape.seq)[None, :]
    cos = np.concatenate([np.cos(angle)] * 2)  # [hd, N], the same for every head
    sin = np.concatenate([-np.sin(angle), np.sin(angle)])
    scale = np.repeat([1.0 / math.sqrt(shape.head_dim), 1.0], [shape.heads, shape.kv_heads])
    scale = np.repeat(scale, shape.head_dim)[:, None]
    heads = shape.heads + shape.kv_heads
    return tuple(  # type: ignore[return-value]
        (np.tile(t, (heads, 1)) * scale)[None, None].astype(np.float16) for t in (cos, sin)
    )


def rope(b: Builder, x: Value, x_swapped: Value, cos: Value, sin: Value, name: str) -> Value:
    """``x * cos + x_swapped * sin``: RoPE when ``x_swapped`` is ``x`` with each head's halves swapped.

    The kernels get ``x_swapped`` from a second projection with the weight columns
    swapped (packed by the CPU), so RoPE costs three elementwise ops and no reshape. The
    rotation is orthogonal: its transpose (the backward pass) is ``g * cos + (g * sin)[swap]``.
    """
    return b.add(
        x=b.mul(x=x, y=cos, name=f"{name}_cos"),
        y=b.mul(x=x_swapped, y=sin, name=f"{name}_sin"),
        name=name,
    )


# -- head layouts -------------------------------------------------------------------------------
# Query head h = kv * group + j belongs to KV head kv = h // group (Hugging Face's repeat_kv
# pairing). Queries are laid out [B, kv_heads, group * S, head_dim]: the rows of one KV head's
# matmul are its group's queries, so no KV head is ever copied, and the backward matmuls over
# those rows sum the group's contributions to dK and dV by construction.


def query_rows(b: Builder, x: Value, shape: BlockShape, name: str) -> Value:
    """``[1, 1, heads*head_dim, N]`` -> ``[B, kv_heads, group*S, head_dim]``."""
    s = shape
    r = b.reshape(x=x, shape=[s.heads, s.head_dim, s.batch, s.seq], name=f"{name}_split")
    t = b.transpose(x=r, perm=[2, 0, 3, 1], name=f"{name}_bhsd")
    return b.reshape(x=t, shape=[s.batch, s.kv_heads, s.group * s.seq, s.head_dim], name=name)


def merge_query_rows(b: Builder, x: Value, shape: BlockShape, name: str) -> Value:
    """Inverse of :func:`query_rows`."""
    s = shape
    r = b.reshape(x=x, shape=[s.batch, s.heads, s.seq, s.head_dim], name=f"{name}_bhsd")
    t = b.transpose(x=r, perm=[1, 3, 0, 2], name=f"{name}_hdbs")
    return b.reshape(x=t, shape=[1, 1, s.q_dim, s.tokens], name=name)


def kv_columns(b: Builder, x: Value, shape: BlockShape, name: str) -> Value:
    """``[1, 1, kv_heads*head_dim, N]`` -> ``[B, kv_heads, head_dim, S]`` (keys/values transposed)."""
    s = shape
    r = b.reshape(x=x, shape=[s.kv_heads, s.head_dim, s.batch, s.seq], name=f"{name}_split")
    return b.transpose(x=r, perm=[2, 0, 1, 3], name=name)


def merge_kv_columns(b: Builder, x: Value, shape: BlockShape, name: str) -> Value:
    """Inverse of :func:`kv_columns`."""
    s = shape
    t = b.transpose(x=x, perm=[1, 2, 0, 3], name=f"{name}_hdbs")
    return b.reshape(x=t, shape=[1, 1, s.kv_dim, s.tokens], name=name)


def query_rows_by_token(rows: np.ndarray, shape: BlockShape) -> np.ndarray:
    """NumPy: a flattened :func:`query_rows` tensor as ``[N, heads*head_dim]`` (token-major)."""
    s = shape
    by_head = rows.reshape(s.batch, s.heads, s.seq, s.head_dim)
    return by_head.transpose(0, 2, 1, 3).reshape(s.tokens, s.q_dim)


def causal_mask(shape: BlockShape) -> np.ndarray:
    """The additive mask ``[1, 1, group*S, S]`` (fp16) for scores in the :func:`query_rows` layout."""
    s = shape.seq
    future = np.triu(np.ones((s, s), dtype=bool), k=1)
    mask = np.where(future, np.float16(MASK_VALUE), np.float16(0))
    return np.tile(mask, (shape.group, 1))[None, None]


def attention_probs(b: Builder, q_rows: Value, k_cols: Value, mask: Value, name: str) -> Value:
    """``softmax(q k^T + mask)`` over keys, for queries already scaled by ``1/sqrt(head_dim)``.

    The mask is added explicitly: ``scaled_dot_product_attention`` ignores ``attn_mask``
    on the ANE (ANE_NOTES section 2.4).
    """
    scores = b.matmul(x=q_rows, y=k_cols, name=f"{name}_scores")
    masked = b.add(x=scores, y=mask, name=f"{name}_masked")
    return b.softmax(x=masked, axis=-1, name=name)
