"""The fp16 pass: fp32 inputs, constants and casts become fp16, and nothing is lost silently."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from anekit.errors import ConversionError, MilTypeError
from anekit.hw import Chip
from anekit.mil.ops.traits import CAST, CONST
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.mil.types import DType
from anekit.mil.values import Value

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
FP16_OVERFLOW = 65520.0  # the smallest magnitude that rounds to inf
FP16_FLUSH = 2.0**-25  # the largest magnitude that rounds to zero
# a value that flushes to zero matters when it is above fp16's rounding step of the
# tensor's largest value (2^-11 relative): below that, fp16 could not have held it anyway
SIGNIFICANT = 2.0**-11


def fp16_problem(arr: np.ndarray) -> str | None:
    """Why ``arr`` cannot become fp16 without loss, or None (see SIGNIFICANT).

    Checked on magnitudes, without converting: ``|x| >= 65520`` rounds to inf, and
    ``0 < |x| <= 2^-25`` rounds to zero (ties to even).
    """
    if arr.size == 0:
        return None
    a = np.abs(arr)
    top = float(a.max())
    if not np.isfinite(top):  # inf or NaN present: they stay as they are; judge the rest
        a = a[np.isfinite(a)]
        top = float(a.max()) if a.size else 0.0
    if top >= FP16_OVERFLOW:
        return f"|value| {top:g} overflows fp16 (largest finite {FP16_MAX:g})"
    if np.count_nonzero((a > 0) & (a <= FP16_FLUSH)):
        lost = float(a[a <= FP16_FLUSH].max())
        if lost > top * SIGNIFICANT:
            return f"value {lost:g} flushes to zero in fp16 (smallest 5.96e-08)"
    return None


class _Fp16:
    """The fp16 pass's rule, remembering the constants that must stay fp32."""

    def __init__(self) -> None:
        self.problems: dict[int, tuple[str, str]] = {}  # new value id -> (const name, problem)
        self.originals: dict[int, np.ndarray] = {}  # new value id -> fp32 array

    def __call__(self, rb: Rebuild, op: Operation) -> bool:
        if CONST in op.opdef.traits:
            return self._const(rb, op)
        params = {k: rb.get(v) for k, v in op.inputs.items()}
        if CAST in op.opdef.traits and params["x"].dtype is DType.fp16:
            target = params["dtype"].const
            if target == "fp16":  # a cast that became fp16 -> fp16
                rb.set(op.outputs[0], params["x"])
                return True
        try:
            rb.set_outputs(op, rb.b.add_op(op.op_type, params, op.name))
        except MilTypeError as e:
            rb.set_outputs(op, self._keep_fp32(rb, op, params, e))
        return True

    def _const(self, rb: Rebuild, op: Operation) -> bool:
        old = op.outputs[0]
        if isinstance(old.const, str):
            if old.const == "fp32":  # a dtype argument (cast): every fp32 type becomes fp16
                rb.set(old, rb.b.const("fp16", name=op.name))
                return True
            return False
        if old.dtype is not DType.fp32:
            return False
        arr = np.asarray(old.const)
        problem = fp16_problem(arr)
        new = _same_storage(rb, op, arr if problem else arr.astype(np.float16))
        rb.set(old, new)
        self.originals[id(new)] = arr
        if problem:
            self.problems[id(new)] = (op.name, problem)
        return True

    def _keep_fp32(self, rb: Rebuild, op: Operation, params: dict, error: MilTypeError):
        """Retry with the op's constants in fp32 (iOS17 norms let gamma/beta/epsilon be fp32)."""
        widened = {k: self._fp32(rb, v) for k, v in params.items()}
        try:
            return rb.b.add_op(op.op_type, widened, op.name)
        except MilTypeError:
            pass
        for v in _flat(params.values()):
            if id(v) in self.problems:
                name, problem = self.problems[id(v)]
                raise ConversionError(
                    f"constant {name!r} (read by {op.op_type} {op.name!r}) cannot be fp16: "
                    f"{problem}; and {op.op_type} needs it in x's dtype. Rescale it, or "
                    "convert with passes=() to keep fp32"
                ) from error
        raise error

    def _fp32(self, rb: Rebuild, v: object) -> object:
        if isinstance(v, tuple):
            return tuple(self._fp32(rb, x) for x in v)
        original = self.originals.get(id(v)) if isinstance(v, Value) else None
        if original is None or v.dtype is DType.fp32:
            return v
        wide = rb.b.const(original, name=f"{v.name}_fp32")
        self.originals[id(wide)] = original
        return wide


def _same_storage(rb: Rebuild, op: Operation, arr: np.ndarray) -> Value:
    """A const for ``arr`` stored as ``op``'s was (weight file or inline)."""
    if op.inputs["val"].blob is not None:
        return rb.b.weight(op.name, arr)
    return rb.b.const(arr, name=op.name)


def _flat(values: Iterable[object]) -> Iterable[object]:
    for v in values:
        yield from v if isinstance(v, tuple) else (v,)


def fp16(program: Program, chip: Chip) -> Program:
    """Make every fp32 input, constant and cast fp16 (the ANE computes in fp16)."""

    def input_type(v: Value) -> tuple[tuple, DType]:
        return v.shape, (DType.fp16 if v.dtype is DType.fp32 else v.dtype)

    return rebuild(program, _Fp16(), input_type=input_type)
