"""The split_wide pass: convs over the chip's channel limits are split and re-joined."""

from __future__ import annotations

import numpy as np

from anekit.hw import Chip
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.passes.base import ChipRule, by_op_type


def _split_conv(rb: Rebuild, op: Operation, chip: Chip) -> bool:
    weight = op.inputs["weight"]
    groups = op.inputs.get("groups")
    if weight.const is None or (groups is not None and int(np.asarray(groups.const)) != 1):
        return False
    w = np.asarray(weight.const)
    out_ch, in_ch = w.shape[:2]
    if out_ch <= chip.max_dim_channel and in_ch <= chip.max_input_channels:
        return False
    params = {k: rb.get(v) for k, v in op.inputs.items() if k not in ("weight", "bias", "x")}
    x, bias = rb.get(op.inputs["x"]), op.inputs.get("bias")
    b = rb.b
    columns = []
    for o0 in range(0, out_ch, chip.max_dim_channel):
        o1 = min(o0 + chip.max_dim_channel, out_ch)
        total = None
        for i0 in range(0, in_ch, chip.max_input_channels):
            i1 = min(i0 + chip.max_input_channels, in_ch)
            tag = f"{op.name}_o{o0}_i{i0}"
            part_x = x
            if (i0, i1) != (0, in_ch):
                begin = [0] * x.rank
                begin[1] = i0
                size = list(x.shape)
                size[1] = i1 - i0
                part_x = b.slice_by_size(x=x, begin=begin, size=size, name=f"{tag}_x")
            part_b = None
            if bias is not None and i0 == 0:
                part_b = rb.const(np.asarray(bias.const)[o0:o1], f"{tag}_b")
            part = b.conv(
                x=part_x, weight=rb.const(w[o0:o1, i0:i1], f"{tag}_w"), bias=part_b,
                name=tag, **params,
            )  # fmt: skip
            total = part if total is None else b.add(x=total, y=part, name=f"{tag}_sum")
        columns.append(total)
    joined = columns[0] if len(columns) == 1 else None
    if joined is None:
        joined = b.concat(values=columns, axis=1, interleave=False, name=f"{op.name}_join")
    rb.set(op.outputs[0], joined)
    return True


_SPLIT_RULES: dict[str, ChipRule] = {"conv": _split_conv}  # conv over limits -> parts, re-joined


def split_wide(program: Program, chip: Chip) -> Program:
    """Convs over the chip's channel limits: output channels split and concatenated, input
    channels split and the partial results added."""
    return rebuild(program, by_op_type(_SPLIT_RULES, chip))
