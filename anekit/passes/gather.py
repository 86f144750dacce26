"""The gather_to_matmul pass: row lookups in a constant table become one-hot matmuls.

The one-op sweep found gather does not compile on the ANE.
"""

from __future__ import annotations

import numpy as np

from anekit.hw import Chip
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.passes.base import ChipRule, by_op_type


def _gather_rows(rb: Rebuild, op: Operation, chip: Chip) -> bool:
    """gather(table, ids, axis=0) -> sum over vocabulary chunks of one_hot(ids) @ table."""
    table, ids = op.inputs["x"], op.inputs["indices"]
    if table.const is None or ids.const is not None or table.rank != 2:
        return False
    if int(np.asarray(op.inputs["axis"].const)) != 0:
        return False
    b, arr = rb.b, np.asarray(table.const)
    rows = table.shape[0]
    column = b.reshape(x=rb.get(ids), shape=[*ids.shape, 1], name=f"{op.name}_ids")
    step = min(chip.max_input_channels, chip.max_dim_spatial)
    total = None
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        tag = f"{op.name}_{start}"
        ids_here = np.arange(start, stop, dtype=np.int32)
        hit = b.equal(x=column, y=rb.const(ids_here, f"{tag}_range"), name=f"{tag}_hit")
        one, zero = np.ones((), arr.dtype), np.zeros((), arr.dtype)
        onehot = b.select(cond=hit, a=one, b=zero, name=f"{tag}_onehot")
        part = b.matmul(x=onehot, y=rb.const(arr[start:stop], f"{tag}_rows"), name=f"{tag}_mm")
        total = part if total is None else b.add(x=total, y=part, name=f"{tag}_sum")
    rb.set(op.outputs[0], total)
    return True


_GATHER_RULES: dict[str, ChipRule] = {"gather": _gather_rows}  # gather(table, ids) -> one-hot @


def gather_to_matmul(program: Program, chip: Chip) -> Program:
    """Row lookups in a constant table become one-hot matmuls, in vocabulary chunks the chip
    accepts as conv input channels (a one-hot row has one 1, so the product is exact)."""
    return rebuild(program, by_op_type(_GATHER_RULES, chip))
