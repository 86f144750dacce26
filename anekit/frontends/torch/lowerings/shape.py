"""Lowerings of ops that move data: views, permutes, slices, concatenation, splits, gathers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

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
    """``x[i, j, ...]`` with index tensors (broadcast together): the indexed axes are merged
    into one and read by one ``gather`` of the linearised index. A boolean mask known at
    export (a buffer, or computed from constants) is its ``nonzero`` positions, as PyTorch
    reads it, and the count export left symbolic becomes static; a mask computed from the
    inputs fails (the result's shape would depend on the data)."""
    value = ctx.v(x)
    shape = ctx.static(value.shape)
    if any(ix is not None and ctx.dtype_of(ix) is DType.bool for ix in indices):
        indices = _mask_positions(ctx, shape, list(indices))
    given = [(d, ix) for d, ix in enumerate(indices) if ix is not None]
    dims = [d for d, _ in given]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if not adjacent:  # PyTorch puts the broadcast index dims first: move the axes there
        rest = [d for d in range(len(shape)) if d not in dims]
        value = ctx.op("transpose", "front", x=value, perm=dims + rest)
        dims, shape = list(range(len(dims))), tuple(shape[d] for d in dims + rest)
    first = dims[0]
    sizes = [shape[d] for d in dims]
    merged = shape[:first] + (int(np.prod(sizes)),) + shape[first + len(dims) :]
    if _reads_in_order([ix for _, ix in given], sizes):  # HF masks' arange grids: a reshape
        return reshape(ctx, value, ctx.out_shape(), "grid")
    flat = _linear_index(ctx, [ix for _, ix in given], sizes)
    value = reshape(ctx, value, merged, "merge")
    if value.dtype is DType.bool:  # gather reads numbers: the mask goes through int32
        value = ctx.cast(value, DType.int32)
        return ctx.cast(reshape(ctx, ctx.op("gather", x=value, indices=flat, axis=first),
                                ctx.out_shape(), "out"), DType.bool)  # fmt: skip
    out = ctx.op("gather", x=value, indices=flat, axis=first)
    return reshape(ctx, out, ctx.out_shape(), "out")


def _mask_positions(ctx: Lower, shape: tuple[int, ...], indices: list[Any]) -> list[Any]:
    """``indices`` with each constant boolean mask replaced by its ``nonzero`` positions (a
    k-dim mask indexes k axes: k index tensors); binds the result's symbolic size."""
    out: list[Any] = []
    for ix in indices:
        if ix is None or ctx.dtype_of(ix) is not DType.bool:
            out.append(ix)
        elif isinstance(ix, torch.Tensor):
            out.extend(ix.nonzero(as_tuple=True))
        else:
            raise ctx.fail(
                "boolean-mask indexing (x[mask]) with a mask computed from the inputs: the "
                "result's shape depends on the data, and the ANE compiles static shapes only. "
                "Keep the shape with torch.where(mask, x, fill) or x.masked_fill(~mask, fill), "
                "or make the mask a constant (a buffer) so the selection is known at export"
            )
    meta = torch.empty(shape, device="meta")
    picks = tuple(
        slice(None)
        if ix is None
        else torch.empty(
            ctx.shape_of(ix) if isinstance(ix, Value) else ix.shape, dtype=torch.long, device="meta"
        )  # fmt: skip
        for ix in out
    )
    ctx.bind(ctx.out.shape, meta[picks].shape)
    return out


def _reads_in_order(indices: list[Any], sizes: list[int]) -> bool:
    """Whether constant index tensors read every element of the indexed axes once, in order
    (``x[arange(B)[:, None], arange(K)]``): then indexing only reshapes."""
    if not all(isinstance(ix, torch.Tensor) for ix in indices):
        return False
    flat = _flat_index(indices, sizes)
    total = int(np.prod(sizes))
    return flat.numel() == total and torch.equal(flat.reshape(-1), torch.arange(total))


def _flat_index(indices: list[torch.Tensor], sizes: list[int]) -> torch.Tensor:
    strides = [int(np.prod(sizes[k + 1 :])) for k in range(len(sizes))]
    return sum((ix.to(torch.int64) % n) * s for ix, n, s in zip(indices, sizes, strides))


def _linear_index(ctx: Lower, indices: list[Any], sizes: list[int]) -> Value:
    """``sum(i_k * stride_k)`` of index tensors over axes of ``sizes`` (negatives wrapped):
    computed here when every index is constant, else by MIL integer ops."""
    if all(isinstance(ix, torch.Tensor) for ix in indices):
        return ctx.v(_flat_index(indices, sizes), DType.int32)
    strides = [int(np.prod(sizes[k + 1 :])) for k in range(len(sizes))]
    total: Value | None = None
    for k, (ix, n, s) in enumerate(zip(indices, sizes, strides)):
        value = ctx.v(ix, DType.int32)
        wrapped = ctx.op("mod", f"wrap{k}", x=value, y=np.int32(n))  # Python-style: >= 0
        term = wrapped if s == 1 else ctx.op("mul", f"stride{k}", x=wrapped, y=np.int32(s))
        total = term if total is None else ctx.op("add", f"sum{k}", x=total, y=term)
    return total


def gather(ctx: Lower, x: Any, dim: int, index: Any, sparse_grad: bool = False) -> Value:
    """``torch.gather``: MIL ``gather_along_axis`` (negative indices wrapped)."""
    value = ctx.v(x)
    shape = ctx.static(value.shape)
    d = axis(dim, len(shape))
    if isinstance(index, torch.Tensor):
        indices = ctx.v(index.to(torch.int64) % shape[d], DType.int32)
    else:
        indices = ctx.op("mod", "wrap", x=ctx.v(index, DType.int32), y=np.int32(shape[d]))
    if value.dtype is DType.bool:
        out = ctx.op("gather_along_axis", x=ctx.cast(value, DType.int32), indices=indices, axis=d)
        return ctx.cast(out, DType.bool)
    return ctx.op("gather_along_axis", x=value, indices=indices, axis=d)


def flip(ctx: Lower, x: Any, dims: Any) -> Value:
    """MIL ``reverse``."""
    value = ctx.v(x)
    rank = len(ctx.static(value.shape))
    return ctx.op("reverse", x=value, axes=[axis(int(d), rank) for d in dims])
