"""I/O ordering for the device pipeline: inputs by ascending, outputs by descending size."""

from __future__ import annotations

import dataclasses

from anekit.mil.program import Program
from anekit.mil.rewrite import replace_main


def order_by_size(program: Program) -> Program:
    """``main`` with inputs in ascending and outputs in descending byte size (ties keep their order).

    One report finds multi-input ANE requests give silent zeros unless input
    surfaces ascend in size and outputs descend (ANE_NOTES section 2.4); equal
    sizes cannot be made strictly ascending and stay in program order.
    """
    fn = program.main
    inputs = tuple(sorted(fn.inputs, key=lambda v: v.type.nbytes or 0))
    outputs = tuple(sorted(fn.outputs, key=lambda v: -(v.type.nbytes or 0)))
    if inputs == fn.inputs and outputs == fn.outputs:
        return program
    return replace_main(program, dataclasses.replace(fn, inputs=inputs, outputs=outputs))
