"""Cases for the elementwise family: references in torch float64 or NumPy formulas written here."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.opcases import Case

Sampler = Callable[[np.random.Generator, tuple], np.ndarray]
FP32_TOL = {"rtol": 1e-5, "atol": 1e-6}


# -- input samplers ---------------------------------------------------------------------------
def uniform(lo: float, hi: float) -> Sampler:
    return lambda rng, shape: rng.uniform(lo, hi, shape)


def away_from_zero(lo: float, hi: float) -> Sampler:
    """Magnitudes in [lo, hi] with random signs (divisors)."""
    return lambda rng, shape: rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


def small_ints(lo: int, hi: int) -> Sampler:
    return lambda rng, shape: rng.integers(lo, hi + 1, shape)


def nonzero_ints(hi: int) -> Sampler:
    """Integers in [-hi, hi] without 0 (divisors: integer division by zero is an error)."""
    return lambda rng, shape: rng.integers(1, hi + 1, shape) * rng.choice([-1, 1], shape)


def halves_and_normals(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Exact halves (where rounding modes differ) mixed with normal values."""
    halves = rng.integers(-6, 6, shape) + 0.5
    return np.where(rng.random(shape) < 0.5, halves, 3 * rng.standard_normal(shape))


def sampled(specs: dict[str, tuple[Sampler, tuple, str]]) -> Callable[..., dict[str, np.ndarray]]:
    """make_inputs from {name: (sampler, shape, dtype)}."""
    np_dtype = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_}
    return lambda rng: {
        name: np.asarray(s(rng, shape)).astype(np_dtype[dtype])
        for name, (s, shape, dtype) in specs.items()
    }


def as_fp16(value: float) -> float:
    """A Python literal as the Builder stores it next to an fp16 tensor."""
    return float(np.float16(value))


# -- independent references ------------------------------------------------------------------
def torch64(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    """Evaluate fn(torch, *tensors) in float64."""

    def apply(*arrays: np.ndarray) -> np.ndarray:
        import torch

        tensors = [torch.from_numpy(np.array(a, np.float64)) for a in arrays]
        return fn(torch, *tensors).numpy()

    return apply


def vectorized(fn: Callable[..., Any], dtype: Any = np.float64) -> Callable[..., np.ndarray]:
    """An elementwise Python formula on scalars (exact integers, math functions)."""
    return lambda *arrays: np.vectorize(fn, otypes=[dtype])(*arrays)


def int_floor_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(y == 0, 0, np.floor(x / np.where(y == 0, 1, y)))


def int_trunc_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(y == 0, 0, np.trunc(x / np.where(y == 0, 1, y)))


def int_pow(a: int, b: int) -> int:
    """a ** b truncated toward zero; 0 ** negative gives 0 (integer division by zero)."""
    if b >= 0:
        return int(a) ** int(b)
    return 0 if a == 0 else int(1 / int(a) ** -int(b))


def gelu_sigmoid(torch: Any, x: Any) -> Any:
    return x * torch.sigmoid(1.702 * x)


# -- case builders ---------------------------------------------------------------------------
def unary(
    op: str,
    ref: Callable[[np.ndarray], np.ndarray],
    label: str = "fp16",
    *,
    shape: tuple = (2, 3, 5),
    dtype: str = "fp16",
    params: dict[str, Any] | None = None,
    sampler: Sampler | None = None,
    **tol: float,
) -> Case:
    def build(b: Any) -> None:
        x = b.input("x", shape, dtype)
        b.output(getattr(b, op)(x=x, **(params or {})), "y")

    return Case(
        op,
        label,
        build,
        {"y": shape},
        expect=lambda x: {"y": ref(x)},
        make_inputs=sampled({"x": (sampler, shape, dtype)}) if sampler else None,
        **(FP32_TOL if dtype == "fp32" and not tol else tol),
    )


def binary(
    op: str,
    ref: Callable[[np.ndarray, np.ndarray], np.ndarray],
    label: str,
    xshape: tuple,
    yshape: tuple | None,
    out: tuple,
    *,
    dtype: str = "fp16",
    y_literal: Any = None,
    xs: Sampler | None = None,
    ys: Sampler | None = None,
    **tol: float,
) -> Case:
    """x (and y, unless ``y_literal`` gives it as a Python number) as inputs of ``dtype``."""

    def build(b: Any) -> None:
        x = b.input("x", xshape, dtype)
        y = y_literal if yshape is None else b.input("y", yshape, dtype)
        b.output(getattr(b, op)(x=x, y=y), "z")

    literal = as_fp16(y_literal) if dtype == "fp16" and y_literal is not None else y_literal
    specs = {"x": (xs, xshape, dtype)} if xs else {}
    if yshape is not None and ys:
        specs["y"] = (ys, yshape, dtype)
    if specs and yshape is not None and len(specs) == 1:
        raise ValueError(f"{op}-{label}: give samplers for both x and y, or neither")

    def expect(x: np.ndarray, y: np.ndarray | None = None) -> dict[str, np.ndarray]:
        return {"z": ref(x, np.asarray(literal if y is None else y))}

    return Case(
        op,
        label,
        build,
        {"z": out},
        expect=expect,
        make_inputs=sampled(specs) if specs else None,
        **(FP32_TOL if dtype == "fp32" and not tol else tol),
    )


# -- unary math ----------------------------------------------------------------------------------
POSITIVE = uniform(0.1, 4.0)
UNIT = uniform(-0.95, 0.95)

UNARY_MATH = [
    unary("exp", torch64(lambda t, x: t.exp(x))),
    unary("exp", torch64(lambda t, x: t.exp(x)), "fp32-rank0", shape=(), dtype="fp32"),
    unary("exp2", torch64(lambda t, x: t.exp2(x))),
    unary(
        "exp2",
        vectorized(lambda a: math.trunc(2.0**a)),
        "int32",
        dtype="int32",
        sampler=small_ints(-4, 20),
    ),
    unary("log", torch64(lambda t, x: t.log(x)), sampler=POSITIVE),
    unary(
        "log",
        torch64(lambda t, x: t.log(x + as_fp16(0.5))),
        "epsilon",
        params={"epsilon": 0.5},
        sampler=POSITIVE,
    ),
    unary(
        "log",
        torch64(lambda t, x: t.log(x + float(np.float32(1e-45)))),
        "fp32",
        dtype="fp32",
        sampler=POSITIVE,
    ),
    unary("sqrt", torch64(lambda t, x: t.sqrt(x)), sampler=POSITIVE),
    unary("rsqrt", torch64(lambda t, x: t.rsqrt(x)), sampler=POSITIVE),
    unary(
        "rsqrt",
        torch64(lambda t, x: t.rsqrt(x + as_fp16(0.25))),
        "epsilon",
        params={"epsilon": 0.25},
        sampler=POSITIVE,
    ),
    unary("inverse", torch64(lambda t, x: 1 / (x + as_fp16(1e-4))), sampler=POSITIVE),
    unary(
        "inverse",
        torch64(lambda t, x: 1 / (x + float(np.float32(1e-4)))),
        "fp32",
        dtype="fp32",
        sampler=POSITIVE,
    ),
    unary(
        "inverse",
        torch64(lambda t, x: 1 / (x + as_fp16(0.5))),
        "epsilon",
        params={"epsilon": 0.5},
        sampler=POSITIVE,
    ),
    unary("abs", torch64(lambda t, x: t.abs(x))),
    unary("abs", np.abs, "int32", dtype="int32", sampler=small_ints(-9, 9)),
    unary("sign", torch64(lambda t, x: t.sign(x)), sampler=small_ints(-2, 2)),
    unary("sign", vectorized(lambda a: int(a > 0) - int(a < 0), np.int32), "int32", dtype="int32"),
    unary("square", torch64(lambda t, x: x * x)),
    unary("square", lambda x: x * x, "int32", dtype="int32", sampler=small_ints(-300, 300)),
    unary("ceil", torch64(lambda t, x: t.ceil(x)), sampler=halves_and_normals),
    unary("floor", torch64(lambda t, x: t.floor(x)), sampler=halves_and_normals),
    unary("round", torch64(lambda t, x: t.round(x)), "half-to-even", sampler=halves_and_normals),
    unary(
        "round", torch64(lambda t, x: t.round(x)), "fp32", dtype="fp32", sampler=halves_and_normals
    ),
    unary("sin", torch64(lambda t, x: t.sin(x)), sampler=uniform(-6, 6)),
    unary("cos", torch64(lambda t, x: t.cos(x)), sampler=uniform(-6, 6)),
    unary("tan", torch64(lambda t, x: t.tan(x)), sampler=uniform(-1.2, 1.2)),
    unary("tan", torch64(lambda t, x: t.tan(x)), "fp32", dtype="fp32", sampler=uniform(-1, 1)),
    unary("atan", torch64(lambda t, x: t.atan(x)), sampler=uniform(-8, 8)),
    unary("asin", torch64(lambda t, x: t.asin(x)), sampler=UNIT),
    unary("acos", torch64(lambda t, x: t.acos(x)), sampler=UNIT),
    unary("sinh", torch64(lambda t, x: t.sinh(x))),
    unary("cosh", torch64(lambda t, x: t.cosh(x))),
    unary("atanh", torch64(lambda t, x: t.atanh(x)), sampler=UNIT),
    unary("erf", torch64(lambda t, x: t.erf(x))),
    unary("erf", torch64(lambda t, x: t.erf(x)), "fp32", dtype="fp32"),
    unary("tanh", torch64(lambda t, x: t.tanh(x))),
    unary("tanh", torch64(lambda t, x: t.tanh(x)), "fp32", dtype="fp32", sampler=uniform(-5, 5)),
    unary(
        "clip",
        lambda x: np.minimum(np.maximum(x, as_fp16(-0.5)), as_fp16(0.7)),
        params={"alpha": -0.5, "beta": 0.7},
    ),
    unary("threshold", lambda x: np.maximum(x, as_fp16(0.2)), params={"alpha": 0.2}),
    unary("threshold", lambda x: np.maximum(x, 1), "int32", dtype="int32", params={"alpha": 1}),
    unary("logical_not", np.logical_not, "bool", dtype="bool"),
]

# -- activations ---------------------------------------------------------------------------------
ACTIVATIONS = [
    unary("relu", torch64(lambda t, x: t.relu(x))),
    unary("relu", torch64(lambda t, x: t.relu(x)), "fp32", dtype="fp32"),
    unary("relu6", torch64(lambda t, x: t.nn.functional.relu6(x)), sampler=uniform(-8, 8)),
    unary(
        "leaky_relu",
        torch64(lambda t, x: t.nn.functional.leaky_relu(x, 0.1)),
        params={"alpha": 0.1},
    ),
    unary(
        "leaky_relu",
        torch64(lambda t, x: t.nn.functional.leaky_relu(x, 0.375)),
        "fp32",
        dtype="fp32",
        params={"alpha": 0.375},
    ),
    unary("elu", torch64(lambda t, x: t.nn.functional.elu(x, 1.0)), params={"alpha": 1.0}),
    unary(
        "elu",
        torch64(lambda t, x: t.nn.functional.elu(x, 0.5)),
        "alpha-0.5",
        dtype="fp32",
        params={"alpha": 0.5},
    ),
    unary("sigmoid", torch64(lambda t, x: t.sigmoid(x)), sampler=uniform(-10, 10)),
    unary("sigmoid", torch64(lambda t, x: t.sigmoid(x)), "fp32", dtype="fp32"),
    unary(
        "sigmoid_hard",
        lambda x: np.clip(0.2 * x + 0.5, 0, 1),
        sampler=uniform(-4, 4),
        params={"alpha": 0.2, "beta": 0.5},
    ),
    unary("silu", torch64(lambda t, x: t.nn.functional.silu(x)), sampler=uniform(-8, 8)),
    unary("gelu", torch64(lambda t, x: t.nn.functional.gelu(x)), "default-exact"),
    unary(
        "gelu",
        torch64(lambda t, x: t.nn.functional.gelu(x)),
        "exact-fp32",
        dtype="fp32",
        params={"mode": "EXACT"},
    ),
    unary(
        "gelu",
        torch64(lambda t, x: t.nn.functional.gelu(x, approximate="tanh")),
        "tanh",
        params={"mode": "TANH_APPROXIMATION"},
    ),
    unary("gelu", torch64(gelu_sigmoid), "sigmoid", params={"mode": "SIGMOID_APPROXIMATION"}),
    unary(
        "gelu",
        torch64(gelu_sigmoid),
        "sigmoid-fp32",
        dtype="fp32",
        params={"mode": "SIGMOID_APPROXIMATION"},
    ),
    unary("softplus", torch64(lambda t, x: t.nn.functional.softplus(x)), sampler=uniform(-20, 20)),
    unary("softsign", torch64(lambda t, x: t.nn.functional.softsign(x))),
    unary(
        "scaled_tanh",
        torch64(lambda t, x: 1.5 * t.tanh(x * 0.625)),
        params={"alpha": 1.5, "beta": 0.625},
    ),
    unary("linear_activation", lambda x: 2.0 * x - 1.0, params={"alpha": 2.0, "beta": -1.0}),
    unary(
        "linear_activation",
        lambda x: float(np.float32(0.3)) * x + 4.0,
        "fp32",
        dtype="fp32",
        params={"alpha": 0.3, "beta": 4.0},
    ),
]


def prelu(label: str, shape: tuple, alpha: list[float]) -> Case:
    slopes = np.asarray(alpha, np.float16)

    def ref(x: np.ndarray) -> np.ndarray:
        import torch

        weight = torch.from_numpy(slopes.astype(np.float64))
        return torch.nn.functional.prelu(torch.from_numpy(x), weight).numpy()

    return unary("prelu", ref, label, shape=shape, params={"alpha": slopes})


PRELU = [
    prelu("rank4", (2, 3, 4, 5), [0.1, -0.5, 2.0]),
    prelu("rank3-shared", (2, 4, 6), [0.25] * 4),
    prelu("rank5-shared", (1, 2, 2, 3, 3), [0.3, 0.3]),
]


# -- binary ----------------------------------------------------------------------------------------
DIVISOR = away_from_zero(0.5, 3.0)
NORMAL: Sampler = lambda rng, shape: 4 * rng.standard_normal(shape)  # noqa: E731


def floor_div64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.floor(x / y)


def mod64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return x - np.floor(x / y) * y


ARITHMETIC = [
    binary("add", lambda x, y: x + y, "same-shape", (2, 3, 4), (2, 3, 4), (2, 3, 4)),
    binary("add", lambda x, y: x + y, "rank-mismatch", (2, 3, 4), (4,), (2, 3, 4)),
    binary("add", lambda x, y: x + y, "both-broadcast", (3, 1), (2, 1, 5), (2, 3, 5)),
    binary("add", lambda x, y: x + y, "rank0-x", (), (2, 3), (2, 3)),
    binary("add", lambda x, y: x + y, "python-float", (2, 3), None, (2, 3), y_literal=2.0),
    binary("add", lambda x, y: x + y, "fp32", (4, 1), (1, 6), (4, 6), dtype="fp32"),
    binary("add", lambda x, y: x + y, "int32", (2, 3), (3,), (2, 3), dtype="int32"),
    binary("sub", lambda x, y: x - y, "broadcast", (1, 4), (3, 1), (3, 4)),
    binary("sub", lambda x, y: x - y, "python-int", (5,), None, (5,), dtype="int32", y_literal=7),
    binary("mul", lambda x, y: x * y, "broadcast", (2, 1, 3), (4, 1), (2, 4, 3)),
    binary("mul", lambda x, y: x * y, "python-float", (2, 3), None, (2, 3), y_literal=-0.3),
    binary("mul", lambda x, y: x * y, "int32", (3, 3), (), (3, 3), dtype="int32"),
    binary(
        "real_div", lambda x, y: x / y, "broadcast", (2, 3), (3,), (2, 3), xs=NORMAL, ys=DIVISOR
    ),
    binary(
        "real_div",
        lambda x, y: x / y,
        "fp32",
        (4,),
        (4,),
        (4,),
        dtype="fp32",
        xs=NORMAL,
        ys=DIVISOR,
    ),
    binary(
        "real_div",
        int_trunc_div,
        "int32-trunc",
        (3, 4),
        (4,),
        (3, 4),
        dtype="int32",
        xs=small_ints(-30, 30),
        ys=nonzero_ints(9),
    ),  # fmt: skip
    binary("floor_div", floor_div64, "broadcast", (2, 3), (3,), (2, 3), xs=NORMAL, ys=DIVISOR),
    binary(
        "floor_div",
        int_floor_div,
        "int32",
        (3, 4),
        (3, 4),
        (3, 4),
        dtype="int32",
        xs=small_ints(-30, 30),
        ys=nonzero_ints(9),
    ),  # fmt: skip
    binary("mod", mod64, "sign-of-y", (2, 5), (5,), (2, 5), xs=NORMAL, ys=DIVISOR),
    binary(
        "mod",
        lambda x, y: np.where(y == 0, 0, x - int_floor_div(x, y) * y),
        "int32",
        (4, 4),
        (4, 4),
        (4, 4),
        dtype="int32",
        xs=small_ints(-30, 30),
        ys=nonzero_ints(9),
    ),
    binary(
        "pow",
        lambda x, y: x**y,
        "broadcast",
        (2, 3),
        (3,),
        (2, 3),
        xs=uniform(0.5, 2.0),
        ys=uniform(-2, 2),
    ),
    binary("pow", lambda x, y: x**y, "python-float", (2, 3), None, (2, 3), y_literal=2.0),
    binary(
        "pow",
        vectorized(int_pow, np.int64),
        "int32",
        (3, 4),
        (3, 4),
        (3, 4),
        dtype="int32",
        xs=small_ints(-4, 4),
        ys=small_ints(0, 9),
    ),  # fmt: skip (4 ** 9 fits int32)
    binary("maximum", lambda x, y: np.where(x >= y, x, y), "broadcast", (2, 1), (1, 3), (2, 3)),
    binary(
        "maximum", lambda x, y: np.where(x >= y, x, y), "int32", (2, 3), (), (2, 3), dtype="int32"
    ),
    binary("minimum", lambda x, y: np.where(x <= y, x, y), "broadcast", (2, 1), (1, 3), (2, 3)),
    binary(
        "minimum",
        lambda x, y: np.where(x <= y, x, y),
        "python-float",
        (6,),
        None,
        (6,),
        y_literal=0.25,
    ),
]

TIES = small_ints(-2, 2)  # equal operands are common, so every comparison takes both values
RELATIONS = {
    "equal": lambda x, y: x == y,
    "not_equal": lambda x, y: x != y,
    "less": lambda x, y: x < y,
    "less_equal": lambda x, y: x <= y,
    "greater": lambda x, y: x > y,
    "greater_equal": lambda x, y: x >= y,
}
COMPARISONS = [
    case
    for op, rel in RELATIONS.items()
    for case in (
        binary(op, rel, "ties", (2, 3), (3,), (2, 3), xs=TIES, ys=TIES),
        binary(op, rel, "int32", (4, 1), (1, 3), (4, 3), dtype="int32"),
        binary(op, rel, "python-float", (5,), None, (5,), y_literal=0.0, xs=TIES),
    )
]

LOGICAL = [
    binary("logical_and", lambda x, y: x & y, "broadcast", (2, 3), (3,), (2, 3), dtype="bool"),
    binary("logical_or", lambda x, y: x | y, "broadcast", (2, 1), (1, 4), (2, 4), dtype="bool"),
    binary("logical_xor", lambda x, y: x ^ y, "same", (3, 2), (3, 2), (3, 2), dtype="bool"),
    binary(
        "logical_and",
        lambda x, y: x & y,
        "python-bool",
        (4,),
        None,
        (4,),
        dtype="bool",
        y_literal=True,
    ),
]


def select(
    label: str,
    shapes: dict[str, tuple],
    out: tuple,
    dtype: str = "fp16",
    b_literal: float | None = None,
) -> Case:
    def build(b: Any) -> None:
        cond = b.input("cond", shapes["cond"], "bool")
        a = b.input("a", shapes["a"], dtype)
        other = b_literal if b_literal is not None else b.input("b", shapes["b"], dtype)
        b.output(b.select(cond=cond, a=a, b=other), "out")

    def expect(cond: np.ndarray, a: np.ndarray, b: np.ndarray | None = None) -> dict:
        other = as_fp16(b_literal) if b is None else b
        return {"out": np.where(cond, a, other)}

    return Case("select", label, build, {"out": out}, expect=expect)


SELECT = [
    select("same", {"cond": (2, 3), "a": (2, 3), "b": (2, 3)}, (2, 3)),
    select("broadcast-cond", {"cond": (3, 1), "a": (1, 4), "b": (3, 4)}, (3, 4)),
    select("cond-widest", {"cond": (2, 3, 4), "a": (4,), "b": (3, 1)}, (2, 3, 4)),
    select("int32", {"cond": (5,), "a": (5,), "b": ()}, (5,), dtype="int32"),
    select("python-float", {"cond": (2, 2), "a": (2, 2)}, (2, 2), b_literal=-1.0),
]

CASES: list[Case] = UNARY_MATH + ACTIVATIONS + PRELU + ARITHMETIC + COMPARISONS + LOGICAL + SELECT
