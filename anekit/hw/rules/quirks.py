"""Catalogue rows that are compiler or engine bugs, not arithmetic: checker rules.

The numerics catalogue (docs/numerics.md) models what the engine computes where it is
arithmetic (saturation, ties, flush); the rows here are program patterns the engine gets
wrong outright, so the golden model cannot reproduce them and the checker names them:

- N6: a scalar multiply after floor/ceil/round is dropped (Espresso folds the scalar into
  the rounding op's gain slot, which its lowering ignores); a multiply by the scalar 0
  after a reduction crashes ANECCompile.
- N15: the native fused scaled_dot_product_attention is reliable only in a window
  (key length <= 2048; query and key lengths not both >= 512) and applies a per-head mask
  as one plane for every head.
- N17: weights quantized per block to integers (constexpr_blockwise_shift_scale with more
  than one block along an axis) come out wrong on the Neural Engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from anekit.hw.kinds import Severity
from anekit.hw.rules.base import Context, Finding
from anekit.mil.ops.traits import ATTENTION, CONSTEXPR, REDUCTION
from anekit.mil.program import Operation, Value

N6 = (
    "docs/numerics.md N6: ANEForge issues #112 (floor/ceil/round drop a following scalar "
    "multiply, M5 / macOS 26.5) and #113, PRs #114 and #116 (muls(0) after a reduce crashes "
    "ANECCompile)"
)
N15 = (
    "docs/numerics.md N15: ANEForge op-quirks.md 'Native fused-attention reliability bounds' "
    "(M5, M1: ~3e-3 for S <= 2048, garbage at S = 4096, cosine 0.67 when min(L, S) >= 512, a "
    "per-head mask applied as one plane)"
)
N17 = (
    "docs/numerics.md N17: apple/coreai-models #279 (8-bit per-block int weights: cosine 0.367 on "
    "the Neural Engine, 0.999 on the GPU; iPhone 16 Pro Max / iOS 27)"
)

ROUNDING = frozenset({"floor", "ceil", "round"})  # the ops whose lowering ignores the gain slot
SCALES = frozenset({"mul"})  # the scalar multiply Espresso folds into the previous op's gain
SDPA_KEY_LIMIT = 2048  # key lengths above it give garbage (~1.0 error at 4096)
SDPA_BOTH_LIMIT = 512  # query and key lengths both at or above it: cosine 0.67


def _scalar_const(ctx: Context, v: Value) -> np.ndarray | None:
    """The value of a compile-time constant holding one element (a broadcast scalar), else None."""
    if not ctx.is_const(v) or v.const is None:
        return None
    array = np.asarray(v.const)
    return array if array.size == 1 and array.dtype.kind in "fiu" else None


def _scaled_pairs(ctx: Context) -> Iterator[tuple[Operation, Operation, np.ndarray]]:
    """(scalar multiply, the op producing its other operand, the scalar) for every such mul."""
    for op in ctx.runtime_ops():
        if op.op_type not in SCALES:
            continue
        a = op.args()
        for tensor, other in ((a.x, a.y), (a.y, a.x)):
            scalar = _scalar_const(ctx, other)
            producer = tensor.producer
            if scalar is not None and producer is not None and not ctx.is_const(tensor):
                yield op, producer, scalar


def fused_scale_dropped(ctx: Context) -> Iterator[Finding]:
    for op, producer, scalar in _scaled_pairs(ctx):
        if producer.op_type in ROUNDING:
            yield Finding(
                f"mul {op.name!r} scales the output of {producer.op_type} {producer.name!r} by the "
                f"scalar {float(scalar.reshape(())):g}: the compiler folds the scalar into "
                f"{producer.op_type}'s gain and drops it (silently wrong values; an add is kept); "
                "multiply by a full-shape constant instead, which blocks the fold",
                op,
            )


def zero_scale_after_reduce(ctx: Context) -> Iterator[Finding]:
    for op, producer, scalar in _scaled_pairs(ctx):
        if REDUCTION in producer.opdef.traits and float(scalar.reshape(())) == 0.0:
            yield Finding(
                f"mul {op.name!r} multiplies the output of {producer.op_type} {producer.name!r} "
                "by the scalar 0, which crashed ANECCompile; write sub(x, x) for a zero of its shape",
                op,
            )


def sdpa_window(ctx: Context) -> Iterator[Finding]:
    for op in ctx.ops_with(ATTENTION):
        a = op.args()
        length, keys = _dim(a.query, -2), _dim(a.key, -2)
        if keys is not None and keys > SDPA_KEY_LIMIT:
            yield Finding(
                f"scaled_dot_product_attention {op.name!r} attends over {keys} keys: the fused "
                f"op is reliable only up to {SDPA_KEY_LIMIT} (garbage at 4096); decompose it into "
                "matmul, softmax, matmul",
                op,
                severity=Severity.ERROR,
            )
        elif length is not None and keys is not None and min(length, keys) >= SDPA_BOTH_LIMIT:
            yield Finding(
                f"scaled_dot_product_attention {op.name!r} has {length} queries and {keys} keys, "
                f"both >= {SDPA_BOTH_LIMIT}: the fused op's cosine to the true result fell to 0.67 "
                "there; decompose it into matmul, softmax, matmul",
                op,
            )
        mask = a.attn_mask
        heads = _dim(mask, -3) if mask is not None and mask.rank >= 3 else None
        if heads is not None and heads > 1:
            yield Finding(
                f"scaled_dot_product_attention {op.name!r} has a per-head mask ({heads} planes): "
                "the fused op applies one plane to every head",
                op,
            )


def _dim(v: Any, axis: int) -> int | None:
    if v is None or v.rank < -axis:
        return None
    d = v.type.shape[axis]
    return d if isinstance(d, int) else None


def blockwise_int(ctx: Context) -> Iterator[Finding]:
    for op in ctx.ops_with(CONSTEXPR):
        if op.opdef.encoding is None or op.opdef.encoding(op.args()).kind != "blockwise":
            continue
        a = op.args()
        data, scale = a.data, a.scale
        if not data.type.dtype.is_int or scale is None:
            continue
        blocks = _partial_blocks(data.type.shape, scale.type.shape)
        if blocks:
            axis, size = blocks[0]
            yield Finding(
                f"{op.op_type} {op.name!r} holds {data.type.dtype.value} weights in blocks of {size} "
                f"along axis {axis}: per-block integer weights came out wrong on the Neural Engine "
                "(8-bit measured; other widths assumed); use per-channel scales or palettize",
                op,
            )


def _partial_blocks(data: tuple, scale: tuple) -> list[tuple[int, int]]:
    """(axis, block size) of every axis split into more than one block of more than one element."""
    found = []
    for axis, (d, s) in enumerate(zip(data, scale, strict=False)):
        if isinstance(d, int) and isinstance(s, int) and 1 < s < d and d % s == 0:
            found.append((axis, d // s))
    return found
