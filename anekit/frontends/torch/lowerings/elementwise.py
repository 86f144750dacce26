"""Lowerings of elementwise ATen ops: arithmetic with broadcasting, activations, casts."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from anekit.frontends.torch.lowerings.common import binary, float_operand, promote
from anekit.mil import DType, Value

if TYPE_CHECKING:
    from anekit.frontends.torch.lower import Lower


def _scaled(ctx: Lower, x: Any, alpha: Any) -> Any:
    """``alpha * x`` for add/sub's alpha argument (nothing when alpha is 1)."""
    if alpha == 1:
        return x
    if isinstance(x, (int, float)):
        return x * alpha
    return binary(ctx, "mul", x, alpha)


def add(ctx: Lower, a: Any, b: Any, alpha: Any = 1) -> Value:
    """MIL ``add`` (``alpha`` scales the second operand)."""
    return binary(ctx, "add", a, _scaled(ctx, b, alpha), ctx.out_dtype())


def sub(ctx: Lower, a: Any, b: Any, alpha: Any = 1) -> Value:
    """MIL ``sub`` (``alpha`` scales the second operand)."""
    return binary(ctx, "sub", a, _scaled(ctx, b, alpha), ctx.out_dtype())


def rsub(ctx: Lower, a: Any, b: Any, alpha: Any = 1) -> Value:
    """``b - alpha * a``."""
    return binary(ctx, "sub", b, _scaled(ctx, a, alpha), ctx.out_dtype())


def mul(ctx: Lower, a: Any, b: Any) -> Value:
    """MIL ``mul``, operands promoted to the result dtype."""
    return binary(ctx, "mul", a, b, ctx.out_dtype())


def div(ctx: Lower, a: Any, b: Any, rounding_mode: str | None = None) -> Value:
    """True division (ints become floats); ``floor`` rounds down; ``trunc`` is not lowered."""
    out = ctx.out_dtype()
    if rounding_mode is None:
        return binary(ctx, "real_div", a, b, out)
    if rounding_mode == "floor":
        if out.is_int:
            return binary(ctx, "floor_div", a, b, out)
        return ctx.op("floor", "floor", x=binary(ctx, "real_div", a, b, out))
    raise ctx.fail(f"rounding_mode={rounding_mode!r} is not lowered (only None and 'floor')")


def pow_(ctx: Lower, a: Any, b: Any) -> Value:
    """MIL ``pow`` (RMSNorm's ``x.pow(2)``, scalar or tensor exponents)."""
    return binary(ctx, "pow", a, b, ctx.out_dtype())


def maximum(ctx: Lower, a: Any, b: Any) -> Value:
    """MIL ``maximum``."""
    return binary(ctx, "maximum", a, b, ctx.out_dtype())


def minimum(ctx: Lower, a: Any, b: Any) -> Value:
    """MIL ``minimum``."""
    return binary(ctx, "minimum", a, b, ctx.out_dtype())


@functools.cache
def compare(op: str) -> Any:
    """A comparison: operands promoted together (bool compared as int32), result bool."""

    def lower(ctx: Lower, a: Any, b: Any) -> Value:
        dtype = promote(ctx, a, b)
        return binary(ctx, op, a, b, DType.int32 if dtype is DType.bool else dtype)

    lower.__name__ = op
    lower.__qualname__ = f'compare("{op}")'
    lower.__doc__ = f"MIL ``{op}``: operands promoted together, bool result."
    return lower


@functools.cache
def logical(op: str) -> Any:
    """A logical op on bool tensors (``bitwise_and`` of bools is ``logical_and``)."""

    def lower(ctx: Lower, a: Any, b: Any) -> Value:
        if ctx.out_dtype() is not DType.bool:
            raise ctx.fail("bitwise ops are lowered for bool tensors only")
        return binary(ctx, op, a, b, DType.bool)

    lower.__name__ = op
    lower.__qualname__ = f'logical("{op}")'
    lower.__doc__ = f"MIL ``{op}`` on bool tensors."
    return lower


def logical_not(ctx: Lower, x: Any) -> Value:
    """MIL ``logical_not`` on bool tensors."""
    if ctx.out_dtype() is not DType.bool:
        raise ctx.fail("bitwise_not is lowered for bool tensors only")
    return ctx.op("logical_not", x=ctx.v(x, DType.bool))


def where(ctx: Lower, cond: Any, a: Any, b: Any) -> Value:
    """MIL ``select(cond, a, b)``."""
    dtype = ctx.out_dtype()
    return ctx.op("select", cond=ctx.v(cond, DType.bool), a=ctx.v(a, dtype), b=ctx.v(b, dtype))


def masked_fill(ctx: Lower, x: Any, mask: Any, value: Any) -> Value:
    """``select(mask, value, x)``."""
    return where(ctx, mask, value, x)


@functools.cache
def unary(op: str) -> Any:
    """A float unary MIL op (integer inputs are cast to the float result type first)."""

    def lower(ctx: Lower, x: Any) -> Value:
        return ctx.op(op, x=float_operand(ctx, x))

    lower.__name__ = op
    lower.__qualname__ = f'unary("{op}")'
    lower.__doc__ = f"MIL ``{op}`` (integer inputs cast to the float result dtype)."
    return lower


def neg(ctx: Lower, x: Any) -> Value:
    """``mul(x, -1)``."""
    return binary(ctx, "mul", x, -1, ctx.out_dtype())


def reciprocal(ctx: Lower, x: Any) -> Value:
    """``real_div(1, x)``."""
    return ctx.op("real_div", x=ctx.v(1.0, ctx.out_dtype()), y=float_operand(ctx, x))


def rsqrt(ctx: Lower, x: Any) -> Value:
    """``pow(x, -0.5)``: the spelling the ANE is reported to prefer (ANE_NOTES 2.4)."""
    return binary(ctx, "pow", float_operand(ctx, x), -0.5, ctx.out_dtype())


def gelu(ctx: Lower, x: Any, approximate: str = "none") -> Value:
    """MIL ``gelu``: ``EXACT`` (erf) or ``TANH_APPROXIMATION``."""
    modes = {"none": "EXACT", "tanh": "TANH_APPROXIMATION"}
    if approximate not in modes:
        raise ctx.fail(f"approximate={approximate!r}; expected 'none' or 'tanh'")
    return ctx.op("gelu", x=float_operand(ctx, x), mode=modes[approximate])


def clamp(ctx: Lower, x: Any, min: Any = None, max: Any = None) -> Value:
    """MIL ``clip`` for two scalar bounds, else ``maximum``/``minimum``."""
    dtype = ctx.out_dtype()
    value = ctx.v(x, dtype)
    if min is not None and max is not None and dtype.is_float and not _is_tensor(min, max):
        return ctx.op("clip", x=value, alpha=float(min), beta=float(max))
    if min is not None:
        value = binary(ctx, "maximum", value, min, dtype)
    if max is not None:
        value = binary(ctx, "minimum", value, max, dtype)
    return value


def atan2(ctx: Lower, y: Any, x: Any) -> Value:
    """``atan(y / x)`` moved to the quadrant of ``(x, y)``; on ``x == 0``, ``sign(y) * pi/2``."""
    dtype = ctx.out_dtype()
    yv, xv = ctx.v(y, dtype), ctx.v(x, dtype)
    zero = ctx.op("equal", "x_zero", x=xv, y=np.asarray(0, dtype.numpy))
    safe = ctx.op("select", "x_safe", cond=zero, a=np.asarray(1, dtype.numpy), b=xv)
    base = ctx.op("atan", "base", x=ctx.op("real_div", "ratio", x=yv, y=safe))
    upper = ctx.op("greater_equal", "y_upper", x=yv, y=np.asarray(0, dtype.numpy))
    turn = ctx.op(
        "select", "turn", cond=upper, a=np.asarray(np.pi, dtype.numpy),
        b=np.asarray(-np.pi, dtype.numpy),
    )  # fmt: skip
    left = ctx.op("less", "x_left", x=xv, y=np.asarray(0, dtype.numpy))
    shift = ctx.op("select", "shift", cond=left, a=turn, b=np.asarray(0, dtype.numpy))
    angle = ctx.op("add", "angle", x=base, y=shift)
    axis_angle = ctx.op("mul", "on_axis", x=ctx.op("sign", "y_sign", x=yv),
                        y=np.asarray(np.pi / 2, dtype.numpy))  # fmt: skip
    return ctx.op("select", cond=zero, a=axis_angle, b=angle)


def _is_tensor(*xs: Any) -> bool:
    return any(not isinstance(x, (int, float)) for x in xs)


def clamp_min(ctx: Lower, x: Any, min: Any) -> Value:
    """MIL ``maximum``."""
    return clamp(ctx, x, min=min)


def clamp_max(ctx: Lower, x: Any, max: Any) -> Value:
    """MIL ``minimum``."""
    return clamp(ctx, x, max=max)


def hardtanh(ctx: Lower, x: Any, min_val: float = -1.0, max_val: float = 1.0) -> Value:
    """MIL ``clip``."""
    return clamp(ctx, x, min_val, max_val)


def leaky_relu(ctx: Lower, x: Any, negative_slope: float = 0.01) -> Value:
    """MIL ``leaky_relu``."""
    return ctx.op("leaky_relu", x=float_operand(ctx, x), alpha=float(negative_slope))


def elu(ctx: Lower, x: Any, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0):
    """MIL ``elu`` (SELU's scales are not lowered)."""
    if scale != 1 or input_scale != 1:
        raise ctx.fail("elu with scale or input_scale other than 1 (selu) is not lowered")
    return ctx.op("elu", x=float_operand(ctx, x), alpha=float(alpha))


def hardsigmoid(ctx: Lower, x: Any) -> Value:
    """``clip(x / 6 + 1 / 2, 0, 1)``."""
    return ctx.op("sigmoid_hard", x=float_operand(ctx, x), alpha=1 / 6, beta=0.5)


def hardswish(ctx: Lower, x: Any) -> Value:
    """``x * sigmoid_hard(x)``."""
    value = float_operand(ctx, x)
    gate = ctx.op("sigmoid_hard", "gate", x=value, alpha=1 / 6, beta=0.5)
    return ctx.op("mul", x=value, y=gate)


def to_dtype(ctx: Lower, x: Any, *args: Any, **kwargs: Any) -> Value:
    """``_to_copy``/``to``: a cast to the result dtype (device and layout do not matter here)."""
    return ctx.v(x, ctx.out_dtype())


def same(ctx: Lower, x: Any, *args: Any, **kwargs: Any) -> Any:
    """Ops that return their input unchanged at inference (clone, alias, dropout in eval)."""
    return x


def nothing(ctx: Lower, *args: Any, **kwargs: Any) -> None:
    """Runtime assertions on metadata: nothing to compute."""
    return None


def full_like(ctx: Lower, x: Any, fill_value: Any, **kwargs: Any) -> Any:
    """A constant tensor of the result's shape and dtype (only the shape of ``x`` matters)."""
    return torch.full(ctx.out_shape(), fill_value, dtype=ctx.out.dtype)


def zeros_like(ctx: Lower, x: Any, **kwargs: Any) -> Any:
    """A constant of the result's shape (nothing computed)."""
    return full_like(ctx, x, 0)


def ones_like(ctx: Lower, x: Any, **kwargs: Any) -> Any:
    """A constant of the result's shape (nothing computed)."""
    return full_like(ctx, x, 1)


def new_full(ctx: Lower, x: Any, size: Any, fill_value: Any, **kwargs: Any) -> Any:
    """A constant of the result's shape (nothing computed)."""
    return full_like(ctx, x, fill_value)


def new_zeros(ctx: Lower, x: Any, size: Any, **kwargs: Any) -> Any:
    """A constant of the result's shape (nothing computed)."""
    return full_like(ctx, x, 0)


def new_ones(ctx: Lower, x: Any, size: Any, **kwargs: Any) -> Any:
    """A constant of the result's shape (nothing computed)."""
    return full_like(ctx, x, 1)


def sym_size(ctx: Lower, x: Any, dim: int) -> int:
    """A dimension of a static shape, as a Python int."""
    return int(ctx.shape_of(x)[dim])


def log1p(ctx: Lower, x: Any) -> Value:
    """``log(1 + x)``."""
    value = float_operand(ctx, x)
    return ctx.op("log", x=ctx.op("add", "shift", x=value, y=ctx.v(1.0, value.dtype)))


def softplus(ctx: Lower, x: Any, beta: float = 1.0, threshold: float = 20.0) -> Value:
    """MIL ``softplus``; ``beta`` scales in and out (the threshold is only a float shortcut)."""
    value = float_operand(ctx, x)
    if beta == 1:
        return ctx.op("softplus", x=value)
    scaled = ctx.op("softplus", "scaled", x=binary(ctx, "mul", value, float(beta)))
    return binary(ctx, "mul", scaled, 1.0 / beta)
