"""Elementwise ops: inference errors and numeric edge cases the generic case loop cannot express."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilTypeError
from anekit.mil.ops import registry
from tests.optest import run_reference

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics

BRIEF_OPS = """relu relu6 leaky_relu elu tanh sigmoid sigmoid_hard silu gelu softplus softsign exp
exp2 log sqrt rsqrt abs sign ceil floor round sin cos tan atan asin acos sinh cosh atanh erf
inverse square clip threshold scaled_tanh linear_activation prelu add sub mul real_div pow
maximum minimum floor_div mod equal not_equal less less_equal greater greater_equal logical_and
logical_or logical_xor logical_not select""".split()


def run_unary(
    op: str, values: Any, dtype: str = "fp16", opset: str = "ios18", **params: Any
) -> np.ndarray:
    """Run ``op`` on a 1-D input holding ``values``; warnings become errors."""
    x = np.asarray(values, dtype=mil.DType(dtype).numpy)
    b = mil.Builder(opset)
    b.output(getattr(b, op)(x=b.input("x", x.shape, dtype), **params), "y")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return run_reference(b.build(), {"x": x})["y"]


def run_binary(op: str, x: Any, y: Any, dtype: str = "fp16") -> np.ndarray:
    xs, ys = (np.asarray(v, dtype=mil.DType(dtype).numpy) for v in (x, y))
    b = mil.Builder()
    out = getattr(b, op)(x=b.input("x", xs.shape, dtype), y=b.input("y", ys.shape, dtype))
    b.output(out, "z")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return run_reference(b.build(), {"x": xs, "y": ys})["z"]


def type_error(build: Callable[[mil.Builder], Any], opset: str = "ios18") -> MilTypeError:
    with pytest.raises(MilTypeError) as info:
        build(mil.Builder(opset))
    return info.value


# -- the declarations ---------------------------------------------------------------------------
def test_every_op_of_the_family_is_registered_as_elementwise() -> None:
    for name in BRIEF_OPS:
        opdef = registry.get(name)
        assert "elementwise" in opdef.traits, name
        assert opdef.reference is not None, name


def test_comparisons_and_logical_ops_output_bool() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 3), "fp16")
    for op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        assert getattr(b, op)(x=x, y=1.0).dtype is mil.DType.bool, op
    flags = b.input("f", (3,), "bool")
    assert b.logical_xor(x=flags, y=flags).dtype is mil.DType.bool


def test_python_float_operand_takes_the_tensor_dtype() -> None:
    b = mil.Builder()
    y = b.add(x=b.input("x", (4,), "fp16"), y=2.0).producer.inputs["y"]
    assert y.dtype is mil.DType.fp16 and y.const == np.float16(2.0)


def test_transcendentals_cost_more_per_element_than_add() -> None:
    add, exp, gelu = (registry.get(n).flops_per_element for n in ("add", "exp", "gelu"))
    assert add == 1 and exp > add and gelu > exp


# -- type errors -----------------------------------------------------------------------------
def test_add_of_fp16_and_int32_names_param_y() -> None:
    err = type_error(lambda b: b.add(x=b.input("x", (2,), "fp16"), y=b.input("y", (2,), "int32")))
    assert (err.op, err.param) == ("add", "y")
    assert "int32" in err.message and "fp16" in err.message


def test_shapes_that_do_not_broadcast_name_the_second_operand() -> None:
    err = type_error(lambda b: b.mul(x=b.input("x", (2, 3)), y=b.input("y", (4,))))
    assert (err.op, err.param) == ("mul", "y") and "[2, 3]" in err.message


def test_select_names_the_operand_that_does_not_broadcast() -> None:
    def build(b: mil.Builder) -> None:
        cond = b.input("c", (2, 3), "bool")
        b.select(cond=cond, a=b.input("a", (1, 3)), b=b.input("b", (5, 1)))

    err = type_error(build)
    assert (err.op, err.param) == ("select", "b")


def test_select_cond_must_be_bool() -> None:
    err = type_error(lambda b: b.select(cond=b.input("c", (2,)), a=b.input("a", (2,)), b=0.0))
    assert (err.op, err.param) == ("select", "cond")


def test_logical_ops_reject_floats_and_math_rejects_bool() -> None:
    err = type_error(lambda b: b.logical_and(x=b.input("x", (2,)), y=b.input("y", (2,))))
    assert (err.op, err.param) == ("logical_and", "x")
    err = type_error(lambda b: b.exp(x=b.input("x", (2,), "bool")))
    assert (err.op, err.param) == ("exp", "x")


def test_transcendentals_reject_int32_but_abs_accepts_it() -> None:
    err = type_error(lambda b: b.sqrt(x=b.input("x", (2,), "int32")))
    assert (err.op, err.param) == ("sqrt", "x")
    b = mil.Builder()
    assert b.abs(x=b.input("x", (2,), "int32")).dtype is mil.DType.int32


def test_activation_alpha_must_be_a_const() -> None:
    err = type_error(lambda b: b.leaky_relu(x=b.input("x", (2,)), alpha=b.input("a", ())))
    assert (err.op, err.param) == ("leaky_relu", "alpha") and "constant" in err.message


def test_gelu_rejects_unknown_mode() -> None:
    err = type_error(lambda b: b.gelu(x=b.input("x", (2,)), mode="ERF"))
    assert (err.op, err.param) == ("gelu", "mode") and "TANH_APPROXIMATION" in err.message


def test_prelu_checks_rank_and_channels() -> None:
    err = type_error(lambda b: b.prelu(x=b.input("x", (2, 3)), alpha=[0.1, 0.2, 0.3]))
    assert (err.op, err.param) == ("prelu", "x") and "rank 2" in err.message
    err = type_error(lambda b: b.prelu(x=b.input("x", (1, 3, 4, 4)), alpha=[0.1, 0.2]))
    assert (err.op, err.param) == ("prelu", "alpha") and "[3]" in err.message
    err = type_error(lambda b: b.prelu(x=b.input("x", (1, 2, 4)), alpha=[0.1, 0.2]))
    assert (err.op, err.param) == ("prelu", "alpha") and "equal" in err.message


def test_clip_needs_alpha_below_beta_from_ios17_only() -> None:
    def build(b: mil.Builder) -> Any:
        return b.clip(x=b.input("x", (3,)), alpha=1.0, beta=0.5)

    err = type_error(build, "ios17")
    assert (err.op, err.param) == ("clip", "beta")
    b = mil.Builder("ios16")
    b.output(build(b), "y")
    out = run_reference(b.build(), {"x": np.array([-3.0, 0.7, 3.0], np.float16)})["y"]
    np.testing.assert_array_equal(out, [0.5, 0.5, 0.5])  # min(max(x, 1), 0.5): beta wins


def test_ios17_epsilon_and_alpha_may_be_fp32_with_fp16_x() -> None:
    def build(b: mil.Builder) -> Any:
        x = b.input("x", (3,), "fp16")
        b.inverse(x=x, epsilon=b.const(np.float32(1e-3)))
        return b.leaky_relu(x=x, alpha=b.const(np.float32(0.25)))

    err = type_error(build, "ios16")
    assert (err.op, err.param) == ("inverse", "epsilon")
    b = mil.Builder("ios17")
    assert build(b).dtype is mil.DType.fp16


@pytest.mark.parametrize("opset", ["ios15", "ios18"])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_default_epsilon_is_stored_in_x_dtype(opset: str, dtype: str) -> None:
    b = mil.Builder(opset)
    eps = b.rsqrt(x=b.input("x", (2,), dtype)).producer.inputs["epsilon"]
    assert eps.dtype is mil.DType(dtype)
    assert eps.const == mil.DType(dtype).numpy.type(1e-12)


# -- numeric edge cases ----------------------------------------------------------------------------
def test_exp_overflows_to_inf_in_fp16_only() -> None:
    np.testing.assert_array_equal(run_unary("exp", [12.0]), [np.inf])  # e**12 > 65504
    assert np.isfinite(run_unary("exp", [11.0])).all()  # e**11 = 59874 < 65504
    assert run_unary("exp", [12.0], "fp32")[0] == pytest.approx(math.exp(12), rel=1e-6)


def test_fp16_products_overflow_to_inf() -> None:
    np.testing.assert_array_equal(
        run_binary("mul", [300.0, -300.0], [300.0, 300.0]), [np.inf, -np.inf]
    )
    np.testing.assert_array_equal(run_binary("pow", [2.0, 2.0], [15.0, 16.0]), [32768, np.inf])


def test_maximum_and_minimum_propagate_nan_like_numpy() -> None:
    x, y = [np.nan, 1.0, np.nan], [2.0, np.nan, np.nan]
    for op in ("maximum", "minimum"):
        assert np.isnan(run_binary(op, x, y)).all(), op
    for op, params in (
        ("relu", {}),
        ("clip", {"alpha": 0.0, "beta": 1.0}),
        ("threshold", {"alpha": 0.0}),
        ("leaky_relu", {"alpha": 0.1}),
    ):
        assert np.isnan(run_unary(op, [np.nan], **params)).all(), op


def test_inverse_of_zero_is_the_inverse_of_epsilon() -> None:
    eps16 = np.float16(1e-4)
    np.testing.assert_array_equal(run_unary("inverse", [0.0]), [np.float16(1 / float(eps16))])
    assert run_unary("inverse", [0.0], "fp32")[0] == np.float32(1 / np.float32(1e-4))
    np.testing.assert_array_equal(run_unary("inverse", [0.0], epsilon=0.0), [np.inf])


def test_log_and_sqrt_domain_errors_give_nan_without_warnings() -> None:
    assert np.isnan(run_unary("log", [-1.0])).all()
    assert np.isnan(run_unary("sqrt", [-1.0])).all()
    assert np.isnan(run_unary("rsqrt", [-1.0])).all()
    assert np.isnan(run_unary("acos", [2.0])).all()
    np.testing.assert_array_equal(run_unary("atanh", [1.0, -1.0]), [np.inf, -np.inf])


def test_log_of_zero_shows_where_epsilon_is_added() -> None:
    # 1e-45 rounds to 0 in fp16 but to the smallest fp32 subnormal 2**-149: log(0 + eps).
    assert run_unary("log", [0.0])[0] == -np.inf
    assert run_unary("log", [0.0], "fp32")[0] == pytest.approx(-149 * math.log(2), rel=1e-6)


def test_round_is_half_to_even() -> None:
    got = run_unary("round", [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999])
    np.testing.assert_array_equal(got, [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0])


def test_floor_div_and_mod_follow_the_sign_of_the_divisor() -> None:
    x, y = [-7.0, 7.0, -7.0, 7.5], [2.0, -2.0, -2.0, 2.0]
    for dtype in ("fp16", "int32"):
        xs = np.trunc(x) if dtype == "int32" else x
        np.testing.assert_array_equal(
            run_binary("floor_div", xs, y, dtype), np.floor(np.divide(xs, y))
        )
        np.testing.assert_array_equal(
            run_binary("mod", xs, y, dtype), np.asarray(xs) - np.floor(np.divide(xs, y)) * y
        )
    np.testing.assert_array_equal(run_binary("mod", [-7, 7], [3, -3], "int32"), [2, -2])


def test_integer_real_div_truncates_toward_zero() -> None:
    got = run_binary("real_div", [-7, 7, -7, 6, 5], [2, -2, -2, 3, 1], "int32")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [-3, -3, 3, 2, 5])
    np.testing.assert_array_equal(run_binary("floor_div", [5, -5], [3, 3], "int32"), [1, -2])
    np.testing.assert_array_equal(run_binary("mod", [5, -5], [-3, 3], "int32"), [-1, 1])


def test_float_division_by_zero_gives_inf_and_nan() -> None:
    got = run_binary("real_div", [1.0, -1.0, 0.0], [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(got[:2], [np.inf, -np.inf])
    assert np.isnan(got[2])


def test_integer_powers_are_exact() -> None:
    x, y = [2, -2, -1, -1, 1, 0, 3, 2, -2, 5], [10, 3, -3, -2, -5, 4, 0, -1, 31, -2]
    got = run_binary("pow", x, y, "int32")
    np.testing.assert_array_equal(got, [1024, -8, -1, 1, 1, 0, 1, 0, -(2**31), 0])
    np.testing.assert_array_equal(run_unary("exp2", [-1, 0, 5, 30], "int32"), [0, 1, 32, 2**30])


def test_float_pow_of_negative_base_with_fractional_exponent_is_nan() -> None:
    got = run_binary("pow", [-8.0, -2.0], [1 / 3, 2.0])
    assert np.isnan(got[0]) and got[1] == 4.0


@pytest.mark.parametrize("mode", ["EXACT", "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION"])
def test_gelu_modes_differ_where_the_approximations_do(mode: str) -> None:
    import torch

    x = np.array([-3.0, -1.0, 0.5, 2.0])
    t = torch.from_numpy(x)
    want = {
        "EXACT": torch.nn.functional.gelu(t),
        "TANH_APPROXIMATION": torch.nn.functional.gelu(t, approximate="tanh"),
        "SIGMOID_APPROXIMATION": t * torch.sigmoid(1.702 * t),
    }[mode].numpy()
    got = run_unary("gelu", x, "fp32", mode=mode)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # The sigmoid approximation is off by ~1e-2 at x = -3: fp32 comparisons can tell modes apart.
    others = {"EXACT", "SIGMOID_APPROXIMATION"} - {mode}
    for other in others:
        assert np.abs(got - run_unary("gelu", x, "fp32", mode=other)).max() > 1e-4


def test_sigmoid_and_softplus_saturate_without_overflow() -> None:
    np.testing.assert_array_equal(run_unary("sigmoid", [-100.0, 100.0], "fp32"), [0.0, 1.0])
    got = run_unary("softplus", [-100.0, 100.0], "fp32")
    assert got[1] == 100.0 and 0 < got[0] < 1e-40


def test_erf_is_vectorised_and_within_2e_7_of_math_erf() -> None:
    import math

    from anekit.mil.ops.npmath import erf as _erf

    grid = np.linspace(-7.0, 7.0, 20001)
    tiny = np.logspace(-30, 0.5, 400)
    x = np.concatenate([grid, tiny, -tiny, [0.49999, 0.5, 0.50001]])
    want = np.array([math.erf(v) for v in x])
    got = _erf(x)
    assert np.max(np.abs(got - want) / np.abs(np.where(want == 0, 1.0, want))) < 2e-7
    special = _erf(np.array([0.0, -0.0, np.inf, -np.inf, np.nan]))
    assert list(special[:4]) == [0.0, 0.0, 1.0, -1.0] and np.isnan(special[4])
    assert not np.signbit(special[0]) and np.signbit(special[1])


def test_gelu_exact_keeps_relative_accuracy_in_the_tail_and_the_sign_of_zero() -> None:
    from anekit.mil.ops.npmath import gelu_exact

    # more than one chunk, both signs, the far negative tail where 1 + erf would cancel
    x = np.concatenate([np.linspace(-12, 8, 40_001), [0.0, -0.0, 1e-30, -1e-30]])
    x = x.astype(np.float32)
    got = gelu_exact(x)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=0)
    assert np.signbit(got[-3]) and not np.signbit(got[-4])  # gelu(-0) = -0, gelu(0) = 0
    assert gelu_exact(np.float32(np.inf)) == np.inf and np.isnan(gelu_exact(np.float32(-np.inf)))


def test_erf_of_float32_is_float32_within_its_bound() -> None:
    from anekit.mil.ops.npmath import erf as _erf

    x = np.concatenate([np.linspace(-6, 6, 40_001), np.logspace(-30, 0, 200)]).astype(np.float32)
    x = np.concatenate([x, -x[-200:]])
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    got = _erf(x)
    assert got.dtype == np.float32 and got.shape == x.shape
    err = np.abs(got.astype(np.float64) - want)
    assert err.max() < 4.5e-7 and (err / np.maximum(np.abs(want), 1e-300)).max() < 8e-7
    special = _erf(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 4.0, -100.0], np.float32))
    assert list(special[:4]) == [0.0, 0.0, 1.0, -1.0] and np.isnan(special[4])
    assert not np.signbit(special[0]) and np.signbit(special[1]) and list(special[5:]) == [1, -1]
