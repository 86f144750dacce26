"""The one attention block: RMSNorm, Q/K/V, RoPE, grouped-query attention, the output projection.

Two things vary between its users, and each is a parameter, not a second copy:

- the **weight layout** (:data:`PACKED` or :data:`HF`): how the projections and RoPE are
  laid out. ``PACKED`` is the training kernels' dynamic-weight layout: one stacked
  ``[1, 1, D, cols]`` matrix read transposed, with second copies of ``wq``/``wk`` whose
  head halves are swapped, so RoPE is three elementwise ops and its tables carry the
  ``1/sqrt(hd)`` scale. ``HF`` is Hugging Face's ``[out, in]`` layout for inference:
  stacked ``wqkv`` (and optional ``bqkv``, ``q_norm``/``k_norm``, ``bo``), RoPE by
  swapping the halves in the graph, the scale applied to the queries.
- the **cache**: none in training (causal attention within the tokens), or a read-only
  :class:`KVCache` of earlier positions in decode, attended to beside the chunk and
  joined on the small score tensor, so the cache is never copied. The chunk's new keys
  and values are returned for the host to write into the cache.

Heads are laid out as :mod:`anekit.nn.layers` says: queries ``[B, KV, g*S, hd]`` (one KV
head's group as rows of one matmul, Hugging Face's ``repeat_kv`` pairing), keys and values
``[B, KV, hd, S]``. The mask is added explicitly: ``scaled_dot_product_attention`` ignores
``attn_mask`` on the ANE (ANE_NOTES section 2.4).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from anekit.mil.builder import Builder
from anekit.mil.program import Value
from anekit.nn.layers import (
    CHANNEL_AXIS,
    causal_mask,
    channels,
    kv_columns,
    merge_query_rows,
    pad_axis,
    project,
    query_rows,
    rmsnorm,
    rope,
    rope_tables,
    stacked_columns,
)
from anekit.nn.spec import BlockShape
from anekit.passes.residual import prescaled_rmsnorm, to_residual

PACKED = "packed"  # training: stacked transposed weights with RoPE-swapped copies
HF = "hf"  # inference: Hugging Face's [out, in] weights, optional biases and q/k norms


@dataclass(frozen=True)
class AttentionTables:
    """What attention reads besides weights: the additive mask and the RoPE factors."""

    mask: Value
    cos: Value
    sin: Value


@dataclass(frozen=True)
class Flavour:
    """How a family's attention differs from Llama's (the defaults are Llama's).

    Attributes:
        norm_offset: added to every norm gain (Gemma stores ``w`` for a gain ``1 + w``).
        query_scale: the queries' factor; None: ``1/sqrt(head_dim)`` (``HF`` layout: the
            ``PACKED`` layout's RoPE tables carry the scale).
        softcap: scores become ``softcap * tanh(scores / softcap)`` before the mask (Gemma-2).
    """

    norm_offset: float = 0.0
    query_scale: float | None = None
    softcap: float | None = None


LLAMA = Flavour()


def gain(b: Builder, w: Value, offset: float, name: str) -> Value:
    """A norm's gain: the stored ``w``, plus ``offset`` where the family stores ``gain - offset``."""
    return w if offset == 0.0 else b.add(x=w, y=offset, name=f"{name}_gain")


def softcap(b: Builder, x: Value, cap: float | None, name: str) -> Value:
    """``cap * tanh(x / cap)``: x bounded by ``cap`` (Gemma-2's scores and logits); None: x."""
    if cap is None:
        return x
    t = b.tanh(x=b.mul(x=x, y=1.0 / cap, name=f"{name}_over_cap"), name=f"{name}_tanh")
    return b.mul(x=t, y=cap, name=f"{name}_capped")


@dataclass(frozen=True)
class KVCache:
    """Earlier positions' keys and values ``[1, KV, S, hd]`` (keys after RoPE), read-only."""

    k: Value
    v: Value


def attention_tables(b: Builder, shape: BlockShape) -> AttentionTables:
    """The causal mask and the (scaled) RoPE factors of ``shape`` as weights of the program."""
    cos, sin = rope_tables(shape)
    return AttentionTables(
        b.weight("mask", causal_mask(shape)), b.weight("rope_cos", cos), b.weight("rope_sin", sin)
    )


def attention(
    b: Builder,
    s: BlockShape,
    x: Value,
    weights: Mapping[str, Value],
    tables: AttentionTables,
    *,
    layout: str = PACKED,
    cache: KVCache | None = None,
    prefix: str = "",
    k_multiple: int = 1,
    residual_scale: float = 1.0,
    prescaled_norm: bool = False,
    flavour: Flavour = LLAMA,
) -> dict[str, Value]:
    """One attention block over the residual stream ``x [1, 1, D, N]``.

    Args:
        weights (Mapping[str, Value]): ``PACKED``: ``gain [1, 1, D, 1]``, ``w_qkv [1, 1, D,
            2 H*hd + 3 KV*hd]`` (:func:`~anekit.nn.layers.stacked_columns` order), ``wo [1, 1,
            D, H*hd]``. ``HF``: ``attn_norm``, ``wqkv [1, 1, H*hd + 2 KV*hd, D]``, ``wo
            [1, 1, D, H*hd]``, and where the model has them ``bqkv``, ``q_norm``/``k_norm``
            ``[1, 1, hd, 1]``, ``bo``.
        tables (AttentionTables): the mask (``[1, 1, g*S, S]``, or ``[1, 1, g*T, S+T]`` with a
            cache of ``S`` slots) and the RoPE factors.
        layout (str): :data:`PACKED` or :data:`HF` (the module docstring). Default: PACKED.
        cache (KVCache or None): earlier positions to attend to as well. Default: None.
        prefix (str): prepended to every value name (one per layer of a stack). Default: "".
        k_multiple (int): every contraction is zero-padded to a multiple of it, for chips with
            an inner-dimension rule (M1: 32); zeros leave the products unchanged. Default: 1.
        residual_scale (float): alpha of a scaled stream (``anekit.llm.residual``): the norm
            takes ``norm_eps * alpha**2`` and ``wo``'s input (and ``bo``) is scaled by alpha.
        prescaled_norm (bool): read ``x`` with :func:`~anekit.passes.residual.prescaled_rmsnorm`
            (safe at any fp16 magnitude; ``rstd`` is then None). Default: False.
        flavour (Flavour): the family's gains, query scale and soft-cap (``HF`` layout).

    Returns:
        dict: ``o`` (before the residual add), ``xn``, ``rstd``, the head layouts ``q_rows``
        (after RoPE and the scale), ``k_cols`` (after RoPE), ``v_cols``, ``a_rows`` (before
        ``wo``) and ``probs``; with a cache also ``k_new``, ``v_new [1, KV, T, hd]``.
    """
    g = weights["gain"] if layout == PACKED else weights["attn_norm"]
    g = gain(b, g, flavour.norm_offset, prefix + "xn")
    eps = s.norm_eps * residual_scale**2
    if prescaled_norm:
        xn, rstd = prescaled_rmsnorm(b, x, g, eps, prefix + "xn"), None
    else:
        xn, rstd = rmsnorm(b, x, g, eps, prefix + "xn")
    q_rows, k_cols, v_cols = _QKV[layout](b, s, xn, weights, tables, prefix, flavour)
    parts = {"xn": xn, "rstd": rstd, "q_rows": q_rows, "k_cols": k_cols, "v_cols": v_cols}
    if cache is None:
        probs = attention_probs(b, q_rows, k_cols, tables.mask, prefix + "probs", k_multiple,
                                flavour.softcap)  # fmt: skip
        a_rows = _product(b, probs, v_cols, prefix + "a_rows", k_multiple, transpose_y=True)
    else:
        probs, a_rows = _with_cache(b, s, (q_rows, k_cols, v_cols), tables, cache, prefix,
                                    k_multiple, flavour.softcap)  # fmt: skip
        parts["k_new"] = b.transpose(x=k_cols, perm=[0, 1, 3, 2], name=prefix + "k_new")
        parts["v_new"] = b.transpose(x=v_cols, perm=[0, 1, 3, 2], name=prefix + "v_new")
    a = merge_query_rows(b, a_rows, s, prefix + "a")
    a = to_residual(b, a, residual_scale, prefix + "a")
    o = project(b, weights["wo"], a, prefix + "o", transpose_w=False)
    if "bo" in weights:
        bo = to_residual(b, weights["bo"], residual_scale, prefix + "bo")
        o = b.add(x=o, y=bo, name=prefix + "o_biased")
    return {**parts, "probs": probs, "a_rows": a_rows, "o": o}


# -- the two weight layouts: (xn, weights, tables) -> q_rows, k_cols, v_cols ---------------------
QKV = tuple[Value, Value, Value]
Weights = Mapping[str, Value]


def _packed_qkv(b: Builder, s: BlockShape, xn: Value, w: Weights, t: AttentionTables,
                prefix: str, flavour: Flavour) -> QKV:  # fmt: skip
    """The training layout: one transposed projection yields q, k and their swapped copies."""
    proj = project(b, w["w_qkv"], xn, prefix + "proj", transpose_w=True)
    col = stacked_columns(s)
    qk_dim = s.q_dim + s.kv_dim  # q and k are adjacent, and so are their swapped copies
    qk = rope(
        b,
        channels(b, proj, col["wq"].start, qk_dim, prefix + "qk_lin"),
        channels(b, proj, col["wq_s"].start, qk_dim, prefix + "qk_swapped"),
        t.cos,
        t.sin,
        prefix + "qk",
    )
    q_rows = query_rows(b, channels(b, qk, 0, s.q_dim, prefix + "q"), s, prefix + "q_rows")
    k_cols = kv_columns(b, channels(b, qk, s.q_dim, s.kv_dim, prefix + "k"), s, prefix + "k_cols")
    v = channels(b, proj, col["wv"].start, s.kv_dim, prefix + "v")
    return q_rows, k_cols, kv_columns(b, v, s, prefix + "v_cols")


def _hf_qkv(b: Builder, s: BlockShape, xn: Value, w: Weights, t: AttentionTables,
            prefix: str, flavour: Flavour) -> QKV:  # fmt: skip
    """Hugging Face's layout: ``wqkv @ xn`` (+ bias), per-head q/k norms, RoPE by swapping
    each head's halves in the graph, then the ``1/sqrt(hd)`` scale on the queries."""
    qkv = project(b, w["wqkv"], xn, prefix + "qkv_lin", transpose_w=False)
    if "bqkv" in w:
        qkv = b.add(x=qkv, y=w["bqkv"], name=prefix + "qkv")
    q = _heads(b, s, channels(b, qkv, 0, s.q_dim, prefix + "q_lin"), s.n_heads, prefix + "q")
    k_lin = channels(b, qkv, s.q_dim, s.kv_dim, prefix + "k_lin")
    k = _heads(b, s, k_lin, s.n_kv_heads, prefix + "k")
    v_lin = channels(b, qkv, s.q_dim + s.kv_dim, s.kv_dim, prefix + "v_lin")
    if "q_norm" in w:  # Qwen3, Gemma-3: RMSNorm over each head's channels, before RoPE
        offset = flavour.norm_offset
        q_gain, k_gain = (gain(b, w[n], offset, prefix + n) for n in ("q_norm", "k_norm"))
        q, _ = rmsnorm(b, q, q_gain, s.norm_eps, prefix + "q_normed")
        k, _ = rmsnorm(b, k, k_gain, s.norm_eps, prefix + "k_normed")
    scale = flavour.query_scale or 1.0 / math.sqrt(s.head_dim)
    q = b.mul(x=_swap_rope(b, q, t, prefix + "q_rope"), y=scale, name=prefix + "q_scaled")
    k_cols = _swap_rope(b, k, t, prefix + "k_cols")  # [1, KV, hd, T]: the key columns
    q_flat = b.reshape(x=q, shape=[1, 1, s.q_dim, s.tokens], name=prefix + "q_flat")
    q_rows = query_rows(b, q_flat, s, prefix + "q_rows")
    return q_rows, k_cols, kv_columns(b, v_lin, s, prefix + "v_cols")


def _heads(b: Builder, s: BlockShape, x: Value, n: int, name: str) -> Value:
    """Channels ``[1, 1, n*hd, T]`` as heads ``[1, n, hd, T]`` (batch 1)."""
    return b.reshape(x=x, shape=[1, n, s.head_dim, s.tokens], name=f"{name}_heads")


def _swap_rope(b: Builder, x: Value, t: AttentionTables, name: str) -> Value:
    """Rotate-half RoPE on heads ``[1, n, hd, T]``: ``x * cos + swap_halves(x) * sin``."""
    n, hd, tokens = x.shape[1], x.shape[2], x.shape[3]
    half = hd // 2
    first = b.slice_by_size(x=x, begin=[0, 0, 0, 0], size=[1, n, half, tokens], name=f"{name}_x1")
    second = b.slice_by_size(
        x=x, begin=[0, 0, half, 0], size=[1, n, half, tokens], name=f"{name}_x2"
    )
    swapped = b.concat(
        values=(second, first), axis=CHANNEL_AXIS, interleave=False, name=f"{name}_swap"
    )
    return rope(b, x, swapped, t.cos, t.sin, name)


_QKV: dict[str, Callable[..., QKV]] = {PACKED: _packed_qkv, HF: _hf_qkv}


# -- scores, softmax and the weighted sum -----------------------------------------------------
def _product(
    b: Builder, x: Value, y: Value, name: str, k_multiple: int, transpose_y: bool = False
) -> Value:
    """``x @ y`` (``y`` transposed if asked), the contracted axis zero-padded to ``k_multiple``."""
    x = pad_axis(b, x, 3, k_multiple, f"{name}_x_padded")
    y = pad_axis(b, y, 3 if transpose_y else 2, k_multiple, f"{name}_y_padded")
    return b.matmul(x=x, y=y, transpose_y=transpose_y, name=name)


def attention_probs(
    b: Builder,
    q_rows: Value,
    k_cols: Value,
    mask: Value,
    name: str,
    k_multiple: int = 1,
    cap: float | None = None,
) -> Value:
    """``softmax(softcap(q k^T) + mask)`` over the keys, for queries already scaled (no cache)."""
    scores = _product(b, q_rows, k_cols, f"{name}_scores", k_multiple)
    return _softmax(b, scores, mask, name, cap)


def _softmax(b: Builder, scores: Value, mask: Value, name: str, cap: float | None = None) -> Value:
    """``softmax(softcap(scores) + mask)`` over the keys (queries are already scaled)."""
    masked = b.add(x=softcap(b, scores, cap, f"{name}_scores"), y=mask, name=f"{name}_masked")
    return b.softmax(x=masked, axis=-1, name=name)


def _with_cache(
    b: Builder,
    s: BlockShape,
    qkv: QKV,
    tables: AttentionTables,
    cache: KVCache,
    prefix: str,
    k_multiple: int,
    cap: float | None,
) -> tuple[Value, Value]:
    """Probabilities over the cache then the chunk, and their weighted sum of values."""
    q_rows, k_cols, v_cols = qkv
    slots, rows, kv = cache.k.shape[2], s.group * s.tokens, s.n_kv_heads
    scores = b.concat(
        values=(
            _product(b, q_rows, cache.k, prefix + "scores_cache", k_multiple, transpose_y=True),
            _product(b, q_rows, k_cols, prefix + "scores_chunk", k_multiple),
        ),
        axis=3,
        interleave=False,
        name=prefix + "scores",
    )
    probs = _softmax(b, scores, tables.mask, prefix + "probs", cap)
    p_cache = b.slice_by_size(
        x=probs, begin=[0, 0, 0, 0], size=[1, kv, rows, slots], name=prefix + "p_cache"
    )
    p_chunk = b.slice_by_size(
        x=probs, begin=[0, 0, 0, slots], size=[1, kv, rows, s.tokens], name=prefix + "p_chunk"
    )
    a_rows = b.add(
        x=_product(b, p_cache, cache.v, prefix + "a_cache", k_multiple),
        y=_product(b, p_chunk, v_cols, prefix + "a_chunk", k_multiple, transpose_y=True),
        name=prefix + "a_rows",
    )
    return probs, a_rows
