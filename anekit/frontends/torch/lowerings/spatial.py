"""Lowerings of resampling and padding: ``interpolate``/``upsample`` (nearest, bilinear,
bicubic, and area: adaptive average pooling), ``pad`` (constant, reflect, replicate,
circular) and ``roll``.

Resampling takes MIL's ``upsample_*`` op where it samples exactly where PyTorch does
(integer nearest scales; bilinear whose scale is the size ratio); otherwise the same
sampling is written as constant interpolation matrices applied along each axis by
``matmul``, computed here from PyTorch's own source-index formulas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from anekit.frontends.torch.lowerings.common import axis, float_operand
from anekit.mil import Value

if TYPE_CHECKING:
    from anekit.frontends.torch.lower import Lower


def _scales(scale_factors: Sequence[float] | None, count: int) -> list[float | None]:
    if scale_factors is None:
        return [None] * count
    return [float(s) for s in scale_factors]


def _ratio(size: int, out: int, scale: float | None) -> float:
    """PyTorch's source step: 1/scale_factor when one was given, else in/out."""
    return 1.0 / scale if scale is not None and scale > 0 else size / out


def nearest_sources(size: int, out: int, scale: float | None) -> np.ndarray:
    """Source index of each output position, as PyTorch's ``nearest`` (floor(i * step))."""
    step = np.float32(_ratio(size, out, scale))
    src = np.floor(np.arange(out, dtype=np.float32) * step).astype(np.int64)
    return np.minimum(src, size - 1)


def bilinear_weights(size: int, out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """The [out, size] matrix of PyTorch's bilinear (linear along one axis) weights."""
    i = np.arange(out, dtype=np.float64)
    if align_corners:
        src = i * ((size - 1) / (out - 1)) if out > 1 else np.zeros(out)
    else:
        src = np.maximum((i + 0.5) * _ratio(size, out, scale) - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), size - 1)
    hi = np.minimum(lo + 1, size - 1)
    frac = src - lo
    weights = np.zeros((out, size), np.float64)
    np.add.at(weights, (np.arange(out), lo), 1 - frac)
    np.add.at(weights, (np.arange(out), hi), frac)
    return weights.astype(np.float32)


def _cubic(x: np.ndarray, a: float = -0.75) -> np.ndarray:
    """PyTorch's cubic convolution kernel (A = -0.75) at distances ``x``."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def bicubic_weights(size: int, out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """The [out, size] matrix of PyTorch's bicubic weights along one axis: four taps around
    the source position (not clamped below 0, unlike bilinear), indices clamped to the
    edges, as ``upsample_bicubic2d`` reads them."""
    i = np.arange(out, dtype=np.float64)
    if align_corners:
        src = i * ((size - 1) / (out - 1)) if out > 1 else np.zeros(out)
    else:
        src = (i + 0.5) * _ratio(size, out, scale) - 0.5
    base = np.floor(src)
    t = src - base
    weights = np.zeros((out, size), np.float64)
    for tap in range(-1, 3):
        index = np.clip(base.astype(np.int64) + tap, 0, size - 1)
        np.add.at(weights, (np.arange(out), index), _cubic(t - tap))
    return weights.astype(np.float32)


def area_weights(size: int, out: int) -> np.ndarray:
    """The [out, size] matrix of adaptive average pooling along one axis: output ``i`` is the
    mean of inputs ``floor(i * size / out)`` to ``ceil((i + 1) * size / out)``."""
    weights = np.zeros((out, size), np.float32)
    for i in range(out):
        start, stop = (i * size) // out, -(-(i + 1) * size // out)
        weights[i, start:stop] = 1.0 / (stop - start)
    return weights


def _along_axes(ctx: Lower, x: Value, matrices: list[np.ndarray]) -> Value:
    """Apply ``matrices[k]`` ([out, in]) along the last ``len(matrices)`` axes by matmul."""
    rank = len(ctx.static(x.shape))
    count = len(matrices)
    for k, m in enumerate(matrices):
        ax = rank - count + k
        perm = list(range(rank))
        perm[ax], perm[-1] = perm[-1], perm[ax]
        moved = x if ax == rank - 1 else ctx.op("transpose", f"to_last{k}", x=x, perm=perm)
        weight = _const(ctx, np.ascontiguousarray(m.T), x)
        moved = ctx.op("matmul", f"resample{k}", x=moved, y=weight)
        x = moved if ax == rank - 1 else ctx.op("transpose", f"back{k}", x=moved, perm=perm)
    return x


def _const(ctx: Lower, arr: np.ndarray, like: Value) -> Value:
    return ctx.v(torch.from_numpy(np.asarray(arr, np.float32)), like.dtype)


def upsample_nearest(
    ctx: Lower, x: Any, output_size: Any = None, scale_factors: Any = None
) -> Value:
    """``upsample_nearest{1,2}d`` (``interpolate(mode="nearest")``): MIL
    ``upsample_nearest_neighbor`` for integer scales, else a constant one-hot resampling."""
    value = float_operand(ctx, x)
    shape, out = ctx.static(value.shape), ctx.out_shape()
    count = len(out) - 2
    sizes, outs = shape[-count:], out[-count:]
    scales = _scales(scale_factors, count)
    if (
        count == 2
        and all(o % s == 0 for s, o in zip(sizes, outs))
        and all(sc is None or sc == o // s for sc, s, o in zip(scales, sizes, outs))
    ):
        return ctx.op(
            "upsample_nearest_neighbor", x=value,
            scale_factor_height=np.int32(outs[0] // sizes[0]),
            scale_factor_width=np.int32(outs[1] // sizes[1]),
        )  # fmt: skip
    matrices = []
    for size, o, sc in zip(sizes, outs, scales):
        m = np.zeros((o, size), np.float32)
        m[np.arange(o), nearest_sources(size, o, sc)] = 1.0
        matrices.append(m)
    return _along_axes(ctx, value, matrices)


def upsample_bilinear(
    ctx: Lower, x: Any, output_size: Any, align_corners: bool, scale_factors: Any = None
) -> Value:
    """``upsample_bilinear2d`` (``interpolate(mode="bilinear")``, ``align_corners`` either
    way): MIL ``upsample_bilinear`` where it samples as PyTorch does, else constant
    interpolation matrices along H and W."""
    value = float_operand(ctx, x)
    shape, out = ctx.static(value.shape), ctx.out_shape()
    sizes, outs = shape[-2:], out[-2:]
    scales = _scales(scale_factors, 2)
    ratios = [np.float32(o / s) for s, o in zip(sizes, outs)]
    exact = all(int(np.floor(r * np.float32(s))) == o for r, s, o in zip(ratios, sizes, outs))
    same_grid = align_corners or all(
        sc is None or abs(1.0 / sc - s / o) < 1e-12 for sc, s, o in zip(scales, sizes, outs)
    )
    if exact and same_grid:
        return ctx.op(
            "upsample_bilinear", x=value, scale_factor_height=ratios[0],
            scale_factor_width=ratios[1], align_corners=bool(align_corners),
            half_pixel_centers=not align_corners,
        )  # fmt: skip
    matrices = [
        bilinear_weights(s, o, bool(align_corners), sc) for s, o, sc in zip(sizes, outs, scales)
    ]
    return _along_axes(ctx, value, matrices)


def upsample_bicubic(
    ctx: Lower, x: Any, output_size: Any, align_corners: bool, scale_factors: Any = None
) -> Value:
    """Bicubic ``interpolate``: constant interpolation matrices along H and W (no MIL op).

    ``upsample_bicubic2d``: ``align_corners`` either way, scales or sizes; PyTorch's
    A = -0.75 kernel, edge indices clamped."""
    value = float_operand(ctx, x)
    shape, out = ctx.static(value.shape), ctx.out_shape()
    scales = _scales(scale_factors, 2)
    matrices = [
        bicubic_weights(s, o, bool(align_corners), sc)
        for s, o, sc in zip(shape[-2:], out[-2:], scales)
    ]
    return _along_axes(ctx, value, matrices)


def adaptive_avg_pool(ctx: Lower, x: Any, output_size: Any) -> Value:
    """Area ``interpolate``: ``reduce_mean``, ``avg_pool`` or constant averaging matrices.

    ``adaptive_avg_pool{1,2}d``: a mean for a global pool, ``avg_pool`` when the output
    size divides the input's, else constant averaging matrices along each axis (PyTorch's
    uneven, overlapping windows)."""
    value = float_operand(ctx, x)
    shape, out = ctx.static(value.shape), ctx.out_shape()
    count = 2 if "2d" in str(ctx.node.target) else 1
    sizes, outs = shape[-count:], out[-count:]
    rank = len(shape)
    if all(o == 1 for o in outs):
        axes = list(range(rank - count, rank))
        return ctx.op("reduce_mean", x=value, axes=axes, keep_dims=True)
    if count == 2 and all(s % o == 0 for s, o in zip(sizes, outs)):
        k = [s // o for s, o in zip(sizes, outs)]
        return ctx.op("avg_pool", x=value, kernel_sizes=k, strides=k, pad_type="valid")
    return _along_axes(ctx, value, [area_weights(s, o) for s, o in zip(sizes, outs)])


def pad(ctx: Lower, x: Any, pad: Any, mode: str = "constant", value: float | None = None) -> Value:
    """``pad``: MIL ``pad`` for constant, reflect and replicate; circular wraps by ``concat``."""
    tensor = ctx.v(x, ctx.out_dtype())
    rank = len(ctx.static(tensor.shape))
    widths = [[0, 0] for _ in range(rank)]
    for i in range(len(pad) // 2):
        widths[rank - 1 - i] = [int(pad[2 * i]), int(pad[2 * i + 1])]
    if any(w < 0 for pair in widths for w in pair):
        raise ctx.fail(f"negative padding {list(pad)} (cropping) is not lowered")
    if mode == "circular":
        return _circular(ctx, tensor, widths)
    if mode not in ("constant", "reflect", "replicate"):
        raise ctx.fail(f"pad mode {mode!r} is not lowered (constant, reflect, replicate, circular)")
    flat = np.array(widths, dtype=np.int32).ravel()
    fill = 0.0 if value is None else float(value)
    return ctx.op("pad", x=tensor, pad=flat, mode=mode, constant_val=fill)


def pad_constant(ctx: Lower, x: Any, pad_widths: Any, value: float = 0.0) -> Value:
    """``constant_pad_nd``: PyTorch lists (before, after) from the last dim backwards."""
    return pad(ctx, x, pad_widths, "constant", value)


def _circular(ctx: Lower, x: Value, widths: list[list[int]]) -> Value:
    for d, (before, after) in enumerate(widths):
        if before or after:
            x = _wrap(ctx, x, d, before, after, f"circ{d}")
    return x


def _wrap(ctx: Lower, x: Value, d: int, before: int, after: int, tag: str) -> Value:
    """``x`` along axis ``d`` with its last ``before`` and first ``after`` elements wrapped
    around (circular padding; ``roll`` is the same with the middle cut)."""
    shape = ctx.static(x.shape)
    if before > shape[d] or after > shape[d]:
        raise ctx.fail(f"circular padding wider than the axis ({before}, {after} > {shape[d]})")
    parts = []
    if before:
        parts.append(_part(ctx, x, d, shape[d] - before, before, f"{tag}_b"))
    parts.append(x)
    if after:
        parts.append(_part(ctx, x, d, 0, after, f"{tag}_a"))
    return ctx.op("concat", tag, values=parts, axis=d, interleave=False)


def _part(ctx: Lower, x: Value, d: int, start: int, size: int, tag: str) -> Value:
    shape = ctx.static(x.shape)
    begin, sizes = [0] * len(shape), list(shape)
    begin[d], sizes[d] = start, size
    return ctx.op("slice_by_size", tag, x=x, begin=begin, size=sizes)


def roll(ctx: Lower, x: Any, shifts: Any, dims: Any = ()) -> Value:
    """``roll``: per axis, the last ``shift`` elements moved to the front by two slices and a
    ``concat`` (no dims: over the flattened tensor)."""
    value = ctx.v(x)
    shape = ctx.static(value.shape)
    shifts = [int(s) for s in ([shifts] if isinstance(shifts, int) else shifts)]
    dims = [int(d) for d in ([dims] if isinstance(dims, int) else dims)]
    if not dims:
        flat = ctx.op("reshape", "flat", x=value, shape=np.array([-1], np.int32))
        rolled = _roll_axis(ctx, flat, 0, shifts[0], "roll0")
        return ctx.op("reshape", "out", x=rolled, shape=np.array(shape, np.int32))
    for k, (s, d) in enumerate(zip(shifts, dims)):
        value = _roll_axis(ctx, value, axis(d, len(shape)), s, f"roll{k}")
    return value


def _roll_axis(ctx: Lower, x: Value, d: int, shift: int, tag: str) -> Value:
    n = ctx.static(x.shape)[d]
    shift %= n
    if shift == 0:
        return x
    tail = _part(ctx, x, d, n - shift, shift, f"{tag}_tail")
    head = _part(ctx, x, d, 0, n - shift, f"{tag}_head")
    return ctx.op("concat", tag, values=[tail, head], axis=d, interleave=False)
