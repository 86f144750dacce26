"""The MIL programs an LLM runs: one decoder block over a chunk of tokens, and the output head.

Every weight is an *input* (ANE_NOTES section 5, "dynamic weights"), so one compiled
block program serves every layer: a model of any depth compiles a handful of programs
(:func:`program_keys`), far below the ~119 per-process budget (ANE_NOTES section 2.4).

Activations are ``[1, 1, C, T]`` (channels by tokens, as in :mod:`anekit.nn.layers`);
weights keep Hugging Face's ``[out, in]`` layout, so a projection is ``matmul(W, x)``.
The KV cache is read-only inside the program (in-graph cache writes are rejected on
the ANE): the block reads ``k_cache``/``v_cache`` ``[1, KV, S, hd]`` and returns the
chunk's new keys and values, which the host writes into the cache.

Attention is the one block of :mod:`anekit.nn.attention` (Hugging Face's weight layout,
with the cache): ``softmax(q k^T + mask) v`` against the cache and the chunk, joined on
the small score tensor, so the cache is never copied. RoPE tables and the mask are
inputs: the host computes them per position.

Block inputs (``T`` tokens, ``S`` cache slots, ``g = H / KV``):

===========  ======================  ================================================
name         shape                   meaning
===========  ======================  ================================================
x            ``[1, 1, D, T]``        residual stream in
cos, sin     ``[1, 1, hd, T]``       RoPE factors (``sin`` negated on the first half)
mask         ``[1, 1, g*T, S+T]``    additive mask over cache slots then chunk tokens
k_cache      ``[1, KV, S, hd]``      cached keys (after RoPE), rows by position
v_cache      ``[1, KV, S, hd]``      cached values
attn_norm    ``[1, 1, D, 1]``        RMSNorm gain before attention
wqkv         ``[1, 1, Q+2K, D]``     stacked q, k, v projections (``Q = H*hd``, ``K = KV*hd``)
bqkv         ``[1, 1, Q+2K, 1]``     their biases (Qwen2; ``attention_bias``)
q_norm       ``[1, 1, hd, 1]``       per-head query RMSNorm gain (Qwen3), and k_norm
wo, bo       ``[1, 1, D, Q]``        output projection (and its bias)
post_attn    ``[1, 1, D, 1]``        RMSNorm gain after attention (Gemma)
ffn_norm     ``[1, 1, D, 1]``        RMSNorm gain before the FFN
post_ffn     ``[1, 1, D, 1]``        RMSNorm gain after the FFN (Gemma)
w13          ``[1, 1, 2F, D]``       stacked gate and up projections
w2           ``[1, 1, D, F]``        down projection
===========  ======================  ================================================

A mixture of experts (``LlmConfig.experts`` E, each of width ``Fe``) replaces ``w13`` and
``w2`` by ``router [1, 1, E, D]``, ``w13 [1, E, 2Fe, D]``, ``w2 [1, E, D, Fe]`` and, with a
shared expert of width ``Fs``, ``shared_w13 [1, 1, 2Fs, D]``, ``shared_w2 [1, 1, D, Fs]``,
``shared_gate [1, 1, 1, D]``. The routing (softmax, top-k, renormalisation) is computed in
the program and every expert runs, weighted by its routing weight (zero unless chosen):
one gathered program whose outputs equal top-k routing, at E/k times the experts' work.

A Gemma config's norm gains are stored as ``gain - 1`` (the program adds the 1), its FFN is
GeGLU (tanh GELU), and its local (sliding-window) layers run a program reading
``cos_local``, ``sin_local`` and ``mask_local`` instead (``BlockKey.local``).

Outputs: ``y [1, 1, D, T]`` (residual stream out), ``k_new``, ``v_new [1, KV, T, hd]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from anekit.hw.numerics import MASK_MIN
from anekit.llm.config import LlmConfig
from anekit.mil.builder import Builder
from anekit.mil.program import Program, Value
from anekit.nn import attention as A
from anekit.nn import layers as L
from anekit.passes import residual as R


@dataclass(frozen=True)
class BlockKey:
    """Which block program: ``tokens`` per call and ``cache`` slots read."""

    tokens: int
    cache: int
    local: bool = False  # a sliding-window layer's program (its own tables; Gemma)
    host: bool = False  # the fp32 host residual's form (:func:`block_program`)


@dataclass(frozen=True)
class HeadKey:
    """Which head program: ``tokens`` per call; the vocabulary split in ``pieces`` rows each."""

    tokens: int
    pieces: tuple[int, ...]


def block_weight_shapes(cfg: LlmConfig) -> dict[str, tuple[int, ...]]:
    """The weight inputs of the block program, by name, for this config."""
    d, q, kv, f, hd = cfg.dim, cfg.q_dim, cfg.kv_dim, cfg.hidden_dim, cfg.head_dim
    shapes = {"attn_norm": (1, 1, d, 1), "wqkv": (1, 1, q + 2 * kv, d)}
    if cfg.qkv_bias:
        shapes["bqkv"] = (1, 1, q + 2 * kv, 1)
    if cfg.qk_norm:
        shapes["q_norm"] = shapes["k_norm"] = (1, 1, hd, 1)
    shapes["wo"] = (1, 1, d, q)
    if cfg.o_bias:
        shapes["bo"] = (1, 1, d, 1)
    if cfg.gemma:
        shapes["post_attn"] = (1, 1, d, 1)
    shapes.update(ffn_norm=(1, 1, d, 1), w13=(1, 1, 2 * f, d), w2=(1, 1, d, f))
    if cfg.experts:
        e, fe, fs = cfg.experts, cfg.expert_dim, cfg.shared_expert_dim
        shapes.update(router=(1, 1, e, d), w13=(1, e, 2 * fe, d), w2=(1, e, d, fe))
        if fs:
            shapes.update(shared_w13=(1, 1, 2 * fs, d), shared_w2=(1, 1, d, fs))
            shapes["shared_gate"] = (1, 1, 1, d)
    if cfg.gemma:
        shapes["post_ffn"] = (1, 1, d, 1)
    return shapes


TABLES = ("cos", "sin", "mask")  # block inputs that depend on the step, not on the layer


def table_names(local: bool) -> tuple[str, ...]:
    """The names of the tables a global (or local) layer reads."""
    return tuple(f"{n}_local" for n in TABLES) if local else TABLES


def layer_key(cfg: LlmConfig, key: BlockKey, i: int) -> BlockKey:
    """The program that runs layer ``i`` in a step at ``key``'s shape (local or not)."""
    return BlockKey(key.tokens, key.cache, i in cfg.local_layers, key.host)


def block_kinds(cfg: LlmConfig) -> int:
    """How many block programs a step shape needs: 2 when local and global layers mix."""
    return len({i in cfg.local_layers for i in range(cfg.n_layers)})


def step_tables(cfg: LlmConfig, key: BlockKey, start: int, valid: int) -> dict[str, np.ndarray]:
    """Every table of a step (float32), by input name: the global layers', and the local
    layers' where the model has any."""
    tables = {}
    for local in (False, True) if cfg.local_layers else (False,):
        cos, sin = rope_tables(cfg, start, key.tokens, local)
        mask = attention_mask(cfg, key, start, valid, local)
        tables.update(zip(table_names(local), (cos, sin, mask)))
    return tables


def block_input_shapes(cfg: LlmConfig, key: BlockKey) -> dict[str, tuple[int, ...]]:
    """Every input of the block program: activations, tables, mask, cache, weights."""
    t, s, hd = key.tokens, key.cache, cfg.head_dim
    cos, sin, mask = table_names(key.local)
    return {
        "x": (1, 1, cfg.dim, t),
        cos: (1, 1, hd, t),
        sin: (1, 1, hd, t),
        mask: (1, 1, cfg.group * t, s + t),
        "k_cache": (1, cfg.n_kv_heads, s, hd),
        "v_cache": (1, cfg.n_kv_heads, s, hd),
        **({"rescale": (1, 1, 1, 1)} if key.host else {}),
        **block_weight_shapes(cfg),
    }


def block_program(cfg: LlmConfig, key: BlockKey, k_multiple: int = 1) -> Program:
    """One decoder block over ``key.tokens`` tokens reading ``key.cache`` cached positions.

    ``k_multiple``: the attention's contractions (head_dim, the cache and chunk lengths) are
    zero-padded to a multiple of it, the chip's inner-dimension rule (M1: 32); zeros on a
    contracted axis leave the products unchanged.

    ``key.host``: the fp32 host residual's form (``anekit.llm.host_residual``):
    ``x`` is the stream at a scale ``s`` the host chose for this call (``s <= alpha``) and
    ``rescale [1, 1, 1, 1]`` is ``s / alpha``; the output ``d`` (instead of ``y``) is what the
    layer adds to the stream, at alpha, which the host adds to its float32 stream.
    """
    b = Builder()
    i = {n: b.input(n, shape, "fp16") for n, shape in block_input_shapes(cfg, key).items()}
    host = (i["rescale"], None) if key.host else None
    for value in _block(b, cfg, key, i, "d" if key.host else "y", k_multiple, host):
        b.output(value)
    return b.build()


def segment_program(
    cfg: LlmConfig,
    key: BlockKey,
    layers: Sequence[Mapping[str, np.ndarray]],
    first: int,
    k_multiple: int = 1,
) -> Program:
    """Consecutive decoder layers ``first, first + 1, ...`` with their weights compiled in.

    The weights are constants (``l{n}_{name}``, one weight file each) rather than inputs,
    so a compression pass can store them compressed: the ANE streams a constexpr weight
    from DRAM in its stored form, where a weight input crosses as fp16. Inputs: ``x``,
    ``cos``, ``sin``, ``mask`` as the block's (and the local tables if a layer is local), then ``k_cache{j}, v_cache{j}`` for each
    layer ``j`` of the segment. Outputs: ``y``, then ``k_new{j}, v_new{j}`` per layer.
    ``k_multiple`` as :func:`block_program`'s. ``key.host``: the host residual's form, as
    :func:`block_program`'s (inputs ``x`` and ``rescale``, output ``d``: the segment's layers'
    sum of what they add, at alpha; inside, layer ``j`` reads ``x + rescale * d_j``).
    """
    b = Builder()
    keys = [layer_key(cfg, key, first + j) for j in range(len(layers))]
    shapes = {n: v for k in keys for n, v in block_input_shapes(cfg, k).items()}
    tables = dict.fromkeys(n for k in keys for n in table_names(k.local))
    names = ("x", "rescale", *tables) if key.host else ("x", *tables)
    i = {n: b.input(n, shapes[n], "fp16") for n in names}
    caches = [
        {c: b.input(f"{c}{j}", shapes[c], "fp16") for c in ("k_cache", "v_cache")}
        for j in range(len(layers))
    ]
    x, news, d = i["x"], [], None
    for j, weights in enumerate(layers):
        consts = {n: b.weight(f"l{first + j}_{n}", _fp16(w)) for n, w in weights.items()}
        if key.host and d is not None:
            x = b.add(x=i["x"], y=b.mul(x=d, y=i["rescale"], name=f"d{j}_r"), name=f"s{j}")
        inputs = {**i, "x": x, **caches[j], **consts}
        host = (i["rescale"], d) if key.host else None
        out = f"d{j + 1}" if key.host else f"x{j + 1}"
        x, k_new, v_new = _block(b, cfg, keys[j], inputs, out, k_multiple, host)
        d = x if key.host else None
        news += [(k_new, f"k_new{j}"), (v_new, f"v_new{j}")]
    b.output(x, "d" if key.host else "y")
    for value, name in news:
        b.output(value, name)
    return b.build()


def _fp16(w: np.ndarray) -> np.ndarray:
    """A host weight (fp16, or fp16 values held as float32) as fp16, without a copy if it is."""
    return w if w.dtype == np.float16 else w.astype(np.float16)


def _block(
    b: Builder,
    cfg: LlmConfig,
    key: BlockKey,
    i: Mapping[str, Value],
    out: str,
    k_multiple: int,
    host: tuple[Value, Value | None] | None = None,
) -> tuple[Value, Value, Value]:
    """One decoder block on the values ``i`` (block inputs or constants); (y, k_new, v_new).

    The attention half is :func:`anekit.nn.attention.attention` in Hugging Face's weight
    layout with the cache; the FFN is SwiGLU (GeGLU for Gemma) over the stacked gate and up
    projections. Gemma normalises each half's output again before adding it to the stream.

    ``host``: ``(rescale, d)`` for the host residual's form: ``x`` is held at the host's
    scale ``s``, each half's output at alpha (added to the stream as ``rescale * o``), and
    the block returns ``d + o_attn + o_ffn`` (what the layers so far add, at alpha) as y.
    The norms' epsilon stays ``eps * alpha**2``: read at ``s < alpha`` it grows by
    ``(alpha / s)**2``, which the host only does for a stream whose peak is above
    ``PEAK_LIMIT / alpha`` (its mean square then dwarfs the larger epsilon; runners).
    """
    s = cfg.kernel_shape(key.tokens)  # one sequence per call; the tables are inputs
    cos, sin, mask = table_names(key.local)
    tables = A.AttentionTables(i[mask], i[cos], i[sin])
    cache = A.KVCache(i["k_cache"], i["v_cache"])
    flavour = A.Flavour(cfg.norm_offset, cfg.query_scale, cfg.attn_softcap)
    parts = A.attention(b, s, i["x"], i, tables, layout=A.HF, cache=cache, k_multiple=k_multiple,
                        residual_scale=cfg.residual_scale, prescaled_norm=True,
                        flavour=flavour)  # fmt: skip
    o = _post_norm(b, cfg, parts["o"], i, "post_attn")
    rescale = None if host is None else host[0]
    o_in = o if rescale is None else b.mul(x=o, y=rescale, name="o_r")
    h = b.add(x=i["x"], y=o_in, name="h")
    xn = R.prescaled_rmsnorm(b, h, _gain(b, cfg, i, "ffn_norm"), cfg.residual_eps, "ffn_xn")
    ffn = _experts(b, cfg, xn, i) if cfg.experts else _ffn(b, cfg, xn, i, "")
    f = _post_norm(b, cfg, ffn, i, "post_ffn")
    if host is None:
        y = b.add(x=h, y=f, name=out)
    else:  # what the block adds, at alpha (after what the layers before it in the segment add)
        delta = b.add(x=o, y=f, name=out if host[1] is None else f"{out}_own")
        y = delta if host[1] is None else b.add(x=host[1], y=delta, name=out)
    return y, parts["k_new"], parts["v_new"]


def _ffn(b: Builder, cfg: LlmConfig, xn: Value, i: Mapping[str, Value], prefix: str) -> Value:
    """The dense FFN ``w2 @ act(gate) * up`` (``prefix``: its weights' and values' names)."""
    w13, w2 = i[prefix + "w13"], i[prefix + "w2"]
    f = w13.shape[2] // 2
    h13 = L.project(b, w13, xn, prefix + "h13", transpose_w=False)
    gate = L.channels(b, h13, 0, f, prefix + "gate")
    up = L.channels(b, h13, f, f, prefix + "up")
    u = _geglu(b, gate, up) if cfg.gemma else L.swiglu(b, gate, up, prefix)
    u = R.to_residual(b, u, cfg.residual_scale, prefix + "u")
    return L.project(b, w2, u, prefix + "ffn", transpose_w=False)


def _experts(b: Builder, cfg: LlmConfig, xn: Value, i: Mapping[str, Value]) -> Value:
    """The mixture of experts on ``xn [1, 1, D, T]`` (the module docstring), shared expert
    included."""
    e, fe, t = cfg.experts, cfg.expert_dim, xn.shape[3]
    probs = b.softmax(x=L.project(b, i["router"], xn, "router", transpose_w=False), axis=2,
                      name="route_probs")  # fmt: skip
    weights = _top_k(b, probs, cfg.experts_per_token, cfg.norm_topk)
    h13 = b.matmul(x=i["w13"], y=xn, name="experts_h13")  # [1, E, 2Fe, T]
    gate = b.slice_by_size(x=h13, begin=[0, 0, 0, 0], size=[1, e, fe, t], name="experts_gate")
    up = b.slice_by_size(x=h13, begin=[0, 0, fe, 0], size=[1, e, fe, t], name="experts_up")
    u = L.swiglu(b, gate, up, "experts_")
    per_expert = b.reshape(x=weights, shape=[1, e, 1, t], name="route_per_expert")
    u = R.to_residual(b, b.mul(x=u, y=per_expert, name="experts_routed"), cfg.residual_scale,
                      "experts_u")  # fmt: skip
    y = b.matmul(x=i["w2"], y=u, name="experts_y")  # [1, E, D, T]: zero for experts not taken
    out = b.reduce_sum(x=y, axes=[1], keep_dims=True, name="experts_sum")
    if not cfg.shared_expert_dim:
        return out
    shared = _ffn(b, cfg, xn, i, "shared_")
    gate_logit = L.project(b, i["shared_gate"], xn, "shared_gate_logit", transpose_w=False)
    shared = b.mul(x=shared, y=b.sigmoid(x=gate_logit, name="shared_gate"), name="shared_out")
    return b.add(x=out, y=shared, name="moe")


def _top_k(b: Builder, probs: Value, k: int, renormalise: bool) -> Value:
    """``probs [1, 1, E, T]`` kept where among each token's ``k`` largest, zero elsewhere.

    Expert ``e``'s rank is how many experts come before it: a larger probability, or an
    equal one at a lower index (fp16 ties a float32 router would not have), so exactly
    ``k`` experts are kept, as ``torch.topk`` keeps.
    """
    e, t = probs.shape[2], probs.shape[3]
    other = b.reshape(x=probs, shape=[1, e, 1, t], name="route_other")  # j on axis 1, e on 2
    lower = np.tril(np.ones((e, e), np.float16), -1).T[None, :, :, None]  # [j, e]: j < e
    earlier = b.select(cond=b.equal(x=other, y=probs, name="route_tied"),
                       a=b.const(lower, name="route_lower"), b=0.0, name="route_tie_first")  # fmt: skip
    before = b.select(cond=b.greater(x=other, y=probs, name="route_greater"), a=1.0, b=earlier,
                      name="route_before")  # fmt: skip
    rank = b.reduce_sum(x=before, axes=[1], keep_dims=True, name="route_rank")  # [1, 1, E, T]
    chosen = b.less(x=rank, y=float(k) - 0.5, name="route_chosen")
    weights = b.select(cond=chosen, a=probs, b=0.0, name="route_weights")
    if not renormalise:
        return weights
    total = b.reduce_sum(x=weights, axes=[2], keep_dims=True, name="route_total")
    return b.real_div(x=weights, y=total, name="route_normalised")


def _gain(b: Builder, cfg: LlmConfig, i: Mapping[str, Value], name: str) -> Value:
    return A.gain(b, i[name], cfg.norm_offset, name)


def _post_norm(b: Builder, cfg: LlmConfig, o: Value, i: Mapping[str, Value], name: str) -> Value:
    """Gemma's norm of a half's output ``o`` (held at alpha, like the stream) before the
    residual add; other families add ``o`` as it is."""
    if name not in i:
        return o
    # o is alpha * o': the norm with eps * alpha^2 gives o''s norm, which goes back to alpha
    normed = R.prescaled_rmsnorm(b, o, _gain(b, cfg, i, name), cfg.residual_eps, f"{name}_n")
    return R.to_residual(b, normed, cfg.residual_scale, name)


def _geglu(b: Builder, gate: Value, up: Value) -> Value:
    """``gelu_tanh(gate) * up`` (Gemma's FFN)."""
    act = b.gelu(x=gate, mode="TANH_APPROXIMATION", name="gelu")
    return b.mul(x=act, y=up, name="u")


def head_pieces(vocab: int, limit: int) -> tuple[int, ...]:
    """Split ``vocab`` output rows into the fewest near-equal pieces of at most ``limit`` rows.

    The ANE rejects a dimension above the chip's limit (65536; Qwen's 151936-row head
    must be split, ANE_NOTES section 2.4).
    """
    n = -(-vocab // limit)
    base, extra = divmod(vocab, n)
    return tuple(base + (j < extra) for j in range(n))


def head_program(cfg: LlmConfig, key: HeadKey) -> Program:
    """Final RMSNorm and the output head over ``key.tokens`` tokens, one matmul per vocabulary piece.

    Inputs: ``x [1, 1, D, T]``, ``norm [1, 1, D, 1]``, ``w0, w1, ... [1, 1, V_j, D]``.
    Outputs: ``logits0, logits1, ... [1, 1, V_j, T]`` (fp16).
    """
    b = Builder()
    x = b.input("x", (1, 1, cfg.dim, key.tokens), "fp16")
    norm = b.input("norm", (1, 1, cfg.dim, 1), "fp16")
    ws = [b.input(f"w{j}", (1, 1, rows, cfg.dim), "fp16") for j, rows in enumerate(key.pieces)]
    return _head(b, cfg, x, norm, ws)


def head_constants_program(
    cfg: LlmConfig, key: HeadKey, norm: np.ndarray, pieces: Sequence[np.ndarray]
) -> Program:
    """The head with its norm and weights (``head_norm``, ``head_w{j}``) compiled in.

    Input: ``x [1, 1, D, T]``; outputs as :func:`head_program`.
    """
    b = Builder()
    x = b.input("x", (1, 1, cfg.dim, key.tokens), "fp16")
    ws = [b.weight(f"head_w{j}", _fp16(w)) for j, w in enumerate(pieces)]
    return _head(b, cfg, x, b.weight("head_norm", _fp16(norm)), ws)


def _head(b: Builder, cfg: LlmConfig, x: Value, norm: Value, ws: Sequence[Value]) -> Program:
    xn = R.prescaled_rmsnorm(b, x, A.gain(b, norm, cfg.norm_offset, "norm"), cfg.residual_eps,
                             "xn")  # fmt: skip
    for j, w in enumerate(ws):
        name = f"logits{j}"
        raw = L.project(b, w, xn, name + "_raw" if cfg.final_softcap else name, transpose_w=False)
        b.output(A.softcap(b, raw, cfg.final_softcap, name), name)
    return b.build()


def rope_tables(
    cfg: LlmConfig, start: int, tokens: int, local: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``cos, sin [1, 1, hd, T]`` (float32) for positions ``start .. start + T - 1`` (of the
    local layers' RoPE if ``local``).

    ``sin`` holds ``-sin`` on the first half of the head and ``+sin`` on the second, so that
    ``x * cos + swap_halves(x) * sin`` is Hugging Face's ``x * cos + rotate_half(x) * sin``.
    """
    rope = cfg.local_rope if local and cfg.local_rope is not None else cfg.rope
    inv = rope.inv_freq(cfg.head_dim)
    angle = inv[:, None] * np.arange(start, start + tokens, dtype=np.float64)[None, :]
    cos = np.concatenate([np.cos(angle)] * 2)
    sin = np.concatenate([-np.sin(angle), np.sin(angle)])
    return cos[None, None].astype(np.float32), sin[None, None].astype(np.float32)


def attention_mask(
    cfg: LlmConfig, key: BlockKey, start: int, valid: int, local: bool = False
) -> np.ndarray:
    """The additive mask ``[1, 1, g*T, S+T]`` (float32) for a chunk at ``start`` with ``valid`` real tokens.

    Query ``t`` (position ``start + t``) sees cache slots ``s < start`` and chunk tokens
    ``t' <= t``, within the sliding window if these layers (global or ``local``) have one. Padding queries
    (``t >= valid``) see themselves, so no row is empty; their outputs are discarded.
    """
    t, s = key.tokens, key.cache
    q_pos = start + np.arange(t)[:, None]
    k_pos = np.concatenate([np.arange(s), start + np.arange(t)])[None, :]
    in_cache = np.arange(s + t)[None, :] < s
    seen = np.where(in_cache, k_pos < start, (k_pos <= q_pos) & (k_pos < start + max(valid, 1)))
    seen |= ~in_cache & (k_pos == q_pos)  # padding rows see themselves
    window = cfg.window(local)
    if window is not None:
        seen &= q_pos - k_pos < window
    mask = np.where(seen, 0.0, MASK_MIN).astype(np.float32)
    return np.tile(mask, (cfg.group, 1))[None, None]
