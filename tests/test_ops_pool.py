"""Edge cases of the pooling and upsampling ops: type errors, opset differences, numerics, costs."""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilTypeError
from tests.optest import raises, run_reference

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics


def pooled(op: str, xs: np.ndarray, **params) -> np.ndarray:
    """Run one pooling or upsampling op on the reference backend."""
    b = mil.Builder()
    x = b.input("x", xs.shape, "fp32" if xs.dtype == np.float32 else "fp16")
    b.output(getattr(b, op)(x=x, **params), "y")
    return run_reference(b.build(), {"x": xs})["y"]


# -- pooling errors ------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["avg_pool", "max_pool", "l2_pool"])
def test_kernel_sizes_need_one_value_per_spatial_dim(op: str) -> None:
    b = mil.Builder()
    x = b.input("x", (1, 2, 6, 6), "fp16")
    with raises(op, "kernel_sizes", "expected 2 values", "[3]"):
        getattr(b, op)(x=x, kernel_sizes=[3], pad_type="valid")


def test_pad_type_is_required() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 2, 6, 6), "fp16")
    with raises("max_pool", "pad_type", "missing"):
        b.max_pool(x=x, kernel_sizes=[2, 2])


@pytest.mark.parametrize(
    ("shape", "params", "param", "fragment"),
    [
        ((1, 2, 6, 6), {"pad_type": "same"}, "ceil_mode", "pad_type same"),
        ((1, 2, 4, 4, 4), {"pad_type": "valid"}, "ceil_mode", "1 or 2 spatial dims"),
        ((1, 2, 6, 6), {"pad_type": "custom", "pad": [1, 0, 1, 1]}, "pad", "symmetric"),
    ],
)
def test_ceil_mode_restrictions(shape, params, param, fragment) -> None:
    b = mil.Builder()
    x = b.input("x", shape, "fp16")
    kernel = [2] * (len(shape) - 2)
    with raises("avg_pool", param, fragment):
        b.avg_pool(x=x, kernel_sizes=kernel, ceil_mode=True, **params)


def test_l2_pool_supports_two_spatial_dims_at_most() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 2, 4, 4, 4), "fp16")
    with raises("l2_pool", "x", "rank"):
        b.l2_pool(x=x, kernel_sizes=[2, 2, 2], pad_type="valid")


def test_pool_same_lower_needs_ios16() -> None:
    b15 = mil.Builder(opset="ios15")
    with raises("max_pool", "pad_type", "ios16"):
        b15.max_pool(x=b15.input("x", (1, 1, 5, 5)), kernel_sizes=[2, 2], pad_type="same_lower")
    b16 = mil.Builder(opset="ios16")
    y = b16.max_pool(x=b16.input("x", (1, 1, 5, 5)), kernel_sizes=[2, 2], pad_type="same_lower")
    assert tuple(y.shape) == (1, 1, 5, 5)


def test_window_larger_than_padded_input_is_rejected() -> None:
    b = mil.Builder()
    with raises("avg_pool", "x", "empty"):
        b.avg_pool(x=b.input("x", (1, 1, 3, 3)), kernel_sizes=[4, 4], pad_type="valid")


# -- pooling numerics ----------------------------------------------------------------------
def test_max_pool_padding_never_wins() -> None:
    xs = -np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    y = pooled("max_pool", xs, kernel_sizes=[3, 3], pad_type="custom", pad=[1, 1, 1, 1])
    # every window's max is its top-left input element (values decrease to the right and down)
    rows, cols = np.meshgrid(np.arange(5), np.arange(5), indexing="ij")
    want = -(np.maximum(rows - 1, 0) * 5 + np.maximum(cols - 1, 0) + 1)
    np.testing.assert_array_equal(y[0, 0], want)


@pytest.mark.parametrize(("exclude", "corner", "edge"), [(False, 4 / 9, 6 / 9), (True, 1.0, 1.0)])
def test_avg_pool_divisor_with_and_without_padding(exclude, corner, edge) -> None:
    xs = np.ones((1, 1, 4, 4), np.float32)
    y = pooled(
        "avg_pool",
        xs,
        kernel_sizes=[3, 3],
        pad_type="same",
        exclude_padding_from_average=exclude,
    )
    assert y[0, 0, 0, 0] == pytest.approx(corner)
    assert y[0, 0, 0, 1] == pytest.approx(edge)
    assert y[0, 0, 1, 1] == pytest.approx(1.0)


def test_avg_pool_ceil_mode_overhang_is_not_counted() -> None:
    # in = 6, k = 3, s = 2, pad 1, ceil: 4 outputs; the last window covers input 5 and
    # padding position 6 and overhangs past it: divisor 2 (with padding), 1 (without)
    xs = np.ones((1, 1, 1, 6), np.float32)
    xs[..., 5] = 4.0
    common = dict(kernel_sizes=[1, 3], strides=[1, 2], pad_type="custom", pad=[0, 0, 1, 1])
    with_pad = pooled("avg_pool", xs, ceil_mode=True, **common)
    without = pooled("avg_pool", xs, ceil_mode=True, exclude_padding_from_average=True, **common)
    assert with_pad.shape[-1] == 4
    assert with_pad[0, 0, 0, -1] == pytest.approx(4.0 / 2)
    assert without[0, 0, 0, -1] == pytest.approx(4.0)


def test_max_pool_propagates_nan_to_windows_that_contain_it() -> None:
    xs = np.zeros((1, 1, 1, 6), np.float16)
    xs[..., 2] = np.nan
    y = pooled("max_pool", xs, kernel_sizes=[1, 2], strides=[1, 2], pad_type="valid")
    np.testing.assert_array_equal(np.isnan(y[0, 0, 0]), [False, True, False])


def test_pool_sums_are_held_in_fp32() -> None:
    window = {"kernel_sizes": [2, 2], "pad_type": "valid"}
    l2 = pooled("l2_pool", np.full((1, 1, 2, 2), 200.0, np.float16), **window)
    assert l2[0, 0, 0, 0] == 400.0  # the sum of squares, 160000, is beyond fp16
    avg = pooled("avg_pool", np.full((1, 1, 2, 2), 65504.0, np.float16), **window)
    assert avg[0, 0, 0, 0] == 65504.0  # so is the sum, not the average


def test_pool_cost_is_one_operation_per_window_tap() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 3, 8, 8), "fp16")
    b.output(b.max_pool(x=x, kernel_sizes=[3, 2], strides=[2, 2], pad_type="valid"), "y")
    op = next(o for o in b.build().ops if o.op_type == "max_pool")
    out_elements = 2 * 3 * 3 * 4
    assert op.cost().flops == out_elements * 3 * 2
    assert op.cost().bytes_written == out_elements * 2


# -- upsampling ----------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["upsample_nearest_neighbor", "upsample_bilinear"])
def test_upsample_needs_rank_3(op: str) -> None:
    b = mil.Builder()
    with raises(op, "x", "rank >= 3"):
        getattr(b, op)(x=b.input("x", (4, 4)), scale_factor_height=2)


@pytest.mark.parametrize("scale", [0, -2, 0.1])
def test_upsample_scale_must_give_a_nonempty_output(scale) -> None:
    b = mil.Builder()
    with raises("upsample_nearest_neighbor", "scale_factor_width"):
        b.upsample_nearest_neighbor(x=b.input("x", (1, 1, 4, 4)), scale_factor_width=scale)


def test_upsample_scales_share_one_dtype() -> None:
    b = mil.Builder()
    with pytest.raises(MilTypeError, match="share type U"):
        b.upsample_nearest_neighbor(
            x=b.input("x", (1, 1, 4, 4)), scale_factor_height=2, scale_factor_width=1.5
        )


def test_fractional_scale_sizes_are_computed_in_fp32_as_coremltools() -> None:
    # float32(0.7) * 10 = 6.99999988 exactly, but the fp32 product rounds to 7.0
    b = mil.Builder()
    y = b.upsample_nearest_neighbor(
        x=b.input("x", (1, 1, 10, 10)), scale_factor_height=0.7, scale_factor_width=1.25
    )
    assert tuple(y.shape) == (1, 1, 7, 12)


def test_nearest_downsampling_picks_every_other_element() -> None:
    xs = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    y = pooled("upsample_nearest_neighbor", xs, scale_factor_height=0.5, scale_factor_width=0.5)
    np.testing.assert_array_equal(y[0, 0], [[0, 2], [8, 10]])


def test_bilinear_both_alignments_true_is_rejected_on_ios16() -> None:
    b = mil.Builder()
    with raises("upsample_bilinear", "half_pixel_centers", "both"):
        b.upsample_bilinear(
            x=b.input("x", (1, 1, 2, 2)), align_corners=True, half_pixel_centers=True
        )


def test_bilinear_half_pixel_centers_needs_ios16() -> None:
    b = mil.Builder(opset="ios15")
    with raises("upsample_bilinear", "half_pixel_centers", "unknown parameter"):
        b.upsample_bilinear(x=b.input("x", (1, 1, 2, 2)), half_pixel_centers=False)


@pytest.mark.parametrize(
    ("align", "half", "want"),
    [
        # coremltools' iOS16 test values for x = [1, 2] upsampled x3 along W
        (True, None, [1.0, 1.2, 1.4, 1.6, 1.8, 2.0]),
        (False, None, [1.0, 1.0, 4 / 3, 5 / 3, 2.0, 2.0]),
        (False, False, [1.0, 4 / 3, 5 / 3, 2.0, 2.0, 2.0]),
    ],
)
def test_bilinear_grids(align, half, want) -> None:
    xs = np.array([1.0, 2.0], np.float32).reshape(1, 1, 1, 2)
    extra = {} if half is None else {"half_pixel_centers": half}
    y = pooled(
        "upsample_bilinear",
        xs,
        scale_factor_height=2,
        scale_factor_width=3,
        align_corners=align,
        **extra,
    )
    assert y.shape == (1, 1, 2, 6)
    np.testing.assert_allclose(y[0, 0], [want, want], rtol=1e-6)


def test_upsample_costs() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 2, 3, 4), "fp16")
    b.output(b.upsample_nearest_neighbor(x=x, scale_factor_height=2, scale_factor_width=2), "n")
    b.output(b.upsample_bilinear(x=x, scale_factor_height=2, scale_factor_width=2), "l")
    nearest, bilinear = (o for o in b.build().ops if o.op_type.startswith("upsample"))
    out_elements = 1 * 2 * 6 * 8
    assert nearest.cost().flops == 0
    assert bilinear.cost().flops == 6 * out_elements
    assert nearest.cost().bytes_written == out_elements * 2
