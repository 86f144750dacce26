"""Test oracle: the reference backend's executor as it was before the planned executor.

Kept verbatim (commit 183d32b, ``anekit/backends/reference.py``) so that the planned
executor can be proven bit-identical to it: ``tests/test_reference_executor.py`` runs
both on every op case, the transformer forward and training steps. Not a backend of the
package; tests register it under the name "oracle" where they need it.

The original docstring follows.

The reference backend: runs any verified Program with NumPy, numerically modelling the ANE.

Storage model: each op's output is rounded to its declared dtype (fp16 on the
ANE, so overflow gives inf and NaN propagates); ops compute in fp32. fp16
values are held as float32 arrays that are exactly fp16-representable, so a
consumer never converts them again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.backends.base import Kernel
from anekit.errors import EvaluationError
from anekit.mil.ops.traits import CONST, EXACT
from anekit.mil.program import Operation, Program, Value
from anekit.mil.types import DType

NAME = "oracle"


def available() -> tuple[bool, str]:
    """The reference backend runs everywhere."""
    return True, "NumPy reference backend"


STORAGE_MODES = ("fp16", "fp32")


def compile(program: Program, *, storage: str = "fp16", **options: Any) -> ReferenceKernel:
    """Prepare a program for execution.

    Args:
        storage (str): ``"fp16"`` (default) rounds every fp16 op output to fp16, as the ANE
            stores it; ``"fp32"`` keeps fp16 intermediates in fp32 and rounds only the
            program's outputs (faster, for debugging and comparisons, not ANE-faithful).
    """
    if options:
        raise TypeError(f"reference backend options are: storage; found {sorted(options)}")
    if storage not in STORAGE_MODES:
        raise ValueError(f"storage must be one of {STORAGE_MODES}, found {storage!r}")
    return ReferenceKernel(program, storage=storage)


_FP16_MIN_NORMAL = np.float32(2.0**-14)
_FP16_OVERFLOW = np.float32(65520.0)  # the smallest magnitude that rounds to inf
_HALF = np.float32(0.5)
_BIT_ROUNDING_FROM = (
    4096  # elements; below this NumPy's conversion is faster (benchmarks/runtime.py)
)


def round_to_fp16(r: Any) -> np.ndarray:
    """Round to the nearest fp16 value (ties to even), held in a new float32 array.

    Exactly ``x.astype(float16).astype(float32)``, computed on the float32 bits: twice as
    fast, and free of NumPy's scalar path for fp16 subnormals, which is about 20x slower
    and common in training (small gradients, softmax tails).
    """
    with np.errstate(over="ignore"):  # overflow to inf is the modelled result
        return _round_to_fp16(r)


def _round_to_fp16(r: Any) -> np.ndarray:
    """``round_to_fp16`` for callers that already silence overflow (the executor)."""
    r = np.asarray(r)
    # A float64 result rounds once, straight to fp16; small arrays are dominated by the
    # per-call cost of the dozen NumPy calls below, so they convert directly too.
    if r.dtype != np.float32 or r.size < _BIT_ROUNDING_FROM:
        return r.astype(np.float16).astype(np.float32)
    bits = r.view(np.uint32)
    t = np.right_shift(bits, 13)  # round half to even at the 10th mantissa bit
    t &= 1
    t += 0xFFF
    t += bits
    t &= 0xFFFFE000
    y = t.view(np.float32)
    a = np.abs(r)
    small = a < _FP16_MIN_NORMAL
    if small.any():  # fp16 subnormals are multiples of 2^-24: float32's grid just above 0.5
        y[small] = np.copysign((a[small] + _HALF) - _HALF, r[small])
    special = ~(a < _FP16_OVERFLOW)  # overflow, inf or NaN
    if special.any():
        v = r[special]
        y[special] = np.where(np.isnan(v), v, np.copysign(np.inf, v))
    return y


def _as_fp32(r: Any) -> np.ndarray:
    return np.asarray(r, dtype=np.float32)


def _storage(dtype: DType, storage: str = "fp16") -> Callable[[Any], np.ndarray]:
    """Return the function that rounds a result to ``dtype`` and holds it for compute."""
    if dtype is DType.fp16:
        return _round_to_fp16 if storage == "fp16" else _as_fp32
    if dtype is DType.string:
        return lambda r: r
    target = dtype.numpy
    return lambda r: np.asarray(r).astype(target, copy=False)


def _held(v: Value) -> Any:
    """A constant as an op receives it: fp16 upcast to float32, strings as str."""
    c = v.const
    if isinstance(c, str):
        return c
    arr = np.asarray(c)
    return arr.astype(np.float32) if arr.dtype == np.float16 else arr


def _already_stored(op: Operation) -> bool:
    """Whether an "exact" op only moves values that are already fp16."""
    if EXACT not in op.opdef.traits:
        return False
    return all(not v.dtype.is_float or v.dtype is DType.fp16 for v in op.input_values())


class _Step:
    """One prepared op: its NumPy function, constant arguments and value slots."""

    __slots__ = ("op", "fn", "consts", "runtime", "variadic", "outs", "rounders")

    def __init__(self, op: Operation, slot_of: dict[int, int], storage: str) -> None:
        if op.opdef.reference is None:
            raise EvaluationError(f"op {op.op_type!r} has no reference implementation")
        self.op = op
        self.fn = op.opdef.reference
        self.consts: dict[str, Any] = {}
        self.runtime: list[tuple[str, int]] = []
        self.variadic: list[tuple[str, list[tuple[int, Any]]]] = []
        for name, v in op.arguments():  # given, or the declared default
            if isinstance(v, tuple):
                items = [
                    (slot_of.get(id(x), -1), None if id(x) in slot_of else _held(x)) for x in v
                ]
                if all(s < 0 for s, _ in items):
                    self.consts[name] = tuple(c for _, c in items)
                else:
                    self.variadic.append((name, items))
            elif id(v) in slot_of:
                self.runtime.append((name, slot_of[id(v)]))
            else:
                self.consts[name] = _held(v)
        self.outs: list[int] = []
        if _already_stored(op):
            storage = "fp32"  # copies of fp16 values: rounding them again changes nothing
        self.rounders = [_storage(v.type.dtype, storage) for v in op.outputs]


class ReferenceKernel(Kernel):
    """A Program prepared as a flat list of steps over a slot array."""

    backend = NAME

    def __init__(self, program: Program, storage: str = "fp16") -> None:
        super().__init__(program)
        self.storage = storage
        fn = program.main
        slot_of: dict[int, int] = {}
        self._input_slots = []
        for v in fn.inputs:
            slot_of[id(v)] = len(slot_of)
            store = _as_fp32 if v.type.dtype is DType.fp16 else _storage(v.type.dtype)
            self._input_slots.append((v.name, slot_of[id(v)], store))  # inputs arrive validated
        self._steps: list[_Step] = []
        constants: dict[int, Any] = {}
        for op in fn.ops:
            if CONST in op.opdef.traits:
                continue  # consumers take constants directly (see _held)
            step = _Step(op, slot_of, storage)
            for v in op.outputs:
                slot_of[id(v)] = len(slot_of)
                step.outs.append(slot_of[id(v)])
            self._steps.append(step)
        for v in fn.outputs:
            if id(v) not in slot_of:  # an output that is a constant
                slot_of[id(v)] = len(slot_of)
                constants[slot_of[id(v)]] = _storage(v.type.dtype)(_held(v))
        self._constants = constants
        self._nslots = len(slot_of)
        self._out_slots = [(v.name, slot_of[id(v)], v.type.dtype.numpy) for v in fn.outputs]
        self._in_buffers = {s.name: np.zeros(s.shape, s.dtype.numpy) for s in self.inputs}
        self._out_buffers = {s.name: np.zeros(s.shape, s.dtype.numpy) for s in self.outputs}

    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env = self._execute(inputs)
        result = {}
        for name, slot, dtype in self._out_slots:
            value = env[slot]
            result[name] = value.astype(dtype) if value.dtype != dtype else value.copy()
        return result

    def run(self) -> None:
        self._check_open()
        env = self._execute(self._in_buffers)
        for name, slot, _ in self._out_slots:
            np.copyto(self._out_buffers[name], env[slot], casting="unsafe")

    def input_buffer(self, name: str) -> np.ndarray:
        self.spec(name)
        return self._in_buffers[name]

    def output_buffer(self, name: str) -> np.ndarray:
        self.spec(name, output=True)
        return self._out_buffers[name]

    def _execute(self, inputs: dict[str, np.ndarray]) -> list[Any]:
        env: list[Any] = [None] * self._nslots
        for name, slot, store in self._input_slots:
            env[slot] = store(inputs[name])
        for slot, value in self._constants.items():
            env[slot] = value
        # fp16 overflow to inf and NaN are the modelled behaviour, not errors
        with np.errstate(all="ignore"):
            for step in self._steps:
                kwargs = dict(step.consts)
                for name, slot in step.runtime:
                    kwargs[name] = env[slot]
                for name, items in step.variadic:
                    kwargs[name] = tuple(env[s] if s >= 0 else c for s, c in items)
                try:
                    result = step.fn(**kwargs)
                except Exception as e:  # a failure inside an op: report which op
                    op = step.op
                    where = f" (MIL line {op.line})" if op.line else ""
                    raise EvaluationError(
                        f"op {op.op_type!r} {op.name!r}{where} failed: {e}"
                    ) from e
                if len(step.outs) == 1:
                    env[step.outs[0]] = step.rounders[0](result)
                else:
                    for slot, rounder, r in zip(step.outs, step.rounders, result):
                        env[slot] = rounder(r)
        return env
