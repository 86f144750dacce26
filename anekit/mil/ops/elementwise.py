"""Elementwise ops: unary math, broadcasting binary ops, comparisons, select; the factories
(:func:`unary`) the activations (:mod:`.activation`) are declared with.

Names, parameters, dtypes and defaults follow coremltools' iOS15 definitions
(``ops/defs/iOS15/elementwise_unary.py``, ``elementwise_binary.py``, ``control_flow.py``
for ``select``) and the iOS17 changes (``ops/defs/iOS17/elementwise_unary.py``:
:mod:`.elementwise17`), read at commit e0e2f42.

References compute in the input's precision (fp16 arrives as float32) and
follow NumPy where MIL says nothing more: ``maximum``/``minimum``/``relu``/
``clip`` propagate NaN, ``round`` is half-to-even (``np.round``, as
coremltools' value inference), ``mod`` takes the sign of ``y`` and
``floor_div`` rounds toward -inf (``np.remainder``/``np.floor_divide``,
coremltools folds with Python's ``%`` and ``//``). Domain errors give NaN or
inf, never an exception. Integer results are exact (:mod:`.integers`): a result
int32 cannot hold and an integer division or modulo by zero are EvaluationErrors,
never wrapped or invented values; integer ``real_div`` truncates toward zero
(coremltools only says the type stays int32).

``flops_per_element`` follows the cost convention of :mod:`anekit.mil.ops.common`
(``_T`` is one transcendental function).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import reduce
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.ops import device, integers, npmath
from anekit.mil.ops.common import BOOL, FP, INT32, TRANSCENDENTAL, broadcast
from anekit.mil.ops.npmath import erf, exp2, quiet, real_div
from anekit.mil.ops.ranges import (
    RangeFn,
    absolute,
    bounded,
    clipped,
    interval_binary,
    monotone,
    power,
    squared,
    values_of,
)
from anekit.mil.ops.ranges_math import (
    ACOS,
    ASIN,
    ATANH,
    even,
    floored_quotient,
    logarithm,
    power_of_two,
    reciprocal,
    reciprocal_root,
    remainder,
    rounded,
    tangent,
    thresholded,
)
from anekit.mil.ops.registry import Args, Numerics, OpDef, Param, Ufunc, param, register
from anekit.mil.ops.traits import BINARY, COMPARISON, ELEMENTWISE, UNARY
from anekit.mil.types import DType, TensorType

FP_I32 = FP | INT32
SELECTABLE = FP_I32 | BOOL
_T = TRANSCENDENTAL
REQUIRED = object()


# -- declaration factories ----------------------------------------------------------------
def _dtypes_text(dtypes: Iterable[DType]) -> str:
    return ", ".join(sorted(d.value for d in dtypes))


def _doc(summary: str, args: list[str], returns: str) -> str:
    lines = [summary, "", "Args:", *(f"    {a}" for a in args), "Returns:", f"    {returns}"]
    return "\n".join(lines) + "\n"


def _scalar(name: str, dtypes: frozenset[DType], default: Any = REQUIRED) -> Param:
    """A const scalar parameter in ``x``'s type domain (alpha, beta, epsilon)."""
    optional = {} if default is REQUIRED else {"default": default}
    return param(name, dtypes, ranks=(0,), const=True, domain="T", **optional)


def _x_dtype_default(value: float) -> Callable[[Args], np.ndarray]:
    """A default stored in x's dtype, as coremltools' ``nptype_from_builtin(x.dtype)(value)``."""
    return lambda a: np.asarray(value, a.x.dtype.numpy)


def unary(
    name: str,
    fn: Callable[..., Any],
    summary: str,
    *,
    dtypes: frozenset[DType] = FP,
    attrs: tuple[tuple[str, str, Any], ...] = (),
    flops: float = 1.0,
    traits: tuple[str, ...] = (UNARY,),
    check: Callable[[Args], None] | None = None,
    extra: tuple[tuple[Param, str], ...] = (),
    numerics: Numerics | None = None,
    ranges: RangeFn | None = None,
    flush_sensitive: frozenset[str] = frozenset(),
    ufunc: Ufunc | None = None,
) -> OpDef:
    """Declare ``y = fn(x, **attrs)`` with y of x's type (``ranges``: its range transfer).

    ``attrs`` are const scalars in x's domain as (name, description, default or
    REQUIRED); ``extra`` are other parameters with their doc line; ``check``
    validates const values in inference. A NumPy ufunc ``fn`` is also the op's ``ufunc``.
    """
    scalars = tuple((_scalar(n, dtypes, d), f"{n} (const T): {text}") for n, text, d in attrs)
    declared = scalars + extra

    def infer(a: Args) -> TensorType:
        if check is not None:
            check(a)
        return a.x.type

    if isinstance(fn, np.ufunc):  # passed x positionally: ufuncs take no x= keyword
        fn, ufunc = (lambda x, f=fn: f(x)), Ufunc(fn)
    return register(
        OpDef(
            name=name,
            params=(param("x", dtypes, domain="T"), *(p for p, _ in declared)),
            infer=infer,
            reference=quiet(fn),
            traits=frozenset({ELEMENTWISE, *traits}),
            ufunc=ufunc,
            flops_per_element=flops,
            numerics=numerics,
            ranges=ranges,
            flush_sensitive=flush_sensitive,
            doc=_doc(
                summary,
                [
                    f"x (tensor<T, [*]>): the input; T in ({_dtypes_text(dtypes)}).",
                    *(d for _, d in declared),
                ],
                "tensor<T, [*]>: the shape of x.",
            ),
        )
    )


def _broadcast_all(op: str, a: Args, names: tuple[str, ...]) -> tuple:
    """NumPy broadcast of several parameters; the error names the first one that does not fit."""

    def step(so_far: tuple[tuple, str], name: str) -> tuple[tuple, str]:
        shape, names_so_far = so_far
        other = getattr(a, name).type
        try:
            joint = broadcast(op, TensorType(other.dtype, shape), other, (names_so_far, name))
        except MilTypeError as e:
            raise MilTypeError(e.message, op=op, param=name) from None
        return joint, f"{names_so_far}, {name}"

    return reduce(step, names[1:], (getattr(a, names[0]).shape, names[0]))[0]


def _binary(
    name: str,
    fn: Callable[[np.ndarray, np.ndarray], Any],
    summary: str,
    *,
    dtypes: frozenset[DType] = FP_I32,
    output: DType | None = None,
    flops: float = 1.0,
    traits: tuple[str, ...] = (),
    divides: bool = False,
    exact: Callable[[str, np.ndarray, np.ndarray], Any] | None = None,
    mask_operands: frozenset[str] = frozenset(),
    ranges: RangeFn | None = None,
    flush_sensitive: frozenset[str] = frozenset(),
    ufunc: np.ufunc | None = None,
    bounded_ints: bool = False,
) -> OpDef:
    """Declare ``fn(x, y)`` with NumPy broadcasting; the result has x's dtype unless ``output``.

    Integer operands run :func:`.integers.binary` (``exact``: their formula, else ``fn`` in
    int64; ``divides``: a zero divisor is an error). The op's ``ufunc``: ``fn`` if a NumPy
    ufunc, for float32 operands only unless ``bounded_ints`` (integers cannot leave int32).
    """
    out_text = output.value if output else "T"
    ufunc = ufunc or fn

    def infer(a: Args) -> TensorType:
        return TensorType(output or a.x.dtype, _broadcast_all(name, a, ("x", "y")))

    return register(
        OpDef(
            name=name,
            params=(param("x", dtypes, domain="T"), param("y", dtypes, domain="T")),
            infer=infer,
            reference=quiet(integers.binary(name, fn, divides=divides, exact=exact)),
            traits=frozenset({ELEMENTWISE, BINARY, *traits}),
            ufunc=Ufunc(ufunc, floats=not bounded_ints) if isinstance(ufunc, np.ufunc) else None,
            flops_per_element=flops,
            mask_operands=mask_operands,
            ranges=ranges,
            flush_sensitive=flush_sensitive,
            doc=_doc(
                summary,
                [
                    f"x (tensor<T, [*]>): first operand; T in ({_dtypes_text(dtypes)}).",
                    "y (tensor<T, [*]>): second operand, broadcastable with x (NumPy rules).",
                ],
                f"tensor<{out_text}, [*]>: the broadcast shape of x and y.",
            ),
        )
    )


def _compare(name: str, fn: Callable[[np.ndarray, np.ndarray], Any], relation: str) -> OpDef:
    return _binary(
        name,
        fn,
        f"Return ``{relation}`` elementwise, with broadcasting.",
        output=DType.bool,
        traits=(COMPARISON,),
        bounded_ints=True,
    )


def _logical(name: str, fn: Callable[[np.ndarray, np.ndarray], Any], relation: str) -> OpDef:
    return _binary(
        name,
        fn,
        f"Return ``{relation}`` elementwise, with broadcasting.",
        dtypes=BOOL,
        output=DType.bool,
        bounded_ints=True,
    )


# -- unary math ---------------------------------------------------------------------------
unary(
    "exp",
    np.exp,
    "Return e**x.",
    flops=_T,
    numerics=device.EXP_SATURATES,
    ranges=monotone(np.exp),
)
unary(
    "round",
    lambda x: np.round(x),
    "Round x to the nearest integer, halves to even (0.5 -> 0, 1.5 -> 2).",
    numerics=device.ROUND_HALF_AWAY,
    ranges=rounded,
)
_SIGN = bounded(-1.0, 1.0)
for _name, _fn, _summary, _flops, _ranges in (  # _ranges: the range transfer (None: unbounded)
    ("sqrt", np.sqrt, "Return the square root of x.", _T, monotone(np.sqrt)),
    ("ceil", np.ceil, "Round x toward +inf.", 1, monotone(np.ceil)),
    ("floor", np.floor, "Round x toward -inf.", 1, monotone(np.floor)),
    ("sin", np.sin, "Return sin(x).", _T, _SIGN),
    ("cos", np.cos, "Return cos(x).", _T, _SIGN),
    ("tan", np.tan, "Return tan(x).", _T, tangent),
    ("asin", np.arcsin, "Return arcsin(x); NaN outside [-1, 1].", _T, ASIN),
    ("acos", np.arccos, "Return arccos(x); NaN outside [-1, 1].", _T, ACOS),
    ("atan", np.arctan, "Return arctan(x).", _T, monotone(np.arctan)),
    ("sinh", np.sinh, "Return sinh(x).", _T, monotone(np.sinh)),
    ("cosh", np.cosh, "Return cosh(x).", _T, even(np.cosh)),
    ("atanh", np.arctanh, "Return artanh(x); +-inf at +-1, NaN outside.", _T, ATANH),
    ("erf", erf, "Return the Gauss error function erf(x).", _T, _SIGN),
    ("tanh", np.tanh, "Return tanh(x).", _T, monotone(np.tanh)),
):
    unary(_name, _fn, _summary, flops=_flops, ranges=_ranges)

for _name, _fn, _summary, _flops, _ranges in (
    ("abs", np.abs, "Return |x|.", 1, absolute),
    ("sign", np.sign, "Return -1, 0 or 1 by the sign of x (NaN stays NaN).", 1, monotone(np.sign)),
    ("square", np.square, "Return x * x.", 1, squared),
):
    _form = Ufunc(_fn, floats=True)  # integers: the exact path
    _op = integers.unary(_name, _fn)
    unary(_name, _op, _summary, dtypes=FP_I32, flops=_flops, ufunc=_form, ranges=_ranges)
unary(
    "exp2",
    integers.unary("exp2", exp2),
    "Return 2**x (integers: exact, truncated toward zero for x < 0).",
    dtypes=FP_I32,
    flops=_T,
    numerics=device.EXP_SATURATES,
    ufunc=Ufunc(np.exp2, floats=True),  # integers: the exact path
    ranges=power_of_two,
)

_EPSILON_DOC = "added to x first, in x's dtype (an fp16 x rounds 1e-12 and 1e-45 to 0)."
LOG = unary(
    "log",
    lambda x, epsilon: np.log(x + epsilon),
    "Return log(x + epsilon) (NaN for x < 0).",
    attrs=(("epsilon", f"{_EPSILON_DOC} Default: 1e-45.", _x_dtype_default(1e-45)),),
    flops=1 + _T,
    flush_sensitive=frozenset({"x"}),
    ufunc=Ufunc(into=npmath.log_into),
    ranges=logarithm,
)
RSQRT = unary(
    "rsqrt",
    lambda x, epsilon: 1.0 / np.sqrt(x + epsilon),
    "Return 1 / sqrt(x + epsilon).",
    attrs=(("epsilon", f"{_EPSILON_DOC} Default: 1e-12.", _x_dtype_default(1e-12)),),
    flops=2 + _T,
    flush_sensitive=frozenset({"x"}),
    ufunc=Ufunc(into=npmath.rsqrt_into),
    ranges=reciprocal_root,
)
INVERSE = unary(
    "inverse",
    lambda x, epsilon: 1.0 / (x + epsilon),
    "Return 1 / (x + epsilon).",
    attrs=(("epsilon", f"{_EPSILON_DOC} Default: 1e-4.", _x_dtype_default(1e-4)),),
    flops=2,
    flush_sensitive=frozenset({"x"}),
    ufunc=Ufunc(into=npmath.inverse_into),
    ranges=reciprocal,
)
CLIP = unary(
    "clip",
    lambda x, alpha, beta: np.minimum(np.maximum(x, alpha), beta),
    "Return min(max(x, alpha), beta) (beta wins if alpha > beta; NaN propagates).",
    attrs=(("alpha", "lower bound.", REQUIRED), ("beta", "upper bound.", REQUIRED)),
    flops=2,
    ufunc=Ufunc(into=npmath.clip_into),
    ranges=clipped,
)
unary(
    "threshold",
    lambda x, alpha: np.maximum(x, alpha),
    "Return max(x, alpha).",
    dtypes=FP_I32,
    attrs=(("alpha", "lower bound.", REQUIRED),),
    ufunc=Ufunc(into=npmath.threshold_into),
    ranges=thresholded,
)
unary(
    "logical_not",
    np.logical_not,
    "Return NOT x.",
    dtypes=BOOL,
)

# -- binary arithmetic ----------------------------------------------------------------------
_binary(
    "add",
    np.add,
    "Return x + y elementwise, with broadcasting.",
    mask_operands=frozenset({"x", "y"}),  # scores + mask
    ranges=interval_binary("add"),
)
_binary(
    "sub",
    np.subtract,
    "Return x - y elementwise, with broadcasting.",
    ranges=interval_binary("sub"),
)
_binary(
    "mul",
    np.multiply,
    "Return x * y elementwise, with broadcasting.",
    ranges=interval_binary("mul"),
)
_binary(
    "real_div",
    real_div,
    "Return x / y elementwise, with broadcasting (integers: truncated toward zero).",
    divides=True,
    ufunc=np.true_divide,
    ranges=interval_binary("div"),
    flush_sensitive=frozenset({"y"}),
)
_binary(
    "floor_div",
    np.floor_divide,
    "Return floor(x / y) elementwise, with broadcasting (NumPy floor_divide).",
    flops=2,
    divides=True,
    ranges=floored_quotient,
)
_binary(
    "mod",
    np.remainder,
    "Return x - floor(x / y) * y elementwise (sign of y, as NumPy remainder).",
    flops=4,
    divides=True,
    ranges=remainder,
)
_binary(
    "pow",
    np.power,
    "Return x ** y elementwise, with broadcasting (NaN for x < 0 and fractional y).",
    flops=1 + 2 * _T,
    exact=integers.power,
    ranges=power,
)
_binary(
    "maximum",
    np.maximum,
    "Return max(x, y) elementwise; NaN propagates (NumPy).",
    bounded_ints=True,
    ranges=interval_binary("max"),
)
_binary(
    "minimum",
    np.minimum,
    "Return min(x, y) elementwise; NaN propagates (NumPy).",
    bounded_ints=True,
    ranges=interval_binary("min"),
)

_compare("equal", np.equal, "x == y")
_compare("not_equal", np.not_equal, "x != y")
_compare("less", np.less, "x < y")
_compare("less_equal", np.less_equal, "x <= y")
_compare("greater", np.greater, "x > y")
_compare("greater_equal", np.greater_equal, "x >= y")
_logical("logical_and", np.logical_and, "x AND y")
_logical("logical_or", np.logical_or, "x OR y")
_logical("logical_xor", np.logical_xor, "x XOR y")

register(
    OpDef(
        name="select",
        params=(
            param("cond", BOOL),
            param("a", SELECTABLE, domain="T"),
            param("b", SELECTABLE, domain="T"),
        ),
        infer=lambda a: TensorType(a.a.dtype, _broadcast_all("select", a, ("cond", "a", "b"))),
        reference=quiet(lambda cond, a, b: np.where(cond, a, b)),
        traits=frozenset({ELEMENTWISE}),
        mask_operands=frozenset({"a", "b"}),  # a mask chosen between stays a mask
        ranges=values_of("a", "b"),
        doc=_doc(
            "Return a where cond is true, else b, broadcasting all three (np.where).",
            [
                "cond (tensor<bool, [*]>): the choice.",
                f"a (tensor<T, [*]>): values where cond holds; T in ({_dtypes_text(SELECTABLE)}).",
                "b (tensor<T, [*]>): values elsewhere.",
            ],
            "tensor<T, [*]>: the broadcast shape of cond, a and b.",
        ),
    )
)
