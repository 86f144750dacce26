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
ffn_norm     ``[1, 1, D, 1]``        RMSNorm gain before the FFN
w13          ``[1, 1, 2F, D]``       stacked gate and up projections
w2           ``[1, 1, D, F]``        down projection
===========  ======================  ================================================

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


@dataclass(frozen=True)
class BlockKey:
    """Which block program: ``tokens`` per call and ``cache`` slots read."""

    tokens: int
    cache: int


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
    shapes.update(ffn_norm=(1, 1, d, 1), w13=(1, 1, 2 * f, d), w2=(1, 1, d, f))
    return shapes


def block_input_shapes(cfg: LlmConfig, key: BlockKey) -> dict[str, tuple[int, ...]]:
    """Every input of the block program: activations, tables, mask, cache, weights."""
    t, s, hd = key.tokens, key.cache, cfg.head_dim
    return {
        "x": (1, 1, cfg.dim, t),
        "cos": (1, 1, hd, t),
        "sin": (1, 1, hd, t),
        "mask": (1, 1, cfg.group * t, s + t),
        "k_cache": (1, cfg.n_kv_heads, s, hd),
        "v_cache": (1, cfg.n_kv_heads, s, hd),
        **block_weight_shapes(cfg),
    }


def block_program(cfg: LlmConfig, key: BlockKey, k_multiple: int = 1) -> Program:
    """One decoder block over ``key.tokens`` tokens reading ``key.cache`` cached positions.

    ``k_multiple``: the attention's contractions (head_dim, the cache and chunk lengths) are
    zero-padded to a multiple of it, the chip's inner-dimension rule (M1: 32); zeros on a
    contracted axis leave the products unchanged.
    """
    b = Builder()
    i = {n: b.input(n, shape, "fp16") for n, shape in block_input_shapes(cfg, key).items()}
    for value in _block(b, cfg, key, i, "y", k_multiple):
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
    ``cos``, ``sin``, ``mask`` as the block's, then ``k_cache{j}, v_cache{j}`` for each
    layer ``j`` of the segment. Outputs: ``y``, then ``k_new{j}, v_new{j}`` per layer.
    ``k_multiple`` as :func:`block_program`'s.
    """
    b = Builder()
    shapes = block_input_shapes(cfg, key)
    i = {n: b.input(n, shapes[n], "fp16") for n in ("x", "cos", "sin", "mask")}
    caches = [
        {c: b.input(f"{c}{j}", shapes[c], "fp16") for c in ("k_cache", "v_cache")}
        for j in range(len(layers))
    ]
    x, news = i["x"], []
    for j, weights in enumerate(layers):
        consts = {n: b.weight(f"l{first + j}_{n}", _fp16(w)) for n, w in weights.items()}
        inputs = {**i, "x": x, **caches[j], **consts}
        x, k_new, v_new = _block(b, cfg, key, inputs, f"x{j + 1}", k_multiple)
        news += [(k_new, f"k_new{j}"), (v_new, f"v_new{j}")]
    b.output(x, "y")
    for value, name in news:
        b.output(value, name)
    return b.build()


def _fp16(w: np.ndarray) -> np.ndarray:
    """A host weight (fp16, or fp16 values held as float32) as fp16, without a copy if it is."""
    return w if w.dtype == np.float16 else w.astype(np.float16)


def _block(
    b: Builder, cfg: LlmConfig, key: BlockKey, i: Mapping[str, Value], out: str, k_multiple: int
) -> tuple[Value, Value, Value]:
    """One decoder block on the values ``i`` (block inputs or constants); (y, k_new, v_new).

    The attention half is :func:`anekit.nn.attention.attention` in Hugging Face's weight
    layout with the cache; the FFN is SwiGLU over the stacked gate and up projections.
    """
    s = cfg.kernel_shape(key.tokens)  # one sequence per call; the tables are inputs
    tables = A.AttentionTables(i["mask"], i["cos"], i["sin"])
    cache = A.KVCache(i["k_cache"], i["v_cache"])
    parts = A.attention(b, s, i["x"], i, tables, layout=A.HF, cache=cache, k_multiple=k_multiple,
                        residual_scale=cfg.residual_scale, prescaled_norm=True)  # fmt: skip
    h = b.add(x=i["x"], y=parts["o"], name="h")
    xn = L.prescaled_rmsnorm(b, h, i["ffn_norm"], cfg.residual_eps, "ffn_xn")
    f = cfg.hidden_dim
    h13 = L.project(b, i["w13"], xn, "h13", transpose_w=False)
    u = L.swiglu(b, L.channels(b, h13, 0, f, "gate"), L.channels(b, h13, f, f, "up"))
    ffn = L.project(b, i["w2"], L.to_residual(b, u, cfg.residual_scale, "u"), "ffn",
                    transpose_w=False)  # fmt: skip
    return b.add(x=h, y=ffn, name=out), parts["k_new"], parts["v_new"]


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
    xn = L.prescaled_rmsnorm(b, x, norm, cfg.residual_eps, "xn")
    for j, w in enumerate(ws):
        b.output(L.project(b, w, xn, f"logits{j}", transpose_w=False))
    return b.build()


def rope_tables(cfg: LlmConfig, start: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """``cos, sin [1, 1, hd, T]`` (float32) for positions ``start .. start + T - 1``.

    ``sin`` holds ``-sin`` on the first half of the head and ``+sin`` on the second, so that
    ``x * cos + swap_halves(x) * sin`` is Hugging Face's ``x * cos + rotate_half(x) * sin``.
    """
    inv = cfg.rope.inv_freq(cfg.head_dim)
    angle = inv[:, None] * np.arange(start, start + tokens, dtype=np.float64)[None, :]
    cos = np.concatenate([np.cos(angle)] * 2)
    sin = np.concatenate([-np.sin(angle), np.sin(angle)])
    return cos[None, None].astype(np.float32), sin[None, None].astype(np.float32)


def attention_mask(cfg: LlmConfig, key: BlockKey, start: int, valid: int) -> np.ndarray:
    """The additive mask ``[1, 1, g*T, S+T]`` (float32) for a chunk at ``start`` with ``valid`` real tokens.

    Query ``t`` (position ``start + t``) sees cache slots ``s < start`` and chunk tokens
    ``t' <= t``, within the sliding window if the model has one. Padding queries
    (``t >= valid``) see themselves, so no row is empty; their outputs are discarded.
    """
    t, s = key.tokens, key.cache
    q_pos = start + np.arange(t)[:, None]
    k_pos = np.concatenate([np.arange(s), start + np.arange(t)])[None, :]
    in_cache = np.arange(s + t)[None, :] < s
    seen = np.where(in_cache, k_pos < start, (k_pos <= q_pos) & (k_pos < start + max(valid, 1)))
    seen |= ~in_cache & (k_pos == q_pos)  # padding rows see themselves
    if cfg.sliding_window is not None:
        seen &= q_pos - k_pos < cfg.sliding_window
    mask = np.where(seen, 0.0, MASK_MIN).astype(np.float32)
    return np.tile(mask, (cfg.group, 1))[None, None]
