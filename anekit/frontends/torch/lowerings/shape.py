"""Lowerings of ops that move data: views, permutes, slices, concatenation, splits, gathers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from anekit.frontends.torch.lowerings.common import axis, reshape
from anekit.mil import DType, Value

if TYPE_CHECKING:
    from anekit.frontends.torch.lower import Lower


def view(ctx: Lower, x: Any, *args: Any, **kwargs: Any) -> Value:
    """Every op that only changes the shape (view, reshape, flatten, (un)squeeze): ``reshape``."""
    return reshape(ctx, ctx.v(x), ctx.out_shape())


def permute(ctx: Lower, x: Any, dims: Any) -> Value:
    """MIL ``transpose`` (nothing for the identity permutation)."""
    value = ctx.v(x)
    rank = len(ctx.static(value.shape))
    perm = [axis(int(d), rank) for d in dims]
    if perm == list(range(rank)):
        return value
    return ctx.op("transpose", x=value, perm=perm)


def transpose(ctx: Lower, x: Any, dim0: int, dim1: int) -> Value:
    """MIL ``transpose`` swapping two axes."""
    rank = len(ctx.shape_of(x))
    perm = list(range(rank))
    a, b = axis(dim0, rank), axis(dim1, rank)
    perm[a], perm[b] = perm[b], perm[a]
    return permute(ctx, x, perm)


def t(ctx: Lower, x: Any) -> Value:
    """MIL ``transpose`` of a matrix."""
    return transpose(ctx, x, 0, 1) if len(ctx.shape_of(x)) == 2 else ctx.v(x)


def expand(ctx: Lower, x: Any, size: Any, *, implicit: bool = False) -> Value:
    """``expand``: ``tile`` the size-1 dims (after adding leading ones)."""
    value = ctx.v(x)
    out = ctx.out_shape()
    shape = (1,) * (len(out) - len(ctx.static(value.shape))) + ctx.static(value.shape)
    value = reshape(ctx, value, shape, "lead")
    reps = [o // s if s != o else 1 for s, o in zip(shape, out)]
    if all(r == 1 for r in reps):
        return value
    return ctx.op("tile", x=value, reps=reps)


def repeat(ctx: Lower, x: Any, repeats: Any) -> Value:
    """MIL ``tile``."""
    value = ctx.v(x)
    shape = ctx.static(value.shape)
    shape = (1,) * (len(repeats) - len(shape)) + shape
    return ctx.op("tile", x=reshape(ctx, value, shape, "lead"), reps=[int(r) for r in repeats])


def slice_(
    ctx: Lower, x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Value:
    """``slice``: ``slice_by_size`` for step 1, else ``slice_by_index`` (bounds clamped)."""
    value = ctx.v(x)
    shape = ctx.static(value.shape)
    d = axis(dim, len(shape))
    begin, stop, _ = slice(start, end, step).indices(shape[d])
    if begin == 0 and stop >= shape[d] and step == 1:
        return value
    if step == 1:
        starts = [0] * len(shape)
        starts[d] = begin
        return ctx.op("slice_by_size", x=value, begin=starts, size=list(ctx.out_shape()))
    begins, ends, strides = [0] * len(shape), list(shape), [1] * len(shape)
    begins[d], ends[d], strides[d] = begin, stop, int(step)
    return ctx.op("slice_by_index", x=value, begin=begins, end=ends, stride=strides)


def select(ctx: Lower, x: Any, dim: int, index: int) -> Value:
    """``select``: a one-wide ``slice_by_size``, then the axis is dropped by ``reshape``."""
    value = ctx.v(x)
    shape = ctx.static(value.shape)
    d = axis(dim, len(shape))
    starts = [0] * len(shape)
    starts[d] = index % shape[d]
    size = list(shape)
    size[d] = 1
    part = ctx.op("slice_by_size", "part", x=value, begin=starts, size=size)
    return reshape(ctx, part, ctx.out_shape())


def cat(ctx: Lower, tensors: Any, dim: int = 0) -> Value:
    """MIL ``concat`` (legacy empty tensors dropped)."""
    dtype = ctx.out_dtype()
    parts = [ctx.v(t, dtype) for t in tensors if ctx.shape_of(t) != (0,)]  # legacy empty tensors
    if len(parts) == 1:
        return parts[0]
    rank = len(ctx.out_shape())
    return ctx.op("concat", values=parts, axis=axis(dim, rank), interleave=False)


def stack(ctx: Lower, tensors: Any, dim: int = 0) -> Value:
    """MIL ``stack``."""
    dtype = ctx.out_dtype()
    rank = len(ctx.out_shape())
    return ctx.op("stack", values=[ctx.v(t, dtype) for t in tensors], axis=axis(dim, rank))


def _split(ctx: Lower, x: Any, sizes: list[int], dim: int) -> tuple[Value, ...]:
    value = ctx.v(x)
    d = axis(dim, len(ctx.static(value.shape)))
    if len(sizes) == 1:
        return (value,)
    parts = ctx.op("split", x=value, split_sizes=sizes, axis=d)
    return tuple(parts)


def split(ctx: Lower, x: Any, split_size: Any, dim: int = 0) -> tuple[Value, ...]:
    """``split``/``split_with_sizes``/``chunk``: sizes read from the results' shapes."""
    shapes = [ctx.static(o.shape) for o in ctx.out]
    d = axis(dim, len(ctx.shape_of(x)))
    return _split(ctx, x, [s[d] for s in shapes], dim)


def chunk(ctx: Lower, x: Any, chunks: int, dim: int = 0) -> tuple[Value, ...]:
    """MIL ``split`` into the results' sizes."""
    return split(ctx, x, chunks, dim)


def unbind(ctx: Lower, x: Any, dim: int = 0) -> tuple[Value, ...]:
    """MIL ``split`` into ones, each axis dropped by ``reshape``."""
    shape = ctx.shape_of(x)
    d = axis(dim, len(shape))
    parts = _split(ctx, x, [1] * shape[d], dim)
    out = ctx.out_shape(0)
    return tuple(reshape(ctx, p, out, f"item{i}") for i, p in enumerate(parts))


def _indices(ctx: Lower, index: Any) -> Value:
    """Index tensors as int32 values (int64 ids are checked to fit when constant)."""
    return ctx.v(index, DType.int32)


def embedding(ctx: Lower, weight: Any, indices: Any, *args: Any, **kwargs: Any) -> Value:
    """``embedding``: ``gather`` rows of the table (padding_idx only matters for training)."""
    return ctx.op("gather", x=ctx.v(weight), indices=_indices(ctx, indices), axis=0)


def index_select(ctx: Lower, x: Any, dim: int, index: Any) -> Value:
    """MIL ``gather`` along ``dim``."""
    value = ctx.v(x)
    d = axis(dim, len(ctx.static(value.shape)))
    return ctx.op("gather", x=value, indices=_indices(ctx, index), axis=d)


def index(ctx: Lower, x: Any, indices: Any) -> Value:
    """``x[..., idx, ...]`` with one index tensor: ``gather``; advanced indexing otherwise fails."""
    given = [(i, ix) for i, ix in enumerate(indices) if ix is not None]
    if len(given) != 1:
        raise ctx.fail("indexing with several index tensors is not lowered")
    d, ix = given[0]
    if ctx.dtype_of(ix) is DType.bool:
        raise ctx.fail("boolean-mask indexing has a data-dependent shape and is not lowered")
    return ctx.op("gather", x=ctx.v(x), indices=_indices(ctx, ix), axis=d)


def flip(ctx: Lower, x: Any, dims: Any) -> Value:
    """MIL ``reverse``."""
    value = ctx.v(x)
    rank = len(ctx.static(value.shape))
    return ctx.op("reverse", x=value, axes=[axis(int(d), rank) for d in dims])
