"""The finite_masks pass: additive masks reaching a softmax hold -65504, not -inf."""

from __future__ import annotations

import numpy as np

from anekit.hw import Chip
from anekit.mil.ops.traits import CAST, CONST
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.mil.values import Value
from anekit.passes.precision import FP16_MAX

# Ops an additive mask may pass through on its way to a softmax (by parameter), the ops
# that only move it, and the op it must reach. Anything else reading the constant means
# it is no mask.
_MASK_CARRIERS: dict[str, tuple[str, ...]] = {"add": ("x", "y"), "select": ("a", "b")}
_MASK_MOVERS = frozenset(
    {"reshape", "transpose", "expand_dims", "squeeze", "tile", "slice_by_size", "slice_by_index"}
)
_MASK_END = "softmax"
# The one masked-out value of converted programs (Hugging Face's finfo(float32).min, -inf):
# every pass that writes a mask reads it from here.
MASKED = -FP16_MAX


def _feeds_softmax_only(rb: Rebuild, v: Value) -> bool:
    """Whether every path from ``v`` is mask arithmetic ending in a softmax."""
    stack, reached = [v], False
    while stack:
        value = stack.pop()
        for op in rb.consumers(value):
            if op.op_type == _MASK_END:
                reached = True
                continue
            carrier = _MASK_CARRIERS.get(op.op_type)
            params = [k for k, x in op.inputs.items() if x is value]
            if carrier is not None and all(k in carrier for k in params):
                stack.extend(op.outputs)
            elif (op.op_type in _MASK_MOVERS or CAST in op.opdef.traits) and params == ["x"]:
                stack.extend(op.outputs)
            else:
                return False
    return reached


def _mask_rule(rb: Rebuild, op: Operation) -> bool:
    if CONST not in op.opdef.traits or not op.outputs[0].dtype.is_float:
        return False
    arr = np.asarray(op.outputs[0].const)
    low = arr <= -FP16_MAX
    if not low.any() or not _feeds_softmax_only(rb, op.outputs[0]):
        return False
    finite = np.where(low, np.asarray(MASKED, arr.dtype), arr)  # -inf -> MASKED
    rb.set(op.outputs[0], rb.const(finite, op.name))
    return True


def finite_masks(program: Program, chip: Chip) -> Program:
    """Additive masks that reach a softmax: -inf (or below fp16) becomes -65504.

    exp(-65504 - max) is 0 in fp32 and fp16 alike, so the softmax is unchanged; -inf
    itself would give NaN for a row with no allowed position and is not an fp16 a
    mask tensor should hold.
    """
    return rebuild(program, _mask_rule)
