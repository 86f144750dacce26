"""Lowerings of ONNX's matrix products, convolutions, pooling, normalisations and reductions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.frontends.onnx.ops.shape import reshape_to
from anekit.mil import Value

if TYPE_CHECKING:
    from anekit.frontends.onnx.lower import Lower


def _constant(ctx: Lower, x: Any, what: str) -> np.ndarray:
    if isinstance(x, Value):
        raise ctx.fail(f"{what} must be a constant (an initializer), found a run-time value")
    return np.asarray(x)


def _linear(ctx: Lower, x: Value, weight: np.ndarray, bias: np.ndarray | None) -> Value:
    """``x @ weight.T + bias`` with MIL ``linear`` (rank 1-3; higher ranks flattened first)."""
    shape = ctx.shape_of(x)
    flat = x
    if len(shape) > 3:
        flat = reshape_to(ctx, x, (int(np.prod(shape[:-1])), shape[-1]), "flat")
    b = None if bias is None else ctx.v(bias.astype(weight.dtype), x.dtype)
    out = ctx.op("linear", x=flat, weight=ctx.v(weight, x.dtype), bias=b)
    return reshape_to(ctx, out, (*shape[:-1], weight.shape[0]), "unflat")


def matmul(ctx: Lower, a: Any, b: Any) -> Value:
    """``linear`` when ``b`` is a constant matrix and ``a`` a value, else MIL ``matmul``."""
    if isinstance(a, Value) and not isinstance(b, Value) and np.ndim(b) == 2:
        return _linear(ctx, a, np.ascontiguousarray(np.asarray(b).T), None)
    dtype = a.dtype if isinstance(a, Value) else b.dtype
    return ctx.op("matmul", x=ctx.v(a, dtype), y=ctx.v(b, dtype))


def gemm(
    ctx: Lower,
    a: Any,
    b: Any,
    c: Any = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,  # noqa: N803 (ONNX's attribute names)
    transB: int = 0,  # noqa: N803
) -> Value:
    """``alpha * A' @ B' + beta * C``: ``linear`` with B (scaled) as the weight and C the bias."""
    value = ctx.v(a)
    if transA:
        value = ctx.op("transpose", "a_t", x=value, perm=[1, 0])
    if isinstance(b, Value):
        out = ctx.op("matmul", "mm", x=value, y=b, transpose_y=bool(transB))
        if alpha != 1:
            out = ctx.op("mul", "alpha", x=out, y=ctx.v(np.float32(alpha), out.dtype))
        weight_out = out
    else:
        weight = np.asarray(b) if transB else np.asarray(b).T
        weight = np.ascontiguousarray(
            weight * np.asarray(alpha, weight.dtype) if alpha != 1 else weight
        )
        n = weight.shape[0]
        if c is not None and not isinstance(c, Value) and np.size(c) in (1, n):
            bias = np.broadcast_to(np.asarray(c).reshape(-1) * beta, (n,)).copy()
            return _linear(ctx, value, weight, bias)
        weight_out = _linear(ctx, value, weight, None)
    if c is None or beta == 0:
        return weight_out
    scaled = c if beta == 1 else (ctx.op("mul", "beta", x=ctx.v(c), y=ctx.v(np.float32(beta))))
    return ctx.op("add", x=weight_out, y=ctx.v(scaled, weight_out.dtype))


def _spatial(
    ctx: Lower, rank: int, kernel: list[int], pads: list[int] | None, auto_pad: str
) -> dict[str, Any]:
    """MIL ``pad_type``/``pad`` from ONNX's ``auto_pad``/``pads`` (begin..., end...)."""
    kinds = {"SAME_UPPER": "same", "SAME_LOWER": "same_lower", "VALID": "valid"}
    if auto_pad in kinds:
        return {"pad_type": kinds[auto_pad]}
    if auto_pad != "NOTSET":
        raise ctx.fail(f"auto_pad={auto_pad!r} is not an ONNX value")
    pads = list(pads or [0] * (2 * rank))
    return {
        "pad_type": "custom",
        "pad": [p for i in range(rank) for p in (pads[i], pads[i + rank])],
    }


def conv(
    ctx: Lower,
    x: Any,
    w: Any,
    b: Any = None,
    auto_pad: str = "NOTSET",
    dilations: list[int] | None = None,
    group: int = 1,
    kernel_shape: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Value:
    """MIL ``conv`` with a constant weight; ONNX's pads become MIL's (before, after) pairs."""
    weight = _constant(ctx, w, "the convolution weight")
    value = ctx.v(x)
    rank = weight.ndim - 2
    return ctx.op(
        "conv",
        x=value,
        weight=ctx.v(weight, value.dtype),
        bias=None if b is None else ctx.v(b, value.dtype),
        strides=list(strides or [1] * rank),
        dilations=list(dilations or [1] * rank),
        groups=int(group),
        **_spatial(ctx, rank, list(weight.shape[2:]), pads, auto_pad),
    )


def _pool_params(ctx: Lower, kernel_shape: list[int], strides: Any, pads: Any, auto_pad: str,
                 ceil_mode: int, dilations: Any) -> dict[str, Any]:  # fmt: skip
    if any(d != 1 for d in dilations or []):
        raise ctx.fail(f"pooling with dilations {dilations} is not lowered (only 1)")
    rank = len(kernel_shape)
    return {
        "kernel_sizes": list(kernel_shape),
        "strides": list(strides or [1] * rank),
        "ceil_mode": bool(ceil_mode),
        **_spatial(ctx, rank, kernel_shape, pads, auto_pad),
    }


def max_pool(
    ctx: Lower,
    x: Any,
    kernel_shape: list[int],
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    storage_order: int = 0,
    strides: list[int] | None = None,
) -> Value:
    """MIL ``max_pool`` (dilation 1; the Indices output is refused)."""
    params = _pool_params(ctx, kernel_shape, strides, pads, auto_pad, ceil_mode, dilations)
    return ctx.op("max_pool", x=ctx.v(x), **params)


def average_pool(
    ctx: Lower,
    x: Any,
    kernel_shape: list[int],
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: list[int] | None = None,
    pads: list[int] | None = None,
    strides: list[int] | None = None,
) -> Value:
    """MIL ``avg_pool``; ``count_include_pad=0`` (ONNX's default) excludes padding."""
    params = _pool_params(ctx, kernel_shape, strides, pads, auto_pad, ceil_mode, dilations)
    return ctx.op(
        "avg_pool", x=ctx.v(x), exclude_padding_from_average=not count_include_pad, **params
    )


def global_pool(op: str) -> Callable[..., Value]:
    """``GlobalAveragePool``/``GlobalMaxPool``: MIL ``op`` over the spatial axes, kept."""

    def lower(ctx: Lower, x: Any) -> Value:
        value = ctx.v(x)
        axes = list(range(2, len(value.shape)))
        return ctx.op(op, x=value, axes=axes, keep_dims=True)

    lower.__doc__ = f"MIL ``{op}`` over the spatial axes (kept)."
    return lower


def batch_norm(
    ctx: Lower,
    x: Any,
    scale: Any,
    bias: Any,
    mean: Any,
    var: Any,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    training_mode: int = 0,
) -> Value:
    """MIL ``batch_norm`` with the running statistics (inference only)."""
    if training_mode:
        raise ctx.fail("BatchNormalization with training_mode=1 is not lowered")
    value = ctx.v(x)
    stats = {
        k: ctx.v(_constant(ctx, a, f"BatchNormalization's {k}"), value.dtype)
        for k, a in (("gamma", scale), ("beta", bias), ("mean", mean), ("variance", var))
    }
    return ctx.op("batch_norm", x=value, epsilon=np.float32(epsilon), **stats)


def instance_norm(ctx: Lower, x: Any, scale: Any, bias: Any, epsilon: float = 1e-5) -> Value:
    """MIL ``instance_norm``."""
    value = ctx.v(x)
    return ctx.op(
        "instance_norm", x=value, gamma=ctx.v(_constant(ctx, scale, "scale"), value.dtype),
        beta=ctx.v(_constant(ctx, bias, "bias"), value.dtype), epsilon=np.float32(epsilon),
    )  # fmt: skip


def layer_norm(
    ctx: Lower,
    x: Any,
    scale: Any,
    bias: Any = None,
    axis: int = -1,
    epsilon: float = 1e-5,
    stash_type: int = 1,
) -> Value:
    """MIL ``layer_norm`` over axes ``axis..`` with Scale and B broadcast to those axes."""
    value = ctx.v(x)
    shape = ctx.shape_of(value)
    first = axis % len(shape)
    normalized = shape[first:]
    gamma = np.broadcast_to(_constant(ctx, scale, "LayerNormalization's Scale"), normalized)
    params: dict[str, Any] = {"gamma": ctx.v(np.ascontiguousarray(gamma), value.dtype)}
    if bias is not None:
        beta = np.broadcast_to(_constant(ctx, bias, "LayerNormalization's B"), normalized)
        params["beta"] = ctx.v(np.ascontiguousarray(beta), value.dtype)
    axes = list(range(first, len(shape)))
    return ctx.op("layer_norm", x=value, axes=axes, epsilon=np.float32(epsilon), **params)


def softmax(ctx: Lower, x: Any, axis: int = -1) -> Value:
    """MIL ``softmax`` along ``axis`` (opset 13's semantics: one axis)."""
    return ctx.op("softmax", x=ctx.v(x), axis=int(axis))


def log_softmax(ctx: Lower, x: Any, axis: int = -1) -> Value:
    """``x - reduce_log_sum_exp(x)`` along ``axis`` (stable)."""
    value = ctx.v(x)
    lse = ctx.op("reduce_log_sum_exp", "lse", x=value, axes=[int(axis)], keep_dims=True)
    return ctx.op("sub", x=value, y=lse)


def reduction(op: str) -> Callable[..., Value]:
    """``Reduce*``: MIL ``op`` over the axes given as an input (opset 18) or an attribute."""

    def lower(
        ctx: Lower,
        x: Any,
        axes_input: Any = None,
        *,
        axes: list[int] | None = None,
        keepdims: int = 1,
        noop_with_empty_axes: int = 0,
    ) -> Value:
        value = ctx.v(x)
        chosen = axes if axes_input is None else ctx.const_ints(axes_input, "axes")
        if not chosen:
            if noop_with_empty_axes:
                return ctx.op("identity", x=value)
            chosen = list(range(len(value.shape)))
        return ctx.op(op, x=value, axes=[int(a) for a in chosen], keep_dims=bool(keepdims))

    lower.__doc__ = f"MIL ``{op}`` (axes from the input or the attribute; none: every axis)."
    return lower
