"""Lowerings of ONNX's data-movement ops: reshapes, transposes, slices, gathers, joins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.mil import DType, Value

if TYPE_CHECKING:
    from anekit.frontends.onnx.lower import Lower


def reshape_to(ctx: Lower, x: Value, shape: Sequence[int], suffix: str = "") -> Value:
    """``x`` reshaped to ``shape`` (``x`` itself when the shape already matches)."""
    shape = [int(d) for d in shape]
    if list(ctx.shape_of(x)) == shape:
        return x
    return ctx.op("reshape", suffix, x=x, shape=np.array(shape, dtype=np.int32))


def onnx_reshape(ctx: Lower, data: Any, shape: Any, allowzero: int = 0) -> Value:
    """``Reshape``: 0 copies the input's dimension (unless ``allowzero``), -1 is inferred."""
    value = ctx.v(data)
    dims = ctx.const_ints(shape, "Reshape's shape")
    source = ctx.shape_of(value)
    if not allowzero:
        dims = [source[i] if d == 0 else d for i, d in enumerate(dims)]
    if dims.count(-1) == 1:
        known = int(np.prod([d for d in dims if d != -1]))
        total = int(np.prod(source))
        if known == 0 or total % known:
            raise ctx.fail(f"cannot reshape {list(source)} to {dims}")
        dims[dims.index(-1)] = total // known
    if int(np.prod(dims)) != int(np.prod(source)) or any(d < 0 for d in dims):
        raise ctx.fail(f"cannot reshape {list(source)} to {dims}")
    return ctx.op("identity", x=value) if list(source) == dims else reshape_to(ctx, value, dims)


def flatten(ctx: Lower, x: Any, axis: int = 1) -> Value:
    """``Flatten``: a 2-D reshape at ``axis``."""
    value = ctx.v(x)
    shape = ctx.shape_of(value)
    axis %= len(shape) + 1
    return reshape_to(ctx, value, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))


def transpose(ctx: Lower, x: Any, perm: list[int] | None = None) -> Value:
    """MIL ``transpose`` (default: reverse the axes)."""
    value = ctx.v(x)
    rank = len(value.shape)
    perm = list(perm) if perm is not None else list(reversed(range(rank)))
    if perm == list(range(rank)):
        return ctx.op("identity", x=value)
    return ctx.op("transpose", x=value, perm=perm)


def _axes(ctx: Lower, axes_input: Any, axes: list[int] | None) -> list[int]:
    return ctx.const_ints(axes_input, "axes") if axes_input is not None else list(axes or [])


def unsqueeze(
    ctx: Lower, x: Any, axes_input: Any = None, *, axes: list[int] | None = None
) -> Value:
    """``Unsqueeze``: a reshape with size-1 axes inserted."""
    value = ctx.v(x)
    shape = list(ctx.shape_of(value))
    chosen = _axes(ctx, axes_input, axes)
    rank = len(shape) + len(chosen)
    for a in sorted(a % rank for a in chosen):
        shape.insert(a, 1)
    return reshape_to(ctx, value, shape)


def squeeze(ctx: Lower, x: Any, axes_input: Any = None, *, axes: list[int] | None = None) -> Value:
    """``Squeeze``: a reshape without the given size-1 axes (none given: every size-1 axis)."""
    value = ctx.v(x)
    shape = ctx.shape_of(value)
    chosen = {a % len(shape) for a in _axes(ctx, axes_input, axes)} or {
        i for i, d in enumerate(shape) if d == 1
    }
    if any(shape[a] != 1 for a in chosen):
        raise ctx.fail(f"Squeeze axes {sorted(chosen)} of shape {list(shape)} are not all 1")
    out = [d for i, d in enumerate(shape) if i not in chosen]
    return reshape_to(ctx, value, out) if out != list(shape) else ctx.op("identity", x=value)


def concat(ctx: Lower, *xs: Any, axis: int) -> Value:
    """MIL ``concat`` (empty constants dropped)."""
    dtype = next(x.dtype for x in xs if isinstance(x, Value))
    values = [ctx.v(x, dtype) for x in xs if isinstance(x, Value) or np.size(x)]
    return ctx.op("concat", values=values, axis=int(axis))


def split(
    ctx: Lower, x: Any, sizes: Any = None, *, axis: int = 0, num_outputs: int | None = None,
    split: list[int] | None = None,
) -> tuple[Value, ...]:  # fmt: skip
    """MIL ``split``: sizes from the input, the attribute (opset 13), or equal parts."""
    value = ctx.v(x)
    dim = ctx.shape_of(value)[axis]
    count = num_outputs or len(ctx.node.output)
    if sizes is not None:
        parts = ctx.const_ints(sizes, "Split's sizes")
    elif split:
        parts = list(split)
    else:
        step = -(-dim // count)  # ONNX: equal parts, the last one smaller
        parts = [min(step, dim - i * step) for i in range(count)]
    if sum(parts) != dim or len(parts) != len(ctx.node.output):
        raise ctx.fail(f"split sizes {parts} do not cut dimension {dim} into {count} parts")
    result = ctx.op("split", x=value, split_sizes=np.array(parts, np.int32), axis=int(axis))
    return result if isinstance(result, tuple) else (result,)


def slice_(
    ctx: Lower, data: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None
) -> Value:
    """``Slice`` with constant bounds: MIL ``slice_by_index`` (Python's clamping rules)."""
    value = ctx.v(data)
    shape = ctx.shape_of(value)
    begin, end = [0] * len(shape), list(shape)
    stride, end_mask = [1] * len(shape), [False] * len(shape)
    starts, ends = ctx.const_ints(starts, "starts"), ctx.const_ints(ends, "ends")
    axes_list = ctx.const_ints(axes, "axes") if axes is not None else list(range(len(starts)))
    steps_list = ctx.const_ints(steps, "steps") if steps is not None else [1] * len(starts)
    for a, s, e, st in zip(axes_list, starts, ends, steps_list):
        a %= len(shape)
        if st == 0:
            raise ctx.fail("Slice with step 0")
        b, e2, _ = slice(s, e, st).indices(shape[a])
        if len(range(b, e2, st)) == 0:
            raise ctx.fail(f"Slice leaves axis {a} empty ({s}:{e}:{st} of {shape[a]})")
        begin[a], end[a], stride[a] = b, e2, st
        end_mask[a] = e2 < 0  # a negative step down to the first element
    return ctx.op(
        "slice_by_index", x=value, begin=np.array(begin, np.int32), end=np.array(end, np.int32),
        stride=np.array(stride, np.int32), end_mask=np.array(end_mask),
    )  # fmt: skip


def gather(ctx: Lower, data: Any, indices: Any, axis: int = 0) -> Value:
    """MIL ``gather``; constant indices that form a run (a scalar index, ``x[:, 0]``) become
    ``slice_by_size`` instead (the one-op sweep found ``gather`` does not compile on the ANE)."""
    table = ctx.v(data)
    shape = ctx.shape_of(table)
    axis %= len(shape)
    if isinstance(indices, Value):
        return ctx.op("gather", x=table, indices=ctx.cast(indices, DType.int32), axis=axis)
    idx = np.asarray(indices).astype(np.int64) % shape[axis]
    out = (*shape[:axis], *idx.shape, *shape[axis + 1 :])
    flat = idx.reshape(-1)
    if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
        begin = [0] * len(shape)
        begin[axis] = int(flat[0])
        size = list(shape)
        size[axis] = int(flat.size)
        taken = ctx.op("slice_by_size", "run", x=table, begin=np.array(begin, np.int32),
                       size=np.array(size, np.int32))  # fmt: skip
    else:
        taken = ctx.op("gather", x=table, indices=ctx.v(flat, DType.int32), axis=axis)
    return reshape_to(ctx, taken, out, "shape")


def gather_elements(ctx: Lower, data: Any, indices: Any, axis: int = 0) -> Value:
    """MIL ``gather_along_axis``."""
    value = ctx.v(data)
    idx = (
        ctx.v(indices, DType.int32)
        if isinstance(indices, Value)
        else ctx.v(np.asarray(indices).astype(np.int64) % ctx.shape_of(value)[axis], DType.int32)
    )
    return ctx.op("gather_along_axis", x=value, indices=idx, axis=int(axis))


def expand(ctx: Lower, x: Any, shape: Any) -> Value:
    """``Expand``: NumPy broadcasting to ``shape``, as a reshape and a MIL ``tile``."""
    value = ctx.v(x)
    source = ctx.shape_of(value)
    target = ctx.const_ints(shape, "Expand's shape")
    out = np.broadcast_shapes(source, tuple(target))
    padded = (1,) * (len(out) - len(source)) + tuple(source)
    value = reshape_to(ctx, value, padded, "rank")
    reps = [o // s for o, s in zip(out, padded)]
    return ctx.op("tile", x=value, reps=reps) if any(r != 1 for r in reps) else value


def tile(ctx: Lower, x: Any, repeats: Any) -> Value:
    """MIL ``tile``."""
    return ctx.op("tile", x=ctx.v(x), reps=ctx.const_ints(repeats, "Tile's repeats"))


def pad(
    ctx: Lower, data: Any, pads: Any, constant_value: Any = None, axes: Any = None,
    mode: str = "constant",
) -> Value:  # fmt: skip
    """MIL ``pad``: ONNX's (begins..., ends...) as (before, after) pairs; constant, reflect, edge."""
    value = ctx.v(data)
    rank = len(value.shape)
    amounts = ctx.const_ints(pads, "Pad's pads")
    chosen = ctx.const_ints(axes, "axes") if axes is not None else list(range(rank))
    full = [0] * (2 * rank)
    for i, a in enumerate(chosen):
        full[2 * (a % rank)] = amounts[i]
        full[2 * (a % rank) + 1] = amounts[i + len(chosen)]
    modes = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}
    if mode not in modes or any(p < 0 for p in full):
        raise ctx.fail(f"Pad mode {mode!r} with pads {amounts} is not lowered")
    fill = 0.0 if constant_value is None else float(np.asarray(constant_value).reshape(-1)[0])
    return ctx.op("pad", x=value, pad=np.array(full, np.int32), mode=modes[mode],
                  constant_val=np.float32(fill))  # fmt: skip
