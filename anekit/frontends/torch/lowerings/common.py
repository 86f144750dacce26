"""Helpers the lowerings share: dtype promotion, binary ops, axes and shapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from anekit.mil import DType, Value

if TYPE_CHECKING:
    from anekit.frontends.torch.lower import Lower

_KIND = {DType.bool: 0, DType.int32: 1, DType.fp16: 2, DType.fp32: 3}


def promote(ctx: Lower, *xs: Any) -> DType:
    """PyTorch's type promotion, mapped to MIL: bool < int32 < float; Python floats keep a
    tensor's float width (``fp16_tensor * 0.5`` stays fp16), as in PyTorch."""
    tensors = [ctx.dtype_of(x) for x in xs if isinstance(x, (Value, torch.Tensor))]
    scalars = [ctx.dtype_of(x) for x in xs if not isinstance(x, (Value, torch.Tensor))]
    best = max(tensors, key=_KIND.__getitem__, default=DType.bool)
    top_scalar = max(scalars, key=_KIND.__getitem__, default=DType.bool)
    if _KIND[top_scalar] > _KIND[best] and not (best.is_float and top_scalar.is_float):
        return top_scalar
    return best


def binary(ctx: Lower, op: str, a: Any, b: Any, dtype: DType | None = None) -> Value:
    """``op(x=a, y=b)`` with both operands promoted to one dtype (``dtype`` if given)."""
    dtype = dtype or promote(ctx, a, b)
    return ctx.op(op, x=ctx.v(a, dtype), y=ctx.v(b, dtype))


def float_operand(ctx: Lower, x: Any) -> Value:
    """``x`` as a float MIL value: integers become the node's float result dtype (fp32)."""
    value = ctx.v(x)
    if value.dtype.is_float:
        return value
    target = ctx.out_dtype()
    return ctx.cast(value, target if target.is_float else DType.fp32)


def axis(dim: int, rank: int) -> int:
    """A PyTorch dim as a non-negative axis (rank 0 tensors take dim 0 or -1)."""
    return dim % rank if rank else 0


def axes(dims: Any, rank: int) -> list[int]:
    """PyTorch's dims argument (int, list, None or []: every axis) as sorted axes."""
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(axis(int(d), rank) for d in dims)


def pairs(value: Any, count: int) -> list[int]:
    """An int or a sequence as ``count`` ints (PyTorch's ``_pair`` for kernel, stride, ...)."""
    if isinstance(value, int):
        return [value] * count
    value = list(value)
    return value * count if len(value) == 1 else value


def reshape(ctx: Lower, x: Value, shape: Sequence[int], suffix: str = "") -> Value:
    """``x`` reshaped to ``shape`` (``x`` itself when the shape already matches)."""
    shape = [int(d) for d in shape]
    if list(ctx.static(x.shape)) == shape:
        return x
    return ctx.op("reshape", suffix, x=x, shape=np.array(shape, dtype=np.int32))
