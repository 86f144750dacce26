"""Kernel generators for a Llama-style decoder block: attention and SwiGLU FFN, forward and backward.

Every kernel takes one fp16 input ``x`` of shape ``[1, 1, D, W]`` (a :class:`Packing`
of activations, weights and taps: the dynamic-weight recipe of ANE_NOTES section 5,
so one compile serves every layer and every step) and returns one fp16 output ``y``
(a :class:`Layout` of results concatenated on channels). Weight matrices all have
the model dimension D first, so they pack without transposing:

==========  ==============  ==============================================
field       shape           meaning
==========  ==============  ==============================================
gain        ``[D, 1]``      RMSNorm gain
wq          ``[D, H*hd]``   ``q = wq^T @ xn``
wk, wv      ``[D, KV*hd]``  ``k = wk^T @ xn``, ``v = wv^T @ xn``
wq_s, wk_s  as wq, wk       ``wq[:, swap]``, ``wk[:, swap]`` (:func:`~anekit.nn.layers.rope_swap`)
wo          ``[D, H*hd]``   ``o = wo @ a`` (attention output back to D)
w1, w3      ``[D, F]``      ``h1 = w1^T @ xn``, ``h3 = w3^T @ xn``
w2          ``[D, F]``      ``f = w2 @ (silu(h1) * h3)``
==========  ==============  ==============================================

Activations are ``[channels, N]`` with N = batch * seq tokens. Attention taps are
stored in the layout the backward kernel consumes (:func:`~anekit.nn.layers.query_rows`
and :func:`~anekit.nn.layers.kv_columns`, flattened), so they need no transposes.

The CPU side adds the residuals, runs the RMSNorm backward from ``dxn`` and
``rstd``, and forms the weight gradients from the taps and the ``dproj`` output
(:func:`attention_backward`): ``dwo = dy @ a^T``, ``dw1 = xn @ dh1^T``, ``dw2 = dy @ u^T``.
"""

from __future__ import annotations

from dataclasses import dataclass

from anekit.mil.builder import Builder
from anekit.mil.program import Program, Value
from anekit.nn import layers as L
from anekit.nn.packing import Layout, Packing
from anekit.nn.spec import BlockShape

INPUT = "x"
OUTPUT = "y"
QKV_WEIGHTS = ("wq", "wk", "wv", "wq_s", "wk_s")


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


def stacked_columns(s: BlockShape) -> dict[str, slice]:
    """Where ``wq wk wv wq_s wk_s`` sit in their stacked matrix: its columns, and the rows of ``dproj``."""
    widths = {"wq": s.q_dim, "wk": s.kv_dim, "wv": s.kv_dim, "wq_s": s.q_dim, "wk_s": s.kv_dim}
    columns, start = {}, 0
    for name in QKV_WEIGHTS:
        columns[name] = slice(start, start + widths[name])
        start += widths[name]
    return columns


def _attention_weights(s: BlockShape) -> list[tuple[str, int, int]]:
    stacked = [(n, s.dim, c.stop - c.start) for n, c in stacked_columns(s).items()]
    return [*stacked, ("wo", s.dim, s.q_dim)]


def _ffn_weights(s: BlockShape) -> list[tuple[str, int, int]]:
    return [("w1", s.dim, s.hidden), ("w3", s.dim, s.hidden), ("w2", s.dim, s.hidden)]


def attention_forward_packing(s: BlockShape) -> Packing:
    """Input of :func:`attention_forward`: ``x [D, N] | gain [D, 1] | wq wk wv wq_s wk_s wo``."""
    return Packing(s.dim, [("x", s.dim, s.tokens), ("gain", s.dim, 1), *_attention_weights(s)])


def attention_backward_packing(s: BlockShape) -> Packing:
    """Input of :func:`attention_backward`: ``dy [D, N] | weights | q_rows k_cols v_cols a_rows`` (taps)."""
    taps = [("q_rows", s.q_dim, s.tokens), ("k_cols", s.kv_dim, s.tokens),
            ("v_cols", s.kv_dim, s.tokens), ("a_rows", s.q_dim, s.tokens)]  # fmt: skip
    return Packing(s.dim, [("dy", s.dim, s.tokens), *_attention_weights(s), *taps])


def ffn_forward_packing(s: BlockShape) -> Packing:
    """Input of :func:`ffn_forward`: ``x [D, N] | gain [D, 1] | w1 | w3 | w2``."""
    return Packing(s.dim, [("x", s.dim, s.tokens), ("gain", s.dim, 1), *_ffn_weights(s)])


def ffn_backward_packing(s: BlockShape) -> Packing:
    """Input of :func:`ffn_backward`: ``dy [D, N] | w1 | w3 | w2 | h1 [F, N] | h3 [F, N]`` (taps)."""
    taps = [("h1", s.hidden, s.tokens), ("h3", s.hidden, s.tokens)]
    return Packing(s.dim, [("dy", s.dim, s.tokens), *_ffn_weights(s), *taps])


def attention_forward(s: BlockShape) -> KernelDef:
    """RMSNorm, Q/K/V projections, RoPE, causal grouped-query attention and the output projection.

    Input: :func:`attention_forward_packing` (``x`` is the block input, the residual stream).

    Output channels, in order: ``o [D]`` (block output before the residual add), ``xn [D]``
    (normalised input), ``q_rows [H*hd]`` (queries after RoPE and the ``1/sqrt(hd)``
    scale, :func:`~anekit.nn.layers.query_rows` order), ``k_cols``, ``v_cols [KV*hd]``
    (keys after RoPE, values; :func:`~anekit.nn.layers.kv_columns` order), ``a_rows
    [H*hd]`` (attention output before ``wo``, query-rows order), ``rstd [1]``.
    """
    pk = attention_forward_packing(s)
    out = Layout(
        s.tokens,
        [("o", s.dim), ("xn", s.dim), ("q_rows", s.q_dim), ("k_cols", s.kv_dim),
         ("v_cols", s.kv_dim), ("a_rows", s.q_dim), ("rstd", 1)],
    )  # fmt: skip
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["x", "gain", "wo"])
    xn, rstd = L.rmsnorm(b, f["x"], f["gain"], s.eps, "xn")
    proj = L.project(b, pk.span(b, x_in, QKV_WEIGHTS), xn, "proj", transpose_w=True)
    col = stacked_columns(s)
    qk_dim = s.q_dim + s.kv_dim  # q and k are adjacent, and so are their swapped copies
    cos, sin = _rope_consts(b, s)
    qk = L.rope(
        b,
        L.channels(b, proj, col["wq"].start, qk_dim, "qk_lin"),
        L.channels(b, proj, col["wq_s"].start, qk_dim, "qk_swapped"),
        cos,
        sin,
        "qk",
    )
    q_rows = L.query_rows(b, L.channels(b, qk, 0, s.q_dim, "q"), s, "q_rows")
    k_cols = L.kv_columns(b, L.channels(b, qk, s.q_dim, s.kv_dim, "k"), s, "k_cols")
    v_cols = L.kv_columns(b, L.channels(b, proj, col["wv"].start, s.kv_dim, "v"), s, "v_cols")
    probs = L.attention_probs(b, q_rows, k_cols, _mask(b, s), "probs")
    a_rows = b.matmul(x=probs, y=v_cols, transpose_y=True, name="a_rows")
    o = L.project(b, f["wo"], L.merge_query_rows(b, a_rows, s, "a"), "o", transpose_w=False)
    taps = {"q_rows": q_rows, "k_cols": k_cols, "v_cols": v_cols, "a_rows": a_rows}
    flat = {n: b.reshape(x=v, shape=[1, 1, out.channels_of(n), s.tokens], name=f"{n}_flat")
            for n, v in taps.items()}  # fmt: skip
    b.output(out.concat(b, {"o": o, "xn": xn, **flat, "rstd": rstd}, OUTPUT))
    return KernelDef("attention_forward", s, b.build(), pk, out)


def attention_backward(s: BlockShape) -> KernelDef:
    """Input gradients of :func:`attention_forward`, with the attention probabilities recomputed.

    Input: :func:`attention_backward_packing`; ``dy`` is the gradient of the block output
    ``o``; the taps are the forward outputs of the same names.

    Output channels: ``dxn [D]`` (gradient of the normalised input), then ``dproj``
    ``[2 H*hd + 3 KV*hd]``, the gradients of the stacked projection outputs in weight
    order ``wq, wk, wv, wq_s, wk_s``: ``xn @ dproj^T`` is the gradient of the stacked
    weights, and ``dwq = dW[wq] + dW[wq_s][:, swap]`` (likewise ``dwk``) folds RoPE back.
    """
    pk = attention_backward_packing(s)
    out = Layout(s.tokens, [("dxn", s.dim), ("dproj", stacked_columns(s)["wk_s"].stop)])
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["dy", "wo"])
    rows, cols = (
        (s.batch, s.kv_heads, s.group * s.seq, s.head_dim),
        (s.batch, s.kv_heads, s.head_dim, s.seq),
    )
    q_rows = pk.unpack_as(b, x_in, "q_rows", rows)
    k_cols = pk.unpack_as(b, x_in, "k_cols", cols)
    v_cols = pk.unpack_as(b, x_in, "v_cols", cols)
    a_rows = pk.unpack_as(b, x_in, "a_rows", rows)
    probs = L.attention_probs(b, q_rows, k_cols, _mask(b, s), "probs")

    da_rows = L.query_rows(b, L.project(b, f["wo"], f["dy"], "da", transpose_w=True), s, "da_rows")
    dv_cols = b.matmul(x=da_rows, y=probs, transpose_x=True, name="dv_cols")
    dprobs = b.matmul(x=da_rows, y=v_cols, name="dprobs")
    # softmax backward dS = P * (dP - sum_keys(P * dP)), where sum_keys(P * dP) = sum_hd(dA * A)
    # (A = P V): a reduction over head_dim instead of over the S x S scores
    row_dot = b.reduce_sum(
        x=b.mul(x=da_rows, y=a_rows, name="da_a"), axes=[-1], keep_dims=True, name="row_dot"
    )
    dscores = b.mul(x=probs, y=b.sub(x=dprobs, y=row_dot, name="dp_centred"), name="dscores")
    # q_rows already carries 1/sqrt(hd), so these are the gradients of the scaled queries
    dq_rows = b.matmul(x=dscores, y=k_cols, transpose_y=True, name="dq_rows")
    dk_cols = b.matmul(x=q_rows, y=dscores, transpose_x=True, name="dk_cols")

    dqk = L.stack(
        b, (L.merge_query_rows(b, dq_rows, s, "dq"), L.merge_kv_columns(b, dk_cols, s, "dk")), "dqk"
    )
    cos, sin = _rope_consts(b, s)
    dqk_c = b.mul(x=dqk, y=cos, name="dqk_c")
    dqk_s = b.mul(x=dqk, y=sin, name="dqk_s")
    dv = L.merge_kv_columns(b, dv_cols, s, "dv")
    dproj = L.stack(b, (dqk_c, dv, dqk_s), "dproj")
    dxn = L.project(b, pk.span(b, x_in, QKV_WEIGHTS), dproj, "dxn", transpose_w=False)
    b.output(out.concat(b, {"dxn": dxn, "dproj": dproj}, OUTPUT))
    return KernelDef("attention_backward", s, b.build(), pk, out)


def ffn_forward(s: BlockShape) -> KernelDef:
    """RMSNorm and the SwiGLU feed-forward ``w2 @ (silu(w1^T xn) * (w3^T xn))``.

    Input: :func:`ffn_forward_packing`.

    Output channels: ``f [D]`` (block output before the residual add), ``xn [D]``,
    ``h1 [F]``, ``h3 [F]`` (the two projections), ``u [F]`` (``silu(h1) * h3``), ``rstd [1]``.
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
    xn, rstd = L.rmsnorm(b, f["x"], f["gain"], s.eps, "xn")
    h13 = L.project(b, pk.span(b, x_in, ["w1", "w3"]), xn, "h13", transpose_w=True)
    h1 = L.channels(b, h13, 0, s.hidden, "h1")
    h3 = L.channels(b, h13, s.hidden, s.hidden, "h3")
    u = b.mul(x=b.mul(x=h1, y=b.sigmoid(x=h1, name="sig"), name="silu"), y=h3, name="u")
    out_f = L.project(b, f["w2"], u, "f", transpose_w=False)
    values = {"f": out_f, "xn": xn, "h1": h1, "h3": h3, "u": u, "rstd": rstd}
    b.output(out.concat(b, values, OUTPUT))
    return KernelDef("ffn_forward", s, b.build(), pk, out)


def ffn_backward(s: BlockShape) -> KernelDef:
    """Input gradients of :func:`ffn_forward`.

    Input: :func:`ffn_backward_packing`; ``dy`` is the gradient of the block output ``f``,
    ``h1`` and ``h3`` the forward taps.

    Output channels: ``dxn [D]``, ``dh1 [F]``, ``dh3 [F]``.
    """
    pk = ffn_backward_packing(s)
    out = Layout(s.tokens, [("dxn", s.dim), ("dh1", s.hidden), ("dh3", s.hidden)])
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["dy", "w2", "h1", "h3"])
    h1, h3 = f["h1"], f["h3"]
    du = L.project(b, f["w2"], f["dy"], "du", transpose_w=True)
    sig = b.sigmoid(x=h1, name="sig")
    silu = b.mul(x=h1, y=sig, name="silu")
    dh3 = b.mul(x=du, y=silu, name="dh3")
    # silu'(h) = sig(h) * (1 + h - silu(h))
    slope = b.mul(
        x=sig,
        y=b.add(x=b.sub(x=h1, y=silu, name="h_minus_silu"), y=1.0, name="one_plus"),
        name="dsilu",
    )
    dh1 = b.mul(x=b.mul(x=du, y=h3, name="dgate"), y=slope, name="dh1")
    dh13 = L.stack(b, (dh1, dh3), "dh13")
    dxn = L.project(b, pk.span(b, x_in, ["w1", "w3"]), dh13, "dxn", transpose_w=False)
    b.output(out.concat(b, {"dxn": dxn, "dh1": dh1, "dh3": dh3}, OUTPUT))
    return KernelDef("ffn_backward", s, b.build(), pk, out)


GENERATORS = {
    "attention_forward": attention_forward,
    "attention_backward": attention_backward,
    "ffn_forward": ffn_forward,
    "ffn_backward": ffn_backward,
}


def block_kernels(
    s: BlockShape, names: tuple[str, ...] = tuple(GENERATORS)
) -> dict[str, KernelDef]:
    """Generate the named kernels (all four by default) for one block shape."""
    unknown = sorted(set(names) - set(GENERATORS))
    if unknown:
        raise ValueError(f"unknown kernels {unknown}; known: {list(GENERATORS)}")
    return {name: GENERATORS[name](s) for name in names}


def _mask(b: Builder, s: BlockShape) -> Value:
    return b.weight("mask", L.causal_mask(s))


def _rope_consts(b: Builder, s: BlockShape) -> tuple[Value, Value]:
    cos, sin = L.rope_tables(s)
    return b.weight("rope_cos", cos), b.weight("rope_sin", sin)
