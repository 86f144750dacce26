"""The engine's op-by-op outputs, for ``anekit diff --b ane``.

The engine cannot be tapped while it runs: a compiled program returns its outputs only.
So, as peers debug by hand (anemll-forge's "tap each stage"; ANE_NUMERICS.md 1b), the
program is compiled again with intermediate values as its outputs: each group of
``per_program`` values (program order) becomes one program holding only the ops those values
need (a prefix of the program), run on the ANE backend with the caller's inputs. Every float
op output with a static shape is tapped. Making a value an output can change how the
compiler fuses around it; what is compared is what the engine computes for that value when
it is an output.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from anekit.mil.ops.traits import COMPILE_TIME
from anekit.mil.program import Function, Program, Value
from anekit.mil.rewrite import replace_main

PER_PROGRAM = 16  # tapped values per compiled program: compiles = ceil(taps / PER_PROGRAM)


def tapped_values(program: Program) -> list[Value]:
    """The values an engine diff compares: float op outputs of static shape, program order."""
    return [
        v
        for op in program.main.ops
        if not op.opdef.traits & COMPILE_TIME
        for v in op.outputs
        if v.type.dtype.is_float and v.type.is_static and v.type.shape
    ]


def groups(values: Sequence[Value], per_program: int) -> list[list[Value]]:
    """Consecutive groups of at most ``per_program`` values."""
    return [list(values[i : i + per_program]) for i in range(0, len(values), per_program)]


def with_outputs(program: Program, outputs: Sequence[Value]) -> Program:
    """``program`` returning ``outputs`` alone: the ops they need, the inputs those read."""
    fn = program.main
    needed = {id(v) for v in outputs}
    kept = []
    for op in reversed(fn.ops):
        if any(id(v) in needed for v in op.outputs):
            kept.append(op)
            needed.update(id(v) for v in op.input_values())
    ops = tuple(reversed(kept))
    inputs = tuple(v for v in fn.inputs if id(v) in needed)
    return replace_main(program, Function(fn.name, inputs, ops, tuple(outputs), fn.opset))


def engine_groups(
    program: Program,
    inputs: dict[str, Any],
    *,
    per_program: int = PER_PROGRAM,
    framework: Any = None,
    **options: Any,
) -> Iterator[dict[str, np.ndarray]]:
    """What the engine computes for each group of tapped values (name -> array), in program
    order: one program per group, compiled, run and closed before the next, so memory holds
    one group's outputs. ``options`` go to :func:`anekit.backends.ane.compile` (``chip``...).
    """
    from anekit.backends import ane

    for group in groups(tapped_values(program), per_program):
        sub = with_outputs(program, group)
        given = {v.name: inputs[v.name] for v in sub.inputs}
        with ane.compile(sub, framework=framework, **options) as kernel:
            outs = kernel(**given)
        yield {v.name: np.asarray(outs[v.name]) for v in group}
