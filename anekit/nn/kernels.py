"""Kernel generators for a Llama-style decoder block: attention and SwiGLU FFN, forward and backward.

Every kernel takes one fp16 input ``x`` of shape ``[1, D, 1, W]`` (a :class:`Packing`
of activations, weights and taps: the dynamic-weight recipe of ANE_NOTES section 5,
so one compile serves every layer and every step) and returns one fp16 output ``y``
(a :class:`Layout` of results concatenated on channels). Weight matrices all have
the model dimension D first, so they pack without transposing:

==========  ==============  ==========================================
name        shape           meaning
==========  ==============  ==========================================
gain        ``[D, 1]``      RMSNorm gain
wq          ``[D, H*hd]``   ``q = wq^T @ xn``
wk, wv      ``[D, KV*hd]``  ``k = wk^T @ xn``, ``v = wv^T @ xn``
wo          ``[D, H*hd]``   ``o = wo @ a`` (attention output back to D)
w1, w3      ``[D, F]``      ``h1 = w1^T @ xn``, ``h3 = w3^T @ xn``
w2          ``[D, F]``      ``f = w2 @ (silu(h1) * h3)``
==========  ==============  ==========================================

Activations are ``[channels, N]`` with N = batch * seq tokens. The CPU side adds the
residuals, runs the RMSNorm backward from ``dxn`` and ``rstd``, and forms the weight
gradients from the taps (``dwq = xn @ dq^T``, ``dwo = dy @ a^T``, ``dw1 = xn @ dh1^T``,
``dw2 = dy @ u^T``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from anekit.mil.builder import Builder
from anekit.mil.program import Program, Value
from anekit.nn import layers as L
from anekit.nn.packing import Layout, Packing
from anekit.nn.spec import BlockShape

INPUT = "x"
OUTPUT = "y"


@dataclass(frozen=True)
class KernelDef:
    """A generated kernel: its program and the layouts of its one input and one output."""

    name: str
    shape: BlockShape
    program: Program
    input: Packing
    output: Layout

    def describe(self) -> str:
        """The kernel's name, input packing and output layout, as text."""
        return f"{self.name}:\n{self.input.describe()}\n{self.output.describe()}"


def _attention_weights(s: BlockShape) -> list[tuple[str, int, int]]:
    return [
        ("wq", s.dim, s.q_dim),
        ("wk", s.dim, s.kv_dim),
        ("wv", s.dim, s.kv_dim),
        ("wo", s.dim, s.q_dim),
    ]


def _ffn_weights(s: BlockShape) -> list[tuple[str, int, int]]:
    return [("w1", s.dim, s.hidden), ("w3", s.dim, s.hidden), ("w2", s.dim, s.hidden)]


def attention_forward_packing(s: BlockShape) -> Packing:
    """Input of :func:`attention_forward`: ``x [D, N] | gain [D, 1] | wq | wk | wv | wo``."""
    return Packing(s.dim, [("x", s.dim, s.tokens), ("gain", s.dim, 1), *_attention_weights(s)])


def attention_backward_packing(s: BlockShape) -> Packing:
    """Input of :func:`attention_backward`: ``dy [D, N] | wq | wk | wv | wo | qkv`` (taps, folded)."""
    qkv = s.q_dim + 2 * s.kv_dim
    return Packing(
        s.dim, [("dy", s.dim, s.tokens), *_attention_weights(s), ("qkv", qkv, s.tokens)]
    )


def ffn_forward_packing(s: BlockShape) -> Packing:
    """Input of :func:`ffn_forward`: ``x [D, N] | gain [D, 1] | w1 | w3 | w2``."""
    return Packing(s.dim, [("x", s.dim, s.tokens), ("gain", s.dim, 1), *_ffn_weights(s)])


def ffn_backward_packing(s: BlockShape) -> Packing:
    """Input of :func:`ffn_backward`: ``dy [D, N] | w1 | w3 | w2 | h13 [2F, N]`` (taps, folded)."""
    return Packing(
        s.dim, [("dy", s.dim, s.tokens), *_ffn_weights(s), ("h13", 2 * s.hidden, s.tokens)]
    )


def attention_forward(s: BlockShape) -> KernelDef:
    """RMSNorm, Q/K/V projections, RoPE, causal grouped-query attention and the output projection.

    Input: :func:`attention_forward_packing` (``x`` is the block input, the residual stream).

    Output ``[1, 2D + 2(H*hd) + 2(KV*hd) + 1, 1, N]``, channels in this order:
    ``o`` (block output before the residual add), ``xn`` (normalised input), ``q``, ``k``
    (after RoPE, before the ``1/sqrt(hd)`` scale), ``v``, ``a`` (attention output, heads
    merged, before ``wo``), ``rstd`` (RMSNorm reciprocal RMS per token).
    """
    pk = attention_forward_packing(s)
    out = Layout(
        s.tokens,
        [("o", s.dim), ("xn", s.dim), ("q", s.q_dim), ("k", s.kv_dim), ("v", s.kv_dim),
         ("a", s.q_dim), ("rstd", 1)],
    )  # fmt: skip
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["x", "gain", "wo"])
    wqkv = pk.span(b, x_in, ["wq", "wk", "wv"])
    xn, rstd = L.rmsnorm(b, f["x"], f["gain"], s.eps, "xn")
    qkv = L.project(b, wqkv, xn, "qkv", transpose_w=True)
    cos2, sin2 = _rope_consts(b, s)
    q = L.rope(b, L.channels(b, qkv, 0, s.q_dim, "q_lin"), s.heads, cos2, sin2, "q")
    k = L.rope(b, L.channels(b, qkv, s.q_dim, s.kv_dim, "k_lin"), s.kv_heads, cos2, sin2, "k")
    v = L.channels(b, qkv, s.q_dim + s.kv_dim, s.kv_dim, "v")
    q_rows = L.query_rows(b, b.mul(x=q, y=_scale(s), name="q_scaled"), s, "q_rows")
    k_cols = L.kv_columns(b, k, s, "k_cols")
    v_cols = L.kv_columns(b, v, s, "v_cols")
    probs = L.attention_probs(b, q_rows, k_cols, _mask(b, s), "probs")
    a_rows = b.matmul(x=probs, y=v_cols, transpose_y=True, name="a_rows")
    a = L.merge_query_rows(b, a_rows, s, "a")
    o = L.project(b, f["wo"], a, "o", transpose_w=False)
    values = {"o": o, "xn": xn, "q": q, "k": k, "v": v, "a": a, "rstd": rstd}
    b.output(out.concat(b, values, OUTPUT))
    return KernelDef("attention_forward", s, b.build(), pk, out)


def attention_backward(s: BlockShape) -> KernelDef:
    """Input gradients of :func:`attention_forward`, with attention probabilities recomputed.

    Input: :func:`attention_backward_packing`; ``dy`` is the gradient of the block
    output ``o``, ``qkv`` the forward taps ``q, k, v`` (channels ``0 : H*hd + 2 KV*hd``
    of the forward output, after ``o`` and ``xn``).

    Output ``[1, D + H*hd + 2 KV*hd, 1, N]``: ``dxn`` (gradient of the normalised input),
    then ``dq``, ``dk`` (gradients of the projections before RoPE) and ``dv``.
    """
    pk = attention_backward_packing(s)
    out = Layout(s.tokens, [("dxn", s.dim), ("dq", s.q_dim), ("dk", s.kv_dim), ("dv", s.kv_dim)])
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["dy", "wo", "qkv"])
    wqkv = pk.span(b, x_in, ["wq", "wk", "wv"])
    qkv = f["qkv"]
    scale = _scale(s)
    q_rows = L.query_rows(
        b, b.mul(x=L.channels(b, qkv, 0, s.q_dim, "q"), y=scale, name="q_scaled"), s, "q_rows"
    )
    k_cols = L.kv_columns(b, L.channels(b, qkv, s.q_dim, s.kv_dim, "k"), s, "k_cols")
    v_cols = L.kv_columns(b, L.channels(b, qkv, s.q_dim + s.kv_dim, s.kv_dim, "v"), s, "v_cols")
    probs = L.attention_probs(b, q_rows, k_cols, _mask(b, s), "probs")

    da = L.project(b, f["wo"], f["dy"], "da", transpose_w=True)
    da_rows = L.query_rows(b, da, s, "da_rows")
    dv_cols = b.matmul(x=da_rows, y=probs, transpose_x=True, name="dv_cols")
    dprobs = b.matmul(x=da_rows, y=v_cols, name="dprobs")
    # softmax backward: dS = P * (dP - sum_keys(dP * P))
    row_dot = b.reduce_sum(
        x=b.mul(x=dprobs, y=probs, name="dp_p"), axes=[-1], keep_dims=True, name="row_dot"
    )
    dscores = b.mul(x=probs, y=b.sub(x=dprobs, y=row_dot, name="dp_centred"), name="dscores")
    dq_rows = b.matmul(x=dscores, y=k_cols, transpose_y=True, name="dq_rows_unscaled")
    dq_rows = b.mul(x=dq_rows, y=scale, name="dq_rows")
    dk_cols = b.matmul(x=q_rows, y=dscores, transpose_x=True, name="dk_cols")

    cos2, sin2 = _rope_consts(b, s, inverse=True)
    dq = L.rope(b, L.merge_query_rows(b, dq_rows, s, "dq_rot"), s.heads, cos2, sin2, "dq")
    dk = L.rope(b, L.merge_kv_columns(b, dk_cols, s, "dk_rot"), s.kv_heads, cos2, sin2, "dk")
    dv = L.merge_kv_columns(b, dv_cols, s, "dv")
    dqkv = b.concat(values=(dq, dk, dv), axis=1, interleave=False, name="dqkv")
    dxn = L.project(b, wqkv, dqkv, "dxn", transpose_w=False)
    b.output(out.concat(b, {"dxn": dxn, "dq": dq, "dk": dk, "dv": dv}, OUTPUT))
    return KernelDef("attention_backward", s, b.build(), pk, out)


def ffn_forward(s: BlockShape) -> KernelDef:
    """RMSNorm and the SwiGLU feed-forward ``w2 @ (silu(w1^T xn) * (w3^T xn))``.

    Input: :func:`ffn_forward_packing`.

    Output ``[1, 2D + 3F + 1, 1, N]``: ``f`` (block output before the residual add),
    ``xn``, ``h1``, ``h3`` (the two projections), ``u = silu(h1) * h3``, ``rstd``.
    """
    pk = ffn_forward_packing(s)
    out = Layout(
        s.tokens,
        [("f", s.dim), ("xn", s.dim), ("h1", s.hidden), ("h3", s.hidden), ("u", s.hidden),
         ("rstd", 1)],
    )  # fmt: skip
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["x", "gain", "w2"])
    w13 = pk.span(b, x_in, ["w1", "w3"])
    xn, rstd = L.rmsnorm(b, f["x"], f["gain"], s.eps, "xn")
    h13 = L.project(b, w13, xn, "h13", transpose_w=True)
    h1 = L.channels(b, h13, 0, s.hidden, "h1")
    h3 = L.channels(b, h13, s.hidden, s.hidden, "h3")
    gate = b.mul(x=h1, y=b.sigmoid(x=h1, name="sig"), name="silu")
    u = b.mul(x=gate, y=h3, name="u")
    out_f = L.project(b, f["w2"], u, "f", transpose_w=False)
    values = {"f": out_f, "xn": xn, "h1": h1, "h3": h3, "u": u, "rstd": rstd}
    b.output(out.concat(b, values, OUTPUT))
    return KernelDef("ffn_forward", s, b.build(), pk, out)


def ffn_backward(s: BlockShape) -> KernelDef:
    """Input gradients of :func:`ffn_forward`.

    Input: :func:`ffn_backward_packing`; ``dy`` is the gradient of the block output
    ``f``, ``h13`` the forward taps ``h1, h3`` (adjacent in the forward output).

    Output ``[1, D + 2F, 1, N]``: ``dxn``, ``dh1``, ``dh3``.
    """
    pk = ffn_backward_packing(s)
    out = Layout(s.tokens, [("dxn", s.dim), ("dh1", s.hidden), ("dh3", s.hidden)])
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["dy", "w2", "h13"])
    w13 = pk.span(b, x_in, ["w1", "w3"])
    h1 = L.channels(b, f["h13"], 0, s.hidden, "h1")
    h3 = L.channels(b, f["h13"], s.hidden, s.hidden, "h3")
    du = L.project(b, f["w2"], f["dy"], "du", transpose_w=True)
    sig = b.sigmoid(x=h1, name="sig")
    gate = b.mul(x=h1, y=sig, name="silu")
    dh3 = b.mul(x=du, y=gate, name="dh3")
    # silu'(h) = sig(h) * (1 + h * (1 - sig(h)))
    one_minus = b.sub(x=1.0, y=sig, name="one_minus_sig")
    slope = b.mul(
        x=sig, y=b.add(x=b.mul(x=h1, y=one_minus, name="h_oms"), y=1.0, name="h_oms_1"), name="dsilu"
    )
    dh1 = b.mul(x=b.mul(x=du, y=h3, name="dgate"), y=slope, name="dh1")
    dh13 = b.concat(values=(dh1, dh3), axis=1, interleave=False, name="dh13")
    dxn = L.project(b, w13, dh13, "dxn", transpose_w=False)
    b.output(out.concat(b, {"dxn": dxn, "dh1": dh1, "dh3": dh3}, OUTPUT))
    return KernelDef("ffn_backward", s, b.build(), pk, out)


GENERATORS = {
    "attention_forward": attention_forward,
    "attention_backward": attention_backward,
    "ffn_forward": ffn_forward,
    "ffn_backward": ffn_backward,
}


def block_kernels(s: BlockShape, names: tuple[str, ...] = tuple(GENERATORS)) -> dict[str, KernelDef]:
    """Generate the named kernels (all four by default) for one block shape."""
    unknown = sorted(set(names) - set(GENERATORS))
    if unknown:
        raise ValueError(f"unknown kernels {unknown}; known: {list(GENERATORS)}")
    return {name: GENERATORS[name](s) for name in names}


def _scale(s: BlockShape) -> float:
    return 1.0 / math.sqrt(s.head_dim)


def _mask(b: Builder, s: BlockShape) -> Value:
    return b.weight("mask", L.causal_mask(s))


def _rope_consts(b: Builder, s: BlockShape, inverse: bool = False) -> tuple[Value, Value]:
    cos2, sin2 = L.rope_tables(s)
    return b.weight("rope_cos", cos2), b.weight("rope_sin", -sin2 if inverse else sin2)
