"""Lowering of ``scaled_dot_product_attention``: masks, causal attention, GQA, custom scale.

The ANE ignores ``attn_mask`` of MIL's ``scaled_dot_product_attention`` (ANE_NOTES 2.4),
so masked or causal attention is spelled out as matmul, scale, add(mask), softmax,
matmul. Unmasked attention with the default scale keeps the fused op.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from anekit.frontends.torch.lowerings.common import reshape
from anekit.mil import DType, Value

if TYPE_CHECKING:
    from anekit.frontends.torch.lower import Lower


def _repeat_heads(ctx: Lower, x: Value, heads: int, suffix: str) -> Value:
    """K or V with each of its heads repeated for the query heads that share it (GQA).

    Query head ``h`` uses KV head ``h // (heads / kv_heads)``, as PyTorch's
    ``enable_gqa`` (``repeat_interleave`` on the head axis).
    """
    shape = ctx.static(x.shape)
    kv = shape[-3]
    if kv == heads:
        return x
    if heads % kv:
        raise ctx.fail(f"{heads} query heads cannot share {kv} key/value heads evenly")
    lead, (s, d) = shape[:-3], shape[-2:]
    grouped = reshape(ctx, x, (*lead, kv, 1, s, d), f"{suffix}_g")
    tiled = ctx.op(
        "tile", f"{suffix}_t", x=grouped, reps=[1] * (len(lead) + 1) + [heads // kv, 1, 1]
    )
    return reshape(ctx, tiled, (*lead, heads, s, d), f"{suffix}_r")


def _mask(ctx: Lower, attn_mask: Any, is_causal: bool, length: int, source: int, dtype: DType):
    """The additive mask (0 where attended, -inf elsewhere) as an array or a value, or None."""
    mask: Any = None
    if is_causal:
        allowed = np.tril(np.ones((length, source), dtype=bool))
        mask = np.where(allowed, np.float32(0), np.float32(-np.inf))
    if attn_mask is None:
        return mask
    if isinstance(attn_mask, torch.Tensor):
        m = attn_mask.detach().cpu()
        extra = (
            np.where(m.numpy(), np.float32(0), np.float32(-np.inf))
            if m.dtype == torch.bool
            else m.to(torch.float32).numpy()
        )
        return extra if mask is None else mask + extra
    value = attn_mask
    if value.dtype is DType.bool:
        value = ctx.op("select", "mask", cond=value, a=np.float32(0), b=np.float32(-np.inf))
        value = ctx.cast(value, dtype)
    if mask is not None:
        value = ctx.op("add", "causal", x=ctx.v(value, dtype), y=mask.astype(dtype.numpy))
    return ctx.v(value, dtype)


def sdpa(
    ctx: Lower,
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Value:
    """Fused MIL ``scaled_dot_product_attention``, or matmul/mask/softmax/matmul."""
    dtype = ctx.out_dtype()
    q, k, v = (ctx.v(t, dtype) for t in (query, key, value))
    q_shape = ctx.static(q.shape)
    length, width = q_shape[-2:]
    if len(q_shape) >= 3:
        k = _repeat_heads(ctx, k, q_shape[-3], "k")
        v = _repeat_heads(ctx, v, q_shape[-3], "v")
    source = ctx.static(k.shape)[-2]
    mask = _mask(ctx, attn_mask, is_causal, length, source, dtype)
    default = 1.0 / math.sqrt(width)
    factor = default if scale is None else float(scale)
    if mask is None:
        if not math.isclose(factor, default, rel_tol=1e-6):  # the fused op scales by 1/sqrt(E)
            q = ctx.op("mul", "qscale", x=q, y=np.asarray(factor / default, dtype.numpy))
        return ctx.op("scaled_dot_product_attention", query=q, key=k, value=v)
    scores = ctx.op("matmul", "scores", x=q, y=k, transpose_y=True)
    scores = ctx.op("mul", "scaled", x=scores, y=np.asarray(factor, dtype.numpy))
    if isinstance(mask, np.ndarray):
        mask = ctx.v(torch.from_numpy(mask.astype(np.float32)), dtype)
    scores = ctx.op("add", "masked", x=scores, y=mask)
    weights = ctx.op("softmax", "weights", x=scores, axis=-1)
    return ctx.op("matmul", x=weights, y=v)
