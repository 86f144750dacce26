"""Lowerings of normalisations, softmax and reductions."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch

from anekit.frontends.torch.lowerings.common import axes, axis, float_operand, reshape
from anekit.mil import Value

if TYPE_CHECKING:
    from anekit.frontends.torch.lower import Lower


def _const_or_none(ctx: Lower, x: Any, what: str) -> Any:
    if x is not None and not isinstance(x, torch.Tensor):
        raise ctx.fail(f"{what} must be a constant (a parameter or buffer)")
    return None if x is None else ctx.v(x, ctx.out_dtype())


def layer_norm(
    ctx: Lower,
    x: Any,
    normalized_shape: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    cudnn_enable: bool = True,
) -> Value:
    """MIL ``layer_norm`` over the last ``len(normalized_shape)`` axes."""
    value = float_operand(ctx, x)
    rank = len(ctx.static(value.shape))
    count = len(normalized_shape)
    return ctx.op(
        "layer_norm",
        x=value,
        axes=list(range(rank - count, rank)),
        gamma=_const_or_none(ctx, weight, "the layer norm weight"),
        beta=_const_or_none(ctx, bias, "the layer norm bias"),
        epsilon=float(eps),
    )


def batch_norm_eval(
    ctx: Lower,
    x: Any,
    weight: Any,
    bias: Any,
    running_mean: Any,
    running_var: Any,
    momentum: float,
    eps: float,
) -> tuple[Any, ...]:
    """``_native_batch_norm_legit_no_training``: MIL ``batch_norm`` with the running stats.

    The saved mean and inverse std PyTorch also returns are empty at inference.
    """
    out = ctx.op(
        "batch_norm",
        x=float_operand(ctx, x),
        mean=_const_or_none(ctx, running_mean, "running_mean"),
        variance=_const_or_none(ctx, running_var, "running_var"),
        gamma=_const_or_none(ctx, weight, "the batch norm weight"),
        beta=_const_or_none(ctx, bias, "the batch norm bias"),
        epsilon=float(eps),
    )
    empty = torch.empty(0)
    return out, empty, empty


def batch_norm(
    ctx: Lower,
    x: Any,
    weight: Any,
    bias: Any,
    running_mean: Any,
    running_var: Any,
    training: bool,
    momentum: float,
    eps: float,
    cudnn_enabled: bool = True,
) -> Value:
    """``batch_norm`` in eval mode: MIL ``batch_norm`` with the running stats."""
    if training:
        raise ctx.fail("batch norm in training mode (batch statistics) is not lowered")
    return batch_norm_eval(ctx, x, weight, bias, running_mean, running_var, momentum, eps)[0]


def rms_norm(
    ctx: Lower, x: Any, normalized_shape: Any, weight: Any = None, eps: float | None = None
) -> Value:
    """``x * pow(mean(x^2) + eps, -0.5) * weight`` (eps None: the dtype's machine epsilon)."""
    value = float_operand(ctx, x)
    rank = len(ctx.static(value.shape))
    reduce = list(range(rank - len(normalized_shape), rank))
    if eps is None:
        eps = float(torch.finfo(ctx.out.dtype).eps)
    square = ctx.op("mul", "sq", x=value, y=value)
    mean = ctx.op("reduce_mean", "mean", x=square, axes=reduce, keep_dims=True)
    shifted = ctx.op("add", "eps", x=mean, y=float(eps))
    scale = ctx.op("pow", "rsqrt", x=shifted, y=-0.5)
    normed = ctx.op("mul", "normed" if weight is not None else "", x=value, y=scale)
    if weight is None:
        return normed
    return ctx.op("mul", x=normed, y=ctx.v(weight, value.dtype))


def group_norm(
    ctx: Lower,
    x: Any,
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    cudnn_enabled: bool = True,
) -> Value:
    """MIL ``layer_norm`` per group, then the per-channel affine (as ``native_group_norm``)."""
    return _group_norm(ctx, x, weight, bias, int(num_groups), float(eps))[0]


def native_group_norm(
    ctx: Lower,
    x: Any,
    weight: Any,
    bias: Any,
    n: int,
    c: int,
    hxw: int,
    group: int,
    eps: float,
) -> tuple[Value, Value, Value]:
    """MIL ``layer_norm`` over each group's channels and positions, then the per-channel affine.

    Also the group means and inverse standard deviations ``[N, G]`` PyTorch returns (dropped
    as dead code when nothing reads them).
    """
    return _group_norm(ctx, x, weight, bias, int(group), float(eps))


def _group_norm(
    ctx: Lower, x: Any, weight: Any, bias: Any, groups: int, eps: float
) -> tuple[Value, Value, Value]:
    value = float_operand(ctx, x)
    shape = ctx.static(value.shape)
    n, c = shape[0], shape[1]  # torch.export has checked that the groups divide c
    grouped = reshape(ctx, value, (n, groups, value.type.numel // (n * groups)), "grouped")
    normed = ctx.op("layer_norm", "normed", x=grouped, axes=[2], epsilon=eps)
    out = reshape(ctx, normed, shape, "ungrouped")
    per_channel = (c, *([1] * (len(shape) - 2)))
    if weight is not None:
        w = _const_or_none(ctx, weight, "the group norm weight")
        out = ctx.op("mul", "scaled", x=out, y=reshape(ctx, w, per_channel, "weight"))
    if bias is not None:
        b = _const_or_none(ctx, bias, "the group norm bias")
        out = ctx.op("add", "shifted", x=out, y=reshape(ctx, b, per_channel, "bias"))
    mean = ctx.op("reduce_mean", "mean", x=grouped, axes=[2], keep_dims=True)
    centered = ctx.op("sub", "centered", x=grouped, y=mean)
    square = ctx.op("mul", "square", x=centered, y=centered)
    variance = ctx.op("reduce_mean", "variance", x=square, axes=[2], keep_dims=False)
    rstd = ctx.op("pow", "rstd", x=ctx.op("add", "eps", x=variance, y=eps), y=-0.5)
    return out, reshape(ctx, mean, (n, groups), "mean_ng"), rstd


def softmax(ctx: Lower, x: Any, dim: int, dtype_or_half: Any = None) -> Value:
    """``softmax.int`` and ``_softmax``: MIL ``softmax`` along ``dim``."""
    value = float_operand(ctx, x)
    out = ctx.op("softmax", x=value, axis=axis(dim, len(ctx.static(value.shape))))
    return ctx.v(out, ctx.out_dtype())


@functools.cache
def reduction(op: str, needs_float: bool = False) -> Any:
    """``mean``/``sum``/``amax``/``amin`` over dims (none given: every axis)."""

    def lower(ctx: Lower, x: Any, dims: Any = None, keepdim: bool = False, **kwargs: Any) -> Value:
        value = float_operand(ctx, x) if needs_float else ctx.v(x, ctx.out_dtype())
        rank = len(ctx.static(value.shape))
        if rank == 0:
            return value
        out = ctx.op(op, x=value, axes=axes(dims, rank), keep_dims=bool(keepdim))
        return ctx.v(out, ctx.out_dtype())

    lower.__name__ = op
    lower.__qualname__ = f'reduction("{op}")'
    lower.__doc__ = f"MIL ``{op}`` over dims (none given: every axis)."
    return lower


def log_softmax(ctx: Lower, x: Any, dim: int, dtype_or_half: Any = None) -> Value:
    """``x - reduce_log_sum_exp(x)`` along ``dim`` (stable, unlike ``log(softmax(x))``)."""
    value = float_operand(ctx, x)
    d = axis(dim, len(ctx.static(value.shape)))
    total = ctx.op("reduce_log_sum_exp", "lse", x=value, axes=[d], keep_dims=True)
    return ctx.v(ctx.op("sub", x=value, y=total), ctx.out_dtype())


def var(
    ctx: Lower, x: Any, dims: Any = None, *, correction: Any = None, keepdim: bool = False
) -> Value:
    """``mean((x - mean(x))^2) * n / (n - correction)`` over dims (correction None: 1)."""
    value = float_operand(ctx, x)
    shape = ctx.static(value.shape)
    reduce = axes(dims, len(shape))
    n = 1
    for a in reduce:
        n *= shape[a]
    c = 1 if correction is None else float(correction)
    factor = n / (n - c) if n > c else float("inf")  # PyTorch: inf (or NaN) for n <= correction
    mean = ctx.op("reduce_mean", "mean", x=value, axes=reduce, keep_dims=True)
    centered = ctx.op("sub", "centered", x=value, y=mean)
    square = ctx.op("mul", "square", x=centered, y=centered)
    out = ctx.op("reduce_mean", "msq", x=square, axes=reduce, keep_dims=bool(keepdim))
    return ctx.op("mul", x=out, y=ctx.v(factor, value.dtype))
