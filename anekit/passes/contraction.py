"""The pad_contractions pass: on a chip whose matmul inner dimension must be a multiple
(M1: 32, ``Chip.matmul_k_multiple``), both operands of a matmul are zero-extended along the
contracted axis to the next multiple: zeros add nothing to the products, so the result is the
same. The LLM and training kernels pad their attention this way when they are generated; this
pass does it for any program (``from_torch``, ``anekit convert --chip m1``, ``anekit compress
--chip m1``) and every op the ``m1-matmul-k`` rule reads (the MATMUL trait):

    matmul   both operands, runtime or constant (a constant is padded in place)
    linear   x gets zero columns, the constant weight zero columns too; a weight a constexpr
             op makes (a compressed program) cannot be padded in place and stay a constant,
             so that linear becomes ``matmul(x, weight^T)`` (+ bias) with the weight padded
             at run time
    einsum   both operands along the contracted dims (-1 of the first, -3 of the second)

Fused attention declares no single inner dimension (the rule skips it; M1 gets it expanded
into matmuls by ``expand_attention`` first)."""

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
    extra = _padding(op, chip)
    if not extra:
        return False
    tx, ty = _flag(op, "transpose_x"), _flag(op, "transpose_y")
    x = _zero_extend(rb, rb.get(op.inputs["x"]), -2 if tx else -1, extra, f"{op.name}_kx")
    y = _zero_extend(rb, rb.get(op.inputs["y"]), -1 if ty else -2, extra, f"{op.name}_ky")
    out = rb.b.matmul(x=x, y=y, transpose_x=tx, transpose_y=ty, name=op.name)
    rb.set(op.outputs[0], out)
    return True


def _padding(op: Operation, chip: Chip) -> int:
    """How many zeros the contraction of ``op`` needs on ``chip`` (0: none)."""
    multiple = chip.matmul_k_multiple
    k = op.opdef.inner_dim(op.args())
    if multiple <= 1 or k is None or k % multiple == 0:
        return 0
    return -(-k // multiple) * multiple - k


def _pad_linear(rb: Rebuild, op: Operation, chip: Chip) -> bool:
    extra = _padding(op, chip)
    if not extra:
        return False
    x = _zero_extend(rb, rb.get(op.inputs["x"]), -1, extra, f"{op.name}_kx")
    weight, bias = op.inputs["weight"], op.inputs.get("bias")
    if weight.const is not None and not isinstance(weight.const, str):
        w = _zero_extend(rb, weight, 1, extra, f"{op.name}_kw")
        params = {"x": x, "weight": w} | ({} if bias is None else {"bias": rb.get(bias)})
        rb.set(op.outputs[0], rb.b.add_op("linear", params, op.name))
        return True
    # a weight a constexpr op makes: a runtime operand, so a matmul with the bias added after
    w = _zero_extend(rb, rb.get(weight), 1, extra, f"{op.name}_kw")
    out_name = op.name if bias is None else f"{op.name}_mm"
    out = rb.b.matmul(x=x, y=w, transpose_x=False, transpose_y=True, name=out_name)
    if bias is not None:
        out = rb.b.add(x=out, y=rb.get(bias), name=op.name)
    rb.set(op.outputs[0], out)
    return True


def _pad_einsum(rb: Rebuild, op: Operation, chip: Chip) -> bool:
    extra = _padding(op, chip)
    if not extra:
        return False
    x, y = op.inputs["values"]
    values = [
        _zero_extend(rb, rb.get(x), -1, extra, f"{op.name}_kx"),
        _zero_extend(rb, rb.get(y), -3, extra, f"{op.name}_ky"),
    ]
    equation = str(op.inputs["equation"].const)
    rb.set(op.outputs[0], rb.b.add_op("einsum", {"values": values, "equation": equation}, op.name))
    return True


# K -> the chip's multiple, for every op the m1-matmul-k rule reads
_CONTRACTION_RULES: dict[str, ChipRule] = {
    "matmul": _pad_matmul,
    "linear": _pad_linear,
    "einsum": _pad_einsum,
}


def pad_contractions(program: Program, chip: Chip) -> Program:
    """Contractions (matmul, linear, einsum) whose inner dimension breaks the chip's multiple
    are zero-padded to it."""
    if chip.matmul_k_multiple <= 1 or not has_op_types(program, _CONTRACTION_RULES):
        return program
    return rebuild(program, by_op_type(_CONTRACTION_RULES, chip))
