"""I/O rules: several inputs, and the order of their surface sizes."""

from __future__ import annotations

from collections.abc import Iterator

from anekit.hw.cost import padded_bytes
from anekit.hw.rules.base import Context, Finding
from anekit.mil.program import Value


def _surface_bytes(v: Value) -> int | None:
    if not v.type.is_static:
        return None
    return padded_bytes(v.type.shape, v.type.dtype.itemsize)  # type: ignore[arg-type]


def _io_order_ok(ctx: Context) -> bool:
    ins = [_surface_bytes(v) for v in ctx.fn.inputs]
    outs = [_surface_bytes(v) for v in ctx.fn.outputs]
    if None in ins or None in outs:
        return True  # dynamic shapes are reported by their own rule
    ascending = all(a < b for a, b in zip(ins, ins[1:]))
    descending = all(a > b for a, b in zip(outs, outs[1:]))
    return ascending and descending


def multi_input_order(ctx: Context) -> Iterator[Finding]:
    if len(ctx.fn.inputs) < 2 or _io_order_ok(ctx):
        return
    sizes = ", ".join(f"{v.name}={_surface_bytes(v)} B" for v in (*ctx.fn.inputs, *ctx.fn.outputs))
    yield Finding(
        f"{len(ctx.fn.inputs)} inputs whose surface sizes ({sizes}) are not strictly ascending "
        "(outputs strictly descending): one report finds outputs then come back silently zero; "
        "others run multi-input programs fine. Reorder by size, or pack the inputs into one tensor"
    )


def multi_input(ctx: Context) -> Iterator[Finding]:
    if len(ctx.fn.inputs) < 2 or not _io_order_ok(ctx):
        return
    yield Finding(
        f"{len(ctx.fn.inputs)} inputs, ordered by ascending size as one report requires; another "
        "report has multi-input requests fail with 0x1d. Packing all inputs into one tensor always works"
    )
