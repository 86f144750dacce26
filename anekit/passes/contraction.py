"""The pad_contractions pass: on a chip whose matmul inner dimension must be a multiple
(M1: 32, ``Chip.matmul_k_multiple``), both operands of a matmul are zero-extended along the
contracted axis to the next multiple: zeros add nothing to the products, so the result is the
same. The LLM and training kernels pad their attention this way when they are generated; this
pass does it for any program (``from_torch``, ``anekit convert --chip m1``)."""

from __future__ import annotations

import numpy as np

from anekit.hw import Chip
from anekit.mil.program import Operation, Program, Value
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.passes.base import ChipRule, by_op_type, has_op_types


def _flag(op: Operation, name: str) -> bool:
    v = op.inputs.get(name)
    return v is not None and bool(np.asarray(v.const))


def _zero_extend(rb: Rebuild, v: Value, axis: int, extra: int, name: str) -> Value:
    """``v`` with ``extra`` zeros appended along ``axis`` (a constant is padded here)."""
    axis %= v.rank
    if v.const is not None and not isinstance(v.const, str):
        widths = [(0, 0)] * v.rank
        widths[axis] = (0, extra)
        return rb.const(np.pad(np.asarray(v.const), widths), name)
    shape = list(v.shape)
    shape[axis] = extra
    zeros = rb.const(np.zeros(shape, v.dtype.numpy), f"{name}_zeros")
    return rb.b.concat(values=[v, zeros], axis=axis, interleave=False, name=name)


def _pad_matmul(rb: Rebuild, op: Operation, chip: Chip) -> bool:
    multiple = chip.matmul_k_multiple
    k = op.opdef.inner_dim(op.args())
    if multiple <= 1 or k is None or k % multiple == 0:
        return False
    extra = -(-k // multiple) * multiple - k
    tx, ty = _flag(op, "transpose_x"), _flag(op, "transpose_y")
    x = _zero_extend(rb, rb.get(op.inputs["x"]), -2 if tx else -1, extra, f"{op.name}_kx")
    y = _zero_extend(rb, rb.get(op.inputs["y"]), -1 if ty else -2, extra, f"{op.name}_ky")
    out = rb.b.matmul(x=x, y=y, transpose_x=tx, transpose_y=ty, name=op.name)
    rb.set(op.outputs[0], out)
    return True


_CONTRACTION_RULES: dict[str, ChipRule] = {"matmul": _pad_matmul}  # K -> the chip's multiple


def pad_contractions(program: Program, chip: Chip) -> Program:
    """Matmuls whose inner dimension breaks the chip's multiple are zero-padded to it."""
    if chip.matmul_k_multiple <= 1 or not has_op_types(program, _CONTRACTION_RULES):
        return program
    return rebuild(program, by_op_type(_CONTRACTION_RULES, chip))
