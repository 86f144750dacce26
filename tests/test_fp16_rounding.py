"""anekit.fp16 equals NumPy's conversion bit for bit, on both paths (PyTorch cast and NumPy only).

The whole float32 space (2**32 bit patterns) is checked when ``ANEKIT_SLOW_TESTS=1`` (a few
minutes); the default suite checks every fp16 value, tie and neighbour, random magnitudes,
subnormal-heavy arrays and the special values.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from anekit import fp16
from anekit.backends.reference import round_to_fp16

PATHS = ("torch", "numpy")


@pytest.fixture(params=PATHS)
def path(request, monkeypatch) -> str:
    """Run a test once with the PyTorch cast and once with it off (as without PyTorch)."""
    if request.param == "torch":
        pytest.importorskip("torch")
        monkeypatch.setattr(fp16, "_torch_state", None)
        assert fp16.use_torch()
    else:
        monkeypatch.setattr(fp16, "_torch_state", False)
    return request.param


def numpy_round(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(np.float16).astype(np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def check(x: np.ndarray) -> None:
    """Every entry point of anekit.fp16 on ``x`` against NumPy."""
    want = numpy_round(x)
    assert same_bits(fp16.round_fp16(x), want).all()
    inplace = x.copy()
    fp16.Rounder()(inplace)
    assert same_bits(inplace, want).all()
    half = fp16.to_fp16(x)
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16)
    assert ((half.view(np.uint16) == ref.view(np.uint16)) | (np.isnan(half) & np.isnan(ref))).all()


def test_every_fp16_value_midpoint_and_neighbour_rounds_like_numpy(path: str) -> None:
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.unique(every[np.isfinite(every)].astype(np.float32))
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)  # the ties
    up, down = np.float32(np.inf), np.float32(-np.inf)
    check(np.concatenate([finite, mids, np.nextafter(mids, up), np.nextafter(mids, down)]))


def test_random_magnitudes_and_special_values_round_like_numpy(path: str) -> None:
    rng = np.random.default_rng(0)
    scale = np.float32(10.0) ** rng.integers(-12, 8, 200_000).astype(np.float32)
    specials = [np.inf, -np.inf, np.nan, 65504, 65519.996, 65520, -65520, 1e30, 3e38, 0.0,
                -0.0, 2**-25, -(2**-25), 3 * 2**-26, 1e-45, -1e-45]  # fmt: skip
    x = np.concatenate(
        [rng.standard_normal(200_000).astype(np.float32) * scale, np.float32(specials)]
    )
    check(x)
    signs = np.tile(np.float32([-0.0, -(2**-26)]), 5000)
    assert np.signbit(fp16.round_fp16(signs)).all()  # signs survive


def test_subnormal_heavy_arrays_of_every_size_round_like_numpy(path: str) -> None:
    """Softmax tails and small gradients: most values below fp16's smallest normal, 2**-14."""
    rng = np.random.default_rng(1)
    for n in (1, 7, 300, 2047, 2048, 5000, 70_000):
        x = (rng.standard_normal(n) * 2.0**-16).astype(np.float32)
        check(x)
        assert (np.abs(x) < 2.0**-14).mean() > 0.5


def test_nan_payloads_and_every_exponent_stay_exact(path: str) -> None:
    """One value per exponent and sign with low, high and all mantissa bits; NaNs of any payload."""
    exps = np.arange(256, dtype=np.uint32) << 23
    mants = np.uint32([0, 1, 0xFFF, 0x1000, 0x1001, 0x2000, 0x7FFFFF, 0x400000])
    bits = (exps[:, None] | mants[None, :]).ravel()
    check(np.concatenate([bits, bits | 0x80000000]).view(np.float32))


def test_input_is_left_untouched_and_float64_rounds_once() -> None:
    x = np.tile(np.float32([1.0001, 3e-7, 7e4]), 5000)
    before = x.copy()
    round_to_fp16(x)
    np.testing.assert_array_equal(x, before)
    # 1 + 2^-11 + 2^-30 is just above a tie in float64; via float32 it would fall on the tie
    y = np.float64([1 + 2**-11 + 2**-30])
    assert round_to_fp16(y)[0] == np.float32(1 + 2**-10)


def test_scalars_round_and_bad_out_is_an_error() -> None:
    got = round_to_fp16(np.float32(70000.0))
    assert got.shape == () and np.isposinf(got)
    assert round_to_fp16(np.float32(0.1)) == np.float32(np.float16(0.1))
    with pytest.raises(ValueError, match="out must be float32 of shape"):
        fp16.round_fp16(np.zeros(3, np.float32), out=np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"cast: expected shape \[2\], found \[3\]"):
        fp16.cast_into(np.zeros(2, np.float16), np.zeros(3, np.float32))


def test_casts_into_strided_views_touch_only_the_view(path: str) -> None:
    """nn packing writes weights into column ranges of a wide fp16 buffer."""
    rng = np.random.default_rng(2)
    src = (rng.standard_normal((300, 9000)) * 2.0**-15).astype(np.float32)
    buf = np.zeros((1, 1, 300, 20000), np.float16)
    fp16.cast_into(buf[0, 0, :, 5:9005], src)
    assert (buf[0, 0, :, 5:9005].view(np.uint16) == src.astype(np.float16).view(np.uint16)).all()
    assert not buf[0, 0, :, :5].any() and not buf[0, 0, :, 9005:].any()


@pytest.mark.skipif(
    os.environ.get("ANEKIT_SLOW_TESTS") != "1", reason="all 2**32 patterns: ANEKIT_SLOW_TESTS=1"
)
def test_all_float32_bit_patterns_round_like_numpy(path: str) -> None:
    rounder = fp16.Rounder()
    step = 1 << 24
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        got = x.copy()
        rounder(got)
        assert same_bits(got, numpy_round(x)).all(), f"patterns from {start:#x}"
