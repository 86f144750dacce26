"""Rules of one chip generation: attention masks, M1/M2 (legacy dialect, casts, blobs), M3 convs."""

from __future__ import annotations

import functools
from collections.abc import Iterator

from anekit.errors import MilTypeError
from anekit.hw.rules.base import Context, Finding, within_dialect
from anekit.mil.ops import registry
from anekit.mil.ops.traits import ATTENTION, CAST, CONST, CONSTEXPR, CONV
from anekit.mil.types import DType


# -- attention --------------------------------------------------------------------------------
def sdpa_mask(ctx: Context) -> Iterator[Finding]:
    for op in ctx.ops_with(ATTENTION):
        if op.inputs.get("attn_mask") is not None:
            yield Finding(
                "the ANE ignores attn_mask of scaled_dot_product_attention, so the result is wrong: "
                "build attention from matmul, add(mask), softmax, matmul",
                op,
            )


# -- M1 / M2 ----------------------------------------------------------------------------------
def legacy_dialect(ctx: Context) -> Iterator[Finding]:
    if within_dialect(ctx.fn.opset, ctx.chip):
        return
    missing = sorted({op.op_type for op in ctx.fn.ops if not _has_ios16(op.op_type)})
    extra = f"; {', '.join(missing)} have no ios16 form" if missing else ""
    yield Finding(
        f"the program targets {ctx.fn.opset}; {ctx.chip.name} reportedly needs program(1.0) with ios16 "
        f"ops and tensor<int32, []> scalars: save with dialect='legacy'{extra}"
    )


@functools.cache
def _has_ios16(op_type: str) -> bool:
    try:
        registry.get(op_type, "ios16")
    except MilTypeError:  # the op needs a later opset
        return False
    return True


def legacy_fp32_cast(ctx: Context) -> Iterator[Finding]:
    for op in ctx.ops_with(CAST):
        types = {v.type.dtype for v in (*op.input_values(), *op.outputs)}
        if DType.fp32 in types:
            yield Finding(
                f"fp32<->fp16 cast may be unsupported on {ctx.chip.name}: use fp16 inputs and outputs",
                op,
            )


def legacy_multi_blob(ctx: Context) -> Iterator[Finding]:
    offsets: dict[str, set[int]] = {}
    for op in ctx.ops_with(CONST, CONSTEXPR):
        for v in op.input_values():
            if v.blob is not None:
                offsets.setdefault(v.blob.path, set()).add(v.blob.offset)
    for path, offs in sorted(offsets.items()):
        if len(offs) > 1:
            yield Finding(
                f"weight file {path} holds {len(offs)} tensors; {ctx.chip.name} rejects multi-blob "
                "weight files: store one tensor per file (the Builder does)"
            )


# -- M3 ---------------------------------------------------------------------------------------------
def m3_conv_channels(ctx: Context) -> Iterator[Finding]:
    for op in ctx.ops_with(CONV):
        out = op.outputs[0].type
        chans = {op.opdef.input_channels(op.args()), out.shape[1] if out.rank >= 2 else None}
        chans.discard(None)
        if chans - {512}:
            yield Finding(
                f"conv with {sorted(chans)} channels: two reports (M3 Pro: 52 channel counts tried, "
                "M3 Ultra) found only 512-channel convs compile on M3; unconfirmed elsewhere",
                op,
            )
