"""The reference backend's fp16 rounding equals NumPy's conversion, bit for bit."""

from __future__ import annotations

import numpy as np

from anekit.backends.reference import round_to_fp16


def numpy_round(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return x.astype(np.float16).astype(np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def test_every_fp16_value_midpoint_and_neighbour_rounds_like_numpy() -> None:
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.unique(every[np.isfinite(every)].astype(np.float32))
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)  # the ties
    x = np.concatenate(
        [
            finite,
            mids,
            np.nextafter(mids, np.float32(np.inf)),
            np.nextafter(mids, np.float32(-np.inf)),
        ]
    )
    assert same_bits(round_to_fp16(x), numpy_round(x)).all()


def test_random_magnitudes_and_special_values_round_like_numpy() -> None:
    rng = np.random.default_rng(0)
    scale = np.float32(10.0) ** rng.integers(-12, 8, 200_000).astype(np.float32)
    specials = [
        np.inf,
        -np.inf,
        np.nan,
        65504,
        65519.996,
        65520,
        -65520,
        1e30,
        0.0,
        -0.0,
        2**-25,
        -(2**-25),
        3 * 2**-26,
    ]
    x = np.concatenate(
        [rng.standard_normal(200_000).astype(np.float32) * scale, np.float32(specials)]
    )
    got = round_to_fp16(x)
    assert same_bits(got, numpy_round(x)).all()
    signs = np.tile(np.float32([-0.0, -(2**-26)]), 5000)
    assert np.signbit(round_to_fp16(signs)).all()  # signs survive


def test_input_is_left_untouched_and_float64_rounds_once() -> None:
    x = np.tile(np.float32([1.0001, 3e-7, 7e4]), 5000)
    before = x.copy()
    round_to_fp16(x)
    np.testing.assert_array_equal(x, before)
    # 1 + 2^-11 + 2^-30 is just above a tie in float64; via float32 it would fall on the tie
    y = np.float64([1 + 2**-11 + 2**-30])
    assert round_to_fp16(y)[0] == np.float32(1 + 2**-10)


def test_scalars_round_too() -> None:
    got = round_to_fp16(np.float32(70000.0))
    assert got.shape == () and np.isposinf(got)
    assert round_to_fp16(np.float32(0.1)) == np.float32(np.float16(0.1))
