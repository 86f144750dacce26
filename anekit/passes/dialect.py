"""The legacy_dialect pass: for a chip of the legacy generations (M1, M2), whose compiler
reportedly wants program(1.0) with ios16 ops, every function is rebuilt against the ios16
op definitions; the program then saves as ``dialect="legacy"``. A program with an op that
has no ios16 form (or an ios17+ argument, such as an fp32 norm gamma beside fp16 data) stays
as it is, and the checker's ``legacy-dialect`` warning names the ops in the way.

ios16 ops take one dtype for data and parameters, while the fp16 pass keeps some parameters
fp32 where iOS17 allows it (norm gammas, betas and epsilons: BERT's ``eps=1e-12``). Here such
a constant becomes fp16, its tiny positive values raised to the smallest fp16 subnormal
(6e-8) so that an epsilon never becomes 0."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from anekit.errors import MilTypeError
from anekit.fp16 import FP16_MAX
from anekit.hw import Chip
from anekit.hw.rules.base import in_dialect, legacy_chip, within_dialect
from anekit.mil.program import Operation, Program, Value
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.mil.types import DType

_TINY = np.float16(2.0**-24)  # the smallest positive fp16


def legacy_dialect(program: Program, chip: Chip) -> Program:
    """The program on ios16 op definitions for M1/M2 (unchanged for other chips, or when an
    op cannot be expressed there)."""
    functions = program.functions.values()
    if not legacy_chip(chip) or all(within_dialect(f.opset, chip) for f in functions):
        return program
    retargeted = Program(
        {name: replace(fn, opset="ios16") for name, fn in program.functions.items()},
        version=program.version,
        build_info=program.build_info,
    )
    try:
        return rebuild(retargeted, _fp16_parameters)
    except MilTypeError:  # an op with no ios16 form: the checker's warning names it
        return program


def _fp16_parameters(rb: Rebuild, op: Operation) -> bool:
    """An op reading fp16 data and fp32 constants: the constants become fp16 (ios16 wants one T)."""
    values = [v for v in op.inputs.values() if isinstance(v, Value)]
    wide = {
        k: v
        for k, v in op.inputs.items()
        if isinstance(v, Value) and v.dtype is DType.fp32 and rb.graph.is_const(v)
    }
    if not wide or not any(v.dtype is DType.fp16 and not rb.graph.is_const(v) for v in values):
        return False
    params = {k: rb.get(v) for k, v in op.inputs.items()}
    for k, v in wide.items():
        arr = np.asarray(v.const, np.float32)
        if not np.isfinite(arr).all() or np.abs(arr).max(initial=0) > FP16_MAX:
            return False  # not representable: the op is left for the checker to name
        narrow = arr.astype(np.float16)
        narrow[(arr > 0) & (narrow == 0)] = _TINY
        params[k] = rb.const(narrow, f"{op.name}_{k}_fp16")
    rb.set_outputs(op, rb.b.add_op(op.op_type, params, op.name))
    return True


def save_dialect(program: Program) -> str:
    """The text dialect a program saves in: legacy program(1.0) for ios15/ios16 functions."""
    legacy = all(in_dialect(f.opset, "legacy") for f in program.functions.values())
    return "legacy" if legacy else "ios18"
