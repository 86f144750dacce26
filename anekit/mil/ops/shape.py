"""Data movement: reshaping, permuting, joining, splitting and tiling, plus shared helpers.

Parameter names, defaults, dtype domains and shape rules follow coremltools' op
definitions (coremltools/converters/mil/mil/ops/defs/, commit e0e2f42):
iOS15/tensor_transformation.py, iOS15/tensor_operation.py and
iOS17/tensor_transformation.py (reshape's new rule for 0, wider dtypes). The family
continues in ``indexing.py`` (slices, gathers, generated tensors) and ``spatial.py``
(pad, block rearrangements), which use the helpers defined here.

Where coremltools accepts a runtime tensor for something that fixes the output
shape (reshape ``shape``, tile ``reps``), we require a constant: anekit programs have
static shapes. Every op here moves values exactly: no arithmetic, no rounding.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.mil.ops.common import (
    ANY,
    BOOL,
    INT32,
    axes_indices,
    axis_index,
    require,
)
from anekit.mil.ops.ranges import RangeFn, moved
from anekit.mil.ops.registry import (
    Args,
    Cost,
    Numerics,
    OpDef,
    Param,
    const_ints,
    param,
    register,
)
from anekit.mil.ops.traits import EXACT, MOVEMENT
from anekit.mil.types import DType, TensorType

# The "T" domain of most ops here in iOS15, and its iOS17 widening (iOS17/tensor_transformation.py).
T15 = frozenset({DType.fp16, DType.fp32, DType.int32, DType.bool})
T17 = T15 | {DType.int8, DType.uint8, DType.int16, DType.uint16}
# Index tensors ("U") from iOS17.
U17 = frozenset({DType.int8, DType.int16, DType.int32})
UINT32 = frozenset({DType.uint32})

# -- shared helpers --------------------------------------------------------------------------


def moves(a: Args, outs: tuple[TensorType, ...]) -> Cost:
    """Cost of a pure data movement: no arithmetic; every input read once, every output written."""
    return Cost(0.0, float(a.input_bytes()), float(sum(t.nbytes or 0 for t in outs)))


def reads_what_it_writes(a: Args, outs: tuple[TensorType, ...]) -> Cost:
    """Cost of a selection (slice): it reads only the elements it writes."""
    written = float(sum(t.nbytes or 0 for t in outs))
    return Cost(0.0, written, written)


MOVES = frozenset({EXACT, MOVEMENT})  # the traits of an op that only moves its input


def with_dtypes(opdef: OpDef, since: str, **dtypes: frozenset[DType]) -> OpDef:
    """A later version of ``opdef`` whose named parameters accept other dtypes."""
    params = tuple(
        dataclasses.replace(p, dtypes=dtypes[p.name]) if p.name in dtypes else p
        for p in opdef.params
    )
    return opdef.evolve(since=since, params=params)


def static_shape(a: Args, name: str = "x") -> tuple[int, ...]:
    """The shape of parameter ``name``; MilTypeError if a dimension is symbolic."""
    shape = getattr(a, name).shape
    require(
        all(isinstance(d, int) for d in shape),
        a.opdef.name,
        name,
        lambda: f"expected a static shape, found {list(shape)}",
    )
    return tuple(shape)


def const_axis(name: str, default: Any = None) -> Param:
    """A const int32 scalar parameter (an axis, a factor, a count)."""
    if default is None:
        return param(name, INT32, ranks=(0,), const=True)
    return param(name, INT32, ranks=(0,), const=True, default=default)


def const_vector(name: str, dtypes: frozenset[DType] = INT32, **kw: Any) -> Param:
    """A const rank-1 parameter (axes, a shape, begin/end indices, masks)."""
    return param(name, dtypes, ranks=(1,), const=True, **kw)


def x_param(dtypes: frozenset[DType] = T15) -> Param:
    return param("x", dtypes, domain="T")


def declare(
    name: str,
    params: tuple[Param, ...],
    infer: Callable[[Args], Any],
    reference: Callable[..., Any],
    doc: str,
    *,
    since: str = "ios15",
    cost: Callable[[Args, tuple[TensorType, ...]], Cost] = moves,
    traits: frozenset[str] = frozenset({EXACT}),
    infer_values: frozenset[str] = frozenset(),
    numerics: Numerics | None = None,
    ranges: RangeFn | None = moved,
) -> OpDef:
    """Register a data-movement op (by default "exact": every output element is an input's, so
    its bound passes through)."""
    return register(
        OpDef(
            name=name,
            params=params,
            infer=infer,
            reference=reference,
            cost=cost,
            traits=traits,
            since=since,
            doc=doc,
            infer_values=infer_values,
            numerics=numerics,
            ranges=ranges,
        )
    )


def _like_x(a: Args, shape: tuple) -> TensorType:
    return TensorType(a.x.dtype, tuple(shape))


# -- reshape ---------------------------------------------------------------------------------


def reshape_target(op: str, x_shape: tuple[int, ...], spec: list[int], right_zeros: bool) -> tuple:
    """The output shape of reshape: 0 copies a dimension of x, -1 takes what is left.

    iOS15 copies ``x.shape[i]`` for a 0 at position ``i`` and needs ``len(shape) == rank(x)``;
    iOS17 aligns ``shape`` and ``x.shape`` on the right and uses 1 where x has no dimension.
    """
    require(
        all(d >= -1 for d in spec),
        op,
        "shape",
        lambda: f"expected dimensions >= -1, found shape {spec}",
    )
    require(
        spec.count(-1) <= 1, op, "shape", lambda: f"at most one -1 is allowed, found shape {spec}"
    )
    out = list(spec)
    if 0 in spec:
        if right_zeros:
            pad = len(spec) - len(x_shape)
            out = [
                (x_shape[i - pad] if i - pad >= 0 else 1) if d == 0 else d
                for i, d in enumerate(spec)
            ]
        else:
            require(
                len(spec) == len(x_shape),
                op,
                "shape",
                lambda: f"a 0 in shape {spec} needs len(shape) == rank(x) = {len(x_shape)}",
            )
            out = [x_shape[i] if d == 0 else d for i, d in enumerate(spec)]
    total = math.prod(x_shape)
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        require(
            known > 0 and total % known == 0,
            op,
            "shape",
            lambda: (
                f"shape {spec} cannot hold x {list(x_shape)}: {total} elements are not a "
                f"multiple of the {known} elements the other dimensions give"
            ),
        )
        out[out.index(-1)] = total // known
    count = math.prod(out)
    require(
        count == total,
        op,
        "shape",
        lambda: f"shape {spec} has {count} elements but x {list(x_shape)} has {total}",
    )
    return tuple(out)


def _reshape(right_zeros: bool) -> tuple[Callable[[Args], TensorType], Callable[..., np.ndarray]]:
    def infer(a: Args) -> TensorType:
        spec = const_ints(a.const("shape"))
        return _like_x(a, reshape_target("reshape", static_shape(a), spec, right_zeros))

    def reference(x: np.ndarray, shape: np.ndarray) -> np.ndarray:
        return x.reshape(reshape_target("reshape", x.shape, const_ints(shape), right_zeros))

    return infer, reference


_RESHAPE_DOC = """Return x with a new shape holding the same elements in the same (row-major) order.

Args:
    x (tensor<T, [*]>): the tensor.
    shape (const tensor<int32, [K]>): the new shape. -1 (at most once) takes the remaining
        size; 0 copies a dimension of x: the one at the same index (iOS15, needs
        K == rank(x)) or, from iOS17, the one at the same position counted from the right
        (1 where x has none).
Returns:
    tensor<T, shape>: x reshaped; the element count must not change.
"""
_reshape15 = declare(
    "reshape",
    (x_param(), const_vector("shape")),
    *_reshape(right_zeros=False),
    doc=_RESHAPE_DOC,
    traits=MOVES,
)
_reshape17_infer, _reshape17_ref = _reshape(right_zeros=True)
register(
    with_dtypes(_reshape15, "ios17", x=T17, shape=U17).evolve(
        infer=_reshape17_infer, reference=_reshape17_ref
    )
)


# -- transpose, squeeze, expand_dims, flatten2d, reverse ---------------------------------------


def _perm(a: Args) -> list[int]:
    perm = const_ints(a.const("perm")) if a.x.rank else []
    require(
        len(perm) == a.x.rank,
        "transpose",
        "perm",
        lambda: f"expected {a.x.rank} entries (rank of x), found perm {perm}",
    )
    return axes_indices("transpose", "perm", perm, a.x.rank) if perm else []


_transpose15 = declare(
    "transpose",
    (x_param(), const_vector("perm")),
    lambda a: _like_x(a, tuple(a.x.shape[i] for i in _perm(a))),
    lambda x, perm: np.transpose(x, const_ints(perm) if x.ndim else None),
    doc="""Permute the dimensions of x.

    Args:
        x (tensor<T, [*]>): the tensor.
        perm (const tensor<int32, [rank(x)]>): output dimension i is input dimension perm[i];
            negative entries count from the end.
    Returns:
        tensor<T, [x.shape[perm[i]] ...]>: the permuted tensor.
    """,
    traits=MOVES,
)
register(with_dtypes(_transpose15, "ios17", x=T17))


def squeezed_shape(op: str, shape: tuple, axes: Any) -> tuple:
    """Shape after removing size-1 dimensions (all, or those in ``axes``; others are kept)."""
    if axes is None:
        return tuple(d for d in shape if d != 1)
    chosen = axes_indices(op, "axes", axes, len(shape))
    return tuple(d for i, d in enumerate(shape) if not (i in chosen and d == 1))


def _squeeze_infer(a: Args) -> TensorType:
    require(a.x.rank >= 1, "squeeze", "x", lambda: f"expected rank >= 1, found {a.x.type}")
    return _like_x(a, squeezed_shape("squeeze", a.x.shape, a.const("axes")))


_squeeze15 = declare(
    "squeeze",
    (x_param(), const_vector("axes", optional=True)),
    _squeeze_infer,
    lambda x, axes=None: x.reshape(squeezed_shape("squeeze", x.shape, axes)),
    doc="""Remove dimensions of size 1.

    Args:
        x (tensor<T, [*]>): a tensor of rank >= 1.
        axes (const tensor<int32, [K]>): the dimensions to remove; listed dimensions whose
            size is not 1 are kept (PyTorch's rule). Default: every size-1 dimension.
    Returns:
        tensor<T, [*]>: x without those dimensions (a scalar if none remain).
    """,
    traits=MOVES,
)
register(with_dtypes(_squeeze15, "ios17", x=T17))


def expanded_shape(op: str, shape: tuple, axes: Any) -> tuple:
    """Shape after inserting a size-1 dimension at each of ``axes`` (output positions)."""
    rank = len(shape) + len(const_ints(axes))
    at = set(axes_indices(op, "axes", axes, rank))
    rest = iter(shape)
    return tuple(1 if i in at else next(rest) for i in range(rank))


_expand15 = declare(
    "expand_dims",
    (x_param(), const_vector("axes")),
    lambda a: _like_x(a, expanded_shape("expand_dims", a.x.shape, a.const("axes"))),
    lambda x, axes: x.reshape(expanded_shape("expand_dims", x.shape, axes)),
    doc="""Insert dimensions of size 1.

    Args:
        x (tensor<T, [*]>): any tensor, scalars included.
        axes (const tensor<int32, [K]>): positions of the new dimensions in the output,
            in [-(rank(x) + K), rank(x) + K).
    Returns:
        tensor<T, [*]>: x with rank(x) + K dimensions.
    """,
    traits=MOVES,
)
register(with_dtypes(_expand15, "ios17", x=T17))


def flattened_shape(op: str, shape: tuple, axis: int) -> tuple[int, int]:
    """(product of dims before axis, product of dims from axis); axis in [-rank, rank]."""
    rank = len(shape)
    require(
        -rank <= axis <= rank, op, "axis", lambda: f"axis {axis} out of range [-{rank}, {rank}]"
    )
    axis = axis + rank if axis < 0 else axis
    return math.prod(shape[:axis]), math.prod(shape[axis:])


declare(
    "flatten2d",
    (x_param(), const_axis("axis", 1)),
    lambda a: _like_x(a, flattened_shape("flatten2d", static_shape(a), int(a.const("axis")))),
    lambda x, axis: x.reshape(flattened_shape("flatten2d", x.shape, int(axis))),
    doc="""Flatten x to a matrix: dimensions before ``axis`` make the rows, the rest the columns.

    Args:
        x (tensor<T, [*]>): the tensor.
        axis (const int32): where to split, in [-rank(x), rank(x)]. Default: 1.
    Returns:
        tensor<T, [prod(x.shape[:axis]), prod(x.shape[axis:])]>: x reshaped.
    """,
    traits=MOVES,
)


def _reverse_reference(x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    if axes is None:
        return np.flip(x)
    return np.flip(x, tuple(axes_indices("reverse", "axes", axes, x.ndim)))


def _reverse_infer(a: Args) -> TensorType:
    if a.axes is not None:
        axes_indices("reverse", "axes", a.const("axes"), a.x.rank)
    return a.x.type


_reverse15 = declare(
    "reverse",
    (x_param(), const_vector("axes", optional=True)),
    _reverse_infer,
    _reverse_reference,
    doc="""Reverse the order of elements along some dimensions.

    Args:
        x (tensor<T, [*]>): the tensor.
        axes (const tensor<int32, [K]>): dimensions to reverse. Default: all of them.
    Returns:
        tensor<T, x.shape>: x reversed along ``axes``.
    """,
    traits=MOVES,
)
register(with_dtypes(_reverse15, "ios17", x=T17))


# -- concat, stack, split, tile --------------------------------------------------------------


def _concat_infer(a: Args) -> TensorType:
    values = a.values
    require(len(values) >= 1, "concat", "values", "expected at least one tensor")
    first = values[0]
    rank = first.rank
    require(
        rank >= 1, "concat", "values", lambda: f"expected tensors of rank >= 1, found {first.type}"
    )
    axis = axis_index("concat", "axis", int(a.const("axis")), rank)
    interleave = bool(a.const("interleave"))
    for v in values[1:]:
        same = v.rank == rank and all(
            d == e
            for i, (d, e) in enumerate(zip(v.shape, first.shape, strict=True))
            if interleave or i != axis
        )
        rule = "equal shapes (interleave)" if interleave else f"equal shapes except on axis {axis}"
        require(
            same,
            "concat",
            "values",
            lambda: f"expected {rule}, found {list(first.shape)} and {list(v.shape)}",
        )
    shape = list(first.shape)
    shape[axis] = sum(v.shape[axis] for v in values)
    return TensorType(first.dtype, tuple(shape))


def _concat_reference(values: tuple, axis: np.ndarray, interleave: np.ndarray) -> np.ndarray:
    ax = int(axis) % values[0].ndim
    if not bool(interleave):
        return np.concatenate(values, axis=ax)
    # out[k::n] along axis = values[k]: stack right after axis, then merge the two.
    shape = list(values[0].shape)
    shape[ax] *= len(values)
    return np.stack(values, axis=ax + 1).reshape(shape)


declare(
    "concat",
    (
        param("values", ANY, variadic=True, domain="T"),
        const_axis("axis"),
        param("interleave", BOOL, ranks=(0,), const=True, default=False),
    ),
    _concat_infer,
    _concat_reference,
    doc="""Join tensors along an existing dimension.

    Args:
        values (tuple of tensor<T, [*]>): tensors of one rank (>= 1) and dtype; their shapes
            differ only on ``axis`` (and not at all if ``interleave``).
        axis (const int32): the dimension to join along; negative counts from the end.
        interleave (const bool): take one slice of each input in turn, so that
            ``out[k::n] = values[k]`` along ``axis`` for n inputs. Default: false.
    Returns:
        tensor<T, [*]>: the inputs' shape with dimension ``axis`` summed over them.
    """,
    traits=MOVES,
)


def _stack_infer(a: Args) -> TensorType:
    values = a.values
    require(len(values) >= 1, "stack", "values", "expected at least one tensor")
    first = values[0]
    for v in values[1:]:
        require(
            v.shape == first.shape,
            "stack",
            "values",
            lambda: f"expected equal shapes, found {list(first.shape)} and {list(v.shape)}",
        )
    axis = axis_index("stack", "axis", int(a.const("axis")), first.rank + 1)
    shape = list(first.shape)
    shape.insert(axis, len(values))
    return TensorType(first.dtype, tuple(shape))


declare(
    "stack",
    (param("values", ANY, variadic=True, domain="T"), const_axis("axis")),
    _stack_infer,
    lambda values, axis: np.stack(values, axis=int(axis)),
    doc="""Join tensors of one shape along a new dimension.

    Args:
        values (tuple of tensor<T, [*]>): tensors of identical shape and dtype.
        axis (const int32): position of the new dimension, in [-(rank + 1), rank].
    Returns:
        tensor<T, [*]>: the common shape with len(values) inserted at ``axis``.
    """,
    traits=MOVES,
)


def piece_sizes(op: str, shape: tuple, axis: int, num_splits: Any, sizes: Any) -> list[int]:
    """The size of every piece, from ``num_splits`` (even pieces) or ``split_sizes``."""
    require(
        num_splits is not None or sizes is not None,
        op,
        "num_splits",
        "give num_splits or split_sizes",
    )
    length = shape[axis]
    if sizes is None:
        n = int(num_splits)
        require(
            n >= 1 and length % n == 0,
            op,
            "num_splits",
            lambda: f"num_splits {n} does not divide dimension {axis} of size {length}",
        )
        return [length // n] * n
    pieces = const_ints(sizes)
    require(
        all(s > 0 for s in pieces) and sum(pieces) == length,
        op,
        "split_sizes",
        lambda: f"expected positive sizes summing to {length} (dimension {axis}), found {pieces}",
    )
    require(
        num_splits is None or int(num_splits) == len(pieces),
        op,
        "num_splits",
        lambda: f"num_splits {num_splits} differs from the {len(pieces)} split_sizes {pieces}",
    )
    return pieces


def _split_axis_sizes(a: Args) -> tuple[int, list[int]]:
    require(a.x.rank >= 1, "split", "x", lambda: f"expected rank >= 1, found {a.x.type}")
    axis = axis_index("split", "axis", int(a.const("axis")), a.x.rank)
    return axis, piece_sizes(
        "split", a.x.shape, axis, a.const("num_splits"), a.const("split_sizes")
    )


def _split_infer(a: Args) -> tuple[TensorType, ...]:
    axis, sizes = _split_axis_sizes(a)
    shape = list(a.x.shape)
    return tuple(_like_x(a, tuple(shape[:axis] + [s] + shape[axis + 1 :])) for s in sizes)


def _split_reference(
    x: np.ndarray, axis: np.ndarray, num_splits: Any = None, split_sizes: Any = None
) -> tuple[np.ndarray, ...]:
    ax = int(axis) % x.ndim
    sizes = piece_sizes("split", x.shape, ax, num_splits, split_sizes)
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=ax))


declare(
    "split",
    (
        x_param(),
        param("num_splits", INT32, ranks=(0,), const=True, optional=True),
        const_vector("split_sizes", optional=True),
        const_axis("axis"),
    ),
    _split_infer,
    _split_reference,
    doc="""Cut x into consecutive pieces along one dimension (one output per piece).

    Args:
        x (tensor<T, [*]>): a tensor of rank >= 1.
        num_splits (const int32): number of equal pieces; must divide x.shape[axis].
        split_sizes (const tensor<int32, [S]>): sizes of the pieces, summing to
            x.shape[axis]. Give num_splits, split_sizes or both (then num_splits == S).
        axis (const int32): the dimension to cut; negative counts from the end.
    Returns:
        tuple of tensor<T, [*]>: the pieces, x.shape with ``axis`` set to each piece's size.
    """,
    traits=MOVES,
)


def _tile_shape(op: str, shape: tuple, reps: Any) -> tuple:
    counts = const_ints(reps)
    require(
        len(counts) == len(shape) and all(r > 0 for r in counts),
        op,
        "reps",
        lambda: f"expected {len(shape)} positive counts (rank of x), found reps {counts}",
    )
    return tuple(d * r for d, r in zip(shape, counts, strict=True))


declare(
    "tile",
    (x_param(), const_vector("reps")),
    lambda a: _like_x(a, _tile_shape("tile", a.x.shape, a.const("reps"))),
    lambda x, reps: np.tile(x, const_ints(reps)),
    doc="""Repeat x along every dimension.

    Args:
        x (tensor<T, [*]>): the tensor.
        reps (const tensor<int32, [rank(x)]>): how many copies along each dimension (> 0).
    Returns:
        tensor<T, [x.shape[i] * reps[i] ...]>: the tiled tensor.
    """,
    traits=MOVES,
)
