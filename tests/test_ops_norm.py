"""Normalisations: type errors, epsilon placement, opset domains and numeric edge cases.

Values on random inputs are covered by tests/opcases/norm.py through the generic op tests.
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilTypeError
from tests.optest import run_reference, type_error


def run_one(op: str, x: np.ndarray, opset: str = "ios18", **params) -> np.ndarray:
    """Run a single op on input ``x`` on the reference backend."""
    b = mil.Builder(opset)
    dtype = "fp16" if x.dtype == np.float16 else "fp32"
    b.output(getattr(b, op)(x=b.input("x", x.shape, dtype), **params), "y")
    return run_reference(b.build(), {"x": x})["y"]


F16 = np.float16


# -- inference errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, shape, params, param, words",
    [
        ("layer_norm", (2, 3, 4), {"axes": [-1, 2]}, "axes", "repeat"),
        ("layer_norm", (2, 3, 4), {"axes": [3]}, "axes", "out of range"),
        (
            "layer_norm",
            (2, 3, 4),
            {"axes": [1, 2], "gamma": np.ones((4, 3), F16)},
            "gamma",
            "[3, 4]",
        ),
        ("layer_norm", (2, 3, 4), {"axes": [-1], "beta": np.ones(3, F16)}, "beta", "[4]"),
        (
            "batch_norm",
            (2, 3, 4),
            {"mean": np.zeros(4, F16), "variance": np.ones(3, F16)},
            "mean",
            "[3]",
        ),
        (
            "batch_norm",
            (2, 3, 4),
            {"mean": np.zeros(3, F16), "variance": np.ones(3, F16), "gamma": np.ones(2, F16)},
            "gamma",
            "found [2]",
        ),
        (
            "batch_norm",
            (2, 3),
            {"mean": np.zeros(3, F16), "variance": np.ones(3, F16)},
            "x",
            "rank",
        ),
        ("instance_norm", (1, 2, 3, 4, 5), {}, "x", "rank"),
        ("instance_norm", (1, 2, 3), {"beta": np.ones(3, F16)}, "beta", "[2]"),
        ("l2_norm", (3, 4), {}, "x", "rank >= 3"),
        ("local_response_norm", (1, 4, 2), {"size": 0}, "size", ">= 1"),
        ("local_response_norm", (1, 4), {"size": 3}, "x", "rank"),
    ],
)
def test_bad_arguments_name_op_and_parameter(op, shape, params, param, words) -> None:
    err = type_error(op, shape, **params)
    assert err.param == param
    assert words in err.message


def test_batch_norm_statistics_must_be_constant() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 3, 4), "fp16")
    mean = b.input("mean", (3,), "fp16")
    with pytest.raises(MilTypeError) as info:
        b.batch_norm(x=x, mean=mean, variance=np.ones(3, F16))
    assert info.value.param == "mean" and "constant" in info.value.message


def test_local_response_norm_needs_size() -> None:
    err = type_error("local_response_norm", (1, 4, 2))
    assert err.param == "size" and "missing" in err.message


# -- opset domains --------------------------------------------------------------------------------


def test_ios15_parameters_share_the_dtype_of_x_and_ios17_lets_them_differ() -> None:
    gamma32 = np.ones(4, np.float32)
    for opset in ("ios15", "ios16", "ios17"):
        b = mil.Builder(opset)
        x = b.input("x", (2, 4), "fp16")
        gamma = b.const(gamma32, name="gamma")  # an fp32 value, not a literal to convert
        if opset == "ios17":
            assert b.layer_norm(x=x, axes=[-1], gamma=gamma).dtype.value == "fp16"
            continue
        with pytest.raises(MilTypeError) as info:
            b.layer_norm(x=x, axes=[-1], gamma=gamma)
        assert info.value.param == "gamma" and "fp32" in info.value.message


def test_default_epsilon_takes_the_dtype_of_x_before_ios17() -> None:
    for opset, dtype in (("ios16", "fp16"), ("ios17", "fp32")):
        b = mil.Builder(opset)
        b.output(b.layer_norm(x=b.input("x", (2, 4), "fp16")), "y")
        assert f"{dtype} layer_norm_epsilon = const()" in b.build().to_text(), opset


# -- numeric behaviour ----------------------------------------------------------------------------


def test_layer_norm_adds_epsilon_to_the_variance_inside_the_square_root() -> None:
    # x = [-1, 1]: mean 0, variance 1. With epsilon 1: y = x / sqrt(1 + 1) = +-0.7071;
    # epsilon outside the root would give x / (1 + 1) = +-0.5.
    x = np.array([[-1.0, 1.0]], dtype=np.float32)
    y = run_one("layer_norm", x, axes=[-1], epsilon=1.0)
    np.testing.assert_allclose(y, [[-(0.5**0.5), 0.5**0.5]], rtol=1e-6)


def test_layer_norm_uses_the_population_variance() -> None:
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    centered = x - 2.5
    want = centered / np.sqrt(np.mean(centered**2) + 1e-5)  # divide by n = 4, not n - 1
    np.testing.assert_allclose(run_one("layer_norm", x), want, rtol=1e-6)


def test_layer_norm_of_a_constant_line_is_beta_not_nan() -> None:
    x = np.full((2, 5), 7.0, dtype=np.float16)
    beta = np.arange(5, dtype=np.float16)
    y = run_one("layer_norm", x, axes=[-1], gamma=np.full(5, 3.0, np.float16), beta=beta)
    np.testing.assert_array_equal(y, np.broadcast_to(beta, (2, 5)))


def test_batch_norm_overflows_to_inf_in_fp16() -> None:
    # 1000 / sqrt(0 + 1e-5) ~ 316000 > 65504: stored as inf (computed finite in fp32).
    x = np.array([[[1000.0], [-1000.0]]], dtype=np.float16)
    stats = {"mean": np.zeros(2, F16), "variance": np.zeros(2, F16)}
    np.testing.assert_array_equal(run_one("batch_norm", x, **stats), [[[np.inf], [-np.inf]]])
    y32 = run_one(
        "batch_norm", x.astype(np.float32), **{k: v.astype(np.float32) for k, v in stats.items()}
    )
    assert np.all(np.isfinite(y32)) and abs(float(y32[0, 0, 0]) - 1000 / 1e-5**0.5) < 1.0


def test_l2_norm_of_zeros_is_zero_and_batches_are_separate() -> None:
    x = np.zeros((2, 1, 2, 2), dtype=np.float16)
    x[1] = 3.0  # second batch: 4 elements of 3, norm 6
    y = run_one("l2_norm", x)
    np.testing.assert_array_equal(y[0], np.zeros((1, 2, 2)))
    np.testing.assert_allclose(y[1].astype(np.float64), np.full((1, 2, 2), 0.5), rtol=2**-10)


def test_local_response_norm_matches_coremltools_published_values() -> None:
    # Input and expected output of coremltools'
    # TestNormalizationLocalResponseNorm.test_builder_to_backend_smoke
    # (coremltools/converters/mil/mil/ops/tests/iOS14/test_normalization.py).
    x = np.array([[[1.0, -7.0], [5.0, -6.0], [-3.0, -5.0]]], dtype=np.float32)
    size2 = [[[0.99996257, -6.98716545], [4.99531746, -5.99191284], [-2.99898791, -4.99531746]]]
    size3 = [[[0.99997497, -6.99143696], [4.99687672, -5.99460602], [-2.99932504, -4.99687672]]]
    np.testing.assert_allclose(run_one("local_response_norm", x, size=2), size2, rtol=1e-6)
    np.testing.assert_allclose(run_one("local_response_norm", x, size=3), size3, rtol=1e-6)


# -- cost -----------------------------------------------------------------------------------------


def test_norm_costs_scale_with_elements() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 8, 4, 4), "fp16")
    b.output(b.layer_norm(x=x, axes=[1]), "a")
    b.output(b.local_response_norm(x=x, size=5), "c")
    ops = {op.op_type: op.cost() for op in b.build().ops if op.op_type != "const"}
    n = 8 * 4 * 4
    assert ops["layer_norm"].flops == 7 * n
    # square, 5 window adds, scale, add k, divide (1 each) and the power (4)
    assert ops["local_response_norm"].flops == (1 + 5 + 1 + 1 + 1 + 4) * n
    assert ops["layer_norm"].bytes_written == n * 2
