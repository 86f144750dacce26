"""Shape, dtype and cost helpers shared by op declarations, and the one FLOP-counting convention.

Cost convention: an op's FLOPs are a counting rule, not a measurement. Count, per element
of the formula in the op's docstring:

- ``ARITH`` (1) for each add, subtract, multiply, divide, compare, min/max, abs, select or
  rounding step; a sign change folds into its neighbour and is free;
- ``TRANSCENDENTAL`` (4) for each exp, log, sqrt, power, tanh, erf or trigonometric
  function, which the ANE evaluates in a few multiply-add passes;
- a multiply-accumulate op: 2 per output element per step of its contraction (``mac_cost``);
- ``where(c, a, b)``: the comparison that makes ``c`` and the select (2);
- work done once per reduced row (a norm's ``1 / sqrt(var)``, a mean's division) is not
  counted: it scales with the rows, not the elements.

``SOFTMAX`` is that count for one element of a softmax: max, subtract, exp, sum, divide.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.ops.registry import Args, Cost, CostFn, elementwise_cost
from anekit.mil.types import ALL, FLOATS, INTS, NUMERIC, DType, TensorType

ARITH = 1.0
TRANSCENDENTAL = 4.0
SOFTMAX = 4 * ARITH + TRANSCENDENTAL

FP = FLOATS
INT = INTS
NUM = NUMERIC
ANY = ALL
INT32 = frozenset({DType.int32})
BOOL = frozenset({DType.bool})
STRING = frozenset({DType.string})
INDEX = frozenset({DType.int32, DType.int16, DType.uint16, DType.int8, DType.uint8})


def broadcast(op: str, a: TensorType, b: TensorType, names: tuple[str, str] = ("x", "y")) -> tuple:
    """NumPy broadcasting of two shapes; symbolic dims broadcast only with 1 or themselves."""
    ra, rb = len(a.shape), len(b.shape)
    out: list[Any] = []
    for i in range(max(ra, rb)):
        da = a.shape[ra - 1 - i] if i < ra else 1
        db = b.shape[rb - 1 - i] if i < rb else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise MilTypeError(
                f"shapes {list(a.shape)} ({names[0]}) and {list(b.shape)} ({names[1]}) "
                "do not broadcast",
                op=op,
            )
    return tuple(reversed(out))


def axis_index(op: str, param: str, axis: int, rank: int) -> int:
    """Normalise a possibly negative axis; MilTypeError if out of range."""
    if not -rank <= axis < max(rank, 1):
        raise MilTypeError(f"axis {axis} out of range for rank {rank}", op=op, param=param)
    return axis % rank if rank else 0


def axes_indices(op: str, param: str, axes: Any, rank: int) -> list[int]:
    """Normalise a list of axes; rejects duplicates."""
    result = [axis_index(op, param, int(a), rank) for a in np.atleast_1d(np.asarray(axes)).ravel()]
    if len(set(result)) != len(result):
        raise MilTypeError(f"axes {list(result)} repeat an axis", op=op, param=param)
    return result


def require(cond: bool, op: str, param: str | None, message: str | Callable[[], str]) -> None:
    """Raise MilTypeError(message) unless ``cond`` holds.

    Pass a formatted message as a lambda: inference runs for every op of every
    program parsed or built, and most messages are never shown.
    """
    if not cond:
        raise MilTypeError(message() if callable(message) else message, op=op, param=param)


def numel(shape: tuple) -> int:
    """Element count of a static shape (0 for symbolic, which costs nothing we can know)."""
    n = 1
    for d in shape:
        if not isinstance(d, int):
            return 0
        n *= d
    return n


def declared(a: Args, name: str, fallback: Any) -> Any:
    """A parameter's value if this version of the op declares it, else what older versions mean."""
    return a.const(name) if name in a.opdef.by_name else fallback


def flops_cost(flops: Callable[[Args, tuple[TensorType, ...]], float]) -> CostFn:
    """A cost rule from a FLOP count; bytes are every input (weights included) plus the outputs."""

    def cost(a: Args, outs: tuple[TensorType, ...]) -> Cost:
        return Cost(float(flops(a, outs)), a.input_bytes(), sum(t.nbytes or 0 for t in outs))

    return cost


def mac_cost(a: Args, outs: tuple[TensorType, ...]) -> Cost:
    """A multiply-accumulate op: 2 operations per output element per step of its contraction."""
    k = a.opdef.inner_dim(a) or 0  # a symbolic contraction costs nothing we can know
    written = sum(t.nbytes or 0 for t in outs)
    return Cost(2.0 * (outs[0].numel or 0) * k, a.input_bytes(), written)


def per_output_element(flops: float) -> CostFn:
    """Cost of ``flops`` operations per output element; every input read once."""
    return lambda a, outs: elementwise_cost(a, outs, flops)
