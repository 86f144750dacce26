"""The bool_logic pass: ``logical_and``/``logical_or``/``logical_xor`` of bool tensors become
arithmetic the ANE runs. The one-op sweep found the logical ops do not compile on the ANE,
while ``select``, ``add`` and the comparisons do: each operand becomes 0 or 1 (``select``),
the two are added, and a comparison of the sum with a constant gives the bool back
(and: sum == 2, or: sum > 0, xor: sum == 1). Hugging Face attention masks combine their
padding and causal parts this way."""

from __future__ import annotations

import numpy as np

from anekit.hw import Chip
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.passes.base import ChipRule, by_op_type, has_op_types

_ONE, _ZERO = np.float16(1), np.float16(0)


def _arithmetic(compare: str, against: float) -> ChipRule:
    def rewrite(rb: Rebuild, op: Operation, chip: Chip) -> bool:
        b = rb.b
        counts = [
            b.select(cond=rb.get(op.inputs[k]), a=_ONE, b=_ZERO, name=f"{op.name}_{k}01")
            for k in ("x", "y")
        ]
        total = b.add(x=counts[0], y=counts[1], name=f"{op.name}_count")
        out = b.add_op(compare, {"x": total, "y": np.float16(against)}, rb.name_for(op))
        rb.set(op.outputs[0], out)
        return True

    return rewrite


_LOGIC_RULES: dict[str, ChipRule] = {
    "logical_and": _arithmetic("equal", 2),
    "logical_or": _arithmetic("greater", 0),
    "logical_xor": _arithmetic("equal", 1),
}


def bool_logic(program: Program, chip: Chip) -> Program:
    """Logical and/or/xor of bool tensors as select, add and a comparison."""
    if not has_op_types(program, _LOGIC_RULES):
        return program
    return rebuild(program, by_op_type(_LOGIC_RULES, chip))
