"""Edge cases of conv, conv_transpose, matmul, linear, einsum and scaled_dot_product_attention
that the generic case loop cannot express: type errors, opset differences, numerics, costs."""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilTypeError
from anekit.mil.types import DType
from tests.opcases.attention import torch_sdpa
from tests.opcases.linear import fixed_weight, torch_conv
from tests.optest import raises, run_reference

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics


def conv_input(b: mil.Builder, shape=(1, 4, 5, 5)):
    return b.input("x", shape, "fp16")


# -- conv and conv_transpose errors --------------------------------------------------------
@pytest.mark.parametrize(
    ("op", "weight_shape", "params", "param", "fragments"),
    [
        ("conv", (8, 3, 3, 3), {}, "weight", ["C_in/groups = 4", "found [8, 3, 3, 3]"]),
        ("conv", (8, 4, 3), {}, "weight", ["rank 4", "found [8, 4, 3]"]),
        ("conv", (6, 1, 3, 3), {"groups": 3}, "groups", ["C_in = 4", "groups = 3"]),
        ("conv", (3, 2, 3, 3), {"groups": 2}, "weight", ["C_out = 3", "groups = 2"]),
        (
            "conv",
            (6, 4, 3, 3),
            {"bias": np.zeros((5,), np.float16)},
            "bias",
            ["expected shape [6]", "found [5]"],
        ),
        ("conv_transpose", (3, 2, 3, 3), {}, "weight", ["C_in = 4", "found [3, 2, 3, 3]"]),
        (
            "conv_transpose",
            (4, 2, 3, 3),
            {"output_shape": [1, 3, 7, 7]},
            "output_shape",
            ["[N, C_out] = [1, 2]", "[1, 3, 7, 7]"],
        ),
    ],
)
def test_conv_operand_shapes_are_checked(op, weight_shape, params, param, fragments) -> None:
    """weight, groups, bias and output_shape must fit x [1, 4, 5, 5]; arrays become weights."""
    b = mil.Builder()
    w = b.weight("w", np.zeros(weight_shape, np.float16))
    given = {k: b.weight(k, v) if isinstance(v, np.ndarray) else v for k, v in params.items()}
    with raises(op, param, *fragments):
        getattr(b, op)(x=conv_input(b), weight=w, **given)


@pytest.mark.parametrize(
    ("params", "param", "fragment"),
    [
        ({"strides": [1]}, "strides", "expected 2 values"),
        ({"strides": [1, 0]}, "strides", "values >= 1"),
        ({"dilations": [1, 1, 1]}, "dilations", "expected 2 values"),
        ({"pad_type": "custom", "pad": [1, 1]}, "pad", "expected 4 values"),
        ({"pad_type": "custom", "pad": [0, 0, -1, 0]}, "pad", "values >= 0"),
        ({"pad_type": "full"}, "pad_type", "found 'full'"),
        ({"groups": 0}, "groups", "groups >= 1"),
    ],
)
def test_conv_window_parameters_are_checked(params, param, fragment) -> None:
    b = mil.Builder()
    w = b.weight("w", np.zeros((4, 4, 3, 3), np.float16))
    with raises("conv", param, fragment):
        b.conv(x=conv_input(b), weight=w, **params)


def test_conv_kernel_larger_than_input_gives_an_empty_output_error() -> None:
    b = mil.Builder()
    w = b.weight("w", np.zeros((4, 4, 3, 3), np.float16))
    with raises("conv", "x", "empty", "dilations [3, 1]"):
        b.conv(x=conv_input(b), weight=w, dilations=[3, 1])


def test_same_lower_needs_ios16() -> None:
    w = np.zeros((4, 4, 2, 2), np.float16)
    b15 = mil.Builder(opset="ios15")
    with raises("conv", "pad_type", "ios16"):
        b15.conv(x=conv_input(b15), weight=b15.weight("w", w), pad_type="same_lower")
    b16 = mil.Builder(opset="ios16")
    y = b16.conv(x=conv_input(b16), weight=b16.weight("w", w), pad_type="same_lower")
    assert tuple(y.shape) == (1, 4, 5, 5)


def test_runtime_weight_needs_unit_dilations() -> None:
    b = mil.Builder()
    w = b.input("w", (4, 4, 2, 2), "fp16")
    with raises("conv", "dilations", "runtime weight"):
        b.conv(x=conv_input(b), weight=w, dilations=[2, 1])


def test_runtime_bias_needs_ios17() -> None:
    b16 = mil.Builder(opset="ios16")
    w = b16.weight("w", np.zeros((2, 4, 1, 1), np.float16))
    with raises("conv", "bias", "compile-time constant"):
        b16.conv(x=conv_input(b16), weight=w, bias=b16.input("bias", (2,), "fp16"))


def test_runtime_bias_is_added_per_channel_on_ios17() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 3, 1, 4), "fp32")
    w = fixed_weight(1, (2, 3, 1, 1), "fp32")
    b.output(b.conv(x=x, weight=b.weight("w", w), bias=b.input("bias", (2,), "fp32")), "y")
    xs = np.random.default_rng(0).standard_normal((1, 3, 1, 4)).astype(np.float32)
    bias = np.array([10.0, -20.0], np.float32)
    got = run_reference(b.build(), {"x": xs, "bias": bias})["y"]
    want = torch_conv(xs, w, bias, [(0, 0), (0, 0)], [1, 1], [1, 1], 1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_ios15_conv_rejects_a_weight_of_another_dtype() -> None:
    b = mil.Builder(opset="ios15")
    x = b.input("x", (1, 4, 5, 5), "fp32")
    with raises("conv", "weight", "fp16"):
        b.conv(x=x, weight=b.weight("w", np.zeros((2, 4, 1, 1), np.float16)))


# -- conv numerics -------------------------------------------------------------------------
def test_conv_fp16_output_overflows_to_inf() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 64, 1, 2), "fp16")
    w = np.full((1, 64, 1, 1), 8.0, np.float16)
    b.output(b.conv(x=x, weight=b.weight("w", w)), "y")
    xs = np.full((1, 64, 1, 2), 200.0, np.float16)
    xs[..., 1] = -1.0
    y = run_reference(b.build(), {"x": xs})["y"]
    assert y.dtype == np.float16
    assert y[0, 0, 0, 0] == np.inf  # 64 * 8 * 200 = 102400 > 65504
    assert y[0, 0, 0, 1] == -512.0


def test_conv_nan_reaches_only_the_windows_that_contain_it() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 1, 1, 7), "fp16")
    b.output(b.conv(x=x, weight=b.weight("w", np.ones((1, 1, 1, 3), np.float16))), "y")
    xs = np.zeros((1, 1, 1, 7), np.float16)
    xs[..., 5] = np.nan
    y = run_reference(b.build(), {"x": xs})["y"][0, 0, 0]
    # output j sums x[j:j+3], so only outputs 3 and 4 see x[5]
    np.testing.assert_array_equal(np.isnan(y), [False, False, False, True, True])


def test_one_by_one_conv_equals_a_matmul() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 32, 1, 16), "fp32")
    w = fixed_weight(3, (24, 32, 1, 1), "fp32")
    b.output(b.conv(x=x, weight=b.weight("w", w)), "y")
    xs = np.random.default_rng(1).standard_normal((1, 32, 1, 16)).astype(np.float32)
    got = run_reference(b.build(), {"x": xs})["y"]
    want = w[:, :, 0, 0].astype(np.float64) @ xs[0, :, 0, :].astype(np.float64)
    np.testing.assert_allclose(got[0, :, 0, :], want, rtol=1e-5, atol=1e-5)


def test_conv_cost_counts_multiply_adds_and_every_byte() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 6, 8, 8), "fp16")
    w = b.weight("w", np.zeros((9, 2, 3, 3), np.float16))
    y = b.conv(x=x, weight=w, groups=3, strides=[2, 1], pad_type="custom", pad=[1, 1, 1, 1])
    b.output(y, "y")
    op = next(o for o in b.build().ops if o.op_type == "conv")
    cost = op.cost()
    n, c_out, out_h, out_w = 2, 9, 4, 8
    assert cost.flops == 2 * n * c_out * out_h * out_w * (6 // 3) * 3 * 3
    param_bytes = 4 * (2 + 4 + 2) + 4  # strides, pad, dilations (int32) and groups
    assert cost.bytes_read == 2 * 6 * 8 * 8 * 2 + 9 * 2 * 3 * 3 * 2 + param_bytes
    assert cost.bytes_written == n * c_out * out_h * out_w * 2


# -- matmul --------------------------------------------------------------------------------
def test_matmul_inner_dimension_mismatch_names_both_shapes() -> None:
    b = mil.Builder()
    x, y = b.input("x", (2, 3, 4), "fp16"), b.input("y", (5, 6), "fp16")
    with raises("matmul", "y", "x [2, 3, 4]", "y [5, 6]", "K = 4", "K = 5"):
        b.matmul(x=x, y=y)


def test_matmul_transposes_count_in_the_inner_dimension_check() -> None:
    b = mil.Builder()
    x, y = b.input("x", (3, 4), "fp16"), b.input("y", (5, 4), "fp16")
    with raises("matmul", "y", "transpose_y=False"):
        b.matmul(x=x, y=y)
    assert tuple(b.matmul(x=x, y=y, transpose_y=True).shape) == (3, 5)


def test_matmul_batch_dims_must_broadcast() -> None:
    b = mil.Builder()
    x, y = b.input("x", (2, 3, 4), "fp16"), b.input("y", (3, 4, 5), "fp16")
    with raises("matmul", "y", "batch dims", "[2, 3, 4]", "[3, 4, 5]"):
        b.matmul(x=x, y=y)


@pytest.mark.parametrize("flag", ["transpose_x", "transpose_y"])
def test_matmul_cannot_transpose_a_vector(flag: str) -> None:
    b = mil.Builder()
    x, y = b.input("x", (4,), "fp16"), b.input("y", (4,), "fp16")
    with raises("matmul", flag, "rank 1"):
        b.matmul(x=x, y=y, **{flag: True})


def test_matmul_mixed_dtypes_need_exactly_one_const_operand() -> None:
    b = mil.Builder()
    x, y = b.input("x", (2, 4), "fp32"), b.input("y", (4, 3), "fp16")
    with raises("matmul", "y", "exactly one"):
        b.matmul(x=x, y=y)
    z = b.matmul(x=b.weight("c", np.ones((2, 4), np.float16)), y=b.input("y32", (4, 3), "fp32"))
    assert z.dtype is DType.fp32  # the dtype of the runtime operand
    b15 = mil.Builder(opset="ios15")
    x15 = b15.input("x", (2, 4), "fp32")
    with pytest.raises(MilTypeError, match="share type T"):
        b15.matmul(x=x15, y=b15.weight("w", np.ones((4, 3), np.float16)))


def test_matmul_fp16_accumulates_in_fp32_and_stores_fp16() -> None:
    b = mil.Builder()
    x, y = b.input("x", (1, 256), "fp16"), b.input("y", (256, 1), "fp16")
    b.output(b.matmul(x=x, y=y), "z")
    xs = np.ones((1, 256), np.float16)
    xs[0, 0] = 2048.0
    z = run_reference(b.build(), {"x": xs, "y": np.ones((256, 1), np.float16)})["z"]
    # an fp16 running sum would stay at 2048 (2048 + 1 rounds back); fp32 gives 2303,
    # stored as the nearest fp16, 2304
    assert z.dtype == np.float16
    assert z[0, 0] == 2304.0


def test_matmul_overflow_to_inf() -> None:
    b = mil.Builder()
    x, y = b.input("x", (1, 256), "fp16"), b.input("y", (256, 1), "fp16")
    b.output(b.matmul(x=x, y=y), "z")
    z = run_reference(
        b.build(), {"x": np.full((1, 256), 300, np.float16), "y": np.ones((256, 1), np.float16)}
    )["z"]
    assert z[0, 0] == np.inf  # 76800 > 65504


def test_matmul_int32_is_exact() -> None:
    b = mil.Builder()
    x, y = b.input("x", (2, 3), "int32"), b.input("y", (3, 2), "int32")
    b.output(b.matmul(x=x, y=y), "z")
    xs = np.array([[100000, 2, 3], [-4, 5, 6]], np.int32)
    ys = np.array([[1000, 1], [1, 1], [1, -1]], np.int32)
    z = run_reference(b.build(), {"x": xs, "y": ys})["z"]
    assert z.dtype == np.int32
    np.testing.assert_array_equal(z, xs.astype(np.int64) @ ys.astype(np.int64))


def test_matmul_cost_is_2mnk_times_batch() -> None:
    b = mil.Builder()
    x, y = b.input("x", (2, 1, 8, 16), "fp16"), b.input("y", (3, 32, 16), "fp16")
    b.output(b.matmul(x=x, y=y, transpose_y=True), "z")
    op = next(o for o in b.build().ops if o.op_type == "matmul")
    assert op.cost().flops == 2 * 8 * 32 * 16 * (2 * 3)


# -- linear --------------------------------------------------------------------------------
def test_linear_weight_of_wrong_shape_names_expected_and_found() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    with raises("linear", "weight", "D_in = 8", "found [4, 6]"):
        b.linear(x=x, weight=b.weight("w", np.zeros((4, 6), np.float16)))


def test_linear_weight_must_be_const() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    with raises("linear", "weight", "compile-time constant"):
        b.linear(x=x, weight=b.input("w", (4, 8), "fp16"))


def test_linear_rank6_input_is_rejected() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 1, 1, 2, 3, 8), "fp16")
    with raises("linear", "x", "rank"):
        b.linear(x=x, weight=b.weight("w", np.zeros((4, 8), np.float16)))


def test_linear_default_bias_is_a_zero_const_as_coremltools_emits() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    b.output(b.linear(x=x, weight=b.weight("w", np.zeros((3, 8), np.float16))), "y")
    text = b.build().to_text()
    assert "tensor<fp16, [3]> linear_bias = const()" in text
    assert "bias = linear_bias" in text


# -- einsum --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "equation",
    ["nchw,nchw->nchw", "ij,jk->ik", "nchw,nwhu", "nchw,nwhu,nwhu->nchu", "nchw, nwhu -> nchu"],
)
def test_einsum_rejects_equations_coremltools_does_not_accept(equation: str) -> None:
    b = mil.Builder()
    x, y = b.input("x", (1, 2, 3, 4), "fp16"), b.input("y", (1, 4, 3, 5), "fp16")
    with raises("einsum", "equation", repr(equation), "nchw,nwhu->nchu"):
        b.einsum(values=(x, y), equation=equation)


def test_einsum_contracted_dims_must_match() -> None:
    b = mil.Builder()
    x, y = b.input("x", (1, 2, 3, 4), "fp16"), b.input("y", (1, 5, 3, 5), "fp16")
    with raises("einsum", "values", "contracted"):
        b.einsum(values=(x, y), equation="nchw,nwhu->nchu")


def test_einsum_rank_must_match_the_equation() -> None:
    b = mil.Builder()
    x, y = b.input("x", (2, 3, 4), "fp16"), b.input("y", (4, 3, 5), "fp16")
    with raises("einsum", "values", "rank-4"):
        b.einsum(values=(x, y), equation="nchw,nwhu->nchu")


# -- scaled_dot_product_attention ----------------------------------------------------------
SDPA = "scaled_dot_product_attention"


def sdpa_program(mask_shape: tuple[int, ...] | None, mask_dtype: str = "bool") -> mil.Program:
    b = mil.Builder()
    q, k, v = (b.input(n, (1, 2, 4, 8), "fp32") for n in "qkv")
    mask = None if mask_shape is None else b.input("mask", mask_shape, mask_dtype)
    b.output(b.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=mask), "y")
    return b.build()


def qkv(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal((1, 2, 4, 8)).astype(np.float32) for n in "qkv"}


def test_sdpa_bool_mask_equals_float_mask_of_zero_and_minus_inf() -> None:
    allowed = np.array([[1, 0, 1, 0], [1, 1, 0, 0], [0, 1, 1, 1], [1, 0, 0, 1]], bool)
    additive = np.where(allowed, 0.0, -np.inf).astype(np.float32)
    inputs = qkv()
    with_bool = run_reference(sdpa_program((4, 4), "bool"), {**inputs, "mask": allowed})["y"]
    with_float = run_reference(sdpa_program((4, 4), "fp32"), {**inputs, "mask": additive})["y"]
    np.testing.assert_allclose(with_bool, with_float, rtol=1e-6, atol=1e-7)
    want = torch_sdpa(inputs["q"], inputs["k"], inputs["v"], allowed)
    np.testing.assert_allclose(with_bool, want, rtol=1e-5, atol=1e-6)


def test_sdpa_float_mask_is_added_to_the_scaled_scores() -> None:
    inputs = qkv(1)
    bias = np.random.default_rng(2).standard_normal((2, 4, 4)).astype(np.float32)
    got = run_reference(sdpa_program((2, 4, 4), "fp32"), {**inputs, "mask": bias})["y"]
    q, k, v = (inputs[n].astype(np.float64) for n in "qkv")
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(8) + bias
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, weights @ v, rtol=1e-5, atol=1e-6)


def test_sdpa_row_with_no_allowed_key_is_nan_as_coremltools() -> None:
    allowed = np.ones((4, 4), bool)
    allowed[2] = False
    y = run_reference(sdpa_program((4, 4), "bool"), {**qkv(), "mask": allowed})["y"]
    assert np.isnan(y[:, :, 2]).all()
    assert np.isfinite(np.delete(y, 2, axis=2)).all()


@pytest.mark.parametrize(
    ("shapes", "param", "fragment"),
    [
        (((1, 2, 4, 8), (1, 2, 5, 7), (1, 2, 5, 3)), "key", "embedding dim E"),
        (((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 6, 3)), "value", "sequence length S"),
        (((1, 2, 4, 8), (1, 3, 5, 8), (1, 3, 5, 3)), "key", "batch dims"),
        (((1, 2, 4, 8), (2, 5, 8), (2, 5, 3)), "key", "same rank"),
        (((4, 8), (5, 8), (5, 3)), "query", "rank >= 3"),
    ],
)
def test_sdpa_shape_errors(shapes, param, fragment) -> None:
    b = mil.Builder()
    q, k, v = (b.input(n, s, "fp16") for n, s in zip("qkv", shapes, strict=True))
    with raises(SDPA, param, fragment):
        b.scaled_dot_product_attention(query=q, key=k, value=v)


@pytest.mark.parametrize("mask_shape", [(4, 5), (3, 4, 4), (1, 1, 2, 4, 4)])
def test_sdpa_mask_must_broadcast_to_the_scores(mask_shape) -> None:
    b = mil.Builder()
    q, k, v = (b.input(n, (1, 2, 4, 4), "fp16") for n in "qkv")
    mask = b.input("mask", mask_shape, "bool")
    with raises(SDPA, "attn_mask", "[1, 2, 4, 4]", str(list(mask_shape))):
        b.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=mask)


def test_sdpa_needs_ios18() -> None:
    b = mil.Builder(opset="ios17")
    q = b.input("q", (1, 2, 4), "fp16")
    with pytest.raises(AttributeError, match="ios18"):
        b.scaled_dot_product_attention(query=q, key=q, value=q)


def test_sdpa_cost_is_two_matmuls_and_a_softmax() -> None:
    b = mil.Builder()
    q = b.input("q", (2, 3, 5, 8), "fp16")
    k = b.input("k", (2, 3, 7, 8), "fp16")
    v = b.input("v", (2, 3, 7, 4), "fp16")
    b.output(b.scaled_dot_product_attention(query=q, key=k, value=v), "y")
    cost = b.build().ops[-1].cost()
    scores = 2 * 3 * 5 * 7
    # per score: q.k (2 * E), the scale (1), softmax (4 arithmetic + exp 4), weights.v (2 * EV)
    assert cost.flops == scores * (2 * 8 + 1 + (4 + 4) + 2 * 4)
    assert cost.bytes_read == 2 * (2 * 3 * 5 * 8 + 2 * 3 * 7 * 8 + 2 * 3 * 7 * 4)
