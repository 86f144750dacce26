"""Cases for conv, conv_transpose, matmul, linear and einsum.

Expected values come from torch float64 (convolutions, with padding applied by hand
from the hand-computed pads of each case) or NumPy float64 (matrix products).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.opcases import Case


def torch_module() -> Any:
    import torch

    return torch


def fixed_weight(seed: int, shape: tuple[int, ...], dtype: str = "fp16") -> np.ndarray:
    """Deterministic weights scaled by 1/sqrt(fan-in), stored in ``dtype``."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    w = np.random.default_rng(seed).standard_normal(shape) / np.sqrt(fan_in)
    return w.astype(np.float16 if dtype == "fp16" else np.float32)


# -- conv ----------------------------------------------------------------------------------
def torch_conv(x, w, bias, pads, strides, dilations, groups) -> np.ndarray:
    """torch conv{1,2,3}d in float64 after explicit (before, after) zero padding."""
    torch = torch_module()
    f = torch.nn.functional
    tx = torch.from_numpy(np.asarray(x, dtype=np.float64))
    flat = [p for before_after in reversed(pads) for p in before_after]
    tx = f.pad(tx, flat)
    conv = {3: f.conv1d, 4: f.conv2d, 5: f.conv3d}[tx.dim()]
    tb = None if bias is None else torch.from_numpy(bias.astype(np.float64))
    tw = torch.from_numpy(w.astype(np.float64))
    return conv(tx, tw, tb, stride=strides, dilation=dilations, groups=groups).numpy()


def conv_case(
    label: str,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    pads: list[tuple[int, int]],
    *,
    bias: bool = False,
    dtype: str = "fp16",
    weight_dtype: str | None = None,
    runtime_weight: bool = False,
    **params: Any,
) -> Case:
    """A conv case; ``pads`` are the hand-computed (before, after) pads of each spatial dim."""
    seed = sum(map(ord, label))
    w = fixed_weight(seed, w_shape, weight_dtype or dtype)
    bias_value = fixed_weight(seed + 1, (w_shape[0],), weight_dtype or dtype) if bias else None
    nsp = len(x_shape) - 2

    def build(b):
        x = b.input("x", x_shape, dtype)
        weight = b.input("w", w_shape, dtype) if runtime_weight else b.weight("w", w)
        extra = {"bias": b.weight("b", bias_value)} if bias else {}
        b.output(b.conv(x=x, weight=weight, **extra, **params), "y")

    def expect(x, w=w):
        strides = params.get("strides", [1] * nsp)
        dilations = params.get("dilations", [1] * nsp)
        groups = params.get("groups", 1)
        return {"y": torch_conv(x, w, bias_value, pads, strides, dilations, groups)}

    tol = 2e-3 if dtype == "fp16" else 1e-5
    return Case("conv", label, build, {"y": out_shape}, expect, rtol=tol, atol=tol)


CONV_CASES = [
    # the training layout [1, C, 1, S]: a 1x1 conv is a linear layer
    conv_case("1x1-sequence", (1, 8, 1, 16), (4, 8, 1, 1), (1, 4, 1, 16), [(0, 0), (0, 0)]),
    # a 1x1 kernel over padding with stride 2: (2 + 2 - 1)//2 + 1 = 2 reads pad, x1 per dim
    conv_case(
        "1x1-padded-strided",
        (1, 3, 2, 2),
        (2, 3, 1, 1),
        (1, 2, 2, 2),
        [(1, 1), (1, 1)],
        pad_type="custom",
        pad=[1, 1, 1, 1],
        strides=[2, 2],
    ),
    conv_case("3x3-valid-bias", (2, 3, 7, 6), (5, 3, 3, 3), (2, 5, 5, 4), [(0, 0)] * 2, bias=True),
    # same, stride 2: out = ceil(7/2), ceil(8/2) = 4, 4; totals 2 and 1 (odd extra after)
    conv_case(
        "same-stride2",
        (1, 4, 7, 8),
        (6, 4, 3, 3),
        (1, 6, 4, 4),
        [(1, 1), (0, 1)],
        strides=[2, 2],
        pad_type="same",
    ),
    # same_lower, even kernels: totals 1 and 3, the odd extra goes before
    conv_case(
        "same_lower-even-kernel",
        (1, 2, 6, 5),
        (3, 2, 2, 4),
        (1, 3, 6, 5),
        [(1, 0), (2, 1)],
        pad_type="same_lower",
    ),
    # dilated kernels 5 and 4: (9+3-5)+1 = 8, (10+3-4)+1 = 10
    conv_case(
        "custom-dilations",
        (1, 3, 9, 10),
        (4, 3, 3, 2),
        (1, 4, 8, 10),
        [(1, 2), (0, 3)],
        pad_type="custom",
        pad=[1, 2, 0, 3],
        dilations=[2, 3],
    ),
    # groups 3: (8+2-3)//2+1 = 4, (8+2-3)+1 = 8
    conv_case(
        "groups-strided",
        (2, 6, 8, 8),
        (9, 2, 3, 3),
        (2, 9, 4, 8),
        [(1, 1), (1, 1)],
        bias=True,
        pad_type="custom",
        pad=[1, 1, 1, 1],
        strides=[2, 1],
        groups=3,
    ),
    conv_case(
        "depthwise-same",
        (1, 4, 5, 5),
        (8, 1, 3, 3),
        (1, 8, 5, 5),
        [(1, 1), (1, 1)],
        pad_type="same",
        groups=4,
    ),
    # rank 3: dilated kernel 5, (10+3-5)//3+1 = 3
    conv_case(
        "conv1d-strided-dilated",
        (2, 3, 10),
        (4, 3, 3),
        (2, 4, 3),
        [(2, 1)],
        pad_type="custom",
        pad=[2, 1],
        strides=[3],
        dilations=[2],
    ),
    # rank 5, same: out = 4, ceil(5/2), ceil(6/2); totals 1, 2, 0
    conv_case(
        "conv3d-same",
        (1, 2, 4, 5, 6),
        (3, 2, 2, 3, 2),
        (1, 3, 4, 3, 3),
        [(0, 1), (1, 1), (0, 0)],
        pad_type="same",
        strides=[1, 2, 2],
    ),
    conv_case(
        "runtime-weight",
        (1, 4, 1, 8),
        (6, 4, 1, 3),
        (1, 6, 1, 6),
        [(0, 0)] * 2,
        runtime_weight=True,
    ),
    # fp32, 5x5 same stride 2: out ceil(9/2) = 5, total (5-1)*2+5-9 = 4
    conv_case(
        "fp32-5x5-same",
        (1, 2, 9, 9),
        (3, 2, 5, 5),
        (1, 3, 5, 5),
        [(2, 2), (2, 2)],
        dtype="fp32",
        pad_type="same",
        strides=[2, 2],
    ),
    # iOS17+: an fp16 weight on an fp32 input
    conv_case(
        "fp16-weight-fp32-x",
        (1, 3, 4, 4),
        (2, 3, 3, 3),
        (1, 2, 2, 2),
        [(0, 0)] * 2,
        bias=True,
        dtype="fp32",
        weight_dtype="fp16",
    ),
]


# -- conv_transpose ------------------------------------------------------------------------
def conv_transpose_case(
    label: str,
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    torch_args: dict[str, Any],
    *,
    bias: bool = False,
    crop: tuple[int, ...] | None = None,
    **params: Any,
) -> Case:
    """A conv_transpose case checked against torch; ``crop`` keeps a prefix of each spatial dim."""
    seed = sum(map(ord, label))
    w = fixed_weight(seed, w_shape)
    bias_value = fixed_weight(seed + 1, (out_shape[1],)) if bias else None

    def build(b):
        x = b.input("x", x_shape, "fp16")
        extra = {"bias": b.weight("b", bias_value)} if bias else {}
        b.output(b.conv_transpose(x=x, weight=b.weight("w", w), **extra, **params), "y")

    def expect(x):
        torch = torch_module()
        f = torch.nn.functional
        op = {3: f.conv_transpose1d, 4: f.conv_transpose2d, 5: f.conv_transpose3d}[len(x_shape)]
        tb = None if bias_value is None else torch.from_numpy(bias_value.astype(np.float64))
        y = op(
            torch.from_numpy(x), torch.from_numpy(w.astype(np.float64)), tb, **torch_args
        ).numpy()
        if crop is not None:
            y = y[(..., *(slice(0, c) for c in crop))]
        return {"y": y}

    return Case("conv_transpose", label, build, {"y": out_shape}, expect)


CONV_TRANSPOSE_CASES = [
    # full = (3-1)*2+3 = 7, (5-1)*2+3 = 11
    conv_transpose_case(
        "valid-stride2", (1, 4, 3, 5), (4, 3, 3, 3), (1, 3, 7, 11), {"stride": 2}, strides=[2, 2]
    ),
    # groups 2: C_out = 2 * 2; (4-1)*2 + 3 - 1 - 1 = 7
    conv_transpose_case(
        "custom-groups-bias",
        (2, 6, 4, 4),
        (6, 2, 3, 3),
        (2, 4, 7, 7),
        {"stride": 2, "padding": 1, "groups": 2},
        bias=True,
        pad_type="custom",
        pad=[1, 1, 1, 1],
        strides=[2, 2],
        groups=2,
    ),
    # output_shape one past the cropped size: torch's output_padding
    conv_transpose_case(
        "output_shape",
        (1, 2, 4, 4),
        (2, 3, 3, 3),
        (1, 3, 8, 8),
        {"stride": 2, "padding": 1, "output_padding": 1},
        pad_type="custom",
        pad=[1, 1, 1, 1],
        strides=[2, 2],
        output_shape=[1, 3, 8, 8],
    ),
    # same: out = in * stride = 8, 10; full 9, 11 cropped from 0 (smaller half first)
    conv_transpose_case(
        "same-stride2",
        (1, 3, 4, 5),
        (3, 2, 3, 3),
        (1, 2, 8, 10),
        {"stride": 2},
        crop=(8, 10),
        pad_type="same",
        strides=[2, 2],
    ),
    # same, kernel 4: full 9, out 6, crop starts at (9-6)//2 = 1
    conv_transpose_case(
        "same-1d-even-kernel",
        (1, 2, 6),
        (2, 3, 4),
        (1, 3, 6),
        {"padding": 1},
        crop=(6,),
        pad_type="same",
    ),
    # dilated kernel 5, stride 3: (5-1)*3+5 = 17
    conv_transpose_case(
        "dilated-1d",
        (2, 3, 5),
        (3, 2, 3),
        (2, 2, 17),
        {"stride": 3, "dilation": 2},
        strides=[3],
        dilations=[2],
    ),
    conv_transpose_case(
        "3d",
        (1, 2, 2, 3, 3),
        (2, 2, 2, 2, 2),
        (1, 2, 4, 4, 6),
        {"stride": (2, 1, 2)},
        strides=[2, 1, 2],
    ),
]


# -- matmul --------------------------------------------------------------------------------
def matmul_case(
    label: str,
    x_shape: tuple[int, ...],
    y_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    *,
    transpose_x: bool = False,
    transpose_y: bool = False,
    dtype: str = "fp16",
) -> Case:
    def build(b):
        x, y = b.input("x", x_shape, dtype), b.input("y", y_shape, dtype)
        b.output(b.matmul(x=x, y=y, transpose_x=transpose_x, transpose_y=transpose_y), "z")

    def expect(x, y):
        xt = np.swapaxes(x, -1, -2) if transpose_x else x
        yt = np.swapaxes(y, -1, -2) if transpose_y else y
        return {"z": np.matmul(xt, yt)}

    return Case("matmul", label, build, {"z": out_shape}, expect)


def _matmul_const_fp16_y(b):
    x = b.input("x", (4, 8), "fp32")
    b.output(b.matmul(x=x, y=b.weight("w", MATMUL_W)), "z")


MATMUL_W = fixed_weight(7, (8, 3))

MATMUL_CASES = [
    matmul_case("2d", (4, 6), (6, 5), (4, 5)),
    matmul_case("transpose_x", (6, 4), (6, 5), (4, 5), transpose_x=True),
    matmul_case(
        "transpose_y-batch-broadcast", (2, 1, 3, 4), (3, 5, 4), (2, 3, 3, 5), transpose_y=True
    ),
    matmul_case(
        "both-transposed", (3, 7, 2), (3, 5, 7), (3, 2, 5), transpose_x=True, transpose_y=True
    ),
    matmul_case("vector-x", (6,), (2, 6, 3), (2, 3)),
    matmul_case("vector-y", (2, 3, 6), (6,), (2, 3)),
    matmul_case("dot", (6,), (6,), ()),
    matmul_case("attention-scores", (1, 4, 16, 8), (1, 4, 16, 8), (1, 4, 16, 16), transpose_y=True),
    matmul_case("int32", (3, 4), (2, 4, 2), (2, 3, 2), dtype="int32"),
    matmul_case("fp32", (5, 33), (33, 7), (5, 7), dtype="fp32"),
    Case(
        "matmul",
        "fp32-x-const-fp16-y",
        _matmul_const_fp16_y,
        {"z": (4, 3)},
        lambda x: {"z": x @ MATMUL_W.astype(np.float64)},
        rtol=1e-5,
        atol=1e-5,
    ),
]


# -- linear --------------------------------------------------------------------------------
def linear_case(
    label: str, x_shape: tuple[int, ...], d_out: int, *, bias: bool, dtype: str = "fp16"
) -> Case:
    w = fixed_weight(len(label), (d_out, x_shape[-1]), dtype)
    b_value = fixed_weight(len(label) + 1, (d_out,), dtype) if bias else None

    def build(b):
        x = b.input("x", x_shape, dtype)
        extra = {"bias": b.weight("b", b_value)} if bias else {}
        b.output(b.linear(x=x, weight=b.weight("w", w), **extra), "y")

    def expect(x):
        y = x @ w.astype(np.float64).T
        return {"y": y if b_value is None else y + b_value.astype(np.float64)}

    tol = 2e-3 if dtype == "fp16" else 1e-5
    return Case("linear", label, build, {"y": (*x_shape[:-1], d_out)}, expect, rtol=tol, atol=tol)


LINEAR_CASES = [
    linear_case("rank1-bias", (8,), 5, bias=True),
    linear_case("rank3-default-bias", (2, 3, 8), 6, bias=False),
    linear_case("rank2-fp32", (4, 16), 3, bias=True, dtype="fp32"),
]


# -- einsum --------------------------------------------------------------------------------
def einsum_case(
    label: str, equation: str, x_shape: tuple[int, ...], y_shape: tuple[int, ...], out_shape
) -> Case:
    def build(b):
        x, y = b.input("x", x_shape, "fp16"), b.input("y", y_shape, "fp16")
        b.output(b.einsum(values=(x, y), equation=equation), "z")

    def expect(x, y):
        rank = len(x_shape)
        batch = [-2, -4] if rank == 4 else [-2]
        xs, ys = list(x.shape), list(y.shape)
        for axis in batch:  # H (and B) broadcast
            xs[axis] = ys[axis] = max(xs[axis], ys[axis])
        return {"z": np.einsum(equation, np.broadcast_to(x, xs), np.broadcast_to(y, ys))}

    return Case("einsum", label, build, {"z": out_shape}, expect)


EINSUM_CASES = [
    einsum_case("nchw", "nchw,nwhu->nchu", (2, 3, 4, 5), (2, 5, 4, 6), (2, 3, 4, 6)),
    einsum_case("renamed-broadcast", "abcd,adce->abce", (1, 3, 4, 5), (2, 5, 1, 6), (2, 3, 4, 6)),
    einsum_case("rank3", "chw,whr->chr", (3, 4, 5), (5, 1, 2), (3, 4, 2)),
]

CASES = CONV_CASES + CONV_TRANSPOSE_CASES + MATMUL_CASES + LINEAR_CASES + EINSUM_CASES
