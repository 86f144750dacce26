"""Cases for the data-movement ops (anekit/mil/ops/shape.py, indexing.py, spatial.py).

Every ``expect`` is written independently of the op's reference: explicit loops over the
documented index formula, Python slicing with hand-written slices, or torch for
pixel_shuffle, pixel_unshuffle and reflect/replicate padding. Output shapes are
computed by hand.
"""

from __future__ import annotations

import numpy as np

from tests.opcases import Case


def _torch():
    import torch

    return torch


def _unary(op: str, x_shape: tuple, dtype: str = "fp16", /, **params):
    """build(b): one input ``x``, one op, output ``y``."""

    def build(b):
        x = b.input("x", x_shape, dtype)
        b.output(getattr(b, op)(x=x, **params), "y")

    return build


def _ints(shape: tuple, low: int, high: int, dtype=np.int32):
    """make_inputs for one int tensor ``x`` with values in [low, high)."""
    return lambda rng: {"x": rng.integers(low, high, shape).astype(dtype)}


# -- reshape, transpose, squeeze, expand_dims, flatten2d, reverse ------------------------------

RESHAPE = [
    Case(
        "reshape",
        "minus-one",
        _unary("reshape", (2, 3, 4), shape=[4, -1]),
        {"y": (4, 6)},
        lambda x: {"y": x.reshape(4, 6)},
    ),
    # iOS17 rule: zeros align with x.shape from the right ([0, -1] -> [x.shape[1], rest]).
    Case(
        "reshape",
        "zero-right-aligned",
        _unary("reshape", (2, 3, 4), shape=[0, -1]),
        {"y": (3, 8)},
        lambda x: {"y": x.reshape(3, 8)},
    ),
    # A 0 with no matching dimension of x becomes 1 (iOS17 docstring: [2, 50] -> [1, 1, 2, 50]).
    Case(
        "reshape",
        "zero-out-of-range",
        _unary("reshape", (2, 50), shape=[1, 0, -1, 0]),
        {"y": (1, 1, 2, 50)},
        lambda x: {"y": x.reshape(1, 1, 2, 50)},
    ),
    Case(
        "reshape",
        "int8-flatten",
        _unary("reshape", (1, 1, 5), "int8", shape=[5]),
        {"y": (5,)},
        lambda x: {"y": x.ravel()},
    ),
    Case(
        "reshape",
        "bool",
        _unary("reshape", (6,), "bool", shape=[3, 2]),
        {"y": (3, 2)},
        lambda x: {"y": x.reshape(3, 2)},
    ),
]

TRANSPOSE = [
    Case(
        "transpose",
        "rank3",
        _unary("transpose", (2, 3, 4), perm=[2, 0, 1]),
        {"y": (4, 2, 3)},
        lambda x: {"y": np.einsum("abc->cab", x)},
    ),
    Case(
        "transpose",
        "negative-perm",
        _unary("transpose", (2, 3, 4, 5), perm=[0, -1, 1, -2]),
        {"y": (2, 5, 3, 4)},
        lambda x: {"y": np.einsum("abcd->adbc", x)},
    ),
    Case(
        "transpose",
        "int32-matrix",
        _unary("transpose", (3, 5), "int32", perm=[1, 0]),
        {"y": (5, 3)},
        lambda x: {"y": x.T},
    ),
]

SQUEEZE = [
    Case(
        "squeeze",
        "all",
        _unary("squeeze", (1, 3, 1, 4)),
        {"y": (3, 4)},
        lambda x: {"y": x[0, :, 0, :]},
    ),
    Case(
        "squeeze",
        "axes",
        _unary("squeeze", (1, 3, 1, 4), axes=[-2]),
        {"y": (1, 3, 4)},
        lambda x: {"y": x[:, :, 0, :]},
    ),
    # PyTorch's rule: a listed axis whose size is not 1 is kept.
    Case(
        "squeeze",
        "non-unit-kept",
        _unary("squeeze", (1, 3, 4), axes=[0, 1]),
        {"y": (3, 4)},
        lambda x: {"y": x[0]},
    ),
    Case(
        "squeeze",
        "to-scalar",
        _unary("squeeze", (1, 1), "int32"),
        {"y": ()},
        lambda x: {"y": x[0, 0]},
    ),
]

EXPAND_DIMS = [
    Case(
        "expand_dims",
        "front-back",
        _unary("expand_dims", (2, 3), axes=[0, -1]),
        {"y": (1, 2, 3, 1)},
        lambda x: {"y": x[None, :, :, None]},
    ),
    Case(
        "expand_dims",
        "middle",
        _unary("expand_dims", (2, 3), axes=[1, 2]),
        {"y": (2, 1, 1, 3)},
        lambda x: {"y": x[:, None, None, :]},
    ),
    Case(
        "expand_dims",
        "scalar",
        _unary("expand_dims", (), "fp32", axes=[0]),
        {"y": (1,)},
        lambda x: {"y": np.array([x])},
    ),
]

FLATTEN2D = [
    Case(
        "flatten2d",
        "default-axis",
        _unary("flatten2d", (2, 3, 4)),
        {"y": (2, 12)},
        lambda x: {"y": x.reshape(2, 12)},
    ),
    Case(
        "flatten2d",
        "negative-axis",
        _unary("flatten2d", (2, 3, 2), axis=-1),
        {"y": (6, 2)},
        lambda x: {"y": x.reshape(6, 2)},
    ),
    Case(
        "flatten2d",
        "axis-rank",
        _unary("flatten2d", (3,), axis=1),
        {"y": (3, 1)},
        lambda x: {"y": x.reshape(3, 1)},
    ),
]

REVERSE = [
    Case(
        "reverse",
        "one-axis",
        _unary("reverse", (2, 3, 4), axes=[1]),
        {"y": (2, 3, 4)},
        lambda x: {"y": x[:, ::-1, :]},
    ),
    Case(
        "reverse",
        "all",
        _unary("reverse", (2, 3), "int32"),
        {"y": (2, 3)},
        lambda x: {"y": x[::-1, ::-1]},
    ),
    Case(
        "reverse",
        "negative-axes",
        _unary("reverse", (2, 3, 4), axes=[-1, 0]),
        {"y": (2, 3, 4)},
        lambda x: {"y": x[::-1, :, ::-1]},
    ),
]


# -- concat, stack, split, tile --------------------------------------------------------------


def _joined(op: str, shapes: list[tuple], dtype: str = "fp16", /, **params):
    def build(b):
        values = [b.input(f"v{i}", s, dtype) for i, s in enumerate(shapes)]
        b.output(getattr(b, op)(values=values, **params), "y")

    return build


def _interleaved(axis: int, *values: np.ndarray) -> np.ndarray:
    """out[k::n] = values[k] along ``axis`` (coremltools' concat docstring)."""
    n = len(values)
    shape = list(values[0].shape)
    shape[axis] *= n
    out = np.empty(shape, dtype=values[0].dtype)
    for k, v in enumerate(values):
        index = [slice(None)] * len(shape)
        index[axis] = slice(k, None, n)
        out[tuple(index)] = v
    return out


def _manual_concat(values: list[np.ndarray], axis: int) -> np.ndarray:
    """Concatenate by copying each input into its window of a preallocated output."""
    shape = list(values[0].shape)
    shape[axis] = sum(v.shape[axis] for v in values)
    out = np.empty(shape, dtype=values[0].dtype)
    start = 0
    for v in values:
        index = [slice(None)] * len(shape)
        index[axis] = slice(start, start + v.shape[axis])
        out[tuple(index)] = v
        start += v.shape[axis]
    return out


CONCAT = [
    Case(
        "concat",
        "axis1",
        _joined("concat", [(2, 1, 3), (2, 4, 3)], axis=1),
        {"y": (2, 5, 3)},
        lambda v0, v1: {"y": _manual_concat([v0, v1], 1)},
    ),
    Case(
        "concat",
        "negative-axis-three",
        _joined("concat", [(2, 1), (2, 2), (2, 3)], "int32", axis=-1),
        {"y": (2, 6)},
        lambda v0, v1, v2: {"y": _manual_concat([v0, v1, v2], 1)},
    ),
    # coremltools' docstring example: two (3, 2) inputs on axis 0 give rows a0 b0 a1 b1 a2 b2.
    Case(
        "concat",
        "interleave-axis0",
        _joined("concat", [(3, 2), (3, 2)], axis=0, interleave=True),
        {"y": (6, 2)},
        lambda v0, v1: {"y": _interleaved(0, v0, v1)},
    ),
    Case(
        "concat",
        "interleave-three-axis1",
        _joined("concat", [(2, 2, 3)] * 3, axis=1, interleave=True),
        {"y": (2, 6, 3)},
        lambda v0, v1, v2: {"y": _interleaved(1, v0, v1, v2)},
    ),
]


def _stacked(axis: int, *values: np.ndarray) -> np.ndarray:
    shape = list(values[0].shape)
    shape.insert(axis, len(values))
    out = np.empty(shape, dtype=values[0].dtype)
    for k, v in enumerate(values):
        index = [slice(None)] * len(shape)
        index[axis] = k
        out[tuple(index)] = v
    return out


STACK = [
    Case(
        "stack",
        "axis0",
        _joined("stack", [(2, 3)] * 2, axis=0),
        {"y": (2, 2, 3)},
        lambda v0, v1: {"y": _stacked(0, v0, v1)},
    ),
    Case(
        "stack",
        "last-axis",
        _joined("stack", [(2, 3)] * 3, "int32", axis=-1),
        {"y": (2, 3, 3)},
        lambda v0, v1, v2: {"y": _stacked(2, v0, v1, v2)},
    ),
]


def _split(shape: tuple, **params):
    def build(b):
        parts = b.split(x=b.input("x", shape, "fp16"), **params)
        for i, p in enumerate(parts):
            b.output(p, f"y{i}")

    return build


SPLIT = [
    Case(
        "split",
        "num-splits",
        _split((2, 6), num_splits=3, axis=1),
        {"y0": (2, 2), "y1": (2, 2), "y2": (2, 2)},
        lambda x: {"y0": x[:, 0:2], "y1": x[:, 2:4], "y2": x[:, 4:6]},
    ),
    Case(
        "split",
        "split-sizes",
        _split((5, 2), split_sizes=[1, 4], axis=0),
        {"y0": (1, 2), "y1": (4, 2)},
        lambda x: {"y0": x[:1], "y1": x[1:]},
    ),
    Case(
        "split",
        "both-negative-axis",
        _split((2, 3, 5), num_splits=3, split_sizes=[2, 2, 1], axis=-1),
        {"y0": (2, 3, 2), "y1": (2, 3, 2), "y2": (2, 3, 1)},
        lambda x: {"y0": x[..., 0:2], "y1": x[..., 2:4], "y2": x[..., 4:5]},
    ),
]

TILE = [
    Case(
        "tile",
        "rank2",
        _unary("tile", (2, 3), reps=[2, 3]),
        {"y": (4, 9)},
        lambda x: {"y": np.concatenate([np.concatenate([x] * 3, axis=1)] * 2, axis=0)},
    ),
    Case(
        "tile",
        "bool-ones",
        _unary("tile", (1, 2, 2), "bool", reps=[3, 1, 1]),
        {"y": (3, 2, 2)},
        lambda x: {"y": np.concatenate([x, x, x], axis=0)},
    ),
]


# -- tensors made from constants: fill, range_1d, shape, one_hot, band_part ---------------------


def _no_input(op: str, /, **params):
    def build(b):
        b.output(getattr(b, op)(**params), "y")

    return build


GENERATED = [
    Case(
        "fill",
        "fp16",
        _no_input("fill", shape=[2, 3], value=np.float16(1.5)),
        {"y": (2, 3)},
        lambda: {"y": np.array([[1.5] * 3] * 2)},
    ),
    Case(
        "fill",
        "default-zero-fp32",
        _no_input("fill", shape=[4]),
        {"y": (4,)},
        lambda: {"y": np.zeros(4)},
    ),
    Case(
        "fill",
        "int32",
        _no_input("fill", shape=[1, 2], value=7),
        {"y": (1, 2)},
        lambda: {"y": np.array([[7, 7]])},
    ),
    Case(
        "range_1d",
        "int",
        _no_input("range_1d", start=2, end=11, step=3),
        {"y": (3,)},
        lambda: {"y": np.array([2, 5, 8])},
    ),
    Case(
        "range_1d",
        "negative-step",
        _no_input("range_1d", start=5, end=0, step=-2),
        {"y": (3,)},
        lambda: {"y": np.array([5, 3, 1])},
    ),
    Case(
        "range_1d",
        "fp32",
        _no_input("range_1d", start=np.float32(0.5), end=np.float32(2.0), step=np.float32(0.5)),
        {"y": (3,)},
        lambda: {"y": np.array([0.5, 1.0, 1.5])},
    ),
    Case(
        "shape",
        "rank3",
        _unary("shape", (2, 5, 7)),
        {"y": (3,)},
        lambda x: {"y": np.array([2, 5, 7])},
    ),
    Case(
        "shape", "bool", _unary("shape", (4,), "bool"), {"y": (1,)}, lambda x: {"y": np.array([4])}
    ),
]


def _one_hot(shape: tuple, depth: int, **params):
    def build(b):
        i = b.input("i", shape, "int32")
        b.output(b.one_hot(indices=i, one_hot_vector_size=depth, **params), "y")

    return build


def _one_hot_expect(depth: int, axis: int, on: float = 1, off: float = 0):
    def expect(i):
        out = np.full(i.shape + (depth,), off, dtype=np.float64)
        for pos in np.ndindex(i.shape):
            if 0 <= i[pos] < depth:
                out[pos + (i[pos],)] = on
        return {"y": np.moveaxis(out, -1, axis)}

    return expect


ONE_HOT = [
    Case(
        "one_hot",
        "last-axis-int",
        _one_hot((2, 3), 4),
        {"y": (2, 3, 4)},
        _one_hot_expect(4, -1),
        make_inputs=lambda rng: {"i": rng.integers(0, 4, (2, 3)).astype(np.int32)},
    ),
    # Indices outside [0, depth) give an all-off vector (tf.one_hot).
    Case(
        "one_hot",
        "axis0-fp16-out-of-range",
        _one_hot((3,), 5, axis=0, on_value=np.float16(2.5), off_value=np.float16(-1)),
        {"y": (5, 3)},
        _one_hot_expect(5, 0, 2.5, -1.0),
        make_inputs=lambda rng: {"i": np.array([4, -1, 7], dtype=np.int32)},
    ),
]


def _band(x: np.ndarray, lower: int, upper: int) -> np.ndarray:
    out = np.zeros_like(x)
    m, n = x.shape[-2:]
    for r in range(m):
        for c in range(n):
            if (lower < 0 or r - c <= lower) and (upper < 0 or c - r <= upper):
                out[..., r, c] = x[..., r, c]
    return out


BAND_PART = [
    Case(
        "band_part",
        "upper-triangle",
        _unary("band_part", (2, 4, 4), lower=0),
        {"y": (2, 4, 4)},
        lambda x: {"y": np.triu(x)},
    ),
    Case(
        "band_part",
        "lower-triangle-int",
        _unary("band_part", (3, 5), "int32", upper=0),
        {"y": (3, 5)},
        lambda x: {"y": np.tril(x)},
    ),
    Case(
        "band_part",
        "band",
        _unary("band_part", (4, 6), lower=1, upper=2),
        {"y": (4, 6)},
        lambda x: {"y": _band(x, 1, 2)},
    ),
]


# -- slices ----------------------------------------------------------------------------------

SLICE_BY_INDEX = [
    Case(
        "slice_by_index",
        "plain",
        _unary("slice_by_index", (4, 5), begin=[1, 0], end=[3, 5]),
        {"y": (2, 5)},
        lambda x: {"y": x[1:3, 0:5]},
    ),
    Case(
        "slice_by_index",
        "strides-negative",
        _unary("slice_by_index", (2, 3, 6), begin=[0, 2, -1], end=[2, 0, 0], stride=[1, -1, -2]),
        {"y": (2, 2, 3)},
        lambda x: {"y": x[0:2, 2:0:-1, -1:0:-2]},
    ),
    Case(
        "slice_by_index",
        "masks",
        _unary(
            "slice_by_index",
            (3, 4, 5),
            begin=[1, 9, 2],
            end=[0, 1, 0],
            begin_mask=[False, True, False],
            end_mask=[True, False, True],
        ),
        {"y": (2, 1, 3)},
        lambda x: {"y": x[1:, :1, 2:]},
    ),
    Case(
        "slice_by_index",
        "squeeze",
        _unary(
            "slice_by_index",
            (3, 4, 5),
            begin=[-1, 0, 1],
            end=[0, 0, 4],
            end_mask=[False, True, False],
            squeeze_mask=[True, False, False],
        ),
        {"y": (4, 3)},
        lambda x: {"y": x[2, :, 1:4]},
    ),
    Case(
        "slice_by_index",
        "reverse-with-masks",
        _unary(
            "slice_by_index",
            (5, 2),
            "int32",
            begin=[0, 0],
            end=[0, 0],
            stride=[-2, 1],
            begin_mask=[True, True],
            end_mask=[True, True],
        ),
        {"y": (3, 2)},
        lambda x: {"y": x[::-2, :]},
    ),
    Case(
        "slice_by_index",
        "all-squeezed",
        _unary("slice_by_index", (2, 3), begin=[1, 2], end=[0, 0], squeeze_mask=[True, True]),
        {"y": ()},
        lambda x: {"y": x[1, 2]},
    ),
]


def _slice_runtime_begin(b):
    x = b.input("x", (3, 4, 5), "fp16")
    begin = b.input("begin", (3,), "int32")
    b.output(b.slice_by_size(x=x, begin=begin, size=[2, 1, 3]), "y")


def _window_inputs(rng):
    return {
        "x": rng.standard_normal((3, 4, 5)).astype(np.float16),
        "begin": np.array(
            [rng.integers(0, 2), rng.integers(-4, 4), rng.integers(0, 3)], dtype=np.int32
        ),
    }


def _window_expect(x, begin):
    b = [int(v) + (d if v < 0 else 0) for v, d in zip(begin, x.shape, strict=True)]
    return {"y": x[b[0] : b[0] + 2, b[1] : b[1] + 1, b[2] : b[2] + 3]}


SLICE_BY_SIZE = [
    Case(
        "slice_by_size",
        "const",
        _unary("slice_by_size", (4, 6), begin=[1, 2], size=[2, 3]),
        {"y": (2, 3)},
        lambda x: {"y": x[1:3, 2:5]},
    ),
    Case(
        "slice_by_size",
        "to-end-negative-begin",
        _unary("slice_by_size", (4, 6), "int32", begin=[-3, 0], size=[-1, 6]),
        {"y": (3, 6)},
        lambda x: {"y": x[1:, :]},
    ),
    Case(
        "slice_by_size",
        "runtime-begin",
        _slice_runtime_begin,
        {"y": (2, 1, 3)},
        _window_expect,
        make_inputs=_window_inputs,
    ),
]


# -- gathers ---------------------------------------------------------------------------------


def _gather(x_shape: tuple, i_shape: tuple, op: str = "gather", x_dtype: str = "fp16", **params):
    def build(b):
        x = b.input("x", x_shape, x_dtype)
        i = b.input("i", i_shape, "int32")
        b.output(getattr(b, op)(x=x, indices=i, **params), "y")

    return build


def _gather_inputs(x_shape: tuple, i_shape: tuple, size: int, x_dtype=np.float16):
    def make(rng):
        x = rng.standard_normal(x_shape).astype(x_dtype)
        return {"x": x, "i": rng.integers(0, size, i_shape).astype(np.int32)}

    return make


def _gather_loop(axis: int, batch_dims: int = 0):
    """out[p, i, q] = x[p, indices[b, i], q] by explicit loops (b: the shared batch index)."""

    def expect(x, i):
        out_shape = x.shape[:axis] + i.shape[batch_dims:] + x.shape[axis + 1 :]
        out = np.empty(out_shape, dtype=x.dtype)
        for pos in np.ndindex(out_shape):
            before = pos[:axis]
            middle = pos[axis : axis + i.ndim - batch_dims]
            after = pos[axis + i.ndim - batch_dims :]
            index = i[before[:batch_dims] + middle]
            out[pos] = x[before + (index,) + after]
        return {"y": out}

    return expect


def _along_loop(axis: int):
    def expect(x, i):
        out = np.empty(i.shape, dtype=x.dtype)
        for pos in np.ndindex(i.shape):
            src = list(pos)
            src[axis] = i[pos]
            out[pos] = x[tuple(src)]
        return {"y": out}

    return expect


GATHER = [
    Case(
        "gather",
        "axis0",
        _gather((5, 3), (4,)),
        {"y": (4, 3)},
        _gather_loop(0),
        make_inputs=_gather_inputs((5, 3), (4,), 5),
    ),
    Case(
        "gather",
        "axis-last-2d-indices",
        _gather((2, 3, 6), (2, 2), axis=-1),
        {"y": (2, 3, 2, 2)},
        _gather_loop(2),
        make_inputs=_gather_inputs((2, 3, 6), (2, 2), 6),
    ),
    Case(
        "gather",
        "batch-dims",
        _gather((2, 3, 4), (2, 5), axis=2, batch_dims=1),
        {"y": (2, 3, 5)},
        _gather_loop(2, 1),
        make_inputs=_gather_inputs((2, 3, 4), (2, 5), 4),
    ),
    Case(
        "gather",
        "scalar-index-int8",
        _gather((4, 3), (), x_dtype="int8", axis=0),
        {"y": (3,)},
        _gather_loop(0),
        make_inputs=lambda rng: {
            "x": rng.integers(-128, 128, (4, 3)).astype(np.int8),
            "i": np.array(rng.integers(0, 4), dtype=np.int32),
        },
    ),
    Case(
        "gather_along_axis",
        "axis1",
        _gather((3, 4), (3, 6), "gather_along_axis", axis=1),
        {"y": (3, 6)},
        _along_loop(1),
        make_inputs=_gather_inputs((3, 4), (3, 6), 4),
    ),
    Case(
        "gather_along_axis",
        "axis0-int32",
        _gather((5, 2, 3), (2, 2, 3), "gather_along_axis", x_dtype="int32"),
        {"y": (2, 2, 3)},
        _along_loop(0),
        make_inputs=_gather_inputs((5, 2, 3), (2, 2, 3), 5, np.int32),
    ),
]


# -- pad and block rearrangements --------------------------------------------------------------


def _torch_pad(mode: str, pad: list[int]):
    def expect(x):
        torch = _torch()
        # torch's pad list runs from the last dimension inward; ours from the outermost.
        pairs = [pad[i : i + 2] for i in range(0, len(pad), 2)][::-1]
        flat = [v for pair in pairs for v in pair]
        t = torch.from_numpy(x)[None]  # torch wants a batch dimension for these modes
        return {"y": torch.nn.functional.pad(t, flat, mode=mode)[0].numpy()}

    return expect


def _constant_pad(x, before: tuple, after: tuple, value: float):
    out = np.full(tuple(d + b + a for d, b, a in zip(x.shape, before, after, strict=True)), value)
    out[tuple(slice(b, b + d) for b, d in zip(before, x.shape, strict=True))] = x
    return out


PAD = [
    Case(
        "pad",
        "constant-last-two",
        _unary("pad", (2, 3, 4), pad=[1, 0, 2, 3], constant_val=np.float16(-2.5)),
        {"y": (2, 4, 9)},
        lambda x: {"y": _constant_pad(x, (0, 1, 2), (0, 0, 3), -2.5)},
    ),
    Case(
        "pad",
        "constant-default-all",
        _unary("pad", (2, 2), "fp32", pad=[1, 1, 0, 2]),
        {"y": (4, 4)},
        lambda x: {"y": _constant_pad(x, (1, 0), (1, 2), 0.0)},
    ),
    Case(
        "pad",
        "reflect",
        _unary("pad", (2, 3, 5), pad=[2, 1, 4, 4], mode="reflect"),
        {"y": (2, 6, 13)},
        _torch_pad("reflect", [2, 1, 4, 4]),
    ),
    Case(
        "pad",
        "replicate",
        _unary("pad", (1, 2, 3), pad=[2, 0, 3, 3], mode="replicate"),
        {"y": (1, 4, 9)},
        _torch_pad("replicate", [2, 0, 3, 3]),
    ),
]


def _to_space_loop(b: int, dcr: bool):
    """DCR: channel (i*b + j) * C_out + c; CRD: c * b^2 + i*b + j (NeuralNetwork.proto)."""

    def expect(x):
        n, c, h, w = x.shape
        cout = c // (b * b)
        out = np.empty((n, cout, h * b, w * b))
        for k, co, y, z in np.ndindex(out.shape):
            i, j = y % b, z % b
            ch = (i * b + j) * cout + co if dcr else co * b * b + i * b + j
            out[k, co, y, z] = x[k, ch, y // b, z // b]
        return {"y": out}

    return expect


def _space_to_depth_loop(b: int):
    def expect(x):
        n, c, h, w = x.shape
        out = np.empty((n, c * b * b, h // b, w // b))
        for k, ch, y, z in np.ndindex(x.shape):
            i, j = y % b, z % b
            out[k, (i * b + j) * c + ch, y // b, z // b] = x[k, ch, y, z]
        return {"y": out}

    return expect


def _torch_shuffle(fn: str, factor: int):
    def expect(x):
        torch = _torch()
        return {"y": getattr(torch.nn.functional, fn)(torch.from_numpy(x), factor).numpy()}

    return expect


def _space_to_batch_loop(block: tuple, pads: tuple):
    """out[(i*b1 + j) * N + n, c, h, w] = padded[n, c, h*b0 + i, w*b1 + j] (tf.space_to_batch)."""

    def expect(x):
        b0, b1 = block
        padded = np.zeros(x.shape[:2] + (x.shape[2] + sum(pads[0]), x.shape[3] + sum(pads[1])))
        padded[:, :, pads[0][0] : pads[0][0] + x.shape[2], pads[1][0] : pads[1][0] + x.shape[3]] = x
        n = x.shape[0]
        out = np.empty((n * b0 * b1, x.shape[1], padded.shape[2] // b0, padded.shape[3] // b1))
        for ob, c, h, w in np.ndindex(out.shape):
            offset, k = divmod(ob, n)
            i, j = divmod(offset, b1)
            out[ob, c, h, w] = padded[k, c, h * b0 + i, w * b1 + j]
        return {"y": out}

    return expect


def _batch_to_space_loop(block: tuple, crops: tuple):
    def expect(x):
        b0, b1 = block
        n = x.shape[0] // (b0 * b1)
        full = np.empty((n, x.shape[1], x.shape[2] * b0, x.shape[3] * b1))
        for ob, c, h, w in np.ndindex(x.shape):
            offset, k = divmod(ob, n)
            i, j = divmod(offset, b1)
            full[k, c, h * b0 + i, w * b1 + j] = x[ob, c, h, w]
        (t, bottom), (left, right) = crops
        return {"y": full[:, :, t : full.shape[2] - bottom, left : full.shape[3] - right]}

    return expect


BLOCKS = [
    Case(
        "depth_to_space",
        "b2",
        _unary("depth_to_space", (2, 8, 2, 3), block_size=2),
        {"y": (2, 2, 4, 6)},
        _to_space_loop(2, dcr=True),
    ),
    Case(
        "depth_to_space",
        "b3-fp32",
        _unary("depth_to_space", (1, 9, 1, 2), "fp32", block_size=3),
        {"y": (1, 1, 3, 6)},
        _to_space_loop(3, dcr=True),
    ),
    Case(
        "space_to_depth",
        "b2",
        _unary("space_to_depth", (2, 3, 4, 6), block_size=2),
        {"y": (2, 12, 2, 3)},
        _space_to_depth_loop(2),
    ),
    Case(
        "pixel_shuffle",
        "f2",
        _unary("pixel_shuffle", (2, 8, 3, 2), upscale_factor=2),
        {"y": (2, 2, 6, 4)},
        _torch_shuffle("pixel_shuffle", 2),
    ),
    Case(
        "pixel_shuffle",
        "f3-fp32",
        _unary("pixel_shuffle", (1, 9, 2, 2), "fp32", upscale_factor=3),
        {"y": (1, 1, 6, 6)},
        _torch_shuffle("pixel_shuffle", 3),
    ),
    Case(
        "pixel_shuffle",
        "crd-loop",
        _unary("pixel_shuffle", (1, 8, 1, 2), upscale_factor=2),
        {"y": (1, 2, 2, 4)},
        _to_space_loop(2, dcr=False),
    ),
    Case(
        "pixel_unshuffle",
        "f2",
        _unary("pixel_unshuffle", (2, 2, 4, 6), downscale_factor=2),
        {"y": (2, 8, 2, 3)},
        _torch_shuffle("pixel_unshuffle", 2),
    ),
    Case(
        "space_to_batch",
        "pad-w",
        _unary("space_to_batch", (2, 1, 2, 4), block_shape=[2, 2], paddings=[[0, 0], [2, 0]]),
        {"y": (8, 1, 1, 3)},
        _space_to_batch_loop((2, 2), ((0, 0), (2, 0))),
    ),
    Case(
        "space_to_batch",
        "rect-block",
        _unary(
            "space_to_batch", (1, 2, 3, 4), "fp32", block_shape=[3, 2], paddings=[[1, 2], [0, 0]]
        ),
        {"y": (6, 2, 2, 2)},
        _space_to_batch_loop((3, 2), ((1, 2), (0, 0))),
    ),
    Case(
        "batch_to_space",
        "crop-w",
        _unary("batch_to_space", (8, 1, 1, 3), block_shape=[2, 2], crops=[[0, 0], [2, 0]]),
        {"y": (2, 1, 2, 4)},
        _batch_to_space_loop((2, 2), ((0, 0), (2, 0))),
    ),
    Case(
        "batch_to_space",
        "rect-block",
        _unary("batch_to_space", (6, 2, 2, 2), "fp32", block_shape=[3, 2], crops=[[1, 2], [0, 1]]),
        {"y": (1, 2, 3, 3)},
        _batch_to_space_loop((3, 2), ((1, 2), (0, 1))),
    ),
]


CASES = (
    RESHAPE
    + TRANSPOSE
    + SQUEEZE
    + EXPAND_DIMS
    + FLATTEN2D
    + REVERSE
    + CONCAT
    + STACK
    + SPLIT
    + TILE
    + GENERATED
    + ONE_HOT
    + BAND_PART
    + SLICE_BY_INDEX
    + SLICE_BY_SIZE
    + GATHER
    + PAD
    + BLOCKS
)
