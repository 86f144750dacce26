"""A NumPy decoder for compressed weights, written from the constexpr op definitions.

Shared by the compression tests so that each checks the stored operands against its
own decoding, not against the reference functions of ``anekit.mil.ops.constexpr``.
"""

from __future__ import annotations

import numpy as np


def decoded(program, name: str) -> np.ndarray:
    """The weight ``name`` decoded with NumPy from the operands its constexpr op stores."""
    op = next(op for op in program.main.ops if op.outputs[0].name == name)
    arg = {k: np.asarray(v.const) for k, v in op.inputs.items()}
    if op.op_type == "constexpr_affine_dequantize":
        scale = arg["scale"].astype(np.float32)
        if scale.ndim:
            shape = [1] * arg["quantized_data"].ndim
            shape[int(arg["axis"])] = -1
            scale = scale.reshape(shape)
        q = arg["quantized_data"].astype(np.float32) - arg["zero_point"].astype(np.float32)
        return (q * scale).astype(np.float16)
    if op.op_type == "constexpr_blockwise_shift_scale":
        data, scale = arg["data"].astype(np.float32), arg["scale"].astype(np.float32)
        for axis in range(data.ndim):
            scale = np.repeat(scale, data.shape[axis] // scale.shape[axis], axis=axis)
        return (data * scale).astype(np.float16)
    assert op.op_type == "constexpr_lut_to_dense"
    if "shape" in arg:  # iOS16: one table, indices packed least significant bit first
        n = int(np.prod(arg["shape"]))
        bits = int(np.log2(arg["lut"].size))
        flat = np.unpackbits(arg["indices"], bitorder="little")[: n * bits].reshape(n, bits)
        return arg["lut"][flat @ (1 << np.arange(bits))].reshape(arg["shape"])
    indices, lut = arg["indices"], arg["lut"]
    out = np.empty(indices.shape, lut.dtype)
    for pos in np.ndindex(indices.shape):
        group = tuple(p // (d // g) for p, d, g in zip(pos, indices.shape, lut.shape))
        out[pos] = lut[group + (indices[pos], 0)]
    return out
