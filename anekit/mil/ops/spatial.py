"""Spatial data movement: padding and the block rearrangements of NCHW tensors.

Parameter names, defaults and shape rules follow coremltools' op definitions
(coremltools/converters/mil/mil/ops/defs/, commit e0e2f42): iOS15/tensor_operation.py
(pad), iOS15/tensor_transformation.py (depth_to_space, space_to_depth, pixel_shuffle,
space_to_batch, batch_to_space) and iOS16/tensor_transformation.py (pixel_unshuffle).

Channel orders: depth_to_space is "DCR" (channel = (i * b + j) * C_out + c) and
pixel_shuffle is "CRD" (channel = c * b * b + i * b + j), as the worked example of
``ReorganizeDataLayerParams`` in coremltools mlmodel/format/NeuralNetwork.proto
shows; space_to_batch puts the block offset outside the batch index
(batch = (i * b1 + j) * N + n), as tf.space_to_batch_nd and coremltools' test
``TestSpaceToBatch`` (ops/tests/iOS14/test_tensor_transformation.py) do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit.mil.ops.common import FP, INT32, STRING, require
from anekit.mil.ops.ranges import moved_or_zero, padded
from anekit.mil.ops.registry import Args, Param, const_ints, param
from anekit.mil.ops.shape import UINT32, const_axis, const_vector, declare, static_shape, x_param
from anekit.mil.types import TensorType

# -- pad -------------------------------------------------------------------------------------

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}  # ours: NumPy's


def pad_widths(op: str, shape: tuple, pad: Any, mode: str) -> list[tuple[int, int]]:
    """(before, after) for every dimension; ``pad`` covers the last len(pad) / 2 of them."""
    amounts = const_ints(pad)
    rank = len(shape)
    require(
        mode in _PAD_MODES,
        op,
        "mode",
        lambda: f"expected one of {sorted(_PAD_MODES)}, found {mode!r}",
    )
    require(
        len(amounts) % 2 == 0 and len(amounts) // 2 <= rank and min(amounts, default=0) >= 0,
        op,
        "pad",
        lambda: (
            f"expected an even count of non-negative sizes for at most {rank} dimensions, "
            f"found pad {amounts}"
        ),
    )
    widths = [(0, 0)] * (rank - len(amounts) // 2) + list(
        zip(amounts[::2], amounts[1::2], strict=True)
    )
    # Reflection excludes the edge element, replication repeats it (iOS15 pad docstring).
    limit = {"reflect": 1, "replicate": 0}.get(mode)
    if limit is not None:
        for i, (d, (before, after)) in enumerate(zip(shape, widths, strict=True)):
            require(
                max(before, after) <= d - limit,
                op,
                "pad",
                lambda: (
                    f"{mode} padding of dimension {i} (size {d}) is at most {d - limit}, "
                    f"found ({before}, {after})"
                ),
            )
    return widths


def _pad_infer(a: Args) -> TensorType:
    widths = pad_widths("pad", a.x.shape, a.const("pad"), str(a.const("mode")))
    return TensorType(
        a.x.dtype, tuple(d + b + e for d, (b, e) in zip(a.x.shape, widths, strict=True))
    )


def _pad_reference(x: np.ndarray, pad: np.ndarray, mode: str, constant_val: np.ndarray) -> Any:
    widths = pad_widths("pad", x.shape, pad, mode)
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=constant_val)
    return np.pad(x, widths, mode=_PAD_MODES[mode])


declare(
    "pad",
    (
        x_param(FP),
        const_vector("pad"),
        param("mode", STRING, ranks=(0,), const=True, default="constant"),
        param("constant_val", FP, ranks=(0,), const=True, default=0.0, domain="T"),
    ),
    _pad_infer,
    _pad_reference,
    ranges=padded,
    doc="""Pad the last dimensions of x.

    Args:
        x (tensor<T, [*]>): the tensor (T: fp16, fp32).
        pad (const tensor<int32, [2N]>): (before, after) sizes for the last N <= rank(x)
            dimensions, outermost first.
        mode (const string): "constant", "reflect" (mirror without repeating the edge,
            pad <= size - 1) or "replicate" (repeat the edge, pad <= size).
            Default: "constant".
        constant_val (const T): the value for "constant" mode. Default: 0.
    Returns:
        tensor<T, [*]>: x with each padded dimension grown by before + after.
    """,
)


# -- block rearrangements ----------------------------------------------------------------------


def _nchw(a: Args) -> tuple[int, int, int, int]:
    require(
        a.x.rank == 4, a.opdef.name, "x", lambda: f"expected rank 4 (N, C, H, W), found {a.x.type}"
    )
    n, c, h, w = static_shape(a)
    return n, c, h, w


def _factor(a: Args, name: str) -> int:
    f = int(a.const(name))
    require(f >= 1, a.opdef.name, name, lambda: f"expected a positive factor, found {f}")
    return f


def _to_space(a: Args, name: str) -> TensorType:
    """Shape of depth_to_space / pixel_shuffle: C / b^2 channels, spatial dims times b."""
    n, c, h, w = _nchw(a)
    b = _factor(a, name)
    require(
        c % (b * b) == 0,
        a.opdef.name,
        "x",
        lambda: f"channels {c} are not a multiple of {name}^2 = {b * b}",
    )
    return TensorType(a.x.dtype, (n, c // (b * b), h * b, w * b))


def _to_depth(a: Args, name: str) -> TensorType:
    """Shape of space_to_depth / pixel_unshuffle: C * b^2 channels, spatial dims over b."""
    n, c, h, w = _nchw(a)
    b = _factor(a, name)
    require(
        h % b == 0 and w % b == 0,
        a.opdef.name,
        "x",
        lambda: f"spatial size {h}x{w} is not a multiple of {name} {b}",
    )
    return TensorType(a.x.dtype, (n, c * b * b, h // b, w // b))


def _channels_to_space(x: np.ndarray, factor: np.ndarray, order: str) -> np.ndarray:
    """depth_to_space ("DCR") or pixel_shuffle ("CRD"): channel blocks into b x b blocks."""
    n, c, h, w = x.shape
    b = int(factor)
    if order == "DCR":  # channel = (i, j, c_out)
        split = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD: channel = (c_out, i, j)
        split = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return split.reshape(n, c // (b * b), h * b, w * b)  # from (n, c_out, h, i, w, j)


def _space_to_channels(x: np.ndarray, factor: np.ndarray, order: str) -> np.ndarray:
    """space_to_depth ("DCR") or pixel_unshuffle ("CRD"): b x b blocks into channels."""
    n, c, h, w = x.shape
    b = int(factor)
    split = x.reshape(n, c, h // b, b, w // b, b)  # (n, c, h, i, w, j)
    # the channel becomes (i, j, c) for DCR, (c, i, j) for CRD
    axes = (0, 3, 5, 1, 2, 4) if order == "DCR" else (0, 1, 3, 5, 2, 4)
    return split.transpose(axes).reshape(n, c * b * b, h // b, w // b)


def _block_op(
    name: str, factor: Param, order: str, to_space: bool, summary: str, since: str = "ios15"
) -> None:
    """Declare a block rearrangement: channel blocks into b x b spatial blocks, or the reverse."""
    f, (factor_type,) = factor.name, factor.dtypes
    infer, move = (_to_space, _channels_to_space) if to_space else (_to_depth, _space_to_channels)
    out = "N, C / b^2, H * b, W * b" if to_space else "N, C * b^2, H / b, W / b"
    declare(
        name,
        (x_param(FP), factor),
        lambda a: infer(a, f),
        lambda x, **given: move(x, given[f], order),  # the factor arrives under its own name
        since=since,
        doc=f"""{summary}

    Args:
        x (tensor<T, [N, C, H, W]>): the tensor (T: fp16, fp32).
        {f} (const {factor_type.value}): the block size (>= 1).
    Returns:
        tensor<T, [{out}]>: the rearranged tensor.
    """,
    )


_block_op(
    "depth_to_space",
    const_axis("block_size"),
    "DCR",
    to_space=True,
    summary="Move channel blocks into b x b spatial blocks, DCR order: "
    "out[n, c, h*b + i, w*b + j] = x[n, (i*b + j) * C/b^2 + c, h, w].",
)
_block_op(
    "space_to_depth",
    const_axis("block_size"),
    "DCR",
    to_space=False,
    summary="Move b x b spatial blocks into channels: the inverse of depth_to_space.",
)
_block_op(
    "pixel_shuffle",
    const_axis("upscale_factor"),
    "CRD",
    to_space=True,
    summary="Move channel blocks into b x b spatial blocks, CRD order (torch.nn.PixelShuffle): "
    "out[n, c, h*b + i, w*b + j] = x[n, c*b^2 + i*b + j, h, w].",
)
_block_op(
    "pixel_unshuffle",
    param("downscale_factor", UINT32, ranks=(0,), const=True),
    "CRD",
    to_space=False,
    summary="Move b x b spatial blocks into channels: the inverse of pixel_shuffle "
    "(torch.nn.PixelUnshuffle).",
    since="ios16",
)


def _block_pairs(a: Args, name: str) -> tuple[list[int], list[tuple[int, int]]]:
    """block_shape (2 positive sizes) and the (2, 2) paddings or crops of the spatial dims."""
    op = a.opdef.name
    block = const_ints(a.const("block_shape"))
    require(
        len(block) == 2 and min(block) >= 1,
        op,
        "block_shape",
        lambda: f"expected 2 positive sizes, found {block}",
    )
    given = np.asarray(a.const(name))
    require(
        given.shape == (2, 2) and given.min() >= 0,
        op,
        name,
        lambda: f"expected non-negative tensor<int32, [2, 2]>, found shape {list(given.shape)}",
    )
    pairs = [(int(given[i, 0]), int(given[i, 1])) for i in range(2)]
    return block, pairs


def _space_to_batch_infer(a: Args) -> TensorType:
    n, c, h, w = _nchw(a)
    block, pads = _block_pairs(a, "paddings")
    padded = [d + p0 + p1 for d, (p0, p1) in zip((h, w), pads, strict=True)]
    require(
        all(p % b == 0 for p, b in zip(padded, block, strict=True)),
        "space_to_batch",
        "paddings",
        lambda: f"padded spatial size {padded} is not a multiple of block_shape {block}",
    )
    return TensorType(
        a.x.dtype, (n * block[0] * block[1], c, padded[0] // block[0], padded[1] // block[1])
    )


def _space_to_batch(x: np.ndarray, block_shape: np.ndarray, paddings: np.ndarray) -> np.ndarray:
    b0, b1 = const_ints(block_shape)
    padded = np.pad(x, [(0, 0), (0, 0), tuple(paddings[0]), tuple(paddings[1])])
    n, c, h, w = padded.shape
    split = padded.reshape(n, c, h // b0, b0, w // b1, b1)  # (n, c, h, i, w, j)
    return split.transpose(3, 5, 0, 1, 2, 4).reshape(b0 * b1 * n, c, h // b0, w // b1)


def _batch_to_space_infer(a: Args) -> TensorType:
    n, c, h, w = _nchw(a)
    block, crops = _block_pairs(a, "crops")
    require(
        n % (block[0] * block[1]) == 0,
        "batch_to_space",
        "x",
        lambda: f"batch {n} is not a multiple of block_shape {block[0]} x {block[1]}",
    )
    out = [d * b - c0 - c1 for d, b, (c0, c1) in zip((h, w), block, crops, strict=True)]
    require(min(out) >= 1, "batch_to_space", "crops", lambda: f"crops {crops} leave no elements")
    return TensorType(a.x.dtype, (n // (block[0] * block[1]), c, out[0], out[1]))


def _batch_to_space(x: np.ndarray, block_shape: np.ndarray, crops: np.ndarray) -> np.ndarray:
    b0, b1 = const_ints(block_shape)
    batch, c, h, w = x.shape
    n = batch // (b0 * b1)
    split = x.reshape(b0, b1, n, c, h, w)  # batch = (i, j, n)
    full = split.transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h * b0, w * b1)
    (t, bottom), (left, right) = (tuple(int(v) for v in row) for row in crops)
    return full[:, :, t : h * b0 - bottom, left : w * b1 - right]


_PAIRS_DOC = "(const tensor<int32, [2, 2]>): (before, after) for H, then for W"
declare(
    "space_to_batch",
    (x_param(FP), const_vector("block_shape"), param("paddings", INT32, ranks=(2,), const=True)),
    _space_to_batch_infer,
    _space_to_batch,
    ranges=moved_or_zero,
    doc=f"""Zero-pad H and W, then move b0 x b1 spatial blocks into the batch dimension.

    out[(i*b1 + j) * N + n, c, h, w] = padded[n, c, h*b0 + i, w*b1 + j].

    Args:
        x (tensor<T, [N, C, H, W]>): the tensor (T: fp16, fp32).
        block_shape (const tensor<int32, [2]>): (b0, b1).
        paddings {_PAIRS_DOC}; padded sizes must be multiples of the block.
    Returns:
        tensor<T, [N * b0 * b1, C, H' / b0, W' / b1]>: H', W' are the padded sizes.
    """,
)
declare(
    "batch_to_space",
    (x_param(FP), const_vector("block_shape"), param("crops", INT32, ranks=(2,), const=True)),
    _batch_to_space_infer,
    _batch_to_space,
    doc=f"""Move batch blocks into b0 x b1 spatial blocks, then crop: inverse of space_to_batch.

    Args:
        x (tensor<T, [B, C, H, W]>): the tensor (T: fp16, fp32); B a multiple of b0 * b1.
        block_shape (const tensor<int32, [2]>): (b0, b1).
        crops {_PAIRS_DOC}.
    Returns:
        tensor<T, [B / (b0 * b1), C, H * b0 - crops, W * b1 - crops]>: the rearranged tensor.
    """,
)
