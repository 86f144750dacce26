"""The readable definition of the reference backend: one op at a time, as the registry says.

Each op runs its registry ``reference`` on its arguments (constants as the registry's
:func:`~anekit.mil.ops.registry.received` gives them) and every result is stored in its
declared dtype: fp16 rounded to nearest even (IEEE, the ``"ideal"`` numerics profile),
unless the op only moves values that are fp16 already (``exact``). Nothing is planned,
shared or done in place. The planned executor (``planner.py``, ``forms.py``) is the fast
form of this definition and must give the same bits: ``tests/test_reference_executor.py``
compares the two on every op case, a transformer forward and three training steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from anekit import fp16
from anekit.errors import EvaluationError
from anekit.mil.ops.registry import received
from anekit.mil.ops.traits import CONST, EXACT
from anekit.mil.program import Operation, Program
from anekit.mil.types import DType

STORAGE_MODES = ("fp16", "fp32")


def interpret(program: Program, inputs: dict[str, Any], storage: str = "fp16") -> dict[str, Any]:
    """Evaluate ``program`` on ``inputs`` (validated arrays); its outputs by name.

    ``storage="fp32"`` keeps fp16 intermediates in fp32 and rounds only the outputs.
    """
    if storage not in STORAGE_MODES:
        raise ValueError(f"storage must be one of {STORAGE_MODES}, found {storage!r}")
    fn = program.main
    env: dict[int, Any] = {}
    for v in fn.inputs:
        env[id(v)] = _stored(v.type.dtype, "fp32" if v.type.dtype is DType.fp16 else "fp16")(
            inputs[v.name]
        )
    with np.errstate(all="ignore"):  # fp16 overflow to inf and NaN are results, not errors
        for op in fn.ops:
            if CONST not in op.opdef.traits:
                _run(op, env, storage)
    return {v.name: _output(v, env) for v in fn.outputs}


def _run(op: Operation, env: dict[int, Any], storage: str) -> None:
    """Run one op's reference on the environment and store its outputs."""
    if op.opdef.reference is None:
        raise EvaluationError(f"op {op.op_type!r} has no reference implementation")
    kwargs = {name: _argument(v, env) for name, v in op.arguments()}
    try:
        result = op.opdef.reference(**kwargs)
    except Exception as e:  # a failure inside an op: report which op
        where = f" (MIL line {op.line})" if op.line else ""
        raise EvaluationError(f"op {op.op_type!r} {op.name!r}{where} failed: {e}") from e
    if _already_stored(op):
        storage = "fp32"  # copies of fp16 values: rounding them again changes nothing
    results = (result,) if len(op.outputs) == 1 else result
    for v, r in zip(op.outputs, results):
        env[id(v)] = _stored(v.type.dtype, storage)(r)


def _argument(v: Any, env: dict[int, Any]) -> Any:
    if isinstance(v, tuple):
        return tuple(_argument(x, env) for x in v)
    return env[id(v)] if id(v) in env else received(v.const)


def _output(v: Any, env: dict[int, Any]) -> Any:
    value = env[id(v)] if id(v) in env else _stored(v.type.dtype)(received(v.const))
    dtype = v.type.dtype.numpy
    return value.astype(dtype) if value.dtype != dtype else value.copy()


def _already_stored(op: Operation) -> bool:
    """Whether an "exact" op only moves values that are already fp16."""
    if EXACT not in op.opdef.traits:
        return False
    return all(not v.dtype.is_float or v.dtype is DType.fp16 for v in op.input_values())


def _stored(dtype: DType, storage: str = "fp16") -> Callable[[Any], Any]:
    """How a result of ``dtype`` is held: fp16 rounded (or kept in fp32), others cast."""
    if dtype is DType.fp16:
        if storage == "fp16":
            return fp16.round_fp16
        return lambda r: np.asarray(r, dtype=np.float32)
    if dtype is DType.string:
        return lambda r: r
    return lambda r: np.asarray(r).astype(dtype.numpy, copy=False)
