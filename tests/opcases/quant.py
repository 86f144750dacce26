"""Cases for cast, quantize, dequantize and the constexpr decompression ops.

References are written from the documented formulas: rounding half to even by an
explicit floor-and-fix-ties rule, decompression by loops over elements and their
blocks, bit unpacking by shifting. Scales are powers of two where a division is
involved, so the fp32 result and the float64 reference are exactly equal.
"""

from __future__ import annotations

import numpy as np

from tests.opcases import Case

_RNG = np.random.default_rng(20240611)  # fixed constants baked into the programs


def _half_even(v: np.ndarray) -> np.ndarray:
    """Round to nearest, ties to the even neighbour, without np.round."""
    low = np.floor(v)
    frac = v - low
    up = (frac > 0.5) | ((frac == 0.5) & (low % 2 == 1))
    return low + up


def _saturate(v: np.ndarray, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.minimum(np.maximum(v, info.min), info.max)


# -- cast ------------------------------------------------------------------------------------


def _cast(shape: tuple, src: str, dst: str):
    def build(b):
        b.output(b.cast(x=b.input("x", shape, src), dtype=dst), "y")

    return build


def _toward_zero(v: np.ndarray) -> np.ndarray:
    return np.where(v < 0, np.ceil(v), np.floor(v))


CAST = [
    Case(
        "cast",
        "fp16-int32-truncates",
        _cast((3, 4), "fp16", "int32"),
        {"y": (3, 4)},
        lambda x: {"y": _toward_zero(x)},
        make_inputs=lambda rng: {"x": (rng.standard_normal((3, 4)) * 100).astype(np.float16)},
    ),
    Case(
        "cast",
        "fp32-fp16-range-edges",  # up to 65519 rounds to 65504; inf stays inf
        _cast((2, 3), "fp32", "fp16"),
        {"y": (2, 3)},
        lambda x: {"y": np.where(np.isfinite(x) & (np.abs(x) > 65504), np.sign(x) * 65504, x)},
        make_inputs=lambda rng: {
            "x": np.array([[65519, -65519.5, 65504], [np.inf, 0.25, -np.inf]], dtype=np.float32)
        },
    ),
    Case(
        "cast",
        "fp32-fp16-rounds",
        _cast((8,), "fp32", "fp16"),
        {"y": (8,)},
        lambda x: {"y": x},
        rtol=2**-11,
        atol=0,
    ),
    Case(
        "cast",
        "int32-fp16",
        _cast((5,), "int32", "fp16"),
        {"y": (5,)},
        lambda x: {"y": x.astype(np.float64)},
    ),
    Case(
        "cast",
        "fp16-bool",
        _cast((2, 3), "fp16", "bool"),
        {"y": (2, 3)},
        lambda x: {"y": np.array([[v != 0 for v in row] for row in x])},
        make_inputs=lambda rng: {
            "x": np.array([[0, -0.0, 1e-3], [np.nan, -2, 0]], dtype=np.float16)
        },
    ),
    Case(
        "cast",
        "bool-fp32",
        _cast((4,), "bool", "fp32"),
        {"y": (4,)},
        lambda x: {"y": np.array([1.0 if v else 0.0 for v in x])},
    ),
    Case(
        "cast",
        "int32-int8",
        _cast((6,), "int32", "int8"),
        {"y": (6,)},
        lambda x: {"y": x},
        make_inputs=lambda rng: {"x": np.array([-128, 127, 0, -5, 99, 1], dtype=np.int32)},
    ),
    Case(
        "cast",
        "uint8-int16",
        _cast((2, 2), "uint8", "int16"),
        {"y": (2, 2)},
        lambda x: {"y": x},
        make_inputs=lambda rng: {"x": np.array([[0, 255], [17, 128]], dtype=np.uint8)},
    ),
]


# -- quantize, dequantize --------------------------------------------------------------------


def _quantize(shape: tuple, dtype: str, out: str, scale, zero_point=None, axis=None):
    def build(b):
        x = b.input("x", shape, dtype)
        b.output(
            b.quantize(input=x, scale=scale, zero_point=zero_point, axis=axis, output_dtype=out),
            "y",
        )

    return build


def _quantize_expect(out: str, scale, zero_point=None, axis=None):
    def expect(x):
        shape = [1] * x.ndim
        if axis is not None:
            shape[axis] = -1
        s = np.reshape(np.asarray(scale, dtype=np.float64), shape)
        z = 0 if zero_point is None else np.reshape(np.asarray(zero_point, np.float64), shape)
        return {"y": _saturate(_half_even(x / s) + z, np.dtype(out))}

    return expect


_Q_SCALE = np.array([0.25, 1, 4], dtype=np.float16)
_Q_ZERO = np.array([128, 0, 250], dtype=np.uint8)


def _wide_inputs(shape: tuple, dtype, spread: float):
    return lambda rng: {"x": (rng.standard_normal(shape) * spread).astype(dtype)}


def _dequantize(shape: tuple, dtype: str, scale, zero_point=None, axis=None):
    def build(b):
        q = b.input("q", shape, dtype)
        b.output(b.dequantize(input=q, scale=scale, zero_point=zero_point, axis=axis), "y")

    return build


def _dequantize_loop(scale, zero_point=None, axis=None):
    def expect(q):
        out = np.empty(q.shape)
        for pos in np.ndindex(q.shape):
            k = pos[axis] if axis is not None else ()
            z = 0.0 if zero_point is None else float(np.asarray(zero_point)[k])
            out[pos] = (float(q[pos]) - z) * float(np.asarray(scale)[k])
        return {"y": out}

    return expect


def _q_inputs(shape: tuple, dtype):
    info = np.iinfo(dtype)
    return lambda rng: {"q": rng.integers(info.min, info.max + 1, shape).astype(dtype)}


_DQ_SCALE = np.array([0.5, 0.0625, 3.0, 0.1], dtype=np.float16)
_DQ_ZERO = np.array([-3, 0, 7, 127], dtype=np.int8)

QUANT = [
    Case(
        "quantize",
        "int8-scalar",
        _quantize((2, 8), "fp16", "int8", np.float16(0.5)),
        {"y": (2, 8)},
        _quantize_expect("int8", 0.5),
        make_inputs=_wide_inputs((2, 8), np.float16, 60),
    ),
    Case(
        "quantize",
        "uint8-per-axis-zero-point",
        _quantize((2, 3, 4), "fp16", "uint8", _Q_SCALE, _Q_ZERO, axis=1),
        {"y": (2, 3, 4)},
        _quantize_expect("uint8", _Q_SCALE, _Q_ZERO, axis=1),
        make_inputs=_wide_inputs((2, 3, 4), np.float16, 200),
    ),
    Case(
        "quantize",
        "fp32-negative-axis",
        _quantize(
            (4, 2),
            "fp32",
            "int8",
            np.array([2.0, 0.125], np.float32),
            np.array([1, -1], np.int8),
            axis=-1,
        ),
        {"y": (4, 2)},
        _quantize_expect("int8", [2.0, 0.125], [1, -1], axis=1),
        make_inputs=_wide_inputs((4, 2), np.float32, 30),
    ),
    Case(
        "dequantize",
        "int8-scalar",
        _dequantize((3, 5), "int8", np.float16(0.25)),
        {"y": (3, 5)},
        _dequantize_loop(np.float16(0.25)),
        make_inputs=_q_inputs((3, 5), np.int8),
    ),
    Case(
        "dequantize",
        "int8-per-axis-fp16",
        _dequantize((2, 4), "int8", _DQ_SCALE, _DQ_ZERO, axis=1),
        {"y": (2, 4)},
        _dequantize_loop(_DQ_SCALE, _DQ_ZERO, axis=1),
        make_inputs=_q_inputs((2, 4), np.int8),
    ),
    Case(
        "dequantize",
        "uint8-fp32-axis0",
        _dequantize(
            (3, 2),
            "uint8",
            np.array([1.5, -2, 1e-3], np.float32),
            np.array([128, 0, 255], np.uint8),
            axis=0,
        ),
        {"y": (3, 2)},
        _dequantize_loop(np.array([1.5, -2, 1e-3], np.float32), np.array([128, 0, 255]), 0),
        make_inputs=_q_inputs((3, 2), np.uint8),
        rtol=1e-6,
        atol=0,
    ),
]


# -- constexpr ops ---------------------------------------------------------------------------


def _constexpr(op: str, **params):
    def build(b):
        b.output(getattr(b, op)(**params), "y")

    return build


def _constant(value: np.ndarray):
    return lambda: {"y": value}


_W = _RNG.integers(-128, 128, (4, 6)).astype(np.int8)
_W_SCALE = np.array([0.5, 0.25, 1.0, 2.0], dtype=np.float16)
_W_ZERO = np.array([0, -4, 3, 127], dtype=np.int8)


def _affine_loop(data, zero, scale, axis):
    out = np.empty(data.shape)
    for pos in np.ndindex(data.shape):
        z = zero if np.ndim(zero) == 0 else zero[pos[axis]]
        s = scale if np.ndim(scale) == 0 else scale[pos[axis]]
        out[pos] = (float(data[pos]) - float(z)) * float(s)
    return out


def _weight_affine(b):
    w = b.weight("w", _W)
    out = b.constexpr_affine_dequantize(
        quantized_data=w, zero_point=_W_ZERO, scale=_W_SCALE, axis=0
    )
    b.output(out, "y")


_U = _RNG.integers(0, 256, (3, 5)).astype(np.uint8)

AFFINE = [
    Case(
        "constexpr_affine_dequantize",
        "blobfile-per-axis",
        _weight_affine,
        {"y": (4, 6)},
        _constant(_affine_loop(_W, _W_ZERO, _W_SCALE, 0)),
    ),
    Case(
        "constexpr_affine_dequantize",
        "uint8-fp32-zero-point",
        _constexpr(
            "constexpr_affine_dequantize",
            quantized_data=_U,
            zero_point=np.float32(127.5),
            scale=np.array([1, 2, 3, 4, 5], np.float32),
            axis=-1,
        ),
        {"y": (3, 5)},
        _constant(_affine_loop(_U, 127.5, [1, 2, 3, 4, 5], 1)),
    ),
]

# iOS18 constexpr_lut_to_dense: uint8 indices, one 256-entry table per group.
_IDX = _RNG.integers(0, 256, (4, 6)).astype(np.uint8)
_LUT_GROUPS = _RNG.standard_normal((2, 3, 256, 1)).astype(np.float16)
_LUT_VECTORS = _RNG.integers(-128, 128, (1, 1, 256, 3)).astype(np.int8)


def _grouped_lut_loop() -> np.ndarray:
    out = np.empty(_IDX.shape)
    for r, c in np.ndindex(_IDX.shape):
        out[r, c] = _LUT_GROUPS[r // 2, c // 2, _IDX[r, c], 0]
    return out


def _vector_lut_loop(axis: int) -> np.ndarray:
    shape = list(_IDX.shape)
    shape[axis] *= 3
    out = np.empty(shape)
    for r, c in np.ndindex(_IDX.shape):
        vector = _LUT_VECTORS[0, 0, _IDX[r, c]]
        for v in range(3):
            at = (r * 3 + v, c) if axis == 0 else (r, c * 3 + v)
            out[at] = vector[v]
    return out


# constexpr_blockwise_shift_scale: blocks of 2 rows x 3 columns.
_DATA = _RNG.integers(-128, 128, (4, 6)).astype(np.int8)
_BLOCK_SCALE = np.array([[0.5, 2.0], [0.25, -1.0]], dtype=np.float16)
_BLOCK_OFFSET = np.array([[1, -2], [0, 100]], dtype=np.int8)
_HALF_DATA = _RNG.standard_normal((2, 4)).astype(np.float16)
_HALF_SCALE = np.array([[2.0], [0.5]], dtype=np.float32)
_HALF_OFFSET = np.array([[0.25], [-1.5]], dtype=np.float16)


def _blockwise_loop(data, scale, offset, block: tuple) -> np.ndarray:
    out = np.empty(data.shape)
    for pos in np.ndindex(data.shape):
        blk = tuple(p // s for p, s in zip(pos, block, strict=True))
        shift = 0.0 if offset is None else float(offset[blk])
        out[pos] = (float(data[pos]) - shift) * float(scale[blk])
    return out


# constexpr_sparse_to_dense (iOS16 form): bits set at flat positions 0, 3, 4, 9.
_SPARSE_VALUES = np.array([1.5, -2.0, 3.25, 8.0], dtype=np.float16)
_SPARSE_MASK = np.array([0b00011001, 0b00000010], dtype=np.uint8)


def _sparse18(b) -> None:
    """The iOS18 form: a uint1 mask of the dense shape (ones at 0, 3, 4 and 9)."""
    bits = np.array([[1, 0, 0, 1, 1], [0, 0, 0, 0, 1]])
    dense = b.constexpr_sparse_to_dense(
        nonzero_data=_SPARSE_VALUES, mask=b.const(bits, dtype="uint1")
    )
    b.output(dense, "y")


def _sparse_dense() -> np.ndarray:
    out = np.zeros(10)
    for value, at in zip(_SPARSE_VALUES, (0, 3, 4, 9), strict=True):
        out[at] = value
    return out.reshape(2, 5)


COMPRESSED = [
    Case(
        "constexpr_lut_to_dense",
        "ios18-grouped-scalar",
        _constexpr("constexpr_lut_to_dense", indices=_IDX, lut=_LUT_GROUPS),
        {"y": (4, 6)},
        _constant(_grouped_lut_loop()),
    ),
    Case(
        "constexpr_lut_to_dense",
        "ios18-vector-axis0",
        _constexpr("constexpr_lut_to_dense", indices=_IDX, lut=_LUT_VECTORS, vector_axis=0),
        {"y": (12, 6)},
        _constant(_vector_lut_loop(0)),
    ),
    Case(
        "constexpr_lut_to_dense",
        "ios18-vector-axis-last",
        _constexpr("constexpr_lut_to_dense", indices=_IDX, lut=_LUT_VECTORS, vector_axis=-1),
        {"y": (4, 18)},
        _constant(_vector_lut_loop(1)),
    ),
    Case(
        "constexpr_blockwise_shift_scale",
        "int8-blocks-offset",
        _constexpr(
            "constexpr_blockwise_shift_scale", data=_DATA, scale=_BLOCK_SCALE, offset=_BLOCK_OFFSET
        ),
        {"y": (4, 6)},
        _constant(_blockwise_loop(_DATA, _BLOCK_SCALE, _BLOCK_OFFSET, (2, 3))),
    ),
    Case(
        "constexpr_blockwise_shift_scale",
        "int8-per-tensor-no-offset",
        _constexpr(
            "constexpr_blockwise_shift_scale", data=_DATA, scale=np.array([[0.125]], np.float16)
        ),
        {"y": (4, 6)},
        _constant(_blockwise_loop(_DATA, np.array([[0.125]]), None, (4, 6))),
    ),
    Case(
        "constexpr_blockwise_shift_scale",
        "fp16-data-float-offset",
        _constexpr(
            "constexpr_blockwise_shift_scale",
            data=_HALF_DATA,
            scale=_HALF_SCALE,
            offset=_HALF_OFFSET,
        ),
        {"y": (2, 4)},
        _constant(_blockwise_loop(_HALF_DATA, _HALF_SCALE, _HALF_OFFSET, (1, 4))),
    ),
    Case(
        "constexpr_sparse_to_dense",
        "ios16-form",
        _constexpr(
            "constexpr_sparse_to_dense",
            nonzero_data=_SPARSE_VALUES,
            mask=_SPARSE_MASK,
            shape=[2, 5],
        ),
        {"y": (2, 5)},
        _constant(_sparse_dense()),
        opset="ios17",  # iOS18 replaced the flat uint8 mask with a uint1 mask of the shape
    ),
    Case(
        "constexpr_sparse_to_dense",
        "ios18-uint1-mask",
        _sparse18,
        {"y": (2, 5)},
        _constant(_sparse_dense()),
    ),
]

CASES = CAST + QUANT + AFFINE + COMPRESSED
