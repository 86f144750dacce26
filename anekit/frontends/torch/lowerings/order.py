"""Lowerings of ops that order, rank or scan along an axis: argmax/argmin, topk, sort,
argsort, cumsum."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anekit.frontends.torch.lowerings.common import axis, reshape
from anekit.mil import DType, Value

if TYPE_CHECKING:
    from anekit.frontends.torch.lower import Lower


def _numeric(ctx: Lower, x: Any) -> Value:
    """``x`` as a value MIL's ordering ops read (bool becomes int32)."""
    value = ctx.v(x)
    return ctx.cast(value, DType.int32) if value.dtype is DType.bool else value


def arg_extreme(op: str):
    """``argmax``/``argmin``: MIL ``reduce_argmax``/``reduce_argmin`` (no dim: the flat index)."""

    def lower(ctx: Lower, x: Any, dim: int | None = None, keepdim: bool = False) -> Value:
        value = _numeric(ctx, x)
        if dim is None:
            value = reshape(ctx, value, [_numel(ctx, value)], "flat")
            dim = 0
        rank = len(ctx.static(value.shape))
        out = ctx.op(op, x=value, axis=axis(dim, rank), keep_dims=bool(keepdim))
        return reshape(ctx, out, ctx.out_shape(), "out")

    lower.__doc__ = f"MIL ``{op}`` (first index of ties, as PyTorch on CPU); int32 indices."
    lower.__qualname__ = f'arg_extreme("{op}")'
    return lower


def _numel(ctx: Lower, value: Value) -> int:
    count = 1
    for d in ctx.static(value.shape):
        count *= d
    return count


def topk(
    ctx: Lower, x: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[Value, Value]:
    """MIL ``topk``: the k largest (or smallest) values, sorted, and their int32 indices."""
    value = _numeric(ctx, x)
    rank = len(ctx.static(value.shape))
    values, indices = ctx.op("topk", x=value, k=int(k), axis=axis(dim, rank), ascending=not largest)
    return ctx.cast(values, ctx.out_dtype()), indices


def sort(
    ctx: Lower, x: Any, dim: int = -1, descending: bool = False, stable: bool | None = None
) -> tuple[Value, Value]:
    """``sort``: MIL ``topk`` over the whole axis (stable: ties keep their order)."""
    value = _numeric(ctx, x)
    shape = ctx.static(value.shape)
    d = axis(dim, len(shape))
    values, indices = ctx.op("topk", x=value, k=shape[d], axis=d, ascending=not descending)
    return ctx.cast(values, ctx.out_dtype()), indices


def sort_stable(
    ctx: Lower, x: Any, *, stable: bool | None = None, dim: int = -1, descending: bool = False
) -> tuple[Value, Value]:
    """``sort.stable``: the same stable ``topk`` (MIL's keeps ties in order)."""
    return sort(ctx, x, dim, descending)


def argsort(
    ctx: Lower, x: Any, dim: int = -1, descending: bool = False, stable: bool = False
) -> Value:
    """MIL ``argsort`` (stable: ties keep their order, as ``stable=True`` asks)."""
    value = _numeric(ctx, x)
    rank = len(ctx.static(value.shape))
    return ctx.op("argsort", x=value, axis=axis(dim, rank), ascending=not descending)


def argsort_stable(
    ctx: Lower, x: Any, *, stable: bool = True, dim: int = -1, descending: bool = False
) -> Value:
    """``argsort.stable``: MIL ``argsort``."""
    return argsort(ctx, x, dim, descending)


def cumsum(ctx: Lower, x: Any, dim: int, dtype: Any = None) -> Value:
    """MIL ``cumsum`` along ``dim``, in the result's dtype (bool and ints sum as int32)."""
    value = ctx.v(x, ctx.out_dtype())
    rank = len(ctx.static(value.shape))
    return ctx.op("cumsum", x=value, axis=axis(dim, rank))
