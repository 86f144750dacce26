"""Cases for avg_pool, max_pool, l2_pool, upsample_nearest_neighbor and upsample_bilinear.

Expected values come from torch float64 (pads that torch cannot express are applied
by hand with F.pad), or a NumPy loop where torch has no such mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.opcases import Case
from tests.opcases.linear import torch_module


def functional() -> Any:
    return torch_module().nn.functional


def as_torch(x: np.ndarray) -> Any:
    return torch_module().from_numpy(np.ascontiguousarray(x, dtype=np.float64))


def pad_by_hand(x: np.ndarray, pads: list[tuple[int, int]], value: float) -> Any:
    flat = [p for before_after in reversed(pads) for p in before_after]
    return functional().pad(as_torch(x), flat, value=value)


def op_case(op: str, label: str, x_shape, out_shape, expect, **params: Any) -> Case:
    """An op applied to one fp16 input ``x`` with the given parameters."""

    def build(b):
        x = b.input("x", x_shape, "fp16")
        b.output(getattr(b, op)(x=x, **params), "y")

    return Case(op, label, build, {"y": out_shape}, lambda x: {"y": expect(x)})


def torch_avg(x, kernel, stride, padding=0, ceil_mode=False, include_pad=True) -> np.ndarray:
    f = functional()
    pool = {3: f.avg_pool1d, 4: f.avg_pool2d, 5: f.avg_pool3d}[x.ndim]
    return pool(as_torch(x), kernel, stride, padding, ceil_mode, include_pad).numpy()


def avg_excluding_asymmetric_pads(x, kernel, stride, pads) -> np.ndarray:
    """Mean over input positions only, with pads torch cannot express: sums / counts."""
    f = functional()
    pool = {3: f.avg_pool1d, 4: f.avg_pool2d}[x.ndim]
    sums = pool(pad_by_hand(x, pads, 0.0), kernel, stride)
    counts = pool(pad_by_hand(np.ones_like(x), pads, 0.0), kernel, stride)
    return (sums / counts).numpy()


def torch_max(x, kernel, stride, pads, ceil_mode=False) -> np.ndarray:
    f = functional()
    pool = {3: f.max_pool1d, 4: f.max_pool2d}[x.ndim]
    return pool(pad_by_hand(x, pads, -np.inf), kernel, stride, ceil_mode=ceil_mode).numpy()


def l2_by_loops(x, kernel, stride, pads) -> np.ndarray:
    """sqrt(sum of squares) of each window, by explicit loops over a zero-padded input."""
    xp = np.pad(x, [(0, 0), (0, 0), *pads])
    spatial = xp.shape[2:]
    out = [(n - k) // s + 1 for n, k, s in zip(spatial, kernel, stride, strict=True)]
    y = np.zeros(x.shape[:2] + tuple(out))
    for index in np.ndindex(*out):
        window = tuple(
            slice(i * s, i * s + k) for i, s, k in zip(index, stride, kernel, strict=True)
        )
        y[(..., *index)] = np.sqrt((xp[(..., *window)] ** 2).sum(axis=tuple(range(2, xp.ndim))))
    return y


# 3x3 windows, stride 2, one position of padding on every side
K3_S2_P1 = {"kernel_sizes": [3, 3], "strides": [2, 2], "pad_type": "custom", "pad": [1, 1, 1, 1]}

POOL_CASES = [
    op_case(
        "avg_pool",
        "valid-2x2",
        (1, 3, 6, 7),
        (1, 3, 3, 3),
        lambda x: torch_avg(x, 2, 2),
        kernel_sizes=[2, 2],
        strides=[2, 2],
        pad_type="valid",
    ),
    # (5 + 2 - 3)//2 + 1 = 3
    op_case(
        "avg_pool",
        "include-padding",
        (2, 2, 5, 5),
        (2, 2, 3, 3),
        lambda x: torch_avg(x, 3, 2, 1),
        **K3_S2_P1,
    ),
    op_case(
        "avg_pool",
        "exclude-padding",
        (2, 2, 5, 5),
        (2, 2, 3, 3),
        lambda x: torch_avg(x, 3, 2, 1, include_pad=False),
        **K3_S2_P1,
        exclude_padding_from_average=True,
    ),
    # ceil((6 + 2 - 3) / 2) + 1 = 4; the last window overhangs the padding
    op_case(
        "avg_pool",
        "ceil-mode",
        (1, 2, 6, 6),
        (1, 2, 4, 4),
        lambda x: torch_avg(x, 3, 2, 1, ceil_mode=True),
        **K3_S2_P1,
        ceil_mode=True,
    ),
    # same: out ceil(7/2) = 4, total (4-1)*2 + 4 - 7 = 3 -> (1, 2)
    op_case(
        "avg_pool",
        "same-1d-exclude",
        (1, 3, 7),
        (1, 3, 4),
        lambda x: avg_excluding_asymmetric_pads(x, 4, 2, [(1, 2)]),
        kernel_sizes=[4],
        strides=[2],
        pad_type="same",
        exclude_padding_from_average=True,
    ),
    op_case(
        "avg_pool",
        "3d",
        (1, 2, 4, 4, 4),
        (1, 2, 2, 2, 2),
        lambda x: torch_avg(x, 2, 2),
        kernel_sizes=[2, 2, 2],
        strides=[2, 2, 2],
        pad_type="valid",
    ),
    # (7 + 2 - 3)//2 + 1 = 4
    op_case(
        "max_pool",
        "3x3-stride2-pad1",
        (1, 3, 7, 7),
        (1, 3, 4, 4),
        lambda x: torch_max(x, 3, 2, [(1, 1), (1, 1)]),
        **K3_S2_P1,
    ),
    # ceil((7 - 2) / 2) + 1 = 4, no padding so no window is dropped
    op_case(
        "max_pool",
        "ceil-mode",
        (1, 2, 7, 7),
        (1, 2, 4, 4),
        lambda x: torch_max(x, 2, 2, [(0, 0), (0, 0)], ceil_mode=True),
        kernel_sizes=[2, 2],
        strides=[2, 2],
        pad_type="valid",
        ceil_mode=True,
    ),
    # same_lower: totals 1 and 2 -> (1, 0) and (1, 1)
    op_case(
        "max_pool",
        "same_lower",
        (1, 2, 6, 5),
        (1, 2, 6, 5),
        lambda x: torch_max(x, (2, 3), 1, [(1, 0), (1, 1)]),
        kernel_sizes=[2, 3],
        pad_type="same_lower",
    ),
    # (9 + 2 - 3)//2 + 1 = 5
    op_case(
        "max_pool",
        "1d-strided",
        (2, 3, 9),
        (2, 3, 5),
        lambda x: torch_max(x, 3, 2, [(1, 1)]),
        kernel_sizes=[3],
        strides=[2],
        pad_type="custom",
        pad=[1, 1],
    ),
    op_case(
        "l2_pool",
        "2x2",
        (1, 2, 4, 6),
        (1, 2, 2, 3),
        lambda x: l2_by_loops(x, (2, 2), (2, 2), [(0, 0), (0, 0)]),
        kernel_sizes=[2, 2],
        strides=[2, 2],
        pad_type="valid",
    ),
    # same, kernel 2: total 1 -> (0, 1)
    op_case(
        "l2_pool",
        "1d-same",
        (1, 3, 5),
        (1, 3, 5),
        lambda x: l2_by_loops(x, (2,), (1,), [(0, 1)]),
        kernel_sizes=[2],
        pad_type="same",
    ),
]


# -- upsampling ----------------------------------------------------------------------------
def torch_interpolate(x: np.ndarray, **kwargs: Any) -> np.ndarray:
    """torch interpolate over the last two dims of a rank >= 3 tensor."""
    lead = x.shape[:-2]
    flat = x.reshape(1, -1, *x.shape[-2:])
    y = functional().interpolate(as_torch(flat), **kwargs).numpy()
    return y.reshape(*lead, *y.shape[-2:])


def lerp_by_loops(x: np.ndarray, out_hw: tuple[int, int], source) -> np.ndarray:
    """Bilinear resize by explicit loops; ``source(i, n_in, n_out)`` gives each coordinate."""
    h_in, w_in = x.shape[-2:]
    y = np.zeros((*x.shape[:-2], *out_hw))
    for i in range(out_hw[0]):
        sh = min(max(source(i, h_in, out_hw[0]), 0.0), h_in - 1)
        h0, th = int(np.floor(sh)), sh - np.floor(sh)
        h1 = min(h0 + 1, h_in - 1)
        for j in range(out_hw[1]):
            sw = min(max(source(j, w_in, out_hw[1]), 0.0), w_in - 1)
            w0, tw = int(np.floor(sw)), sw - np.floor(sw)
            w1 = min(w0 + 1, w_in - 1)
            top = x[..., h0, w0] * (1 - tw) + x[..., h0, w1] * tw
            bottom = x[..., h1, w0] * (1 - tw) + x[..., h1, w1] * tw
            y[..., i, j] = top * (1 - th) + bottom * th
    return y


UPSAMPLE_CASES = [
    op_case(
        "upsample_nearest_neighbor",
        "int-2x3",
        (1, 2, 3, 4),
        (1, 2, 6, 12),
        lambda x: torch_interpolate(x, scale_factor=(2, 3), mode="nearest"),
        scale_factor_height=2,
        scale_factor_width=3,
    ),
    # floor(4 * 1.5) = 6, floor(6 * 0.5) = 3
    op_case(
        "upsample_nearest_neighbor",
        "fractional",
        (1, 1, 4, 6),
        (1, 1, 6, 3),
        lambda x: torch_interpolate(
            x, scale_factor=(1.5, 0.5), mode="nearest", recompute_scale_factor=False
        ),
        scale_factor_height=1.5,
        scale_factor_width=0.5,
    ),
    op_case(
        "upsample_nearest_neighbor",
        "rank3-height-only",
        (3, 2, 5),
        (3, 4, 5),
        lambda x: np.repeat(x, 2, axis=-2),
        scale_factor_height=2,
    ),
    op_case(
        "upsample_bilinear",
        "align-corners",
        (1, 2, 3, 4),
        (1, 2, 6, 8),
        lambda x: torch_interpolate(x, size=(6, 8), mode="bilinear", align_corners=True),
        scale_factor_height=2,
        scale_factor_width=2,
    ),
    op_case(
        "upsample_bilinear",
        "half-pixel",
        (1, 1, 4, 5),
        (1, 1, 8, 15),
        lambda x: torch_interpolate(x, size=(8, 15), mode="bilinear", align_corners=False),
        scale_factor_height=2,
        scale_factor_width=3,
        align_corners=False,
    ),
    # floor(4 * 1.5) = 6, floor(4 * 2.5) = 10; the grid uses 4/6 and 4/10
    op_case(
        "upsample_bilinear",
        "fractional-rank5",
        (2, 1, 3, 4, 4),
        (2, 1, 3, 6, 10),
        lambda x: torch_interpolate(x, size=(6, 10), mode="bilinear", align_corners=False),
        scale_factor_height=1.5,
        scale_factor_width=2.5,
        align_corners=False,
    ),
    # iOS16: neither aligned corners nor half-pixel centers: src = i * in / out
    op_case(
        "upsample_bilinear",
        "asymmetric-ios16",
        (1, 2, 2, 3),
        (1, 2, 4, 6),
        lambda x: lerp_by_loops(x, (4, 6), lambda i, n, m: i * n / m),
        scale_factor_height=2,
        scale_factor_width=2,
        align_corners=False,
        half_pixel_centers=False,
    ),
]

CASES = POOL_CASES + UPSAMPLE_CASES
