"""The findings of running coremltools' own MIL op tests through the reference backend
(issue 27 item 6), each pinned by a test: the expected values are coremltools' (quoted from
its tests, or its documented formula written in NumPy here)."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.errors import EvaluationError, MilTypeError


def run(build, opset: str = "ios18", **inputs: np.ndarray) -> dict[str, np.ndarray]:
    b = mil.Builder(opset=opset)
    values = {k: b.input(k, v.shape, "fp32" if v.dtype == np.float32 else "int32")
              for k, v in inputs.items()}  # fmt: skip
    for name, out in build(b, **values).items():
        b.output(out, name)
    with anekit.compile(b.build(), backend="reference") as k:
        return {k_: np.asarray(v) for k_, v in k(**inputs).items()}


def test_upsample_nearest_fractional_scales_read_the_sizes_ratio() -> None:
    # coremltools ops/tests/iOS15/test_image_resizing.py TestUpsampleNearestNeighborFractionalScales
    x = np.array([1.5, -2.5, 3.5], np.float32).reshape(1, 1, 1, 3)

    def build(b, x):
        return {
            "a": b.upsample_nearest_neighbor(
                x=x, scale_factor_height=np.float32(3.17), scale_factor_width=np.float32(0.67)
            ),
            "b": b.upsample_nearest_neighbor(
                x=x, scale_factor_height=np.float32(2.0), scale_factor_width=np.float32(1.12)
            ),
        }

    out = run(build, x=x)
    np.testing.assert_array_equal(out["a"], np.array([1.5, -2.5] * 3).reshape(1, 1, 3, 2))
    np.testing.assert_array_equal(out["b"], np.array([1.5, -2.5, 3.5] * 2).reshape(1, 1, 2, 3))


def test_negative_stride_slice_past_the_start_of_a_size_one_axis() -> None:
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)

    def build(b, x):
        return {"y": b.slice_by_index(x=x, begin=[-1, -1, -1], end=[-2, -3, -4],
                                      stride=[-1, -1, -1])}  # fmt: skip

    np.testing.assert_array_equal(run(build, x=x)["y"], x[-1:-2:-1, -1:-3:-1, -1:-4:-1])


@pytest.mark.parametrize("rank", [4, 5])
def test_linear_takes_rank_4_and_5(rank: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2,) * (rank - 1) + (3,)).astype(np.float32)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    out = run(lambda b, x: {"y": b.linear(x=x, weight=w, bias=bias)}, x=x)["y"]
    np.testing.assert_allclose(out, x @ w.T + bias, rtol=1e-5, atol=1e-6)


def test_const_keeps_a_sub_byte_dtype_and_checks_its_range() -> None:
    b = mil.Builder()
    assert b.const(np.array([0, 15, 3]), dtype="uint4").dtype is mil.DType.uint4
    assert b.const(np.array([-8, 7]), dtype="int4").dtype is mil.DType.int4
    with pytest.raises(MilTypeError, match="uint4"):
        b.const(np.array([16]), dtype="uint4")


def test_blockwise_shift_scale_reads_4_bit_data() -> None:
    q = np.array([[-8, 7, 1, 0], [3, -2, 0, 5]])
    scale = np.array([[0.5], [2.0]], np.float16)
    offset = np.array([[1], [-1]])
    x = np.zeros((2, 4), np.float32)

    def build(b, x):
        w = b.add_op("constexpr_blockwise_shift_scale", {
            "data": b.const(q, dtype="int4"), "scale": b.const(scale),
            "offset": b.const(offset, dtype="int4")})  # fmt: skip
        return {"y": b.add(x=x, y=b.cast(x=w, dtype="fp32"))}

    np.testing.assert_array_equal(run(build, x=x)["y"], (q - offset) * scale.astype(np.float32))


def test_sparse_to_dense_with_ios18_uint1_mask() -> None:
    mask = np.array([[1, 0, 0, 1], [0, 1, 1, 0]])
    values = np.array([1, 2, 3, 4], np.float32)
    x = np.zeros((2, 4), np.float32)

    def build(b, x):
        dense = b.add_op("constexpr_sparse_to_dense", {
            "nonzero_data": b.const(values), "mask": b.const(mask, dtype="uint1")})  # fmt: skip
        return {"y": b.add(x=x, y=dense)}

    want = np.zeros((2, 4), np.float32)
    want[mask != 0] = values
    np.testing.assert_array_equal(run(build, x=x)["y"], want)


def test_gather_with_negative_indices_counts_from_the_end_up_to_ios16() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([-1, 0, -3], np.int32)
    for axis in (0, 1):
        build = lambda b, x, i, a=axis: {"y": b.gather(x=x, indices=i, axis=a)}  # noqa: E731
        out = run(build, "ios16", x=x, i=idx)
        np.testing.assert_array_equal(out["y"], np.take(x, idx, axis=axis))
        with pytest.raises(EvaluationError, match="out of range"):  # iOS17: [0, D) only
            run(build, "ios17", x=x, i=idx)
