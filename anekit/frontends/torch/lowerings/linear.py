"""Lowerings of matrix products, convolutions and pooling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from anekit.frontends.torch.lowerings.common import binary, pairs, reshape
from anekit.mil import Value

if TYPE_CHECKING:
    from anekit.frontends.torch.lower import Lower


def linear(ctx: Lower, x: Any, weight: Any, bias: Any = None) -> Value:
    """``x @ weight.T + bias``: MIL ``linear`` for a constant weight, else ``matmul``."""
    dtype = ctx.out_dtype()
    value = ctx.v(x, dtype)
    if not isinstance(weight, torch.Tensor):
        out = ctx.op("matmul", x=value, y=ctx.v(weight, dtype), transpose_y=True)
        return out if bias is None else binary(ctx, "add", out, bias, dtype)
    shape = ctx.static(value.shape)
    flat = value
    if len(shape) > 3:  # MIL linear takes rank 1 to 3
        flat = reshape(ctx, value, (int(np.prod(shape[:-1])), shape[-1]), "flat")
    if bias is not None and not isinstance(bias, torch.Tensor):
        out = ctx.op("linear", x=flat, weight=ctx.v(weight, dtype))
        out = binary(ctx, "add", out, bias, dtype)
    else:
        b = None if bias is None else ctx.v(bias, dtype)
        out = ctx.op("linear", x=flat, weight=ctx.v(weight, dtype), bias=b)
    return reshape(ctx, out, ctx.out_shape(), "unflat")


def matmul(ctx: Lower, a: Any, b: Any) -> Value:
    """``mm``, ``bmm`` and ``matmul``: MIL ``matmul`` (a constant ``b`` stays a const operand)."""
    return binary(ctx, "matmul", a, b, ctx.out_dtype())


def addmm(ctx: Lower, bias: Any, m1: Any, m2: Any, beta: Any = 1, alpha: Any = 1) -> Value:
    """``beta * bias + alpha * m1 @ m2`` (GPT-2's Conv1D): ``linear`` when m2 is a constant."""
    if isinstance(m2, torch.Tensor) and beta == 1 and alpha == 1:
        return linear(ctx, m1, m2.t().contiguous(), bias)
    product = matmul(ctx, m1, m2)
    if alpha != 1:
        product = binary(ctx, "mul", product, alpha)
    if beta == 0:
        return product
    scaled = bias if beta == 1 else binary(ctx, "mul", bias, beta)
    return binary(ctx, "add", product, scaled, ctx.out_dtype())


def conv(
    ctx: Lower,
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Value:
    """``conv1d``/``conv2d``: MIL ``conv`` with explicit padding (or ``same``/``valid``)."""
    return ctx.op("conv", **_conv_args(ctx, x, weight, bias, stride, padding, dilation, groups))


def _conv_args(
    ctx: Lower,
    x: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
) -> dict[str, Any]:
    """The MIL arguments ``conv`` and ``conv_transpose`` share; the weight must be a constant."""
    if not isinstance(weight, torch.Tensor):
        raise ctx.fail("the convolution weight must be a constant (a parameter or buffer)")
    dtype = ctx.out_dtype()
    spatial = weight.dim() - 2
    args: dict[str, Any] = {
        "x": ctx.v(x, dtype),
        "weight": ctx.v(weight, dtype),
        "bias": None if bias is None else ctx.v(bias, dtype),
        "strides": pairs(stride, spatial),
        "dilations": pairs(dilation, spatial),
        "groups": int(groups),
    }
    if isinstance(padding, str):
        args["pad_type"] = padding
    else:
        args["pad_type"] = "custom"
        args["pad"] = [p for p in pairs(padding, spatial) for _ in range(2)]
    return args


def convolution(
    ctx: Lower,
    x: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
) -> Value:
    """The generic ``aten.convolution``: MIL ``conv``, or ``conv_transpose`` when ``transposed``."""
    if transposed:
        return conv_transpose(
            ctx, x, weight, bias, stride, padding, output_padding, groups, dilation
        )
    return conv(ctx, x, weight, bias, stride, padding, dilation, groups)


def conv_transpose(
    ctx: Lower,
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> Value:
    """``conv_transpose1d``/``2d``: MIL ``conv_transpose``, cropped by ``padding``.

    ``output_padding`` lengthens the output at the end: the full output shape is passed
    (``output_shape``), so those positions read the uncropped result where it reaches them
    and are zero (plus the bias) beyond it, as in PyTorch.
    """
    args = _conv_args(ctx, x, weight, bias, stride, padding, dilation, groups)
    if any(pairs(output_padding, len(args["strides"]))):
        args["output_shape"] = np.array(ctx.out_shape(), dtype=np.int32)
    return ctx.op("conv_transpose", **args)


def _pool_params(
    ctx: Lower, kernel: Any, stride: Any, padding: Any, ceil_mode: bool
) -> dict[str, Any]:
    k = pairs(kernel, 2)
    return {
        "kernel_sizes": k,
        "strides": pairs(stride, 2) if stride else k,
        "pad_type": "custom",
        "pad": [p for p in pairs(padding, 2) for _ in range(2)],
        "ceil_mode": bool(ceil_mode),
    }


def max_pool2d(
    ctx: Lower,
    x: Any,
    kernel_size: Any,
    stride: Any = (),
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> Value:
    """MIL ``max_pool`` with explicit padding (dilation 1 only)."""
    if pairs(dilation, 2) != [1, 1]:
        raise ctx.fail(f"max_pool2d with dilation {dilation} is not lowered (only 1)")
    params = _pool_params(ctx, kernel_size, stride, padding, ceil_mode)
    return ctx.op("max_pool", x=ctx.v(x, ctx.out_dtype()), **params)


def avg_pool2d(
    ctx: Lower,
    x: Any,
    kernel_size: Any,
    stride: Any = (),
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Any = None,
) -> Value:
    """MIL ``avg_pool``; ``count_include_pad=False`` excludes padding."""
    if divisor_override is not None:
        raise ctx.fail("avg_pool2d with divisor_override is not lowered")
    params = _pool_params(ctx, kernel_size, stride, padding, ceil_mode)
    return ctx.op(
        "avg_pool",
        x=ctx.v(x, ctx.out_dtype()),
        exclude_padding_from_average=not count_include_pad,
        **params,
    )
