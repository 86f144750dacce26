"""Reductions, softmax, topk, argsort, cumsum: type errors and numeric edge cases.

Values and shapes on random inputs are covered by tests/opcases/reduction.py
through the generic op tests.
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilTypeError
from tests.optest import run_reference, type_error

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics

FP16_MAX = float(np.finfo(np.float16).max)  # 65504


def run_one(op: str, x: np.ndarray, opset: str = "ios18", **params) -> dict[str, np.ndarray]:
    """Run a single op on input ``x`` on the reference backend; outputs are y0, y1, ..."""
    b = mil.Builder(opset)
    dtype = {np.float16: "fp16", np.float32: "fp32", np.int32: "int32"}[x.dtype.type]
    out = getattr(b, op)(x=b.input("x", x.shape, dtype), **params)
    for i, v in enumerate(out if isinstance(out, tuple) else (out,)):
        b.output(v, f"y{i}")
    return run_reference(b.build(), {"x": x})


# -- inference errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, params, param, words",
    [
        ("reduce_sum", {"axes": [1, -2]}, "axes", "repeat"),
        ("reduce_mean", {"axes": [0, 0]}, "axes", "repeat"),
        ("reduce_max", {"axes": [3]}, "axes", "out of range"),
        ("reduce_l2_norm", {"axes": [-4]}, "axes", "out of range"),
        ("reduce_argmax", {"axis": 3}, "axis", "out of range"),
        ("reduce_argmin", {"axis": -4}, "axis", "out of range"),
        ("softmax", {"axis": -4}, "axis", "out of range"),
        ("argsort", {"axis": 3}, "axis", "out of range"),
        ("topk", {"k": 5}, "k", "larger than axis 2"),
        ("topk", {"k": 3, "axis": 0}, "k", "length 2"),
        ("topk", {"k": 0}, "k", ">= 1"),
        ("topk", {"k": -2}, "k", ">= 1"),
        ("cumsum", {"axis": -2}, "axis", "[-1, 2]"),
        ("cumsum", {"axis": 3}, "axis", "found 3"),
        ("reduce_argmax", {"output_dtype": "int8"}, "output_dtype", "uint16"),
        ("topk", {"output_indices_dtype": "fp16"}, "output_indices_dtype", "int32"),
        (
            "topk",
            {"return_indices": False, "output_indices_dtype": "int32"},
            "output_indices_dtype",
            "return_indices",
        ),
    ],
)
def test_bad_arguments_name_op_and_parameter(op, params, param, words) -> None:
    err = type_error(op, (2, 3, 4), **params)
    assert err.param == param
    assert words in err.message


def test_topk_k_larger_than_axis_says_both_numbers() -> None:
    err = type_error("topk", (2, 3), k=4, axis=1)
    assert "k = 4" in err.message and "length 3" in err.message


def test_reductions_reject_a_scalar() -> None:
    for op in ("reduce_sum", "reduce_argmax", "softmax", "topk", "cumsum"):
        assert type_error(op, ()).param == "x"


@pytest.mark.parametrize(
    "op, dtype", [("softmax", "int32"), ("reduce_sum", "int8"), ("topk", "uint32")]
)
def test_dtypes_outside_the_domain_are_rejected(op, dtype) -> None:
    err = type_error(op, (2, 3), dtype)
    assert err.param == "x" and dtype in err.message


def test_axes_must_be_constant() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 3), "fp16")
    axes = b.input("axes", (1,), "int32")
    with pytest.raises(MilTypeError) as info:
        b.reduce_sum(x=x, axes=axes)
    assert info.value.param == "axes" and "constant" in info.value.message


def test_uint16_indices_need_an_axis_they_can_address() -> None:
    err = type_error("reduce_argmax", (65537,), output_dtype="uint16")
    assert err.param == "output_dtype" and "65537" in err.message
    b = mil.Builder()
    y = b.reduce_argmax(x=b.input("x", (65536,), "fp16"), output_dtype="uint16")
    assert y.dtype.value == "uint16"


# -- opset versions ----------------------------------------------------------------------------------


def test_index_dtype_parameters_arrive_in_ios17() -> None:
    assert type_error("reduce_argmax", (2, 3), opset="ios16", output_dtype="int32").param == (
        "output_dtype"
    )
    assert type_error("topk", (2, 3), opset="ios16", output_indices_dtype="int32").param == (
        "output_indices_dtype"
    )
    assert type_error("topk", (2, 3), opset="ios15", sort=True).param == "sort"


def test_k_minus_one_takes_the_whole_axis_only_from_ios17() -> None:
    assert type_error("topk", (2, 5), opset="ios16", k=-1).param == "k"
    x = np.array([[3, 1, 2, 5, 4]], dtype=np.int32)
    out = run_one("topk", x, opset="ios17", k=-1)
    np.testing.assert_array_equal(out["y0"], [[5, 4, 3, 2, 1]])
    np.testing.assert_array_equal(out["y1"], [[3, 4, 0, 2, 1]])


def test_topk_outputs_by_version() -> None:
    x = np.array([[0.5, 2.0, -1.0]], dtype=np.float16)
    ios15 = run_one("topk", x, opset="ios15", k=2)
    np.testing.assert_array_equal(ios15["y0"], [[2.0, 0.5]])
    np.testing.assert_array_equal(ios15["y1"], [[1, 0]])
    assert ios15["y1"].dtype == np.int32
    values_only = run_one("topk", x, opset="ios16", k=2, return_indices=False)
    assert set(values_only) == {"y0"}
    wide = run_one("topk", x, opset="ios17", k=1, output_indices_dtype="uint16")
    assert wide["y1"].dtype == np.uint16 and wide["y1"].tolist() == [[1]]


def test_ios15_programs_print_without_ios17_parameters() -> None:
    b = mil.Builder("ios15")
    x = b.input("x", (2, 3), "fp16")
    b.output(b.reduce_argmax(x=x), "y")
    text = b.build().to_text()
    assert "output_dtype" not in text and "keep_dims" in text


# -- numeric edge cases --------------------------------------------------------------------------------


def test_reduce_max_and_min_propagate_nan_per_line() -> None:
    x = np.array([[1.0, np.nan, 3.0], [4.0, -5.0, 6.0]], dtype=np.float16)
    for op, clean in (("reduce_max", 6.0), ("reduce_min", -5.0)):
        y = run_one(op, x, axes=[1])["y0"]
        assert np.isnan(y[0]) and y[1] == clean, op


def test_softmax_near_fp16_max_does_not_overflow() -> None:
    # exp(65504) overflows even fp32; subtracting the line maximum first keeps it finite.
    x = np.array([[FP16_MAX, FP16_MAX, 0.0, -FP16_MAX], [-FP16_MAX, -FP16_MAX, -FP16_MAX, 0.0]])
    y = run_one("softmax", x.astype(np.float16))["y0"]
    np.testing.assert_array_equal(y, [[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])


def test_softmax_of_equal_values_is_uniform() -> None:
    y = run_one("softmax", np.full((3, 8), 1000.0, dtype=np.float16), axis=0)["y0"]
    np.testing.assert_allclose(y.astype(np.float64), np.full((3, 8), 1 / 3), rtol=2**-10)


def test_reduce_sum_overflows_to_inf_in_fp16_but_mean_does_not() -> None:
    # The sum 120000 exceeds fp16's 65504 and is stored as inf; the mean is computed in fp32
    # and stored as 60000, which fp16 holds exactly.
    x = np.array([60000.0, 60000.0], dtype=np.float16)
    assert run_one("reduce_sum", x)["y0"] == np.inf
    assert run_one("reduce_mean", x)["y0"] == 60000.0
    assert run_one("reduce_sum", x.astype(np.float32))["y0"] == 120000.0


def test_reduce_log_sum_exp_of_large_and_minus_inf_lines() -> None:
    x = np.array([[FP16_MAX, FP16_MAX], [-np.inf, -np.inf], [0.0, 0.0]], dtype=np.float16)
    y = run_one("reduce_log_sum_exp", x, axes=[-1])["y0"]
    assert y[0] == FP16_MAX  # 65504 + log 2 rounds back to 65504 (fp16 ulp there is 32)
    assert y[1] == -np.inf
    assert y[2] == np.float16(np.log(2.0))


def test_ties_go_to_the_first_occurrence() -> None:
    x = np.array([1.0, 3.0, 3.0, 2.0, 3.0, 1.0], dtype=np.float16)
    assert run_one("reduce_argmax", x)["y0"] == 1
    assert run_one("reduce_argmin", x)["y0"] == 0
    top = run_one("topk", x, k=3)
    np.testing.assert_array_equal(top["y1"], [1, 2, 4])
    bottom = run_one("topk", x, k=3, ascending=True)
    np.testing.assert_array_equal(bottom["y1"], [0, 5, 3])
    np.testing.assert_array_equal(run_one("argsort", x)["y0"], [1, 2, 4, 3, 0, 5])


def test_integer_reductions_are_exact_and_round_toward_zero() -> None:
    x = np.array([[-7, -2], [5, 4], [46341, 1]], dtype=np.int32)
    np.testing.assert_array_equal(run_one("reduce_mean", x, axes=[1])["y0"], [-4, 4, 23171])
    # 46341**2 = 2147488281 exceeds int32, but only the square root is stored
    l2 = run_one("reduce_l2_norm", x, axes=[1])["y0"]
    np.testing.assert_array_equal(l2, [7, 6, 46341])
    assert run_one("reduce_prod", x[:2])["y0"] == -7 * -2 * 5 * 4


def test_int32_cumsum_is_exact() -> None:
    x = np.array([2**24 + 1, 2**24 + 1, 3], dtype=np.int32)  # fp32 would lose the +1s
    out = run_one("cumsum", x, exclusive=True, reverse=True)["y0"]
    np.testing.assert_array_equal(out, [2**24 + 4, 3, 0])


# -- cost ----------------------------------------------------------------------------------------


def _only_op_cost(build):
    b = mil.Builder()
    b.output(build(b, b.input("x", (4, 8, 16), "fp16")), "y")
    return next(op for op in b.build().ops if op.op_type != "const").cost()


def test_costs_count_input_elements() -> None:
    n = 4 * 8 * 16
    reduce = _only_op_cost(lambda b, x: b.reduce_sum(x=x, axes=[1]))
    assert reduce.flops == n and reduce.bytes_written == 4 * 16 * 2
    assert reduce.bytes_read >= n * 2
    # max, subtract, sum, divide (1 each) and exp (4): the convention of anekit.mil.ops.common
    assert _only_op_cost(lambda b, x: b.softmax(x=x)).flops == (4 + 4) * n
    assert _only_op_cost(lambda b, x: b.topk(x=x, k=2)[0]).flops == 4 * n  # log2(16)
