"""The layers compression works on: constant weights of multiply-accumulate ops.

A layer is one weight: a ``const`` op's float tensor that some conv/matmul/linear reads
as an operand its op declares an output-channel axis for (``OpDef.output_axis``). A
weight read by several ops is one layer (it is stored once). Weights with fewer
elements than ``min_elements`` stay fp16: their bytes do not matter and a table or a
scale per channel would cost more than it saves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from anekit.mil.graph import FunctionGraph
from anekit.mil.ops.traits import CONST, MAC
from anekit.mil.program import Operation, Program, Value

MIN_ELEMENTS = 4096  # weights below this stay fp16 (a 64x64 projection is the smallest compressed)


@dataclass(frozen=True)
class Layer:
    """One compressible weight and the ops that read it.

    Attributes:
        name: the weight's MIL name (the key of the report and of per-layer choices).
        weight: the const op's output holding the weight.
        users: ``(op, parameter)`` for every MAC op reading it.
        axis: the output-channel axis (per-channel scales and palettes run along it).
    """

    name: str
    weight: Value
    users: tuple[tuple[Operation, str], ...]
    axis: int

    @property
    def array(self) -> np.ndarray:
        return np.asarray(self.weight.const)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.weight.type.shape)

    @property
    def channels(self) -> int:
        return self.shape[self.axis]

    @property
    def dense_bytes(self) -> int:
        return self.weight.type.nbytes or 0

    @property
    def ops(self) -> tuple[Operation, ...]:
        return tuple(op for op, _ in self.users)

    def activations(self, graph: FunctionGraph) -> list[tuple[Operation, str, Value]]:
        """``(op, parameter, value)`` of every runtime tensor operand of the layer's ops."""
        found = []
        for op, param in self.users:
            for name, v in op.inputs.items():
                if name == param or isinstance(v, tuple) or graph.is_const(v):
                    continue
                if v.type.dtype.is_float and v.type.shape:
                    found.append((op, name, v))
        return found


def find_layers(program: Program, *, min_elements: int = MIN_ELEMENTS) -> list[Layer]:
    """Every compressible weight of ``main`` with at least ``min_elements`` elements, in order."""
    found: dict[int, tuple[Value, list[tuple[Operation, str]], int]] = {}
    graph = FunctionGraph(program.main)
    for op in program.main.ops:
        if not op.opdef.traits & MAC:
            continue
        args = op.args()
        for param, v in op.inputs.items():
            if isinstance(v, tuple) or graph.is_boundary(v) or not _is_weight(v, min_elements):
                continue  # a weight that is also a program output stays as it is
            axis = op.opdef.weight_axis(args, param)
            if axis is None:
                continue
            # a weight read along two axes is compressed along the first (still the same tensor)
            found.setdefault(id(v), (v, [], axis))[1].append((op, param))
    return [Layer(v.name, v, tuple(users), axis) for v, users, axis in found.values()]


def _is_weight(v: Value, min_elements: int) -> bool:
    """A const op's float tensor of static shape with at least ``min_elements`` elements."""
    producer = v.producer
    if producer is None or CONST not in producer.opdef.traits or v.const is None:
        return False
    t = v.type
    return t.dtype.is_float and t.is_static and t.rank >= 1 and math.prod(t.shape) >= min_elements  # type: ignore[arg-type]
