"""constexpr ops: constants stored compressed and decompressed when the program is loaded.

``constexpr_affine_dequantize``, ``constexpr_lut_to_dense``,
``constexpr_blockwise_shift_scale`` and ``constexpr_sparse_to_dense``. Parameter names,
defaults, dtype domains and shape rules follow coremltools' op definitions
(coremltools/converters/mil/mil/ops/defs/, commit e0e2f42): iOS16/constexpr_ops.py and
iOS18/compression.py. Numerics follow coremltools' constant folding
(coremltools/optimize/_utils.py, ``dequantize_by_scale_and_zp``,
``restore_elements_from_packed_bits``, ``lut_to_dense``); dequantization computes
``(q - zero_point) * scale`` in fp32 and stores the result in scale's dtype, as
``dequantize`` (quant.py) does.

constexpr ops take only constants and are decompressed when the program is loaded
(or evaluated); their cost is zero, the consumer counts the bytes it reads. The
iOS16 versions print every parameter as an attribute (``constexpr_x()[...]``). iOS18
``constexpr_lut_to_dense`` takes indices of the weight's rank in uint1, uint2, uint3,
uint4, uint6 or uint8 (tables of 2, 4, 8, 16, 64 or 256 entries; sub-byte tensors are
packed in the weight file, ``anekit.mil.blob``). The iOS18 form of
``constexpr_sparse_to_dense`` (a uint1 mask) is not declared.

Each op declares its ``encoding`` (:class:`~anekit.mil.ops.registry.Encoding`): which
storage scheme it decodes and the bits of one stored element, the fact the checker and
the cost model read to know what a chip streams compressed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anekit.mil.ops.common import FP, INT32, axis_index, require
from anekit.mil.ops.quant import Q8, affine_dequantize, axis_param, per_axis_infer, per_axis_param
from anekit.mil.ops.ranges import values_of
from anekit.mil.ops.ranges_math import AFFINE_DEQUANTIZED, SHIFT_SCALED, with_zero
from anekit.mil.ops.registry import Args, Cost, Encoding, OpDef, const_ints, param, register
from anekit.mil.ops.traits import ATTRIBUTES, CONSTEXPR
from anekit.mil.types import UNSIGNED_SUB_BYTE, DType, TensorType

_LUT_VALUES = frozenset({DType.int8, DType.uint8, DType.fp16, DType.fp32})
_SPARSE18_VALUES = _LUT_VALUES | {DType.int4, DType.uint4}
_UINT8 = frozenset({DType.uint8})
_LUT_INDICES = UNSIGNED_SUB_BYTE | _UINT8
_UINT32 = frozenset({DType.uint32})
_CONSTEXPR16 = frozenset({CONSTEXPR, ATTRIBUTES})
_CONSTEXPR18 = frozenset({CONSTEXPR})


def _no_cost(a: Args, outs: tuple[TensorType, ...]) -> Cost:
    return Cost(0.0, 0.0, 0.0)


# -- constexpr_affine_dequantize (iOS16) -----------------------------------------------------


register(
    OpDef(
        name="constexpr_affine_dequantize",
        params=(
            param("quantized_data", Q8, const=True),
            per_axis_param("zero_point", Q8 | {DType.fp32}, "ZeroPointT", optional=False),
            per_axis_param("scale", FP, "DstT", optional=False),
            axis_param(optional=False),
        ),
        infer=per_axis_infer("quantized_data", axis_required=True),
        shape_only=frozenset({"quantized_data"}),
        reference=lambda quantized_data, zero_point, scale, axis: affine_dequantize(
            quantized_data, zero_point, scale, axis
        ),
        cost=_no_cost,
        encoding=lambda a: Encoding("affine", a.quantized_data.dtype.bits),
        traits=_CONSTEXPR16,
        ranges=AFFINE_DEQUANTIZED,
        since="ios16",
        doc="""A constant stored as 8-bit integers: (quantized_data - zero_point) * scale.

        Every parameter is printed as an attribute: ``constexpr_affine_dequantize()[...]``.

        Args:
            quantized_data (const tensor<SrcT, [1..]>): the integers (SrcT: int8, uint8).
            zero_point (const ZeroPointT or tensor<ZeroPointT, [D]>): the offset
                (ZeroPointT: int8, uint8, fp32).
            scale (const DstT or tensor<DstT, [D]>): the step (DstT: fp16, fp32).
            axis (const int32): the dimension vector parameters run along.
        Returns:
            const tensor<DstT, quantized_data.shape>: the decompressed values.
        """,
    )
)


# -- constexpr_lut_to_dense (iOS16 packed form, iOS18 tensor form) -----------------------------


def unpack_bits(packed: np.ndarray, nbits: int, count: int) -> np.ndarray:
    """``count`` unsigned nbits-wide fields packed least significant bit first, byte by byte."""
    bits = np.unpackbits(packed.astype(np.uint8), bitorder="little")[: count * nbits]
    weights = (1 << np.arange(nbits)).astype(np.int64)
    return bits.reshape(count, nbits).astype(np.int64) @ weights


def _shape_param(a: Args) -> tuple[int, ...]:
    dims = const_ints(a.const("shape"))
    require(
        len(dims) >= 1 and all(d > 0 for d in dims),
        a.opdef.name,
        "shape",
        lambda: f"expected positive sizes, found {dims}",
    )
    return tuple(dims)


def _lut16_infer(a: Args) -> TensorType:
    op, shape = "constexpr_lut_to_dense", _shape_param(a)
    entries = a.lut.shape[0]
    require(
        entries in (2, 4, 16, 64, 256),
        op,
        "lut",
        lambda: f"expected 2, 4, 16, 64 or 256 entries, found {entries}",
    )
    nbits = entries.bit_length() - 1
    needed = math.ceil(nbits * math.prod(shape) / 8)
    require(
        a.indices.shape[0] == needed,
        op,
        "indices",
        lambda: (
            f"{math.prod(shape)} {nbits}-bit indices need {needed} bytes, found {a.indices.shape[0]}"
        ),
    )
    return TensorType(a.lut.dtype, shape)


def _lut16(indices: np.ndarray, lut: np.ndarray, shape: np.ndarray) -> np.ndarray:
    dims = const_ints(shape)
    nbits = lut.size.bit_length() - 1
    return lut[unpack_bits(indices, nbits, math.prod(dims))].reshape(dims)


_lut16_op = register(
    OpDef(
        name="constexpr_lut_to_dense",
        params=(
            param("indices", _UINT8, ranks=(1,), const=True),
            param("lut", _LUT_VALUES, ranks=(1,), const=True),
            param("shape", _UINT32, ranks=(1,), const=True),
        ),
        infer=_lut16_infer,
        reference=_lut16,
        shape_only=frozenset({"indices"}),
        cost=_no_cost,
        encoding=lambda a: Encoding("lut", a.lut.shape[0].bit_length() - 1),
        traits=_CONSTEXPR16,
        ranges=values_of("lut"),
        since="ios16",
        doc="""A constant stored as a look-up table and packed n-bit indices (palettization).

        Args:
            indices (const tensor<uint8, [M]>): prod(shape) indices of n = log2(len(lut)) bits,
                packed least significant bit first; M = ceil(n * prod(shape) / 8).
            lut (const tensor<T, [2^n]>): the table, n in {1, 2, 4, 6, 8}
                (T: int8, uint8, fp16, fp32).
            shape (const tensor<uint32, [K]>): the output shape.
        Returns:
            const tensor<T, shape>: lut[index] for every element, row-major.
        """,
    )
)


def _lut18_infer(a: Args) -> TensorType:
    op, ind, lut = "constexpr_lut_to_dense", a.indices, a.lut
    require(ind.rank >= 1, op, "indices", lambda: f"expected rank >= 1, found {ind.type}")
    require(
        lut.rank == ind.rank + 2
        and all(d % g == 0 for d, g in zip(ind.shape, lut.shape[: ind.rank], strict=True)),
        op,
        "lut",
        lambda: (
            f"expected [groups..., entries, vector size] with groups dividing indices "
            f"{list(ind.shape)}, found {list(lut.shape)}"
        ),
    )
    entries = 1 << ind.dtype.bits
    require(
        lut.shape[-2] == entries,
        op,
        "lut",
        lambda: f"{ind.dtype} indices address {entries} entries, found {lut.shape[-2]}",
    )
    shape = list(ind.shape)
    vector = lut.shape[-1]
    if a.vector_axis is not None:
        axis = axis_index(op, "vector_axis", int(a.const("vector_axis")), ind.rank)
        shape[axis] *= vector
    else:
        require(
            vector == 1, op, "vector_axis", lambda: f"vectors of {vector} values need a vector_axis"
        )
    return TensorType(lut.dtype, tuple(shape))


def _lut18(indices: np.ndarray, lut: np.ndarray, vector_axis: Any = None) -> np.ndarray:
    rank = indices.ndim
    # Element p uses table number p // block on every dimension (block = indices / groups).
    groups = tuple(
        (np.arange(d) // (d // g)).reshape([-1 if i == k else 1 for k in range(rank)])
        for i, (d, g) in enumerate(zip(indices.shape, lut.shape[:rank], strict=True))
    )
    vectors = lut[groups + (indices.astype(np.int64),)]  # indices.shape + (vector size,)
    if vector_axis is None:
        return vectors[..., 0]
    axis = int(vector_axis) % rank
    shape = list(indices.shape)
    shape[axis] *= lut.shape[-1]
    return np.moveaxis(vectors, -1, axis + 1).reshape(shape)


register(
    _lut16_op.evolve(
        since="ios18",
        params=(
            param("indices", _LUT_INDICES, const=True),
            param("lut", _LUT_VALUES, const=True),
            param("vector_axis", INT32, ranks=(0,), const=True, optional=True),
        ),
        infer=_lut18_infer,
        reference=_lut18,
        encoding=lambda a: Encoding("lut", a.indices.dtype.bits),
        traits=_CONSTEXPR18,
        doc="""A constant stored as per-group look-up tables of scalars or vectors.

        Parameters are op inputs (not attributes) from iOS18. Indices of n bits address
        tables of 2^n entries; sub-byte indices are packed in the weight file.

        Args:
            indices (const tensor<IndicesT, [*D]>): an index into its group's table per
                element (IndicesT: uint1, uint2, uint3, uint4, uint6, uint8).
            lut (const tensor<T, [*G, 2^n, V]>): one table per group; G[i] divides D[i]
                and element p uses table p // (D / G) (T: int8, uint8, fp16, fp32).
            vector_axis (const int32): where a table's V-vectors are laid out; required
                when V > 1.
        Returns:
            const tensor<T, [*D with D[vector_axis] * V]>: the decompressed values.
        """,
    )
)


# -- constexpr_blockwise_shift_scale (iOS18) -------------------------------------------------


def _blockwise_infer(a: Args) -> TensorType:
    op, data, scale, offset = "constexpr_blockwise_shift_scale", a.data, a.scale, a.offset
    require(data.rank >= 1, op, "data", lambda: f"expected rank >= 1, found {data.type}")
    require(
        scale.rank == data.rank
        and all(d % s == 0 for d, s in zip(data.shape, scale.shape, strict=True)),
        op,
        "scale",
        lambda: (
            f"expected one scale per block: rank {data.rank}, sizes dividing {list(data.shape)}, "
            f"found {list(scale.shape)}"
        ),
    )
    if offset is not None:
        require(
            offset.shape == scale.shape,
            op,
            "offset",
            lambda: f"expected scale's shape {list(scale.shape)}, found {list(offset.shape)}",
        )
        require(
            offset.dtype.is_float or offset.dtype == data.dtype,
            op,
            "offset",
            lambda: f"an integer offset must have data's dtype {data.dtype}, found {offset.dtype}",
        )
    return TensorType(scale.dtype, data.shape)


def _per_block(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Repeat each block parameter over its block of a tensor of ``shape``."""
    for axis, (d, s) in enumerate(zip(shape, values.shape, strict=True)):
        values = np.repeat(values, d // s, axis=axis)
    return values


def _blockwise(data: np.ndarray, scale: np.ndarray, offset: np.ndarray | None = None) -> Any:
    values = data.astype(np.float32)
    if offset is not None:
        values = values - _per_block(offset.astype(np.float32), data.shape)
    return values * _per_block(scale.astype(np.float32), data.shape)


_DATA = frozenset({DType.int4, DType.uint4, DType.int8, DType.uint8, DType.fp16, DType.fp32})
register(
    OpDef(
        name="constexpr_blockwise_shift_scale",
        params=(
            param("data", _DATA, const=True),
            param("scale", FP, const=True),
            param("offset", _DATA, const=True, optional=True),
        ),
        infer=_blockwise_infer,
        reference=_blockwise,
        shape_only=frozenset({"data", "offset"}),
        cost=_no_cost,
        encoding=lambda a: Encoding("blockwise", a.data.dtype.bits),
        traits=_CONSTEXPR18,
        ranges=SHIFT_SCALED,
        since="ios18",
        doc="""A constant dequantized per block: (data - offset) * scale, computed in fp32.

        Element p uses scale[p // block] with block = data.shape / scale.shape per dimension.

        Args:
            data (const tensor<SrcT, [*D]>): the stored values (SrcT: int4, uint4, int8,
                uint8, fp16, fp32; 4-bit data is iOS18's per-block 4-bit format).
            scale (const tensor<DstT, [*S]>): one step per block; S[i] divides D[i]
                (DstT: fp16, fp32).
            offset (const tensor<OffsetT, [*S]>): one offset per block; an integer offset has
                data's dtype. Default: none.
        Returns:
            const tensor<DstT, D>: the decompressed values.
        """,
    )
)


# -- constexpr_sparse_to_dense (iOS16; iOS18's uint1 mask) -------------------------------------


def _sparse_infer(a: Args) -> TensorType:
    op, shape = "constexpr_sparse_to_dense", _shape_param(a)
    count = math.prod(shape)
    mask = np.asarray(a.const("mask"), dtype=np.uint8)
    require(
        mask.size == math.ceil(count / 8),
        op,
        "mask",
        lambda: f"{count} elements need {math.ceil(count / 8)} mask bytes, found {mask.size}",
    )
    bits = np.unpackbits(mask, bitorder="little")
    require(not bits[count:].any(), op, "mask", "bits past the last element must be 0")
    require(
        int(bits.sum()) == a.nonzero_data.shape[0],
        op,
        "nonzero_data",
        lambda: f"the mask sets {int(bits.sum())} bits, found {a.nonzero_data.shape[0]} values",
    )
    return TensorType(a.nonzero_data.dtype, shape)


def _sparse(nonzero_data: np.ndarray, mask: np.ndarray, shape: np.ndarray) -> np.ndarray:
    dims = const_ints(shape)
    count = math.prod(dims)
    dense = np.zeros(count, dtype=nonzero_data.dtype)
    dense[np.unpackbits(mask.astype(np.uint8), bitorder="little")[:count] == 1] = nonzero_data
    return dense.reshape(dims)


_sparse16 = register(
    OpDef(
        name="constexpr_sparse_to_dense",
        params=(
            param("nonzero_data", _LUT_VALUES, ranks=(1,), const=True),
            param("mask", _UINT8, ranks=(1,), const=True),
            param("shape", _UINT32, ranks=(1,), const=True),
        ),
        infer=_sparse_infer,
        reference=_sparse,
        shape_only=frozenset({"nonzero_data"}),
        cost=_no_cost,
        encoding=lambda a: Encoding("sparse", a.nonzero_data.dtype.bits),
        traits=_CONSTEXPR16,
        ranges=with_zero("nonzero_data"),
        since="ios16",
        doc="""A constant stored as its non-zero values and a bit mask.

        Args:
            nonzero_data (const tensor<T, [N]>): the values whose mask bit is set, row-major
                (T: int8, uint8, fp16, fp32).
            mask (const tensor<uint8, [ceil(prod(shape) / 8)]>): one bit per element, least
                significant bit first; N bits set, bits past the end 0.
            shape (const tensor<uint32, [K]>): the output shape.
        Returns:
            const tensor<T, shape>: zeros with the values placed where the mask is set.
        """,
    )
)


def _sparse18_infer(a: Args) -> TensorType:
    mask = np.asarray(a.const("mask"))
    require(
        int(np.count_nonzero(mask)) == a.nonzero_data.shape[0],
        "constexpr_sparse_to_dense",
        "nonzero_data",
        lambda: (
            f"the mask sets {int(np.count_nonzero(mask))} bits, found "
            f"{a.nonzero_data.shape[0]} values"
        ),
    )
    return TensorType(a.nonzero_data.dtype, a.mask.shape)


def _sparse18(nonzero_data: np.ndarray, mask: np.ndarray) -> np.ndarray:
    dense = np.zeros(mask.shape, dtype=nonzero_data.dtype)
    dense[np.asarray(mask) != 0] = nonzero_data
    return dense


register(
    _sparse16.evolve(
        since="ios18",
        params=(
            param("nonzero_data", _SPARSE18_VALUES, ranks=(1,), const=True),
            param("mask", frozenset({DType.uint1}), const=True),
        ),
        infer=_sparse18_infer,
        reference=_sparse18,
        doc="""A constant stored as its non-zero values and a mask of the dense shape (iOS18).

        Args:
            nonzero_data (const tensor<T, [N]>): the values whose mask bit is set, row-major
                (T: int4, uint4, int8, uint8, fp16, fp32).
            mask (const tensor<uint1, [*D]>): 1 where a value is stored; N ones.
        Returns:
            const tensor<T, D>: zeros with the values placed where the mask is 1.
        """,
    )
)
