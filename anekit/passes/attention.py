"""The expand_attention pass: on a chip whose dialect has no ``scaled_dot_product_attention``
(M1/M2 want ios16; the fused op is ios18), the op becomes what it computes:
``softmax(query @ key^T / sqrt(E) + mask) @ value`` from matmul, mul, add (or select for a bool
mask, where a masked score becomes ``masks.MASKED``, the project's masked-out value) and softmax."""

from __future__ import annotations

import numpy as np

from anekit.hw import Chip
from anekit.hw.rules.base import legacy_chip
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.mil.types import DType
from anekit.passes.base import ChipRule, by_op_type, has_op_types
from anekit.passes.masks import MASKED


def _expand_sdpa(rb: Rebuild, op: Operation, chip: Chip) -> bool:
    b, name = rb.b, op.name
    q, k, v = (rb.get(op.inputs[n]) for n in ("query", "key", "value"))
    mask = op.inputs.get("attn_mask")
    scale = np.asarray(1.0 / np.sqrt(q.shape[-1]), q.dtype.numpy)
    scores = b.matmul(x=q, y=k, transpose_x=False, transpose_y=True, name=f"{name}_scores")
    scores = b.mul(x=scores, y=scale, name=f"{name}_scaled")
    if mask is not None:
        m = rb.get(mask)
        if m.dtype is DType.bool:
            floor = np.asarray(MASKED, q.dtype.numpy)
            scores = b.select(cond=m, a=scores, b=floor, name=f"{name}_masked")
        else:
            scores = b.add(x=scores, y=m, name=f"{name}_masked")
    weights = b.softmax(x=scores, axis=-1, name=f"{name}_weights")
    out = b.matmul(x=weights, y=v, transpose_x=False, transpose_y=False, name=rb.name_for(op))
    rb.set(op.outputs[0], out)
    return True


_ATTENTION_RULES: dict[str, ChipRule] = {"scaled_dot_product_attention": _expand_sdpa}


def expand_attention(program: Program, chip: Chip) -> Program:
    """Fused attention written out for M1/M2 (unchanged for later chips)."""
    if not legacy_chip(chip) or not has_op_types(program, _ATTENTION_RULES):
        return program
    return rebuild(program, by_op_type(_ATTENTION_RULES, chip))
