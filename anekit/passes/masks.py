"""The finite_masks pass: additive masks reaching a softmax hold -65504, not -inf."""

from __future__ import annotations

import numpy as np

from anekit.hw import Chip
from anekit.hw.numerics import MASK_MIN
from anekit.mil.ops.traits import CAST, CONST, MOVEMENT, PROBABILITIES
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.mil.values import Value
from anekit.passes.precision import FP16_MAX

# A mask may pass through the operands of its OpDef.mask_operands (add's, select's), ops that
# only move or cast it (as their x), and must end in a PROBABILITIES op (softmax). Anything
# else reading the constant means it is no mask.
_PASSES_X = frozenset({MOVEMENT, CAST})
# The masked-out value of converted programs (Hugging Face's finfo(float32).min, -inf):
# every pass that writes a mask reads it from here. It is the project's one mask constant,
# inside N1's matmul range (anekit.hw.numerics.MASK_MIN; -65504 overflows with any score).
MASKED = MASK_MIN


def _feeds_softmax_only(rb: Rebuild, v: Value) -> bool:
    """Whether every path from ``v`` is mask arithmetic ending in a softmax."""
    stack, reached = [v], False
    while stack:
        value = stack.pop()
        for op in rb.consumers(value):
            traits = op.opdef.traits
            if PROBABILITIES in traits:
                reached = True
                continue
            params = [k for k, x in op.inputs.items() if x is value]
            if op.opdef.mask_operands and all(k in op.opdef.mask_operands for k in params):
                stack.extend(op.outputs)
            elif traits & _PASSES_X and params == ["x"]:
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
    """Additive masks that reach a softmax: -inf (or below fp16) becomes MASKED (-30000).

    exp(-30000 - max) is 0 in fp32 and fp16 alike, so the softmax is unchanged; -inf
    itself would give NaN for a row with no allowed position and is not an fp16 a
    mask tensor should hold.
    """
    return rebuild(program, _mask_rule)
