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

The CPU half of each kernel's contract lives here too (:class:`BlockHalf`,
:func:`kernel_weights`): what the CPU packs (the weights, the RoPE-swapped copies
``wq_s`` and ``wk_s``, the gains as columns), which forward outputs feed the backward
kernel, and how the backward pass ends on the CPU: the RMSNorm backward from ``dxn``
and ``rstd``, and the weight gradients from the taps and the ``dproj`` output
(:func:`attention_backward`): ``dwo = dy @ a^T``, ``dw1 = xn @ dh1^T``, ``dw2 = dy @ u^T``,
with RoPE's swapped copies folded back into ``dwq`` and ``dwk``. The caller adds
the residuals and owns the buffers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from anekit.errors import UsageError
from anekit.hw.chips import Chip, get_chip
from anekit.hw.compat import check
from anekit.hw.kinds import Severity
from anekit.mil.builder import Builder
from anekit.mil.program import Program
from anekit.nn import attention as A
from anekit.nn import layers as L
from anekit.nn.cpu import rmsnorm_backward
from anekit.nn.layers import FFN_IN_WEIGHTS, QKV_WEIGHTS, stacked_columns
from anekit.nn.packing import Layout, Packing
from anekit.nn.spec import BlockShape

INPUT = "x"
OUTPUT = "y"
# one layer's parameters, as the CPU keeps them (shapes in the table above; gains [D])
LAYER_PARAMETERS = ("wq", "wk", "wv", "wo", "w1", "w3", "w2", "attn_norm", "ffn_norm")
# forward outputs the backward kernels take, under the same field names
ATTENTION_TAPS = ("q_rows", "k_cols", "v_cols", "a_rows")
FFN_TAPS = ("h1", "h3")


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
    stacked = [(n, s.dim, c.stop - c.start) for n, c in stacked_columns(s).items()]
    return [*stacked, ("wo", s.dim, s.q_dim)]


def _ffn_weights(s: BlockShape) -> list[tuple[str, int, int]]:
    return [("w1", s.dim, s.hidden_dim), ("w3", s.dim, s.hidden_dim), ("w2", s.dim, s.hidden_dim)]


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
    taps = [("h1", s.hidden_dim, s.tokens), ("h3", s.hidden_dim, s.tokens)]
    return Packing(s.dim, [("dy", s.dim, s.tokens), *_ffn_weights(s), *taps])


def attention_forward(s: BlockShape, k_multiple: int = 1) -> KernelDef:
    """RMSNorm, Q/K/V projections, RoPE, causal grouped-query attention and the output projection.

    Input: :func:`attention_forward_packing` (``x`` is the block input, the residual stream).

    Output channels, in order: ``o [D]`` (block output before the residual add), ``xn [D]``
    (normalised input), ``q_rows [H*hd]`` (queries after RoPE and the ``1/sqrt(hd)``
    scale, :func:`~anekit.nn.layers.query_rows` order), ``k_cols``, ``v_cols [KV*hd]``
    (keys after RoPE, values; :func:`~anekit.nn.layers.kv_columns` order), ``a_rows
    [H*hd]`` (attention output before ``wo``, query-rows order), ``rstd [1]``.

    ``k_multiple``: the contractions over head_dim are zero-padded to a multiple of it inside
    the kernel (the chip's inner-dimension rule); the layouts do not change.
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
    w_qkv = pk.span(b, x_in, QKV_WEIGHTS)
    tables = A.attention_tables(b, s)
    weights = {"gain": f["gain"], "w_qkv": w_qkv, "wo": f["wo"]}
    parts = A.attention(b, s, f["x"], weights, tables, k_multiple=k_multiple)
    for n in ATTENTION_TAPS:
        shape = [1, 1, out.channels_of(n), s.tokens]
        parts[n] = b.reshape(x=parts[n], shape=shape, name=f"{n}_flat")
    b.output(out.concat(b, {n: parts[n] for n in out.fields}, OUTPUT))
    return KernelDef("attention_forward", s, b.build(), pk, out)


def attention_backward(s: BlockShape, k_multiple: int = 1) -> KernelDef:
    """Input gradients of :func:`attention_forward`, with the attention probabilities recomputed.

    Input: :func:`attention_backward_packing`; ``dy`` is the gradient of the block output
    ``o``; the taps are the forward outputs of the same names.

    Output channels: ``dxn [D]`` (gradient of the normalised input), then ``dproj``
    ``[2 H*hd + 3 KV*hd]``, the gradients of the stacked projection outputs in weight
    order ``wq, wk, wv, wq_s, wk_s``: ``xn @ dproj^T`` is the gradient of the stacked
    weights, and ``dwq = dW[wq] + dW[wq_s][:, swap]`` (likewise ``dwk``) folds RoPE back.

    ``k_multiple``: as for :func:`attention_forward`.
    """
    pk = attention_backward_packing(s)
    out = Layout(s.tokens, [("dxn", s.dim), ("dproj", stacked_columns(s)["wk_s"].stop)])
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["dy", "wo"])
    rows, cols = (
        (s.batch, s.n_kv_heads, s.group * s.seq, s.head_dim),
        (s.batch, s.n_kv_heads, s.head_dim, s.seq),
    )
    q_rows = pk.unpack_as(b, x_in, "q_rows", rows)
    k_cols = pk.unpack_as(b, x_in, "k_cols", cols)
    v_cols = pk.unpack_as(b, x_in, "v_cols", cols)
    a_rows = pk.unpack_as(b, x_in, "a_rows", rows)
    tables = A.attention_tables(b, s)
    probs = A.attention_probs(b, q_rows, k_cols, tables.mask, "probs", k_multiple)

    da_rows = L.query_rows(b, L.project(b, f["wo"], f["dy"], "da", transpose_w=True), s, "da_rows")
    dv_cols = b.matmul(x=da_rows, y=probs, transpose_x=True, name="dv_cols")
    dprobs = b.matmul(
        x=L.pad_axis(b, da_rows, 3, k_multiple, "da_rows_padded"),
        y=L.pad_axis(b, v_cols, 2, k_multiple, "v_cols_padded"),
        name="dprobs",
    )
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
    dqk_c = b.mul(x=dqk, y=tables.cos, name="dqk_c")
    dqk_s = b.mul(x=dqk, y=tables.sin, name="dqk_s")
    dv = L.merge_kv_columns(b, dv_cols, s, "dv")
    dproj = L.stack(b, (dqk_c, dv, dqk_s), "dproj")
    dxn = L.project(b, pk.span(b, x_in, QKV_WEIGHTS), dproj, "dxn", transpose_w=False)
    b.output(out.concat(b, {"dxn": dxn, "dproj": dproj}, OUTPUT))
    return KernelDef("attention_backward", s, b.build(), pk, out)


def ffn_forward(s: BlockShape, k_multiple: int = 1) -> KernelDef:
    """RMSNorm and the SwiGLU feed-forward ``w2 @ (silu(w1^T xn) * (w3^T xn))``.

    Input: :func:`ffn_forward_packing`.

    Output channels: ``f [D]`` (block output before the residual add), ``xn [D]``,
    ``h1 [F]``, ``h3 [F]`` (the two projections), ``u [F]`` (``silu(h1) * h3``), ``rstd [1]``.
    Its contractions are the model's widths (D, F): ``k_multiple`` pads none of them.
    """
    pk = ffn_forward_packing(s)
    out = Layout(
        s.tokens,
        [("f", s.dim), ("xn", s.dim), ("h1", s.hidden_dim), ("h3", s.hidden_dim), ("u", s.hidden_dim),
         ("rstd", 1)],
    )  # fmt: skip
    b = Builder()
    x_in = b.input(INPUT, pk.shape, "fp16")
    f = pk.unpack(b, x_in, ["x", "gain", "w2"])
    w13 = pk.span(b, x_in, FFN_IN_WEIGHTS)
    parts = L.ffn(b, s, f["x"], f["gain"], w13, f["w2"])
    b.output(out.concat(b, {n: parts[n] for n in out.fields}, OUTPUT))
    return KernelDef("ffn_forward", s, b.build(), pk, out)


def ffn_backward(s: BlockShape, k_multiple: int = 1) -> KernelDef:
    """Input gradients of :func:`ffn_forward`.

    Input: :func:`ffn_backward_packing`; ``dy`` is the gradient of the block output ``f``,
    ``h1`` and ``h3`` the forward taps.

    Output channels: ``dxn [D]``, ``dh1 [F]``, ``dh3 [F]``. ``k_multiple``: as for
    :func:`ffn_forward`.
    """
    pk = ffn_backward_packing(s)
    out = Layout(s.tokens, [("dxn", s.dim), ("dh1", s.hidden_dim), ("dh3", s.hidden_dim)])
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
    dxn = L.project(b, pk.span(b, x_in, FFN_IN_WEIGHTS), dh13, "dxn", transpose_w=False)
    b.output(out.concat(b, {"dxn": dxn, "dh1": dh1, "dh3": dh3}, OUTPUT))
    return KernelDef("ffn_backward", s, b.build(), pk, out)


GENERATORS = {
    "attention_forward": attention_forward,
    "attention_backward": attention_backward,
    "ffn_forward": ffn_forward,
    "ffn_backward": ffn_backward,
}


def block_kernels(
    s: BlockShape, names: tuple[str, ...] = tuple(GENERATORS), chip: str | Chip | None = None
) -> dict[str, KernelDef]:
    """Generate the named kernels (all four by default) for one block shape.

    With ``chip``, the kernels are made for it and must pass its checker: a contraction over
    head_dim is zero-padded to the chip's inner-dimension multiple (M1: 32), and a kernel the
    checker still finds errors in (a model width the rule rejects, a dimension over the
    chip's limit) is refused with a UsageError that lists them, before anything is compiled.
    """
    unknown = sorted(set(names) - set(GENERATORS))
    if unknown:
        raise ValueError(f"unknown kernels {unknown}; known: {list(GENERATORS)}")
    profile = None if chip is None else get_chip(chip)
    k_multiple = 1 if profile is None else profile.matmul_k_multiple
    kernels = {name: GENERATORS[name](s, k_multiple) for name in names}
    if profile is not None:
        for kd in kernels.values():
            _refuse_if_rejected(kd, profile)
    return kernels


def _refuse_if_rejected(kd: KernelDef, chip: Chip) -> None:
    """Raise UsageError if the checker finds errors in the kernel for ``chip``."""
    found = [d for d in check(kd.program, chip) if d.severity is Severity.ERROR]
    if not found:
        return
    listed = "; ".join(f"[{d.rule}] {d.message}" for d in found[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    raise UsageError(
        f"kernel {kd.name} for {_describe(kd.shape)} cannot run on {chip.name}: the checker "
        f"finds {len(found)} error(s): {listed}{more}; choose a model shape that passes "
        f"`anekit check` on {chip.name}, or another --chip"
    )


def _describe(s: BlockShape) -> str:
    return (
        f"dim {s.dim}, heads {s.n_heads}/{s.n_kv_heads}, head_dim {s.head_dim}, hidden {s.hidden_dim}, "
        f"{s.batch} x {s.seq} tokens"
    )


# -- the CPU half of the contract ---------------------------------------------------------------
Arrays = Mapping[str, np.ndarray]


@functools.lru_cache(maxsize=64)  # bounded: a process may make kernels for many shapes
def _rope_swaps(s: BlockShape) -> tuple[np.ndarray, np.ndarray]:
    """The column swaps of ``wq_s`` and ``wk_s`` (:func:`~anekit.nn.layers.rope_swap`), read-only."""
    swaps = L.rope_swap(s.n_heads, s.head_dim), L.rope_swap(s.n_kv_heads, s.head_dim)
    for swap in swaps:
        swap.setflags(write=False)  # cached: shared by every caller
    return swaps


def kernel_weights(s: BlockShape, layer: Arrays) -> dict[str, dict[str, np.ndarray]]:
    """What the CPU packs into each kernel's input from one layer's parameters, by kernel and field.

    ``layer`` holds :data:`LAYER_PARAMETERS` (matrices as in the table above, gains ``[D]``).
    The result adds the RoPE copies ``wq_s = wq[:, swap]`` and ``wk_s = wk[:, swap]`` and
    gives each forward kernel its RMSNorm gain as a column ``[D, 1]``; the arrays keep their
    dtype (:meth:`Packing.write` stores fp16).
    """
    missing = [n for n in LAYER_PARAMETERS if n not in layer]
    if missing:
        raise ValueError(
            f"layer parameters {missing} are missing; a block takes {LAYER_PARAMETERS}"
        )
    swap_q, swap_k = _rope_swaps(s)
    attention = {"wq": layer["wq"], "wk": layer["wk"], "wv": layer["wv"],
                 "wq_s": layer["wq"][:, swap_q], "wk_s": layer["wk"][:, swap_k], "wo": layer["wo"]}  # fmt: skip
    ffn = {n: layer[n] for n in (*FFN_IN_WEIGHTS, "w2")}
    return {
        ATTENTION.forward: {"gain": layer[ATTENTION.norm][:, None], **attention},
        ATTENTION.backward: attention,
        FFN.forward: {"gain": layer[FFN.norm][:, None], **ffn},
        FFN.backward: ffn,
    }


def stacked(weights: Arrays, names: tuple[str, ...]) -> np.ndarray:
    """Adjacent weight fields as the one matrix a span of them is (e.g. :data:`QKV_WEIGHTS`)."""
    return np.concatenate([weights[n] for n in names], axis=1)


def _attention_weight_grads(s: BlockShape, fwd: Arrays, bwd: Arrays, dy: np.ndarray) -> dict:
    dw = fwd["xn"].astype(np.float32) @ bwd["dproj"].astype(np.float32).T  # stacked wq..wk_s
    col = stacked_columns(s)
    swap_q, swap_k = _rope_swaps(s)
    return {
        "wo": dy @ L.query_rows_by_token(fwd["a_rows"], s).astype(np.float32),
        # RoPE's swapped copies fold back into wq and wk
        "wq": dw[:, col["wq"]] + dw[:, col["wq_s"]][:, swap_q],
        "wk": dw[:, col["wk"]] + dw[:, col["wk_s"]][:, swap_k],
        "wv": dw[:, col["wv"]],
    }


def _ffn_weight_grads(s: BlockShape, fwd: Arrays, bwd: Arrays, dy: np.ndarray) -> dict:
    u, xn = fwd["u"].astype(np.float32), fwd["xn"].astype(np.float32)
    return {
        "w2": dy @ u.T,
        "w1": xn @ bwd["dh1"].astype(np.float32).T,
        "w3": xn @ bwd["dh3"].astype(np.float32).T,
    }


@dataclass(frozen=True)
class BlockHalf:
    """One half of a decoder block (attention or FFN): its two kernels and the CPU half of their contract.

    The forward kernel's output field ``residual`` is what the half adds to the residual
    stream; its backward kernel takes the gradient of that field as ``dy`` and the forward
    outputs ``taps``, and :meth:`gradients` finishes the backward pass on the CPU.

    Attributes:
        forward: the forward kernel's name (:data:`GENERATORS`).
        backward: the backward kernel's name.
        norm: the layer parameter holding the half's RMSNorm gain.
        residual: the forward output added to the residual stream.
        taps: the forward outputs the backward kernel takes, under the same field names.
        weight_grads: ``(shape, forward outputs, backward outputs, dy)`` -> the gradient of
            each weight matrix, by layer parameter name (fp32).
    """

    forward: str
    backward: str
    norm: str
    residual: str
    taps: tuple[str, ...]
    weight_grads: Callable[[BlockShape, Arrays, Arrays, np.ndarray], dict[str, np.ndarray]]

    def backward_inputs(self, fwd: Arrays, dy: np.ndarray) -> dict[str, np.ndarray]:
        """The non-weight fields of the backward kernel's input: ``dy`` and the taps."""
        return {"dy": dy, **{t: fwd[t] for t in self.taps}}

    def gradients(
        self,
        s: BlockShape,
        fwd: Arrays,
        bwd: Arrays,
        dy: np.ndarray,
        x: np.ndarray,
        gain: np.ndarray,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The gradients of the half's input ``x`` (through its RMSNorm; without the residual) and parameters.

        Args:
            fwd, bwd: the split outputs of the forward and the backward kernel.
            dy: the gradient of the ``residual`` output, fp32 ``[D, N]``.
            x: the half's input (the residual stream), fp32 ``[D, N]``.
            gain: the RMSNorm gain ``[D]`` (the layer parameter ``norm``).
        Returns:
            (dx, grads): ``grads`` by layer parameter name, the gain's under ``norm``.
        """
        grads = self.weight_grads(s, fwd, bwd, dy)
        dxn, rstd = bwd["dxn"].astype(np.float32), fwd["rstd"].astype(np.float32)
        dx, grads[self.norm] = rmsnorm_backward(dxn, x, rstd, gain)
        return dx, grads


ATTENTION = BlockHalf("attention_forward", "attention_backward", "attn_norm", "o",
                      ATTENTION_TAPS, _attention_weight_grads)  # fmt: skip
FFN = BlockHalf("ffn_forward", "ffn_backward", "ffn_norm", "f", FFN_TAPS, _ffn_weight_grads)
HALVES = (ATTENTION, FFN)  # in forward order
