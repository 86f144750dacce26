"""Reductions and other axis-wise ops: ``reduce_*``, ``softmax``, ``topk``, ``argsort``, ``cumsum``.

Parameter names, defaults, dtype domains and shape rules follow coremltools'
op definitions (coremltools/converters/mil/mil/ops/defs/: iOS15/reduction.py,
iOS17/reduction.py, iOS15/activation.py for softmax, iOS15/, iOS16/ and
iOS17/tensor_operation.py for topk, argsort and cumsum). coremltools has no
``log_softmax`` op, so neither do we.

References compute floats in fp32 and integers exactly (:func:`.integers.reduce`:
int64, or Python integers where int64 could overflow); an int32 result outside
the int32 range is an EvaluationError, never a wrapped value. Integer results of
non-integer formulas (mean, log, sqrt) round toward zero, as coremltools' constant
folding does (``astype`` of the float result); a non-finite one is an error too.
Sort-like ops break ties by first occurrence (a stable sort).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.mil.ops import device, integers
from anekit.mil.ops.common import (
    BOOL,
    FP,
    INT32,
    SOFTMAX,
    STRING,
    TRANSCENDENTAL,
    axes_indices,
    axis_index,
    declared,
    numel,
    per_output_element,
    require,
)
from anekit.mil.ops.ranges import (
    L1,
    L2,
    LOG_SUM_EXP,
    SUM_SQUARE,
    RangeFn,
    bounded,
    passes,
    scaled_by_count,
)
from anekit.mil.ops.ranges_math import LOG_SUM, PRODUCT, running_sum
from anekit.mil.ops.registry import (
    Args,
    Cost,
    CostFn,
    InferFn,
    Numerics,
    OpDef,
    Param,
    param,
    register,
)
from anekit.mil.ops.traits import EXACT, PROBABILITIES, REDUCTION
from anekit.mil.types import DType, TensorType

# The "T" domain of every op in this module except softmax (fp16, fp32, int32 in iOS15).
_T = frozenset({DType.fp16, DType.fp32, DType.int32})
# iOS17 topk widens T and lets k be a narrower integer (iOS17/tensor_operation.py).
_T_TOPK17 = _T | {DType.int8, DType.int16, DType.uint8, DType.uint16}
_K_TOPK17 = frozenset({DType.int8, DType.int16, DType.int32})
# Index outputs selectable from iOS17 (reduce_arg ``output_dtype``, topk ``output_indices_dtype``).
_INDEX_DTYPES = ("int32", "uint16")


# -- shared helpers --------------------------------------------------------------------------


def _x_param(dtypes: frozenset[DType] = _T) -> Param:
    return param("x", dtypes, domain="T")


def _axis_param(default: int) -> Param:
    return param("axis", INT32, ranks=(0,), const=True, default=default)


def _flag_param(name: str, default: bool) -> Param:
    return param(name, BOOL, ranks=(0,), const=True, default=default)


def _require_tensor(a: Args) -> None:
    require(
        a.x.rank >= 1, a.opdef.name, "x", lambda: f"expected rank >= 1, found scalar {a.x.type}"
    )


def _index_dtype(a: Args, name: str, length: Any) -> DType:
    """The dtype of an index output chosen by parameter ``name``; int32 where it is not declared."""
    chosen = str(declared(a, name, "int32"))
    op = a.opdef.name
    require(
        chosen in _INDEX_DTYPES,
        op,
        name,
        lambda: f"expected one of {_INDEX_DTYPES}, found {chosen!r}",
    )
    if chosen == "uint16" and isinstance(length, int):
        require(
            length <= 65536,
            op,
            name,
            lambda: f"uint16 indices cannot address an axis of length {length} (at most 65536)",
        )
    return DType(chosen)


def _reduced_shape(shape: tuple, axes: list[int], keep_dims: bool) -> tuple:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep_dims or i not in axes)


def _widen(x: np.ndarray) -> np.ndarray:
    """Integers to int64 (exact sums, products and negation); floats stay fp32."""
    return x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float32, copy=False)


def _per_input_element(flops: float) -> CostFn:
    """Cost of an op that does ``flops`` operations per element of ``x``."""

    def cost(a: Args, outs: tuple[TensorType, ...]) -> Cost:
        written = sum(t.nbytes or 0 for t in outs)
        return Cost(flops * numel(a.x.shape), a.input_bytes(), written)

    return cost


def _sort_cost(a: Args, outs: tuple[TensorType, ...]) -> Cost:
    """A comparison sort along one axis: n log2 n comparisons per line of length n."""
    n = a.x.shape[axis_index(a.opdef.name, "axis", int(a.const("axis")), a.x.rank)]
    per_element = max(1, math.ceil(math.log2(n))) if isinstance(n, int) and n > 1 else 1
    return _per_input_element(per_element)(a, outs)


def _stable_order(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Indices that sort ``x`` along ``axis``; equal values keep their original order."""
    key = _widen(x)
    return np.argsort(key if ascending else -key, axis=axis, kind="stable")


# -- reduce_* over axes ----------------------------------------------------------------------


def _infer_reduce_axes(a: Args) -> TensorType:
    _require_tensor(a)
    given = a.const("axes")
    rank = a.x.rank
    axes = list(range(rank)) if given is None else axes_indices(a.opdef.name, "axes", given, rank)
    return TensorType(a.x.dtype, _reduced_shape(a.x.shape, axes, bool(a.const("keep_dims"))))


def _reference_over_axes(name: str, fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    integral = fn in _INTEGRAL

    def reference(
        x: np.ndarray, keep_dims: np.ndarray, axes: np.ndarray | None = None
    ) -> np.ndarray:
        axis = None if axes is None else tuple(int(v) for v in np.ravel(axes))
        if integers.is_int(x):
            return integers.reduce(name, fn, x, integral=integral, axis=axis,
                                   keepdims=bool(keep_dims))  # fmt: skip
        return fn(_widen(x), axis=axis, keepdims=bool(keep_dims))

    return reference


def _l1_norm(x: np.ndarray, **kw: Any) -> np.ndarray:
    return np.sum(np.abs(x), **kw)


def _l2_norm(x: np.ndarray, **kw: Any) -> np.ndarray:
    return np.sqrt(np.sum(np.square(x), **kw))


def _log_sum(x: np.ndarray, **kw: Any) -> np.ndarray:
    return np.log(np.sum(x, **kw))


def _sum_square(x: np.ndarray, **kw: Any) -> np.ndarray:
    return np.sum(np.square(x), **kw)


def _log_sum_exp(x: np.ndarray, axis: tuple[int, ...] | None, keepdims: bool) -> np.ndarray:
    """log(sum(exp(x))) shifted by the maximum so that no exp overflows."""
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0)  # all -inf (or an inf) lines: no shift, no inf - inf
    total = np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True)) + top
    return total if keepdims else np.squeeze(total, axis=axis)


def _reduce_axes(
    name: str,
    fn: Callable[..., Any],
    flops: float,
    what: str,
    numerics: Numerics | None = None,
    ranges: RangeFn | None = None,
) -> OpDef:
    return register(
        OpDef(
            name=name,
            params=(
                _x_param(),
                param("axes", INT32, ranks=(1,), const=True, default=None),
                _flag_param("keep_dims", False),
            ),
            infer=_infer_reduce_axes,
            reference=_reference_over_axes(name, fn),
            traits=frozenset({REDUCTION}),
            cost=_per_input_element(flops),
            numerics=numerics,
            ranges=ranges,
            doc=f"""Reduce ``x`` over ``axes`` to {what}.

            Args:
                x (tensor<T, [*]>): rank >= 1; T is fp16, fp32 or int32.
                axes (const tensor<int32, [K]>): axes to reduce, negative ones count from the
                    end; no axis twice. Default: None (every axis).
                keep_dims (const bool): keep each reduced axis with length 1. Default: False.
            Returns:
                tensor<T, [*]>: ``x.shape`` without the reduced axes (length 1 with keep_dims);
                    a scalar when every axis is reduced. Integer T rounds toward zero.
            """,
        )
    )


# formulas whose integer results are exact integers (the rest are rounded toward zero)
_INTEGRAL = (np.sum, np.max, np.min, np.prod, _l1_norm, _sum_square)

# the range transfer of the reductions below (the rest: unbounded)
_REDUCE_RANGES: dict[str, RangeFn] = {
    "reduce_sum": scaled_by_count,
    "reduce_mean": passes("x"),
    "reduce_max": passes("x"),
    "reduce_min": passes("x"),
    "reduce_l1_norm": L1,
    "reduce_l2_norm": L2,
    "reduce_sum_square": SUM_SQUARE,
    "reduce_prod": PRODUCT,
    "reduce_log_sum": LOG_SUM,
}
# flops: operations per input element (the cost convention of anekit.mil.ops.common).
for _name, _fn, _flops, _what in (
    ("reduce_sum", np.sum, 1, "the sum of its elements"),
    ("reduce_mean", np.mean, 1, "the mean of its elements"),
    ("reduce_max", np.max, 1, "its largest element (NaN if any element is NaN)"),
    ("reduce_min", np.min, 1, "its smallest element (NaN if any element is NaN)"),
    ("reduce_prod", np.prod, 1, "the product of its elements"),
    ("reduce_l1_norm", _l1_norm, 2, "the sum of absolute values"),
    ("reduce_l2_norm", _l2_norm, 2, "the square root of the sum of squares"),
    ("reduce_log_sum", _log_sum, 1, "the natural log of the sum"),
    ("reduce_sum_square", _sum_square, 2, "the sum of squares"),
):
    _reduce_axes(_name, _fn, _flops, _what, ranges=_REDUCE_RANGES.get(_name))
_reduce_axes(  # flops: max, subtract, exp, add
    "reduce_log_sum_exp",
    _log_sum_exp,
    3 + TRANSCENDENTAL,
    "log(sum(exp(x))), without overflow",
    device.LOGSUMEXP_UNSHIFTED,
    LOG_SUM_EXP,
)


# -- reduce_argmax / reduce_argmin -------------------------------------------------------------


def _infer_reduce_arg(a: Args) -> TensorType:
    _require_tensor(a)
    axis = axis_index(a.opdef.name, "axis", int(a.const("axis")), a.x.rank)
    shape = _reduced_shape(a.x.shape, [axis], bool(a.const("keep_dims")))
    return TensorType(_index_dtype(a, "output_dtype", a.x.shape[axis]), shape)


def _reference_arg(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    # np.argmax/argmin return the first occurrence of a tie, and the first NaN if any.
    def reference(
        x: np.ndarray, axis: np.ndarray, keep_dims: np.ndarray, output_dtype: str = ""
    ) -> np.ndarray:
        return fn(x, axis=int(axis), keepdims=bool(keep_dims))

    return reference


def _indexed_axis_length(a: Args) -> Any:
    """The length of the axis an index output counts along (N22: fp16 indices exact below 2048)."""
    return a.x.shape[axis_index(a.opdef.name, "axis", int(a.const("axis")), a.x.rank)]


def _reduce_arg(name: str, fn: Callable[..., np.ndarray], what: str) -> None:
    ios15 = register(
        OpDef(
            name=name,
            params=(_x_param(), _axis_param(-1), _flag_param("keep_dims", False)),
            infer=_infer_reduce_arg,
            reference=_reference_arg(fn),
            cost=_per_input_element(1),
            indexes_along=_indexed_axis_length,
            doc=f"""The index of the {what} of ``x`` along ``axis`` (the first one on a tie).

            Args:
                x (tensor<T, [*]>): rank >= 1; T is fp16, fp32 or int32.
                axis (const int32): the axis to reduce. Default: -1.
                keep_dims (const bool): keep the reduced axis with length 1. Default: False.
            Returns:
                tensor<int32, [*]>: ``x.shape`` without ``axis`` (length 1 with keep_dims).
            """,
        )
    )
    register(
        ios15.evolve(
            since="ios17",
            params=(
                *ios15.params,
                param("output_dtype", STRING, ranks=(0,), const=True, default="int32"),
            ),
            doc=ios15.doc
            + """
            iOS17 adds ``output_dtype`` (const string, "int32" or "uint16", default "int32"),
            the dtype of the result.
            """,
        )
    )


_reduce_arg("reduce_argmax", np.argmax, "largest element")
_reduce_arg("reduce_argmin", np.argmin, "smallest element")


# -- softmax -------------------------------------------------------------------------------------


def _infer_same_as_x_along_axis(a: Args) -> TensorType:
    _require_tensor(a)
    axis_index(a.opdef.name, "axis", int(a.const("axis")), a.x.rank)
    return a.x.type


def _softmax(x: np.ndarray, axis: np.ndarray) -> np.ndarray:
    shifted = x - np.max(x, axis=int(axis), keepdims=True)  # exp never overflows
    e = np.exp(shifted)
    return e / np.sum(e, axis=int(axis), keepdims=True)


register(
    OpDef(
        name="softmax",
        params=(_x_param(FP), _axis_param(-1)),
        infer=_infer_same_as_x_along_axis,
        reference=_softmax,
        traits=frozenset({PROBABILITIES}),
        cost=per_output_element(SOFTMAX),
        ranges=bounded(0.0, 1.0),
        doc="""``exp(x) / sum(exp(x))`` along ``axis``, shifted by the maximum to avoid overflow.

        Args:
            x (tensor<T, [*]>): rank >= 1; T is fp16 or fp32.
            axis (const int32): the axis to normalise. Default: -1.
        Returns:
            tensor<T, [*]>: same shape as ``x``.
        """,
    )
)


# -- topk ----------------------------------------------------------------------------------------


def _infer_topk(*, minus_one_takes_all: bool) -> InferFn:
    def infer(a: Args) -> TensorType | tuple[TensorType, TensorType]:
        _require_tensor(a)
        axis = axis_index("topk", "axis", int(a.const("axis")), a.x.rank)
        length = a.x.shape[axis]
        k = int(a.const("k"))
        if k == -1 and minus_one_takes_all:
            k = length
        else:
            require(k >= 1, "topk", "k", lambda: f"expected k >= 1, found {k}")
            require(
                not isinstance(length, int) or k <= length,
                "topk",
                "k",
                lambda: (
                    f"k = {k} is larger than axis {axis} of x (length {length}, shape {list(a.x.shape)})"
                ),
            )
        shape = tuple(k if i == axis else d for i, d in enumerate(a.x.shape))
        values = TensorType(a.x.dtype, shape)
        if not bool(declared(a, "return_indices", True)):
            require(
                "output_indices_dtype" not in a.given,
                "topk",
                "output_indices_dtype",
                "may only be given when return_indices is true",
            )
            return values
        return values, TensorType(_index_dtype(a, "output_indices_dtype", length), shape)

    return infer


def _topk(
    x: np.ndarray,
    k: np.ndarray,
    axis: np.ndarray,
    ascending: np.ndarray,
    sort: np.ndarray | None = None,
    return_indices: np.ndarray | None = None,
    output_indices_dtype: str = "",
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    # sort=False allows any order; sorted is one of them.
    ax = int(axis) % x.ndim
    count = x.shape[ax] if int(k) == -1 else int(k)
    indices = np.take(_stable_order(x, ax, bool(ascending)), np.arange(count), axis=ax)
    values = np.take_along_axis(x, indices, axis=ax)
    if return_indices is not None and not bool(return_indices):
        return values
    return values, indices


_topk15 = register(
    OpDef(
        name="topk",
        indexes_along=_indexed_axis_length,
        params=(
            _x_param(),
            param("k", INT32, ranks=(0,), const=True, default=1),
            _axis_param(-1),
            _flag_param("ascending", False),
        ),
        infer=_infer_topk(minus_one_takes_all=False),
        reference=_topk,
        cost=_sort_cost,
        traits=frozenset({EXACT}),  # the values are elements of x; the indices are integers
        ranges=passes("x"),  # the first output, the values
        doc="""The ``k`` largest (or smallest) values of ``x`` along ``axis``, and their indices.

        Ties keep their original order (the first occurrence comes first).

        Args:
            x (tensor<T, [*]>): rank >= 1; T is fp16, fp32 or int32.
            k (const int32): how many values; 1 <= k <= x.shape[axis]. Default: 1.
            axis (const int32): the axis to search. Default: -1.
            ascending (const bool): return the smallest values, smallest first. Default: False.
        Returns:
            tensor<T, [*]>: the values, ``x.shape`` with ``k`` at ``axis``.
            tensor<int32, [*]>: their indices along ``axis``, same shape.
        """,
    )
)

_topk16 = register(
    _topk15.evolve(
        since="ios16",
        params=(
            *_topk15.params,
            _flag_param("sort", True),
            _flag_param("return_indices", True),
        ),
        doc=_topk15.doc
        + """
        iOS16 adds ``sort`` (const bool, default True: the k values come sorted) and
        ``return_indices`` (const bool, default True; False returns only the values).
        """,
    )
)


def _default_indices_dtype(a: Args) -> str | None:
    return "int32" if bool(a.const("return_indices")) else None


register(
    _topk16.evolve(
        since="ios17",
        params=(
            param("x", _T_TOPK17, domain="T"),
            param("k", _K_TOPK17, ranks=(0,), const=True, default=1),
            *_topk16.params[2:],
            param(
                "output_indices_dtype",
                STRING,
                ranks=(0,),
                const=True,
                default=_default_indices_dtype,
            ),
        ),
        infer=_infer_topk(minus_one_takes_all=True),
        doc=_topk16.doc
        + """
        iOS17: T adds int8, int16, uint8 and uint16; k may be int8 or int16, and k = -1
        takes the whole axis; ``output_indices_dtype`` (const string, "int32" or "uint16",
        default "int32") sets the index dtype and may be given only with return_indices.
        """,
    )
)


# -- argsort and cumsum ---------------------------------------------------------------------------


def _argsort(x: np.ndarray, axis: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    return _stable_order(x, int(axis), bool(ascending))


register(
    OpDef(
        name="argsort",
        params=(_x_param(), _axis_param(-1), _flag_param("ascending", False)),
        infer=lambda a: TensorType(DType.int32, _infer_same_as_x_along_axis(a).shape),
        reference=_argsort,
        cost=_sort_cost,
        indexes_along=_indexed_axis_length,
        traits=frozenset({EXACT}),  # integer indices only
        doc="""The indices that sort ``x`` along ``axis``; ties keep their original order.

        Args:
            x (tensor<T, [*]>): rank >= 1; T is fp16, fp32 or int32.
            axis (const int32): the axis to sort. Default: -1.
            ascending (const bool): smallest first. Default: False (largest first).
        Returns:
            tensor<int32, [*]>: same shape as ``x``.
        """,
    )
)


def _infer_cumsum(a: Args) -> TensorType:
    _require_tensor(a)
    axis = int(a.const("axis"))
    # coremltools accepts only -1 among negative axes (iOS15/tensor_operation.py, cumsum).
    require(
        -1 <= axis < a.x.rank,
        "cumsum",
        "axis",
        lambda: f"expected an axis in [-1, {a.x.rank - 1}] for rank {a.x.rank}, found {axis}",
    )
    return a.x.type


def _cumsum(
    x: np.ndarray, axis: np.ndarray, exclusive: np.ndarray, reverse: np.ndarray
) -> np.ndarray:
    ax = int(axis) % x.ndim
    data = np.flip(_widen(x), ax) if bool(reverse) else _widen(x)
    out = np.cumsum(data, axis=ax)
    if bool(exclusive):
        out = np.roll(out, 1, axis=ax)  # out[i] = sum(data[:i]) ...
        np.moveaxis(out, ax, 0)[0] = 0  # ... and out[0] = 0
    out = np.flip(out, ax) if bool(reverse) else out
    return integers.fit("cumsum", out, x.dtype, "running sum") if integers.is_int(x) else out


register(
    OpDef(
        name="cumsum",
        params=(
            _x_param(),
            _axis_param(0),
            _flag_param("exclusive", False),
            _flag_param("reverse", False),
        ),
        infer=_infer_cumsum,
        reference=_cumsum,
        cost=per_output_element(1),
        ranges=running_sum,
        doc="""The running sum of ``x`` along ``axis``.

        Args:
            x (tensor<T, [*]>): rank >= 1; T is fp16, fp32 or int32.
            axis (const int32): the axis to sum along, in [-1, rank - 1]. Default: 0.
            exclusive (const bool): element i sums the elements before i (element 0 is 0).
                Default: False (element i includes itself).
            reverse (const bool): sum from the end of the axis towards its start.
                Default: False.
        Returns:
            tensor<T, [*]>: same shape as ``x``.
        """,
    )
)
