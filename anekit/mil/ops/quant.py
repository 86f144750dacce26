"""Type conversion and quantization: ``cast``, ``quantize`` and ``dequantize``.

Parameter names, defaults, dtype domains and shape rules follow coremltools' op
definitions (coremltools/converters/mil/mil/ops/defs/, commit e0e2f42):
iOS15/ and iOS17/elementwise_unary.py (cast) and iOS17/quantization_ops.py. Numerics
follow coremltools' constant folding (coremltools/optimize/_utils.py,
``quantize_by_scale_and_zp``, ``dequantize_by_scale_and_zp``). The constexpr ops, which
share the per-axis parameters and ``affine_dequantize`` defined here, are in constexpr.py.

Exact conversions, and what we refuse to guess:

- ``cast`` float -> int rounds toward zero (NumPy ``astype``, what coremltools folds);
  to a float rounds to nearest even; any -> bool is x != 0. A value with no
  representation in the target (NaN, +-inf, out of range; a narrowing int cast that
  would wrap; a finite value beyond fp16's range, which would become inf) has no
  documented result (Metal's conversions are
  non-saturating and leave it undefined), so the reference backend raises
  EvaluationError instead of inventing one.
- ``quantize`` computes ``round_half_even(x / scale) + zero_point`` in fp32, then
  saturates to the int8/uint8 range; a NaN input is refused as above.
- ``dequantize`` and the constexpr ops compute ``(q - zero_point) * scale`` in fp32; the
  result is stored in scale's dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.errors import EvaluationError
from anekit.mil.ops.common import FP, INT32, STRING, axis_index, numel, require
from anekit.mil.ops.ranges import passes
from anekit.mil.ops.ranges_math import DEQUANTIZED, quantized
from anekit.mil.ops.registry import Args, Cost, OpDef, Param, param, register
from anekit.mil.ops.traits import CAST, ELEMENTWISE, QUANTIZE, UNARY
from anekit.mil.types import DType, TensorType

FP16_OVERFLOW = 65520.0  # the smallest magnitude that rounds to fp16 inf
_CAST15 = frozenset({DType.fp16, DType.fp32, DType.int32, DType.bool})
_CAST17 = _CAST15 | {DType.int8, DType.uint8, DType.int16, DType.uint16}
Q8 = frozenset({DType.int8, DType.uint8})


def _reject(op: str, what: str, bad: np.ndarray, total: int) -> EvaluationError:
    return EvaluationError(
        f"{op}: {bad.size} of {total} values {what} (first: {bad.flat[0]!r}); "
        "the result is undefined"
    )


# -- cast ------------------------------------------------------------------------------------


def cast_values(x: np.ndarray, dtype: str) -> np.ndarray:
    """Convert ``x`` to ``dtype`` exactly as documented in the module docstring."""
    target = DType(dtype)
    if target is DType.bool:
        return x != 0
    if target.is_float:
        if target is DType.fp16 and x.dtype != np.float16:
            # a finite value at or beyond 65520 rounds to inf: not a value the target holds
            wide = np.abs(x.astype(np.float64))
            with np.errstate(invalid="ignore"):
                over = np.isfinite(wide) & (wide >= FP16_OVERFLOW)
            if over.any():
                raise _reject("cast", "overflow fp16 (largest 65504)", x[over], x.size)
        return x.astype(np.float32)  # the executor rounds to fp16 where declared
    # float64 holds every int32 bound exactly, so the range test below is exact
    whole = np.trunc(x.astype(np.float64)) if x.dtype.kind == "f" else x.astype(np.int64)
    info = np.iinfo(target.numpy)
    with np.errstate(invalid="ignore"):
        fits = (whole >= info.min) & (whole <= info.max)  # NaN compares false
    if not fits.all():
        raise _reject("cast", f"have no {target} representation", x[~fits], x.size)
    return whole.astype(target.numpy)


def _cast_infer(a: Args) -> TensorType:
    targets = a.opdef.by_name["x"].dtypes or frozenset()
    name = str(a.const("dtype"))
    known = sorted(d.value for d in targets)
    require(name in known, "cast", "dtype", lambda: f"expected one of {known}, found {name!r}")
    return TensorType(DType(name), a.x.shape)


_cast15 = register(
    OpDef(
        name="cast",
        params=(param("x", _CAST15), param("dtype", STRING, ranks=(0,), const=True)),
        infer=_cast_infer,
        reference=cast_values,
        traits=frozenset({ELEMENTWISE, UNARY, CAST}),
        ranges=passes("x"),  # the same values, rounded to the target
        doc="""Convert x to another dtype, elementwise.

        Float to int rounds toward zero; float to float rounds to nearest even; to bool is
        x != 0. Values the target cannot hold (NaN or inf into an int, out of range, a finite
        value beyond fp16) are rejected by the reference backend: their result is undefined.

        Args:
            x (tensor<T, [*]>): the tensor (T: fp16, fp32, int32, bool; iOS17 adds int8,
                uint8, int16, uint16).
            dtype (const string): the target, one of the dtypes T allows.
        Returns:
            tensor<dtype, x.shape>: the converted tensor.
        """,
    )
)
register(_cast15.evolve(since="ios17", params=(param("x", _CAST17), _cast15.params[1])))


# -- per-axis parameters (quantize, dequantize; constexpr_affine_dequantize in constexpr.py) ---


def _check_per_axis(a: Args, data: str, axis_required: bool) -> None:
    """scale (and zero_point) are scalars, or vectors along ``axis`` of ``data``."""
    op, shape = a.opdef.name, getattr(a, data).shape
    require(
        len(shape) >= 1,
        op,
        data,
        lambda: f"expected rank >= 1, found scalar {getattr(a, data).type}",
    )
    scale, zero = a.scale, a.zero_point
    axis = a.const("axis")
    if scale.rank == 0 and not axis_required:
        require(axis is None, op, "axis", "a scalar scale takes no axis")
    if scale.rank == 1 or axis_required:
        require(axis is not None, op, "axis", "a vector scale needs an axis")
        axis = axis_index(op, "axis", int(axis), len(shape))
    for name, v in (("scale", scale), ("zero_point", zero)):
        if v is None:
            continue
        require(v.rank <= 1, op, name, lambda: f"expected a scalar or a vector, found {v.type}")
        if v.rank == 1:
            require(
                v.shape[0] == shape[axis],
                op,
                name,
                lambda: (
                    f"expected {shape[axis]} values ({data} dimension {axis}), found {v.shape[0]}"
                ),
            )
        if not axis_required:
            require(v.rank == scale.rank, op, name, "zero_point and scale must have one rank")


def per_axis_infer(data: str, axis_required: bool) -> Callable[[Args], TensorType]:
    """Infer of a dequantization: ``data``'s shape in scale's dtype, per-axis parameters checked."""

    def infer(a: Args) -> TensorType:
        _check_per_axis(a, data, axis_required)
        return TensorType(a.scale.dtype, getattr(a, data).shape)

    return infer


def along_axis(values: np.ndarray | None, rank: int, axis: Any) -> np.ndarray | None:
    """A scalar, or a vector reshaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    if values is None or np.ndim(values) == 0:
        return values
    shape = [1] * rank
    shape[int(axis) % rank] = -1
    return np.reshape(values, shape)


def affine_dequantize(q: np.ndarray, zero_point: Any, scale: np.ndarray, axis: Any) -> Any:
    """(q - zero_point) * scale in fp32, parameters broadcast along ``axis``."""
    values = q.astype(np.float32)
    zero = along_axis(zero_point, q.ndim, axis)
    if zero is not None:
        values = values - np.asarray(zero, dtype=np.float32)
    return values * along_axis(np.asarray(scale, dtype=np.float32), q.ndim, axis)


def _per_element(flops: float) -> Callable[[Args, tuple[TensorType, ...]], Cost]:
    def cost(a: Args, outs: tuple[TensorType, ...]) -> Cost:
        return Cost(
            flops * numel(outs[0].shape), float(a.input_bytes()), float(outs[0].nbytes or 0)
        )

    return cost


def axis_param(optional: bool) -> Param:
    return param("axis", INT32, ranks=(0,), const=True, optional=optional)


def per_axis_param(name: str, dtypes: frozenset[DType], domain: str, optional: bool) -> Param:
    return param(name, dtypes, ranks=(0, 1), const=True, optional=optional, domain=domain)


# -- quantize, dequantize (iOS17) --------------------------------------------------------------


def _quantize_infer(a: Args) -> TensorType:
    out = str(a.const("output_dtype"))
    require(
        out in ("int8", "uint8"),
        "quantize",
        "output_dtype",
        lambda: f"expected int8 or uint8, found {out!r}",
    )
    if a.zero_point is not None:
        require(
            a.zero_point.dtype is DType(out),
            "quantize",
            "zero_point",
            lambda: f"dtype {a.zero_point.dtype} differs from output_dtype {out}",
        )
    scale = np.asarray(a.const("scale"))
    require(
        bool(np.all(scale != 0)),
        "quantize",
        "scale",
        lambda: f"expected non-zero scales, found {scale.ravel().tolist()}",
    )
    _check_per_axis(a, "input", axis_required=False)
    return TensorType(DType(out), a.input.shape)


def quantize_values(
    input: np.ndarray,
    scale: np.ndarray,
    output_dtype: str,
    zero_point: np.ndarray | None = None,
    axis: Any = None,
) -> np.ndarray:
    """round_half_even(input / scale) + zero_point in fp32, saturated to int8 or uint8."""
    rank = input.ndim
    q = np.rint(input.astype(np.float32) / along_axis(scale.astype(np.float32), rank, axis))
    if zero_point is not None:
        q = q + along_axis(zero_point.astype(np.float32), rank, axis)
    nan = np.isnan(q)
    if nan.any():
        raise _reject("quantize", "are NaN", input[np.broadcast_to(nan, input.shape)], input.size)
    info = np.iinfo(np.dtype(output_dtype))
    return np.clip(q, info.min, info.max).astype(output_dtype)


register(
    OpDef(
        name="quantize",
        params=(
            param("input", FP, domain="SrcT"),
            per_axis_param("zero_point", Q8, "DstT", optional=True),
            per_axis_param("scale", FP, "SrcT", optional=False),
            axis_param(optional=True),
            param("output_dtype", STRING, ranks=(0,), const=True),
        ),
        infer=_quantize_infer,
        reference=quantize_values,
        cost=_per_element(5.0),  # divide, round, add the zero point, clip (min and max)
        traits=frozenset({QUANTIZE}),
        ranges=quantized,
        since="ios17",
        doc="""Quantize x to 8-bit integers: clip(round(input / scale) + zero_point).

        Rounding is half to even and computed in fp32; results saturate to the output
        range (int8: [-128, 127], uint8: [0, 255]).

        Args:
            input (tensor<SrcT, [1..]>): the values (SrcT: fp16, fp32).
            zero_point (const DstT or tensor<DstT, [D]>): the integer offset; its dtype is
                output_dtype. Default: 0.
            scale (const SrcT or tensor<SrcT, [D]>): the step, non-zero.
            axis (const int32): the dimension D runs along; only with vector parameters.
            output_dtype (const string): "int8" or "uint8".
        Returns:
            tensor<DstT, input.shape>: the quantized values.
        """,
    )
)


register(
    OpDef(
        name="dequantize",
        params=(
            param("input", Q8, domain="SrcT"),
            per_axis_param("zero_point", Q8, "SrcT", optional=True),
            per_axis_param("scale", FP, "DstT", optional=False),
            axis_param(optional=True),
        ),
        infer=per_axis_infer("input", axis_required=False),
        reference=lambda input, scale, zero_point=None, axis=None: affine_dequantize(
            input, zero_point, scale, axis
        ),
        cost=_per_element(2.0),  # subtract the zero point, multiply by the scale
        traits=frozenset({QUANTIZE}),
        ranges=DEQUANTIZED,
        since="ios17",
        doc="""Dequantize 8-bit integers: (input - zero_point) * scale, computed in fp32.

        Args:
            input (tensor<SrcT, [1..]>): the quantized values (SrcT: int8, uint8).
            zero_point (const SrcT or tensor<SrcT, [D]>): the integer offset. Default: 0.
            scale (const DstT or tensor<DstT, [D]>): the step (DstT: fp16, fp32).
            axis (const int32): the dimension D runs along; only with vector parameters.
        Returns:
            tensor<DstT, input.shape>: the real values.
        """,
    )
)
