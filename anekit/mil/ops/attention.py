"""scaled_dot_product_attention (iOS18), as coremltools' ``iOS18/transformers.py`` declares it."""

from __future__ import annotations

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.ops import device
from anekit.mil.ops.common import ARITH, BOOL, FP, SOFTMAX, broadcast, flops_cost, numel, require
from anekit.mil.ops.ranges import passes
from anekit.mil.ops.registry import Args, OpDef, param, register
from anekit.mil.ops.traits import ATTENTION, MATMUL
from anekit.mil.types import TensorType

OP = "scaled_dot_product_attention"


def _sdpa_infer(a: Args) -> TensorType:
    q, k, v = a.query, a.key, a.value
    require(
        q.rank == k.rank == v.rank,
        OP,
        "key",
        lambda: (
            f"query, key and value need the same rank, found {list(q.shape)}, {list(k.shape)}, "
            f"{list(v.shape)}"
        ),
    )
    require(
        q.rank >= 3, OP, "query", lambda: f"expected rank >= 3 [B, *, L, E], found {list(q.shape)}"
    )
    for name, t in (("key", k), ("value", v)):
        require(
            t.shape[:-2] == q.shape[:-2],
            OP,
            name,
            lambda: f"batch dims {list(t.shape[:-2])} differ from query's {list(q.shape[:-2])}",
        )
    require(
        k.shape[-1] == q.shape[-1],
        OP,
        "key",
        lambda: f"embedding dim E of key {list(k.shape)} differs from query {list(q.shape)}",
    )
    require(
        v.shape[-2] == k.shape[-2],
        OP,
        "value",
        lambda: f"sequence length S of value {list(v.shape)} differs from key {list(k.shape)}",
    )
    mask = a.attn_mask
    if mask is not None:
        expected = (*q.shape[:-1], k.shape[-2])
        try:
            fits = mask.rank <= len(expected) and broadcast(
                OP,
                TensorType(q.dtype, expected),
                mask.type,
                ("scores", "attn_mask"),
            ) == tuple(expected)
        except MilTypeError:
            fits = False
        require(
            fits,
            OP,
            "attn_mask",
            lambda: (
                f"expected a shape that broadcasts to the scores [B, *, L, S] = {list(expected)}, "
                f"found {list(mask.shape)}"
            ),
        )
    return TensorType(q.dtype, (*q.shape[:-1], v.shape[-1]))


def _sdpa_reference(query, key, value, attn_mask=None, matmul=np.matmul):
    """softmax(query @ key^T / sqrt(E) + mask) @ value in fp32 (coremltools' value_inference)."""
    scores = matmul(query, np.swapaxes(key, -1, -2)) / np.float32(np.sqrt(query.shape[-1]))
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            scores = np.where(attn_mask, scores, np.float32(-np.inf))
        else:
            scores = scores + attn_mask
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = scores / scores.sum(axis=-1, keepdims=True)
    return matmul(weights.astype(np.float32), value)


def _sdpa_flops(a: Args, outs: tuple[TensorType, ...]) -> float:
    q, k, v = a.query.shape, a.key.shape, a.value.shape
    scores = numel(tuple(q[:-1])) * k[-2]  # B * L * S
    # per score: q.k (2E), the 1/sqrt(E) scale, the mask (if any), softmax, weights.v (2EV)
    masked = ARITH if a.attn_mask is not None else 0.0
    return scores * (2 * q[-1] + ARITH + masked + SOFTMAX + 2 * v[-1])


register(
    OpDef(
        name=OP,
        params=(
            param("query", FP, domain="T"),
            param("key", FP, domain="T"),
            param("value", FP, domain="T"),
            param("attn_mask", BOOL | FP, optional=True),
        ),
        infer=_sdpa_infer,
        reference=_sdpa_reference,
        # its two products rounded under the precise profiles (N3); no saturation measured
        numerics=device.rounded_products(_sdpa_reference, None),
        ranges=passes("value"),  # softmax weights in [0, 1] summing to 1: inside value's interval
        cost=flops_cost(_sdpa_flops),
        traits=frozenset({ATTENTION, MATMUL}),
        since="ios18",
        doc="""``softmax(query @ key^T / sqrt(E) + mask) @ value``, as PyTorch's function.

        Args:
            query (tensor<T, [B, *, L, E]>): rank >= 3.
            key (tensor<T, [B, *, S, E]>): same batch dims as query.
            value (tensor<T, [B, *, S, EV]>): same batch dims as query.
            attn_mask (tensor<M, [*, S]>): broadcasts to [B, *, L, S]. bool: the positions
                that may be attended (others get -inf; a row with none gives NaN, as
                coremltools' value inference); fp16/fp32: added to the scores. Optional.
        Returns:
            tensor<T, [B, *, L, EV]>: the attention output. Note: the ANE ignores
            ``attn_mask`` (see ANE_NOTES.md); use matmul + mask + softmax + matmul there.
        """,
    )
)
