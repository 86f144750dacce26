"""Lowerings of ONNX's elementwise ops: arithmetic, comparisons, activations, casts."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.frontends.onnx.lower import mil_dtype
from anekit.mil import DType, Value

if TYPE_CHECKING:
    from anekit.frontends.onnx.lower import Lower

Lowering = Callable[..., Any]


def operand_dtype(ctx: Lower, *xs: Any) -> DType:
    """The dtype both operands take: the runtime operand's (ONNX gives both one type)."""
    for x in xs:
        if isinstance(x, Value):
            return x.dtype
    return ctx.dtype_of(xs[0])


def binary(op: str) -> Lowering:
    """ONNX's two-operand op (arithmetic or comparison) as MIL ``op(x, y)``, broadcasting."""

    def lower(ctx: Lower, a: Any, b: Any) -> Value:
        dtype = operand_dtype(ctx, a, b)
        return ctx.op(op, x=ctx.v(a, dtype), y=ctx.v(b, dtype))

    lower.__doc__ = f"MIL ``{op}``."
    return lower


def div(ctx: Lower, a: Any, b: Any) -> Value:
    """MIL ``real_div`` for floats; integer division (truncating in ONNX) is not lowered."""
    dtype = operand_dtype(ctx, a, b)
    if not dtype.is_float:
        raise ctx.fail("integer Div at run time is not lowered (ONNX truncates, MIL floors)")
    return ctx.op("real_div", x=ctx.v(a, dtype), y=ctx.v(b, dtype))


def variadic(op: str) -> Lowering:
    """``Max``/``Min``/``Sum`` of any number of inputs: a chain of MIL ``op``."""

    def lower(ctx: Lower, *xs: Any) -> Value:
        dtype = operand_dtype(ctx, *xs)
        result = ctx.v(xs[0], dtype)
        for i, x in enumerate(xs[1:]):
            result = ctx.op(op, str(i) if i < len(xs) - 2 else "", x=result, y=ctx.v(x, dtype))
        return result if len(xs) > 1 else ctx.op("identity", x=result)

    lower.__doc__ = f"a chain of MIL ``{op}``."
    return lower


def unary(op: str) -> Lowering:
    """An ONNX one-operand op that MIL has under the name ``op``."""

    def lower(ctx: Lower, x: Any, **attrs: Any) -> Value:
        return ctx.op(op, x=ctx.v(x))

    lower.__doc__ = f"MIL ``{op}``."
    return lower


def neg(ctx: Lower, x: Any) -> Value:
    """``mul(x, -1)``."""
    value = ctx.v(x)
    return ctx.op("mul", x=value, y=ctx.v(np.array(-1, value.dtype.numpy)))


def reciprocal(ctx: Lower, x: Any) -> Value:
    """``real_div(1, x)``."""
    value = ctx.v(x)
    return ctx.op("real_div", x=ctx.v(np.array(1, value.dtype.numpy)), y=value)


def not_a_number(ctx: Lower, x: Any) -> Value:
    """``IsNaN``: ``not_equal(x, x)`` (NaN is the only value unequal to itself)."""
    value = ctx.v(x)
    return ctx.op("not_equal", x=value, y=value)


def identity(ctx: Lower, x: Any) -> Value:
    """The input itself."""
    return ctx.v(x)


def dropout(
    ctx: Lower, x: Any, ratio: Any = None, training_mode: Any = None, seed: int = 0
) -> Value:
    """The input itself, as at inference (training mode and the mask output are refused)."""
    if training_mode is not None and (isinstance(training_mode, Value) or np.any(training_mode)):
        raise ctx.fail("Dropout in training mode is not lowered")
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        raise ctx.fail("Dropout's mask output is not produced at inference")
    return ctx.v(x)


def gelu(ctx: Lower, x: Any, approximate: str = "none") -> Value:
    """MIL ``gelu``: ``EXACT`` (erf) or ``TANH_APPROXIMATION``."""
    mode = {"none": "EXACT", "tanh": "TANH_APPROXIMATION"}.get(approximate)
    if mode is None:
        raise ctx.fail(f"Gelu approximate={approximate!r}; expected 'none' or 'tanh'")
    return ctx.op("gelu", x=ctx.v(x), mode=mode)


def leaky_relu(ctx: Lower, x: Any, alpha: float = 0.01) -> Value:
    """MIL ``leaky_relu``."""
    return ctx.op("leaky_relu", x=ctx.v(x), alpha=np.float32(alpha))


def elu(ctx: Lower, x: Any, alpha: float = 1.0) -> Value:
    """MIL ``elu``."""
    return ctx.op("elu", x=ctx.v(x), alpha=np.float32(alpha))


def hard_sigmoid(ctx: Lower, x: Any, alpha: float = 0.2, beta: float = 0.5) -> Value:
    """MIL ``sigmoid_hard``: ``clip(alpha * x + beta, 0, 1)``."""
    return ctx.op("sigmoid_hard", x=ctx.v(x), alpha=np.float32(alpha), beta=np.float32(beta))


def hard_swish(ctx: Lower, x: Any) -> Value:
    """``x * sigmoid_hard(x, 1/6, 1/2)``."""
    value = ctx.v(x)
    gate = ctx.op("sigmoid_hard", "gate", x=value, alpha=np.float32(1 / 6), beta=np.float32(0.5))
    return ctx.op("mul", x=value, y=gate)


def clip(ctx: Lower, x: Any, low: Any = None, high: Any = None) -> Value:
    """MIL ``clip`` for two constant bounds, else ``maximum``/``minimum``."""
    value = ctx.v(x)
    if not value.dtype.is_float:
        raise ctx.fail("Clip on integers is not lowered")
    if (
        low is not None
        and high is not None
        and not isinstance(low, Value)
        and not isinstance(high, Value)
    ):
        return ctx.op("clip", x=value, alpha=np.float32(low), beta=np.float32(high))
    if low is not None:
        value = ctx.op("maximum", "low", x=value, y=ctx.v(low, value.dtype))
    if high is not None:
        value = ctx.op("minimum", "high", x=value, y=ctx.v(high, value.dtype))
    return value if low is not None or high is not None else ctx.op("identity", x=value)


def where(ctx: Lower, cond: Any, a: Any, b: Any) -> Value:
    """MIL ``select(cond, a, b)``."""
    dtype = operand_dtype(ctx, a, b)
    return ctx.op("select", cond=ctx.v(cond, DType.bool), a=ctx.v(a, dtype), b=ctx.v(b, dtype))


def cast(ctx: Lower, x: Any, to: int, saturate: int = 1) -> Value:
    """MIL ``cast`` to the target's MIL dtype (int64 becomes int32, double fp32)."""
    return ctx.cast(ctx.v(x), mil_dtype(to, f"Cast node {ctx.name()!r}"))


def cast_like(ctx: Lower, x: Any, like: Any, saturate: int = 1) -> Value:
    """MIL ``cast`` to the dtype of ``like``."""
    return ctx.cast(ctx.v(x), ctx.dtype_of(like))
