"""Matrix products: matmul, linear, einsum.

Parameter names, defaults and shape rules follow coremltools' ``iOS15/linear.py`` and
``iOS17/linear.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.ops import device, integers
from anekit.mil.ops.common import BOOL, FP, STRING, broadcast, mac_cost, require
from anekit.mil.ops.ranges import contraction, matmul_like
from anekit.mil.ops.registry import Args, OpDef, Param, param, register
from anekit.mil.ops.traits import MATMUL
from anekit.mil.types import DType, TensorType

MATMUL_DTYPES = frozenset({DType.fp16, DType.fp32, DType.int32})


# -- matmul --------------------------------------------------------------------------------
def _matmul_shape(a: Args) -> tuple[Any, ...]:
    """The output shape of matmul, NumPy rules (rank-1 operands promoted, then squeezed)."""
    op, xs, ys = "matmul", list(a.x.shape), list(a.y.shape)
    for name, shape in (("x", xs), ("y", ys)):
        flag = f"transpose_{name}"
        if bool(a.const(flag)):
            require(
                len(shape) >= 2,
                op,
                flag,
                lambda: f"{name} is rank 1 {shape}; it cannot be transposed",
            )
            shape[-1], shape[-2] = shape[-2], shape[-1]
    x_vec, y_vec = len(xs) == 1, len(ys) == 1
    xm = [1, *xs] if x_vec else xs
    ym = [*ys, 1] if y_vec else ys
    k_x, k_y = xm[-1], ym[-2]
    require(
        k_x == k_y or not (isinstance(k_x, int) and isinstance(k_y, int)),
        op,
        "y",
        lambda: (
            f"inner dimensions differ: x {list(a.x.shape)} gives K = {k_x}, y {list(a.y.shape)} "
            f"gives K = {k_y} (transpose_x={bool(a.const('transpose_x'))}, "
            f"transpose_y={bool(a.const('transpose_y'))})"
        ),
    )
    try:
        batch = broadcast(
            op, TensorType(a.x.dtype, tuple(xm[:-2])), TensorType(a.y.dtype, tuple(ym[:-2]))
        )
    except MilTypeError as e:
        raise MilTypeError(
            f"batch dims of x {list(a.x.shape)} and y {list(a.y.shape)} do not broadcast",
            op=op,
            param="y",
        ) from e
    return (*batch, *([] if x_vec else [xm[-2]]), *([] if y_vec else [ym[-1]]))


def _matmul_infer(a: Args) -> TensorType:
    return TensorType(a.x.dtype, _matmul_shape(a))


def _matmul_infer_ios17(a: Args) -> TensorType:
    x_const, y_const = a.x.const is not None, a.y.const is not None
    require(
        x_const != y_const or a.x.dtype == a.y.dtype,
        "matmul",
        "y",
        lambda: (
            f"x is {a.x.dtype} and y is {a.y.dtype}: dtypes may differ only when exactly one of "
            "them is const"
        ),
    )
    return TensorType(a.y.dtype if x_const and not y_const else a.x.dtype, _matmul_shape(a))


def _matmul_reference(x, y, transpose_x=False, transpose_y=False, matmul=np.matmul):
    if bool(transpose_x):
        x = np.swapaxes(x, -1, -2)
    if bool(transpose_y):
        y = np.swapaxes(y, -1, -2)
    if integers.is_int(x) and integers.is_int(y):  # exact, or an error: never wrapped
        return integers.fit("matmul", integers.matmul(x, y), np.result_type(x, y))
    return matmul(x, y)


def _matmul_contraction(a: Args) -> Any:
    """K: the last axis of x, or its second-to-last when transpose_x."""
    return a.x.shape[-2] if bool(a.const("transpose_x")) else a.x.shape[-1]


def _matmul_y_summed_axis(a: Args) -> int:
    """The axis of y that matmul sums over (K)."""
    return -1 if a.y.rank == 1 or a.const("transpose_y") else -2


def _matmul_output_axis(a: Args, operand: str) -> int | None:
    """M of a constant x (its rows; columns when transposed), N of a constant y likewise."""
    value = getattr(a, operand)
    if operand not in ("x", "y") or value.rank < 2:
        return None  # a vector operand has no output channels of its own
    transposed = bool(a.const(f"transpose_{operand}"))
    return (-1 if transposed else -2) if operand == "x" else (-2 if transposed else -1)


_MATMUL_DOC = """Batched matrix product with NumPy broadcasting of the batch dims.

Args:
    x (tensor<T, [*, M, K]>): rank >= 1; a rank-1 x is a row vector, removed from the result.
    y (tensor<T, [*, K, N]>): rank >= 1; a rank-1 y is a column vector, removed likewise.
    transpose_x (const bool): swap the last two dims of x first (rank >= 2). Default: false.
    transpose_y (const bool): swap the last two dims of y first (rank >= 2). Default: false.
Returns:
    tensor<T, [*broadcast(batch dims), M, N]>: both operands may be runtime tensors.
"""

_matmul_ios15 = register(
    OpDef(
        name="matmul",
        params=(
            param("x", MATMUL_DTYPES, domain="T"),
            param("y", MATMUL_DTYPES, domain="T"),
            param("transpose_x", BOOL, ranks=(0,), const=True, default=False),
            param("transpose_y", BOOL, ranks=(0,), const=True, default=False),
        ),
        infer=_matmul_infer,
        reference=_matmul_reference,
        cost=mac_cost,
        contraction=_matmul_contraction,
        output_axis=_matmul_output_axis,
        traits=frozenset({MATMUL}),
        numerics=device.rounded_products(_matmul_reference, "matmul"),  # N1 observed; N3
        ranges=contraction("x", "y", _matmul_y_summed_axis),
        doc=_MATMUL_DOC,
    )
)
register(
    _matmul_ios15.evolve(
        since="ios17",
        params=(
            param("x", MATMUL_DTYPES, domain="T"),
            param("y", MATMUL_DTYPES, domain="U"),
            *_matmul_ios15.params[2:],
        ),
        infer=_matmul_infer_ios17,
        doc=_MATMUL_DOC + "\niOS17: x and y may differ in dtype when exactly one is const; "
        "the output takes the dtype of the runtime one.\n",
    )
)


# -- linear --------------------------------------------------------------------------------
def _linear_infer(a: Args) -> TensorType:
    op, x, w = "linear", a.x, a.weight
    d_in = x.shape[-1]
    require(
        w.shape[1] == d_in,
        op,
        "weight",
        lambda: f"expected shape [D_out, D_in = {d_in}] (x {list(x.shape)}), found {list(w.shape)}",
    )
    if a.bias is not None:
        require(
            tuple(a.bias.shape) == (w.shape[0],),
            op,
            "bias",
            lambda: f"expected shape [{w.shape[0]}] (D_out), found {list(a.bias.shape)}",
        )
    return TensorType(x.dtype, (*x.shape[:-1], w.shape[0]))


def _linear_default_bias(a: Args) -> Any:
    # coremltools' default: zeros of the weight's dtype (iOS15/linear.py default_inputs)
    w = a.weight
    if w is None or w.rank != 2 or w.dtype not in MATMUL_DTYPES:
        return None
    return np.zeros(w.shape[0], dtype=w.dtype.numpy)


def _weight_and_bias(domain: str) -> tuple[Param, Param]:
    """linear's const weight and bias, in x's type domain T (iOS15) or their own, U (iOS17)."""
    return (
        param("weight", MATMUL_DTYPES, ranks=(2,), const=True, domain=domain),
        param(
            "bias",
            MATMUL_DTYPES,
            ranks=(1,),
            const=True,
            default=_linear_default_bias,
            domain=domain,
        ),
    )


def _linear_reference(x, weight, bias=None, matmul=np.matmul):
    if integers.is_int(x) and integers.is_int(weight):  # exact, or an error: never wrapped
        y = integers.matmul(x, np.asarray(weight).T)
        y = y if bias is None else y + np.asarray(bias, integers.WIDE)
        return integers.fit("linear", y, np.result_type(x, weight))
    y = matmul(x, np.asarray(weight).T)
    return y if bias is None else y + bias


_LINEAR_DOC = """``x @ weight.T + bias`` with a const weight.

Args:
    x (tensor<T, [*D, D_in]>): rank 1 to 5 (coremltools documents 1 to 3, but its type
        inference and its own tests take rank 5).
    weight (const tensor<T, [D_out, D_in]>): the weight.
    bias (const tensor<T, [D_out]>): Default: zeros.
Returns:
    tensor<T, [*D, D_out]>: same rank as x.
"""

_linear_ios15 = register(
    OpDef(
        name="linear",
        params=(
            param("x", MATMUL_DTYPES, ranks=(1, 2, 3, 4, 5), domain="T"),
            *_weight_and_bias("T"),
        ),
        infer=_linear_infer,
        reference=_linear_reference,
        cost=mac_cost,
        contraction=lambda a: a.x.shape[-1],  # D_in
        output_axis=lambda a, operand: 0 if operand == "weight" else None,  # [D_out, D_in]
        traits=frozenset({MATMUL}),
        # N1: a matmul with a constant operand; N3 under the precise profiles
        numerics=device.rounded_products(_linear_reference, "matmul"),
        ranges=contraction("x", "weight", lambda a: -1, bias="bias"),  # [D_out, D_in]
        shape_only=frozenset({"weight", "bias"}),
        doc=_LINEAR_DOC,
    )
)
register(
    _linear_ios15.evolve(
        since="ios17",
        params=(_linear_ios15.params[0], *_weight_and_bias("U")),
        doc=_LINEAR_DOC + "\niOS17: weight and bias may have another dtype than x.\n",
    )
)


# -- einsum --------------------------------------------------------------------------------
# coremltools accepts exactly these two patterns, up to renaming of the letters
# (iOS15/linear.py einsum; _utils.parse_einsum_equation numbers letters by first use).
_EINSUM_PATTERNS = {
    ((0, 1, 2, 3), (0, 3, 2, 4), (0, 1, 2, 4)): "nchw,nwhu->nchu",
    ((0, 1, 2), (2, 1, 3), (0, 1, 3)): "chw,whr->chr",
}


def _einsum_pattern(equation: str) -> tuple[tuple[int, ...], ...] | None:
    """Number each letter of ``a,b->c`` by first appearance; None if not of that form."""
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if not arrow or len(terms) != 2 or not all(t.isalpha() for t in (*terms, rhs)):
        return None
    numbering: dict[str, int] = {}
    return tuple(
        tuple(numbering.setdefault(ch, len(numbering)) for ch in term) for term in (*terms, rhs)
    )


def _einsum_infer(a: Args) -> TensorType:
    op, values = "einsum", a.values
    require(len(values) == 2, op, "values", lambda: f"expected 2 tensors, found {len(values)}")
    equation = a.const("equation")
    require(
        _einsum_pattern(equation) in _EINSUM_PATTERNS,
        op,
        "equation",
        lambda: (
            f"unsupported equation {equation!r}; coremltools accepts only "
            f"{' and '.join(repr(p) for p in _EINSUM_PATTERNS.values())} (letters may be renamed)"
        ),
    )
    x, y = values
    rank = len(equation.partition(",")[0])
    require(
        x.rank == rank and y.rank == rank,
        op,
        "values",
        lambda: (
            f"equation {equation!r} needs two rank-{rank} tensors, found {list(x.shape)} and "
            f"{list(y.shape)}"
        ),
    )
    require(
        x.shape[-1] == y.shape[-3],
        op,
        "values",
        lambda: (
            f"contracted dims differ: x {list(x.shape)} dim -1 is {x.shape[-1]}, "
            f"y {list(y.shape)} dim -3 is {y.shape[-3]}"
        ),
    )
    batch_axes = (-2, -4) if rank == 4 else (-2,)
    out = [*x.shape[:-1], y.shape[-1]]
    for axis in batch_axes:
        dx, dy = x.shape[axis], y.shape[axis]
        require(
            dx == dy or 1 in (dx, dy),
            op,
            "values",
            lambda: f"dim {axis} of x {list(x.shape)} and y {list(y.shape)} do not broadcast",
        )
        out[axis] = dy if dx == 1 else dx
    return TensorType(x.dtype, tuple(out))


def _einsum_reference(values, equation, matmul=np.matmul):
    # both patterns are a matmul over dims (-3, -1) x (-1, -3) batched over the others
    x, y = (np.moveaxis(v, -2, -3) for v in values)
    return np.moveaxis(matmul(x, y), -3, -2)


register(
    OpDef(
        name="einsum",
        params=(
            param("values", FP, ranks=(3, 4), variadic=True, domain="T"),
            param("equation", STRING, ranks=(0,), const=True),
        ),
        infer=_einsum_infer,
        reference=_einsum_reference,
        cost=mac_cost,
        contraction=lambda a: a.values[0].shape[-1],  # the dim summed over: -1 of x, -3 of y
        traits=frozenset({MATMUL}),
        # the matmul datapath, assumed (N1); N3 under the precise profiles
        numerics=device.rounded_products(_einsum_reference, "conv"),
        ranges=matmul_like,
        doc="""Einstein summation, restricted to a matmul over dims -3 and -1 (as coremltools).

        Args:
            values (tuple of 2 tensor<T, [*B, C, H, W1]> and tensor<T, [*B, W1, H, W2]>): rank 3
                or 4; H and B broadcast.
            equation (const string): ``"nchw,nwhu->nchu"`` or ``"chw,whr->chr"``, letters renamed
                freely; any other equation is rejected.
        Returns:
            tensor<T, [*B, C, H, W2]>: same rank as the inputs.
        """,
    )
)
