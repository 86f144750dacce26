"""Shape and size rules: static shapes, dimension, rank, tensor, memory and weight limits."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from anekit.hw.cost import LAST_AXIS_ALIGN, padded_bytes
from anekit.hw.rules.base import Context, Finding
from anekit.mil.ops.traits import COMPILE_TIME, CONV, MATMUL
from anekit.mil.program import Operation, Value
from anekit.mil.types import DType


def dynamic_shapes(ctx: Context) -> Iterator[Finding]:
    for v, op in ctx.tensors():
        if not v.type.is_static:
            yield Finding(
                f"{v.name!r} has dynamic shape {list(v.type.shape)}; the ANE compiles static shapes only "
                "(all DMA is fixed at compile time): give every dimension a number",
                op,
                v.name,
            )


def dim_limits(ctx: Context) -> Iterator[Finding]:
    chip = ctx.chip
    for v, op in ctx.tensors():
        for axis, dim in enumerate(v.type.shape):
            if not isinstance(dim, int):
                continue
            channel = v.type.rank >= 4 and axis == 1
            limit = chip.max_dim_channel if channel else chip.max_dim_spatial
            if dim > limit:
                kind = "channel" if channel else "spatial/contraction"
                yield Finding(
                    f"{v.name!r} {list(v.type.shape)}: {kind} axis {axis} is {dim}, over the "
                    f"{chip.name} limit of {limit}; split the tensor (e.g. a 151936-row head into parts)",
                    op,
                    v.name,
                )


GIB = 2**30


def _values(ctx: Context) -> Iterator[tuple[Value, Operation | None]]:
    """Every value the function defines (inputs, then each op's results, consts included)."""
    for v in ctx.fn.inputs:
        yield v, None
    for op in ctx.fn.ops:
        for v in op.outputs:
            yield v, op


def _laid_out(v: Value) -> int | None:
    """Bytes of a tensor as the ANE lays it out (rows padded to 64 bytes); None if unknown."""
    t = v.type
    if not t.is_static or t.dtype is DType.string:
        return None
    return padded_bytes(t.shape, t.dtype.itemsize)  # type: ignore[arg-type]


def zero_size(ctx: Context) -> Iterator[Finding]:
    for v, op in _values(ctx):
        if 0 in v.type.shape:
            axes = [i for i, d in enumerate(v.type.shape) if d == 0]
            yield Finding(
                f"{v.name!r} {list(v.type.shape)} has no elements (axis {axes[0]} is 0): the ANE "
                "lays a tensor out as rows of its last axis on C x H planes (ANE_NOTES 2.5), and "
                "MILBlob refuses empty data; no published program runs one. Remove the tensor or "
                "give every dimension at least 1",
                op,
                v.name,
            )


def rank_limit(ctx: Context) -> Iterator[Finding]:
    limit = ctx.chip.max_rank
    for v, op in _values(ctx):
        if v.type.rank > limit:
            yield Finding(
                f"{v.name!r} has rank {v.type.rank} {list(v.type.shape)}; the ANE compiler accepts "
                f"ranks 0 to {limit}: merge adjacent dimensions with reshape",
                op,
                v.name,
            )


def tensor_bytes(ctx: Context) -> Iterator[Finding]:
    limit = ctx.chip.max_tensor_gib * GIB
    for v, op in ctx.tensors():
        size = _laid_out(v)
        if size is not None and size >= limit:
            yield Finding(
                f"{v.name!r} {list(v.type.shape)} {v.type.dtype} takes {size / GIB:.2f} GiB as laid "
                f"out; the ANE's DMA addresses one tensor in under {ctx.chip.max_tensor_gib:g} GiB "
                "(32-bit offsets, an estimate from the register map): split it",
                op,
                v.name,
            )


def program_memory(ctx: Context) -> tuple[int, int, int]:
    """Bytes a program needs at once: its I/O surfaces, its weights, its intermediates at their peak.

    Intermediates (runtime tensors other than inputs and outputs) live from the op that makes
    them to their last reader, in program order, as laid out (rows padded to 64 bytes).
    """
    fn = ctx.fn
    io = sum(_laid_out(v) or 0 for v in {id(v): v for v in (*fn.inputs, *fn.outputs)}.values())
    last_use: dict[int, int] = {}
    for i, op in enumerate(fn.ops):
        for v in op.input_values():
            last_use[id(v)] = i
    live = peak = 0
    freed: dict[int, int] = {}
    for i, op in enumerate(fn.ops):
        if not op.opdef.traits & COMPILE_TIME:
            for v in op.outputs:
                size = 0 if ctx.is_boundary(v) else _laid_out(v) or 0
                live += size
                end = last_use.get(id(v), i)
                freed[end] = freed.get(end, 0) + size
        peak = max(peak, live)
        live -= freed.pop(i, 0)
    return io, ctx.weight_bytes(), peak


def program_bytes(ctx: Context) -> Iterator[Finding]:
    limit = ctx.chip.max_program_gib * GIB
    io, weights, intermediates = program_memory(ctx)
    total = io + weights + intermediates
    if total >= limit:
        yield Finding(
            f"the program needs {total / GIB:.2f} GiB at once (inputs and outputs "
            f"{io / GIB:.2f}, weights {weights / GIB:.2f}, intermediates at their peak "
            f"{intermediates / GIB:.2f}); the ANE addresses about {ctx.chip.max_program_gib:g} GiB "
            "per program (an estimate from its 32-bit DMA offsets): split it into several programs"
        )


def conv_input_channels(ctx: Context) -> Iterator[Finding]:
    limit = ctx.chip.max_input_channels
    for op in ctx.ops_with(CONV):
        channels = op.opdef.input_channels(op.args())
        if channels is not None and channels > limit:
            yield Finding(
                f"conv input has {channels} channels; a 32000-input-channel conv is rejected "
                f"(32000 output channels work) and the cap is taken as {limit}: split the input "
                "channels and add the partial results",
                op,
            )


def m1_matmul_k(ctx: Context) -> Iterator[Finding]:
    multiple = ctx.chip.matmul_k_multiple
    for op in ctx.ops_with(MATMUL):
        k = op.opdef.inner_dim(op.args())  # None for attention, which declares no single K
        if k is not None and k % multiple:
            padded = -(-k // multiple) * multiple
            yield Finding(
                f"matmul inner dimension {k} is not a multiple of {multiple} on {ctx.chip.name}; "
                f"zero-pad it to {padded}",
                op,
            )


def last_axis_padding(ctx: Context) -> Iterator[Finding]:
    for v, op in ctx.tensors():
        t = v.type
        if not t.is_static or t.rank < 2 or t.dtype is DType.string or not t.numel:
            continue  # an empty tensor is the zero-size rule's
        row = t.shape[-1] * t.dtype.itemsize  # type: ignore[operator]
        if row * 4 > LAST_AXIS_ALIGN or math.prod(t.shape[:-1]) < 2:  # type: ignore[arg-type]
            continue
        waste = padded_bytes(t.shape, t.dtype.itemsize) / (math.prod(t.shape) * t.dtype.itemsize)  # type: ignore[arg-type]
        yield Finding(
            f"{v.name!r} {list(t.shape)}: its last axis is {row} bytes, padded to {LAST_AXIS_ALIGN} in "
            f"memory ({waste:.0f}x the data); put a long axis last, e.g. [1, C, 1, S]",
            op,
            v.name,
        )


def weights_ceiling(severity_over: bool) -> Callable[[Context], Iterator[Finding]]:
    def rule(ctx: Context) -> Iterator[Finding]:
        ceiling = ctx.chip.weights_ceiling_gb * 1e9
        total = ctx.weight_bytes()
        over = total > ceiling
        near = 0.8 * ceiling < total <= ceiling
        if over if severity_over else near:
            yield Finding(
                f"the program holds {total / 1e9:.2f} GB of weights; one program is limited to about "
                f"{ctx.chip.weights_ceiling_gb:g} GB: split it into several programs"
            )

    return rule
