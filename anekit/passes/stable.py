"""The stable_forms pass: softplus, logsumexp and mish written in forms that stay inside the
engine's fp16 envelope (ANE_NUMERICS N9, N10, N14; the peer fixes of its section 1b).

- ``softplus(x)`` -> ``softplus(min(x, T)) + relu(x - T)``: the engine's exp saturates near
  2^15, so softplus drops to 0 at x ~ 10.39 on M4 (N9); above T = 10 softplus(x) - x is below
  5e-5, under half an fp16 step at 10 (the Rust ANE builder's form).
- ``reduce_log_sum_exp(x)`` -> ``m + reduce_log_sum_exp(x - m)`` with ``m = reduce_max(x)``:
  the engine applies no max-shift and its sum overflows fp16 (N10: x ~ 7.63 with C = 32);
  shifted, every exp is at most 1 and the sum at most the axis length.
- ``x * tanh(softplus(x))`` (mish, as torch decomposes it) -> ``x * n / (n + 2)`` with
  ``e = exp(min(x, 5))``, ``n = e * (e + 2)``: one exp and no softplus/tanh (N14's fix);
  at x = 5, n / (n + 2) is 1 in fp16 already, and n stays below fp16's range.
"""

from __future__ import annotations

import numpy as np

from anekit.hw import Chip
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.mil.values import Value
from anekit.passes.base import ChipRule, has_op_types

# log(32752) = 10.397 is N9's cliff; below it the engine's softplus is exact enough
SOFTPLUS_LINEAR_FROM = 10.0
# e = exp(5) = 148.4 keeps e * (e + 2) = 22320 inside fp16 while n / (n + 2) rounds to 1
MISH_EXP_LIMIT = 5.0


def _scalar(v: Value, x: float) -> np.ndarray:
    return np.asarray(x, v.dtype.numpy)


def _stable_softplus(rb: Rebuild, op: Operation, chip: Chip | None) -> bool:
    b, name, x = rb.b, op.name, rb.get(op.inputs["x"])
    t = _scalar(x, SOFTPLUS_LINEAR_FROM)
    low = b.softplus(x=b.minimum(x=x, y=t, name=f"{name}_low_x"), name=f"{name}_low")
    high = b.relu(x=b.sub(x=x, y=t, name=f"{name}_over"), name=f"{name}_high")
    rb.set(op.outputs[0], b.add(x=low, y=high, name=rb.name_for(op)))
    return True


def _shifted_logsumexp(rb: Rebuild, op: Operation, chip: Chip | None) -> bool:
    b, name = rb.b, op.name
    x, axes, keep = (rb.get(op.inputs.get(k)) for k in ("x", "axes", "keep_dims"))
    if not x.dtype.is_float:
        return False
    peak = b.reduce_max(x=x, axes=axes, keep_dims=True, name=f"{name}_max")
    shifted = b.sub(x=x, y=peak, name=f"{name}_shifted")
    lse = b.reduce_log_sum_exp(x=shifted, axes=axes, keep_dims=keep, name=f"{name}_lse")
    back = b.reduce_max(x=x, axes=axes, keep_dims=keep, name=f"{name}_max_out")
    rb.set(op.outputs[0], b.add(x=lse, y=back, name=rb.name_for(op)))
    return True


def _only_consumer(rb: Rebuild, v: Value, op_type: str) -> Operation | None:
    users = rb.consumers(v)
    return users[0] if len(users) == 1 and users[0].op_type == op_type else None


def _mish_of(rb: Rebuild, softplus: Operation) -> tuple[Operation, Operation] | None:
    """The (tanh, mul) ops making ``softplus`` part of ``x * tanh(softplus(x))``, if they do."""
    tanh = _only_consumer(rb, softplus.outputs[0], "tanh")
    mul = tanh and _only_consumer(rb, tanh.outputs[0], "mul")
    if tanh is None or mul is None:
        return None
    operands = {id(mul.inputs.get("x")), id(mul.inputs.get("y"))}
    return (tanh, mul) if operands == {id(softplus.inputs["x"]), id(tanh.outputs[0])} else None


def _mish_rule(absorbed: set[int]) -> ChipRule:
    """Rewrites the softplus of a mish into the rational form; its tanh and mul are absorbed."""

    def rewrite(rb: Rebuild, op: Operation, chip: Chip | None) -> bool:
        if id(op) in absorbed:
            return True
        found = _mish_of(rb, op) if op.op_type == "softplus" else None
        if found is None:
            return False
        tanh, mul = found
        absorbed.update((id(tanh), id(mul)))
        b, name, x = rb.b, mul.name, rb.get(op.inputs["x"])
        clipped = b.minimum(x=x, y=_scalar(x, MISH_EXP_LIMIT), name=f"{name}_clip")
        e = b.exp(x=clipped, name=f"{name}_exp")
        e2 = b.add(x=e, y=_scalar(x, 2.0), name=f"{name}_exp2")
        n = b.mul(x=e, y=e2, name=f"{name}_n")
        ratio = b.real_div(
            x=n, y=b.add(x=n, y=_scalar(x, 2.0), name=f"{name}_n2"), name=f"{name}_gate"
        )
        rb.set(mul.outputs[0], b.mul(x=x, y=ratio, name=rb.name_for(mul)))
        return True

    return rewrite


_STABLE_RULES: dict[str, ChipRule] = {
    "softplus": _stable_softplus,
    "reduce_log_sum_exp": _shifted_logsumexp,
}


def stable_forms(program: Program, chip: Chip | None = None) -> Program:
    """Mish, softplus and logsumexp in forms the engine's exp and fp16 sums cannot overflow."""
    if not has_op_types(program, _STABLE_RULES):
        return program
    mish = _mish_rule(set())

    def rule(rb: Rebuild, op: Operation) -> bool:
        if mish(rb, op, chip):
            return True
        rewrite = _STABLE_RULES.get(op.op_type)
        return rewrite is not None and rewrite(rb, op, chip)

    return rebuild(program, rule)
