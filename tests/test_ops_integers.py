"""Integer semantics of the golden model: no wrapped int32 values, no invented quotients.

Each case runs through the planned executor (``anekit.compile(..., backend="reference")``,
where integer arithmetic has no planned form and runs the registry's exact path) and
through the registry reference itself. An int32 result out of range, or an integer
division by zero, must be an EvaluationError naming the op (and, from the executor, the
op's output ``z``); values at the edge of the range are exact.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.errors import EvaluationError
from anekit.mil.ops import registry

MAX, MIN = 2**31 - 1, -(2**31)


def binary(op: str, x: list[int], y: list[int]) -> mil.Program:
    b = mil.Builder()
    xs = b.input("x", (len(x),), "int32")
    ys = b.input("y", (len(y),), "int32")
    b.output(getattr(b, op)(x=xs, y=ys), "z")
    return b.build()


def unary(op: str, x: list[int], **params: Any) -> mil.Program:
    b = mil.Builder()
    b.output(getattr(b, op)(x=b.input("x", (len(x),), "int32"), **params), "z")
    return b.build()


def run(program: mil.Program, **inputs: list[int]) -> np.ndarray:
    arrays = {k: np.asarray(v, np.int32) for k, v in inputs.items()}
    with anekit.compile(program, backend="reference") as k:
        return k(**arrays)["z"]


BINARY_OVERFLOWS = [
    ("add", [1, MAX], [5, 1], "2147483648 at index [1]"),
    ("sub", [MIN], [1], "-2147483649"),
    ("mul", [2**20, 3], [2**20, 3], "1099511627776 at index [0]"),
    ("pow", [7, 2], [12, 31], "7 ** 12 = 13841287201"),
    ("floor_div", [MIN], [-1], "2147483648"),
    ("real_div", [MIN], [-1], "2147483648"),
]
DIVISIONS_BY_ZERO = [
    ("floor_div", [5, 6], [1, 0]),
    ("mod", [5], [0]),
    ("real_div", [0, 3], [2, 0]),
    ("pow", [0], [-1]),  # 1 / 0 ** 1
]
UNARY_OVERFLOWS = [
    ("abs", [MIN], {}, "2147483648"),
    ("square", [2**16], {}, "4294967296"),
    ("exp2", [31], {}, "2147483648"),
    ("reduce_sum", [MAX, 1], {}, "2147483648"),
    ("reduce_prod", [2**16, 2**15, 2], {}, "2147483648"),
    ("reduce_sum_square", [2**16, 1], {}, "4294967297"),
    ("reduce_sum_square", [MIN] * 4, {}, "18446744073709551616"),  # int64 would wrap to 0
    ("reduce_l1_norm", [MIN], {}, "2147483648"),
    ("cumsum", [MAX, 1, -5], {"axis": 0}, "running sum 2147483648 at index [1]"),
    ("reduce_log_sum", [0, 0], {}, "-inf"),
]


@pytest.mark.parametrize(("op", "x", "y", "value"), BINARY_OVERFLOWS)
def test_int32_overflow_is_an_error_naming_the_op(op, x, y, value) -> None:
    with pytest.raises(EvaluationError, match=rf"op '{op}' 'z' failed: {op}: .*{re.escape(value)}"):
        run(binary(op, x, y), x=x, y=y)
    with pytest.raises(EvaluationError, match="does not fit int32|beyond"):
        registry.get(op).reference(x=np.asarray(x, np.int32), y=np.asarray(y, np.int32))


@pytest.mark.parametrize(("op", "x", "y"), DIVISIONS_BY_ZERO)
def test_integer_division_by_zero_is_an_error(op, x, y) -> None:
    with pytest.raises(EvaluationError, match=f"op '{op}' 'z' failed: .*division by zero"):
        run(binary(op, x, y), x=x, y=y)


@pytest.mark.parametrize(("op", "x", "params", "value"), UNARY_OVERFLOWS)
def test_unary_and_reduction_overflow_is_an_error(op, x, params, value) -> None:
    with pytest.raises(EvaluationError, match=rf"op '{op}' 'z' failed: .*{re.escape(value)}"):
        run(unary(op, x, **params), x=x)


def test_results_at_the_edge_of_the_range_are_exact() -> None:
    edge = [MAX - 1, MIN + 1, -(2**15), 2**16]
    np.testing.assert_array_equal(
        run(binary("add", edge, [1, -1, 0, 0]), x=edge, y=[1, -1, 0, 0])[:2], [MAX, MIN]
    )
    np.testing.assert_array_equal(
        run(binary("mul", [-(2**16)], [2**15]), x=[-(2**16)], y=[2**15]), [MIN]
    )
    np.testing.assert_array_equal(run(binary("pow", [-2], [31]), x=[-2], y=[31]), [MIN])
    np.testing.assert_array_equal(run(unary("reduce_sum", [MAX, -1, 1]), x=[MAX, -1, 1]), MAX)
    # a product whose partial products leave int64 but whose value is 0
    zeros = [2**30, 2**30, 2**30, 0]
    assert run(unary("reduce_prod", zeros), x=zeros) == 0
    squares = [-46340, 3]
    assert run(unary("reduce_sum_square", squares), x=squares) == 46340**2 + 9


def test_integer_matmul_is_exact_or_an_error() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 3), "int32")
    y = b.input("y", (3, 2), "int32")
    b.output(b.matmul(x=x, y=y), "z")
    program = b.build()
    xs = np.array([[2**15, 2**15, -3], [1, 2, 3]], np.int32)
    ys = np.array([[2**15, 1], [2**15 - 1, 2], [5, 6]], np.int32)
    want = xs.astype(np.int64) @ ys.astype(np.int64)
    assert want.max() < MAX
    with anekit.compile(program, backend="reference") as k:
        np.testing.assert_array_equal(k(x=xs, y=ys)["z"], want)
        with pytest.raises(EvaluationError, match="op 'matmul' 'z' failed: matmul: the "):
            k(x=xs, y=np.full((3, 2), 2**16, np.int32))
