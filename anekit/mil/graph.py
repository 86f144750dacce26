"""What each value of a function is: on the program boundary, a compile-time constant, or neither.

The checker (``anekit.hw.rules``) and the cost model (``anekit.hw.cost``) both split a
function's values into program inputs and outputs, constants known at compile time
(weights) and the runtime tensors in between; this is the one definition they share.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from anekit.mil.ops.registry import Encoding
from anekit.mil.ops.traits import COMPILE_TIME, CONSTEXPR
from anekit.mil.values import Value

if TYPE_CHECKING:
    from anekit.mil.program import Function, Operation


def stored_form(v: Value) -> tuple[Encoding, int] | None:
    """How a constexpr op's result is stored: its encoding and stored bytes; None otherwise.

    The stored bytes are those of the op's constant operands as the weight file holds
    them (sub-byte elements packed), tables and scales included.
    """
    producer = v.producer
    if producer is None or CONSTEXPR not in producer.opdef.traits:
        return None
    if producer.opdef.encoding is None:
        return None
    stored = sum(
        x.type.nbytes or 0 for x in producer.input_values() if x.type.shape and x.type.is_static
    )
    return producer.opdef.encoding(producer.args()), stored


class FunctionGraph:
    """A function with its boundary and its consumers indexed (values are compared by identity)."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self._inputs = {id(v) for v in fn.inputs}
        self._boundary = self._inputs | {id(v) for v in fn.outputs}
        self._consumers: dict[int, list[Operation]] = {}
        for op in fn.ops:
            for v in op.input_values():
                self._consumers.setdefault(id(v), []).append(op)

    def is_boundary(self, v: Value) -> bool:
        """The value is a program input or output (it crosses to the host)."""
        return id(v) in self._boundary

    def is_const(self, v: Value) -> bool:
        """The value is known at compile time: an inline literal, or made by a const/constexpr op."""
        if id(v) in self._inputs:
            return False
        return v.producer is None or bool(v.producer.opdef.traits & COMPILE_TIME)

    def at_boundary(self, op: Operation) -> bool:
        """Some input or output of the op is a program input or output."""
        return any(self.is_boundary(v) for v in (*op.input_values(), *op.outputs))

    def consumers(self, v: Value) -> list[Operation]:
        """The ops that read the value, in program order (an op reading it twice is listed twice)."""
        return self._consumers.get(id(v), [])

    def runtime_ops(self) -> Iterator[Operation]:
        """The ops that run when the program is evaluated (constants and constexpr ops excluded)."""
        return (op for op in self.fn.ops if not op.opdef.traits & COMPILE_TIME)
