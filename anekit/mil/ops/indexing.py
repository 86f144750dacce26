"""Selecting and generating elements: slices, gathers, one_hot, band_part, fill, range_1d, shape.

Parameter names, defaults, dtype domains and shape rules follow coremltools' op
definitions (coremltools/converters/mil/mil/ops/defs/, commit e0e2f42):
iOS15/tensor_transformation.py (slices), iOS15/, iOS16/ and iOS17/scatter_gather.py
(gathers: iOS16 adds ``batch_dims``, iOS17 adds ``validate_indices``, narrower index
types, and makes negative indices out of bounds), iOS15/tensor_operation.py (the rest).

Deviations, all because anekit programs have static shapes: ``slice_by_index``
``begin``/``end``, ``fill`` ``shape``, ``range_1d`` and ``one_hot_vector_size`` must be
constants. ``slice_by_size`` may take a runtime ``begin`` (a dynamic offset) when no
``size`` is -1. An out-of-bounds index at run time has no defined result (coremltools:
"undefined but memory safe"), so the reference backend raises EvaluationError for it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anekit.errors import EvaluationError, MilTypeError
from anekit.mil.ops import device
from anekit.mil.ops.common import BOOL, INT32, axis_index, declared, require
from anekit.mil.ops.ranges import moved_or_zero, values_of
from anekit.mil.ops.registry import Args, Cost, OpDef, Param, const_ints, param, register
from anekit.mil.ops.shape import (
    MOVES,
    T15,
    T17,
    U17,
    const_axis,
    const_vector,
    declare,
    reads_what_it_writes,
    with_dtypes,
    x_param,
)
from anekit.mil.ops.traits import EXACT
from anekit.mil.types import DType, TensorType

# gather's "T" and "I" domains (iOS15/, iOS16/, iOS17/scatter_gather.py).
_G15 = frozenset({DType.fp16, DType.fp32, DType.int32})
_G17 = _G15 | {DType.int16, DType.uint16, DType.int8, DType.uint8}
_I16 = frozenset({DType.int32, DType.int16, DType.uint16})
_I17 = _I16 | {DType.int8, DType.uint8}
_GATHER_TRAITS = frozenset({EXACT})


def _flags(op: str, name: str, value: Any, rank: int) -> list[bool]:
    flags = [bool(v) for v in np.atleast_1d(value)] if value is not None else [False] * rank
    require(
        len(flags) == rank,
        op,
        name,
        lambda: f"expected {rank} flags (rank of x), found {len(flags)}",
    )
    return flags


def _ints(op: str, name: str, value: Any, rank: int) -> list[int]:
    ints = const_ints(value)
    require(
        len(ints) == rank, op, name, lambda: f"expected {rank} entries (rank of x), found {ints}"
    )
    return ints


# -- slice_by_index --------------------------------------------------------------------------


def slice_items(shape: tuple, spec: dict[str, Any]) -> tuple[int | slice, ...]:
    """The NumPy index of slice_by_index: a slice per dimension, an int where squeezed.

    ``spec`` holds begin, end and the optional stride and masks. Python slicing rules
    apply; an end below -size with a negative stride is rejected because coremltools'
    shape rule (clamp to 0) and value rule (Python: through index 0) disagree there.
    """
    op, rank = "slice_by_index", len(shape)
    begin = _ints(op, "begin", spec["begin"], rank)
    end = _ints(op, "end", spec["end"], rank)
    stride = (
        _ints(op, "stride", spec.get("stride"), rank)
        if spec.get("stride") is not None
        else [1] * rank
    )
    masks = {
        k: _flags(op, k, spec.get(k), rank) for k in ("begin_mask", "end_mask", "squeeze_mask")
    }
    items: list[int | slice] = []
    for i, d in enumerate(shape):
        start = None if masks["begin_mask"][i] else begin[i]
        if masks["squeeze_mask"][i]:
            index = start or 0
            require(
                -d <= index < d,
                op,
                "begin",
                lambda: f"index {index} out of range for dimension {i} of size {d}",
            )
            items.append(index % d)
            continue
        step = stride[i]
        stop = None if masks["end_mask"][i] else end[i]
        require(step != 0, op, "stride", lambda: f"stride of dimension {i} is 0")
        # an end below -d with a negative stride runs past index 0 (Python's and NumPy's
        # reading, which coremltools' value inference uses): index 0 is included
        chosen = slice(start, stop, step)
        require(
            len(range(*chosen.indices(d))) > 0,
            op,
            "end",
            lambda: (
                f"dimension {i} (size {d}) slices to nothing: begin {start}, end {stop}, stride {step}"
            ),
        )
        items.append(chosen)
    return tuple(items)


def _sliced_shape(shape: tuple, items: tuple[int | slice, ...]) -> tuple[int, ...]:
    return tuple(
        len(range(*s.indices(d))) for d, s in zip(shape, items, strict=True) if isinstance(s, slice)
    )


_SLICE_SPEC = ("begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask")


def _slice_by_index_infer(a: Args) -> TensorType:
    items = slice_items(a.x.shape, {k: a.const(k) for k in _SLICE_SPEC})
    return TensorType(a.x.dtype, _sliced_shape(a.x.shape, items))


def _slice_by_index(x: np.ndarray, **spec: Any) -> np.ndarray:
    return x[slice_items(x.shape, spec)]


def _last_axis_start(args: dict[str, Any]) -> int:
    """The first index slice_by_index takes on the last axis of x (N7's width offset)."""
    shape = args["x"].shape
    last = slice_items(shape, {k: args.get(k) for k in _SLICE_SPEC})[-1]
    return last if isinstance(last, int) else last.indices(shape[-1])[0]


def _index_vector(name: str, **kw: Any) -> Param:
    return const_vector(name, INT32, domain="U", **kw)


_slice15 = declare(
    "slice_by_index",
    (
        x_param(),
        _index_vector("begin"),
        _index_vector("end"),
        _index_vector("stride", optional=True),
        const_vector("begin_mask", BOOL, optional=True),
        const_vector("end_mask", BOOL, optional=True),
        const_vector("squeeze_mask", BOOL, optional=True),
    ),
    _slice_by_index_infer,
    _slice_by_index,
    cost=reads_what_it_writes,
    numerics=device.width_offset_clamp(_last_axis_start),
    doc="""Slice x as ``x[begin[0]:end[0]:stride[0], ...]`` (Python slicing rules).

    Args:
        x (tensor<T, [*]>): the tensor.
        begin (const tensor<U, [rank(x)]>): first index per dimension; negative counts from
            the end.
        end (const tensor<U, [rank(x)]>): exclusive end per dimension.
        stride (const tensor<U, [rank(x)]>): step per dimension, not 0. Default: all 1.
        begin_mask (const tensor<bool, [rank(x)]>): true ignores begin (start at the edge).
            Default: all false.
        end_mask (const tensor<bool, [rank(x)]>): true ignores end (run to the edge).
            Default: all false.
        squeeze_mask (const tensor<bool, [rank(x)]>): true takes the single element at begin
            and drops the dimension. Default: all false.
    Returns:
        tensor<T, [*]>: the slice; every kept dimension must be non-empty.
    """,
    traits=MOVES,
)
register(with_dtypes(_slice15, "ios17", x=T17, begin=U17, end=U17, stride=U17))


# -- slice_by_size ---------------------------------------------------------------------------


def size_window(op: str, shape: tuple, begin: Any, size: Any) -> list[tuple[int, int]]:
    """(start, length) per dimension; a size of -1 runs to the end (needs a known begin)."""
    rank = len(shape)
    sizes = _ints(op, "size", size, rank)
    starts = _ints(op, "begin", begin, rank) if begin is not None else None
    window = []
    for i, (d, s) in enumerate(zip(shape, sizes, strict=True)):
        require(s == -1 or s >= 1, op, "size", lambda: f"expected sizes >= 1 or -1, found {sizes}")
        if starts is None:
            require(s >= 1, op, "size", "-1 (to the end) needs a constant begin")
            require(s <= d, op, "size", lambda: f"size {s} exceeds dimension {i} of size {d}")
            window.append((0, s))
            continue
        b = starts[i] + d if starts[i] < 0 else starts[i]
        length = d - b if s == -1 else s
        require(
            0 <= b < d and b + length <= d,
            op,
            "begin",
            lambda: f"window [{starts[i]}, +{s}) leaves dimension {i} of size {d}",
        )
        window.append((b, length))
    return window


def _slice_by_size_infer(a: Args) -> TensorType:
    window = size_window("slice_by_size", a.x.shape, a.const("begin"), a.const("size"))
    return TensorType(a.x.dtype, tuple(length for _, length in window))


def _slice_by_size(x: np.ndarray, begin: np.ndarray, size: np.ndarray) -> np.ndarray:
    try:
        window = size_window("slice_by_size", x.shape, begin, size)
    except MilTypeError as e:  # begin was a runtime value: a window outside x has no result
        raise EvaluationError(f"slice_by_size: begin {const_ints(begin)}: {e.message}") from None
    return x[tuple(slice(b, b + length) for b, length in window)]


_slice_size15 = declare(
    "slice_by_size",
    (x_param(), param("begin", INT32, ranks=(1,), domain="U"), _index_vector("size")),
    _slice_by_size_infer,
    _slice_by_size,
    cost=reads_what_it_writes,
    infer_values=frozenset({"begin"}),  # a const begin fixes the window
    numerics=device.width_offset_clamp(
        lambda a: size_window("slice_by_size", a["x"].shape, a["begin"], a["size"])[-1][0]
    ),
    doc="""Take the window of x that starts at ``begin`` and spans ``size``.

    Args:
        x (tensor<T, [*]>): the tensor.
        begin (tensor<U, [rank(x)]>): start per dimension, negative counts from the end; may
            be a runtime tensor (then no size may be -1).
        size (const tensor<U, [rank(x)]>): length per dimension (>= 1), or -1 for "to the end".
    Returns:
        tensor<T, [*]>: the window; it must lie inside x.
    """,
    traits=MOVES,
)
register(with_dtypes(_slice_size15, "ios17", x=T17, begin=U17, size=U17))


# -- gather, gather_along_axis ---------------------------------------------------------------


def _checked_indices(op: str, indices: np.ndarray, size: int, negative_ok: bool) -> np.ndarray:
    """Indices as int64 in [0, size): negative ones wrap where allowed, others are rejected."""
    idx = np.asarray(indices).astype(np.int64)
    low = -size if negative_ok else 0
    bad = idx[(idx < low) | (idx >= size)]
    if bad.size:
        raise EvaluationError(
            f"{op}: index {int(bad.flat[0])} out of range [{low}, {size}) "
            f"({bad.size} of {idx.size} indices); the result would be undefined"
        )
    return np.where(idx < 0, idx + size, idx)


def _check_const_indices(a: Args, size: Any) -> None:
    """validate_indices: reject out-of-range constant indices at compile time."""
    if not bool(declared(a, "validate_indices", False)) or a.indices.const is None:
        return
    idx = np.asarray(a.indices.const)
    bad = idx[(idx < 0) | (idx >= size)]
    require(
        not bad.size,
        a.opdef.name,
        "indices",
        lambda: f"index {bad.flat[0] if bad.size else 0} out of [0, {size})",
    )


def _gather_infer(a: Args) -> TensorType:
    op, x, ind = "gather", a.x, a.indices
    axis = axis_index(op, "axis", int(a.const("axis")), x.rank)
    bd = int(declared(a, "batch_dims", 0))
    require(
        0 <= bd <= min(axis, ind.rank),
        op,
        "batch_dims",
        lambda: (
            f"expected 0 <= batch_dims <= min(axis {axis}, rank(indices) {ind.rank}), found {bd}"
        ),
    )
    require(
        x.shape[:bd] == ind.shape[:bd],
        op,
        "indices",
        lambda: f"leading {bd} dimensions differ: x {list(x.shape)}, indices {list(ind.shape)}",
    )
    _check_const_indices(a, x.shape[axis])
    return TensorType(x.dtype, x.shape[:axis] + ind.shape[bd:] + x.shape[axis + 1 :])


def _gather(negative_ok: bool):
    def reference(
        x: np.ndarray, indices: np.ndarray, axis: Any, batch_dims: Any = 0, **_: Any
    ) -> Any:
        ax, bd = int(axis) % x.ndim, int(batch_dims)
        idx = _checked_indices("gather", indices, x.shape[ax], negative_ok)
        if bd == 0:
            return np.take(x, idx, axis=ax)
        batch = x.shape[:bd]
        xs = x.reshape((-1,) + x.shape[bd:])
        ids = idx.reshape((-1,) + idx.shape[bd:])
        out = np.stack([np.take(xi, ii, axis=ax - bd) for xi, ii in zip(xs, ids, strict=True)])
        return out.reshape(batch + out.shape[1:])

    return reference


def _along_infer(a: Args) -> TensorType:
    op, x, ind = "gather_along_axis", a.x, a.indices
    axis = axis_index(op, "axis", int(a.const("axis")), x.rank)
    same = ind.rank == x.rank and all(
        d == e for i, (d, e) in enumerate(zip(x.shape, ind.shape, strict=True)) if i != axis
    )
    require(
        same,
        op,
        "indices",
        lambda: (
            f"expected x's shape except on axis {axis}, found x {list(x.shape)}, indices {list(ind.shape)}"
        ),
    )
    _check_const_indices(a, x.shape[axis])
    return TensorType(x.dtype, ind.shape)


def _along(negative_ok: bool):
    def reference(x: np.ndarray, indices: np.ndarray, axis: Any, **_: Any) -> np.ndarray:
        ax = int(axis) % x.ndim
        idx = _checked_indices("gather_along_axis", indices, x.shape[ax], negative_ok)
        return np.take_along_axis(x, idx, axis=ax)

    return reference


def _gather_versions(base: OpDef, gather_fn: Any) -> None:
    """iOS16 widens the index types (gather also gains batch_dims); iOS17 adds validate_indices."""
    extra16 = (const_axis("batch_dims", 0),) if base.name == "gather" else ()
    v16 = with_dtypes(base.evolve(params=base.params + extra16), "ios16", indices=_I16)
    register(v16)
    validate = param("validate_indices", BOOL, ranks=(0,), const=True, default=False)
    v17 = v16.evolve(
        params=v16.params + (validate,),
        reference=gather_fn(False),
        infer_values=frozenset({"indices"}),  # validate_indices checks const indices
    )
    register(with_dtypes(v17, "ios17", x=_G17, indices=_I17))


_GATHER_DOC = """Gather slices of x along ``axis`` at ``indices`` (tf.gather).

out[p..., i..., q...] = x[p..., indices[i...], q...], with the batch_dims leading
dimensions shared by x and indices.

Args:
    x (tensor<T, [*D]>): the tensor (T: fp16, fp32, int32; iOS17 adds 8/16-bit ints).
    indices (tensor<I, [*N]>): runtime or const indices into dimension ``axis``: in
        [-D[axis], D[axis]) up to iOS16, in [0, D[axis]) from iOS17.
    axis (const int32): the gathered dimension; negative counts from the end. Default: 0.
    batch_dims (const int32): from iOS16, leading dimensions x and indices share. Default: 0.
    validate_indices (const bool): from iOS17, reject out-of-range const indices.
        Default: false.
Returns:
    tensor<T, [D[:axis] + N[batch_dims:] + D[axis+1:]]>: the gathered values.
"""
_gather15 = declare(
    "gather",
    (x_param(_G15), param("indices", INT32), const_axis("axis", 0)),
    _gather_infer,
    _gather(True),
    cost=lambda a, outs: Cost(
        0.0, float((outs[0].nbytes or 0) + (a.indices.type.nbytes or 0)), float(outs[0].nbytes or 0)
    ),
    traits=_GATHER_TRAITS,
    doc=_GATHER_DOC,
)
_gather_versions(_gather15, _gather)

_along15 = declare(
    "gather_along_axis",
    (x_param(_G15), param("indices", INT32), const_axis("axis", 0)),
    _along_infer,
    _along(True),
    cost=_gather15.cost,
    traits=_GATHER_TRAITS,
    doc="""Take values of x along ``axis`` at positions ``indices`` (np.take_along_axis).

    out[..., i, ...] = x[..., indices[..., i, ...], ...] on dimension ``axis``.

    Args:
        x (tensor<T, [*D]>): the tensor (T: fp16, fp32, int32; iOS17 adds 8/16-bit ints).
        indices (tensor<I, [*K]>): same rank as x and same sizes except on ``axis``; index
            ranges as for gather.
        axis (const int32): the dimension indexed; negative counts from the end. Default: 0.
        validate_indices (const bool): from iOS17, reject out-of-range const indices.
            Default: false.
    Returns:
        tensor<T, indices.shape>: the selected values.
    """,
)
_gather_versions(_along15, _along)
# -- tensors made from a shape: fill, range_1d, shape -----------------------------------------


def _fill_infer(a: Args) -> TensorType:
    dims = const_ints(a.const("shape"))
    require(
        all(d > 0 for d in dims), "fill", "shape", lambda: f"expected positive sizes, found {dims}"
    )
    return TensorType(a.value.dtype, tuple(dims))


declare(
    "fill",
    (const_vector("shape"), param("value", T15, ranks=(0,), const=True, default=0.0)),
    _fill_infer,
    lambda shape, value: np.full(const_ints(shape), value),
    ranges=values_of("value"),
    doc="""Return a tensor of the given shape with every element equal to ``value``.

    Args:
        shape (const tensor<int32, [K]>): the output shape (positive sizes).
        value (const T): the element. Default: 0.0 (fp32).
    Returns:
        tensor<T, shape>: the filled tensor.
    """,
)


def range_length(op: str, start: Any, end: Any, step: Any) -> int:
    """Element count of ``start, start + step, ...`` up to ``end`` exclusive (NumPy arange)."""
    require(float(step) != 0, op, "step", "step must not be 0")
    n = math.ceil((float(end) - float(start)) / float(step))
    require(
        n >= 1,
        op,
        "end",
        lambda: (
            f"the range from {start} to {end} by {step} is empty; tensors need at least one element"
        ),
    )
    return n


def _range_reference(end: np.ndarray, start: np.ndarray, step: np.ndarray) -> np.ndarray:
    n = range_length("range_1d", start, end, step)
    return start + step * np.arange(n, dtype=start.dtype)


def _scalar_const(name: str) -> Param:
    return param(
        name, frozenset({DType.fp16, DType.fp32, DType.int32}), ranks=(0,), const=True, domain="T"
    )


declare(
    "range_1d",
    (_scalar_const("end"), _scalar_const("start"), _scalar_const("step")),
    lambda a: TensorType(
        a.start.dtype,
        (range_length("range_1d", a.const("start"), a.const("end"), a.const("step")),),
    ),
    _range_reference,
    ranges=values_of("start", "end"),
    doc="""Return ``start, start + step, ...`` up to ``end`` exclusive, as NumPy's arange.

    Args:
        end (const T): the exclusive bound (T: fp16, fp32, int32).
        start (const T): the first element.
        step (const T): the increment, not 0.
    Returns:
        tensor<T, [ceil((end - start) / step)]>: the sequence (at least one element).
    """,
)


def _shape_infer(a: Args) -> TensorType:
    require(a.x.rank >= 1, "shape", "x", lambda: f"expected rank >= 1, found scalar {a.x.type}")
    return TensorType(DType.int32, (a.x.rank,))


declare(
    "shape",
    (x_param(),),
    _shape_infer,
    lambda x: np.array(x.shape, dtype=np.int32),
    cost=lambda a, outs: Cost(0.0, 0.0, float(outs[0].nbytes or 0)),
    ranges=None,  # integers: the shape, not x's values
    doc="""Return the shape of x as a tensor.

    Args:
        x (tensor<T, [*]>): a tensor of rank >= 1; only its shape is read.
    Returns:
        tensor<int32, [rank(x)]>: x.shape.
    """,
)


# -- one_hot, band_part ----------------------------------------------------------------------


def _one_hot_infer(a: Args) -> TensorType:
    depth = int(a.const("one_hot_vector_size"))
    require(depth >= 1, "one_hot", "one_hot_vector_size", lambda: f"expected >= 1, found {depth}")
    axis = axis_index("one_hot", "axis", int(a.const("axis")), a.indices.rank + 1)
    shape = list(a.indices.shape)
    shape.insert(axis, depth)
    return TensorType(a.on_value.dtype, tuple(shape))


def _one_hot(
    indices: np.ndarray,
    one_hot_vector_size: np.ndarray,
    axis: np.ndarray,
    on_value: np.ndarray,
    off_value: np.ndarray,
) -> np.ndarray:
    hot = indices[..., None] == np.arange(int(one_hot_vector_size))
    hot = np.moveaxis(hot, -1, int(axis) % hot.ndim)
    return np.where(hot, on_value, off_value)


def _value_param(name: str, default: int) -> Param:
    return param(name, T15, ranks=(0,), const=True, default=default, domain="T")


declare(
    "one_hot",
    (
        param("indices", INT32),
        param("one_hot_vector_size", INT32, ranks=(0,), const=True),
        const_axis("axis", -1),
        _value_param("on_value", 1),
        _value_param("off_value", 0),
    ),
    _one_hot_infer,
    _one_hot,
    ranges=values_of("on_value", "off_value"),
    doc="""Expand indices into one-hot vectors along a new dimension.

    Args:
        indices (tensor<int32, [*D]>): positions of ``on_value``; one outside
            [0, one_hot_vector_size) gives a vector of ``off_value`` (as tf.one_hot).
        one_hot_vector_size (const int32): length of each vector (>= 1).
        axis (const int32): position of the new dimension, in [-(rank + 1), rank].
            Default: -1.
        on_value (const T): the value at the index. Default: 1.
        off_value (const T): every other value. Default: 0.
    Returns:
        tensor<T, [*D with one_hot_vector_size inserted at axis]>: the one-hot tensor.
    """,
)


def _band_part_infer(a: Args) -> TensorType:
    require(a.x.rank >= 2, "band_part", "x", lambda: f"expected rank >= 2, found {a.x.type}")
    return a.x.type


def _band_part(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    rows = np.arange(x.shape[-2])[:, None]
    cols = np.arange(x.shape[-1])[None, :]
    keep = ((lower < 0) | (rows - cols <= lower)) & ((upper < 0) | (cols - rows <= upper))
    return np.where(keep, x, np.zeros((), x.dtype))


declare(
    "band_part",
    (x_param(), const_axis("lower", -1), const_axis("upper", -1)),
    _band_part_infer,
    _band_part,
    ranges=moved_or_zero,
    doc="""Keep a diagonal band of the innermost matrices of x and zero the rest.

    Element (m, n) is kept when (lower < 0 or m - n <= lower) and (upper < 0 or
    n - m <= upper): band_part(x, 0, -1) is the upper triangle, (-1, 0) the lower one.

    Args:
        x (tensor<T, [*, M, N]>): a tensor of rank >= 2.
        lower (const int32): sub-diagonals kept; negative keeps all. Default: -1.
        upper (const int32): super-diagonals kept; negative keeps all. Default: -1.
    Returns:
        tensor<T, x.shape>: the banded tensor.
    """,
)
