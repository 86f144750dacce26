"""MIL building blocks of a decoder block: projections, RMSNorm, RoPE, head layouts, SwiGLU.

The two halves of a block's forward pass, :func:`anekit.nn.attention.attention` and
:func:`ffn`, take their weights as Values from anywhere: slices of a packed kernel input
(the training kernels of :mod:`anekit.nn.kernels`), program inputs (the LLM kernels of
:mod:`anekit.llm.kernels`) or constants (the benchmark decoder of
:mod:`anekit.bench.programs`).

Activations are ``[1, 1, C, N]``: C channels by N = batch * seq tokens (sequence-major),
the memory order of ANE_NOTES' ``[1, C, 1, S]`` with the channels where ``matmul``
wants its rows (see :mod:`anekit.nn.packing`). Attention works on rank-4 head layouts;
the GQA head pairing lives here, once, for the forward and the backward kernels alike.
"""

from __future__ import annotations

import math

import numpy as np

from anekit.hw.numerics import MASK_MIN
from anekit.mil.builder import Builder
from anekit.mil.program import Value
from anekit.nn.packing import CHANNEL_AXIS
from anekit.nn.spec import BlockShape

# The stacked Q/K/V projection's weights, in column order: the second copies of wq and wk
# have each head's halves swapped (rope_swap), so one matmul yields q and q[swap] for RoPE.
QKV_WEIGHTS = ("wq", "wk", "wv", "wq_s", "wk_s")
FFN_IN_WEIGHTS = ("w1", "w3")  # the FFN's stacked input projection, in column order


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
    scale = np.repeat([1.0 / math.sqrt(shape.head_dim), 1.0], [shape.n_heads, shape.n_kv_heads])
    scale = np.repeat(scale, shape.head_dim)[:, None]
    heads = shape.n_heads + shape.n_kv_heads
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
    r = b.reshape(x=x, shape=[s.n_heads, s.head_dim, s.batch, s.seq], name=f"{name}_split")
    t = b.transpose(x=r, perm=[2, 0, 3, 1], name=f"{name}_bhsd")
    return b.reshape(x=t, shape=[s.batch, s.n_kv_heads, s.group * s.seq, s.head_dim], name=name)


def merge_query_rows(b: Builder, x: Value, shape: BlockShape, name: str) -> Value:
    """Inverse of :func:`query_rows`."""
    s = shape
    r = b.reshape(x=x, shape=[s.batch, s.n_heads, s.seq, s.head_dim], name=f"{name}_bhsd")
    t = b.transpose(x=r, perm=[1, 3, 0, 2], name=f"{name}_hdbs")
    return b.reshape(x=t, shape=[1, 1, s.q_dim, s.tokens], name=name)


def kv_columns(b: Builder, x: Value, shape: BlockShape, name: str) -> Value:
    """``[1, 1, kv_heads*head_dim, N]`` -> ``[B, kv_heads, head_dim, S]`` (keys/values transposed)."""
    s = shape
    r = b.reshape(x=x, shape=[s.n_kv_heads, s.head_dim, s.batch, s.seq], name=f"{name}_split")
    return b.transpose(x=r, perm=[2, 0, 1, 3], name=name)


def merge_kv_columns(b: Builder, x: Value, shape: BlockShape, name: str) -> Value:
    """Inverse of :func:`kv_columns`."""
    s = shape
    t = b.transpose(x=x, perm=[1, 2, 0, 3], name=f"{name}_hdbs")
    return b.reshape(x=t, shape=[1, 1, s.kv_dim, s.tokens], name=name)


def query_rows_by_token(rows: np.ndarray, shape: BlockShape) -> np.ndarray:
    """NumPy: a flattened :func:`query_rows` tensor as ``[N, heads*head_dim]`` (token-major)."""
    s = shape
    by_head = rows.reshape(s.batch, s.n_heads, s.seq, s.head_dim)
    return by_head.transpose(0, 2, 1, 3).reshape(s.tokens, s.q_dim)


def causal_mask(shape: BlockShape) -> np.ndarray:
    """The additive mask ``[1, 1, group*S, S]`` (fp16) for scores in the :func:`query_rows` layout."""
    s = shape.seq
    future = np.triu(np.ones((s, s), dtype=bool), k=1)
    mask = np.where(future, np.float16(MASK_MIN), np.float16(0))  # the project's one mask
    return np.tile(mask, (shape.group, 1))[None, None]


def pad_axis(b: Builder, x: Value, axis: int, multiple: int, name: str) -> Value:
    """``x`` with zeros appended on ``axis`` up to a multiple of ``multiple`` (x itself if it is one).

    Zeros on a contracted axis leave a matrix product unchanged: this is how a kernel meets a
    chip's rule on the inner dimension (M1: a multiple of 32, ANE_NOTES section 2.4).
    """
    size = x.shape[axis]
    extra = -size % multiple
    if not extra:
        return x
    shape = list(x.shape)
    shape[axis] = extra
    zeros = b.weight(f"{name}_zeros", np.zeros(shape, x.dtype.numpy))
    return b.concat(values=(x, zeros), axis=axis, interleave=False, name=name)


# -- the feed-forward half of a block (the attention half: anekit.nn.attention) ----------------
def stacked_columns(s: BlockShape) -> dict[str, slice]:
    """Where ``wq wk wv wq_s wk_s`` sit in their stacked matrix: its columns, and the rows of ``dproj``."""
    widths = {"wq": s.q_dim, "wk": s.kv_dim, "wv": s.kv_dim, "wq_s": s.q_dim, "wk_s": s.kv_dim}
    columns, start = {}, 0
    for name in QKV_WEIGHTS:
        columns[name] = slice(start, start + widths[name])
        start += widths[name]
    return columns


def swiglu(b: Builder, gate: Value, up: Value, prefix: str = "") -> Value:
    """``silu(gate) * up``, SiLU spelled ``gate * sigmoid(gate)`` (both ops compile on the ANE)."""
    silu = b.mul(x=gate, y=b.sigmoid(x=gate, name=prefix + "sig"), name=prefix + "silu")
    return b.mul(x=silu, y=up, name=prefix + "u")


def ffn(
    b: Builder, s: BlockShape, x: Value, gain: Value, w13: Value, w2: Value, prefix: str = ""
) -> dict[str, Value]:
    """RMSNorm and the SwiGLU feed-forward ``w2 @ (silu(w1^T xn) * (w3^T xn))``.

    Args:
        x (Value): the residual stream ``[1, 1, D, N]``.
        gain (Value): the RMSNorm gain ``[1, 1, D, 1]``.
        w13 (Value): ``[1, 1, D, 2 F]``, ``w1`` and ``w3`` side by side (:data:`FFN_IN_WEIGHTS`).
        w2 (Value): ``[1, 1, D, F]``.
        prefix (str): prepended to every value name. Default: "".

    Returns:
        dict: ``f`` (before the residual add), ``xn``, ``rstd``, ``h1`` and ``h3`` (the
        two projections) and ``u = silu(h1) * h3``.
    """
    xn, rstd = rmsnorm(b, x, gain, s.norm_eps, prefix + "xn")
    h13 = project(b, w13, xn, prefix + "h13", transpose_w=True)
    h1 = channels(b, h13, 0, s.hidden_dim, prefix + "h1")
    h3 = channels(b, h13, s.hidden_dim, s.hidden_dim, prefix + "h3")
    u = swiglu(b, h1, h3, prefix)
    f = project(b, w2, u, prefix + "f", transpose_w=False)
    return {"f": f, "xn": xn, "rstd": rstd, "h1": h1, "h3": h3, "u": u}
