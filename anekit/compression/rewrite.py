"""Rebuild a program with chosen weights decoded by constexpr ops and W8A8 activations.

Each chosen weight's ``const`` op is replaced, in place, by the constants of its
:class:`~anekit.compression.encode.Encoded` form and the constexpr op that decodes them,
whose result keeps the weight's name and type; every op reading it is rebuilt
(``anekit.mil.rewrite.substitute``), so the program it came from stays as it was. For a
W8A8 layer, each float activation its op reads goes through ``quantize`` to int8 and
``dequantize`` back (one pair per activation, shared by the ops reading it), with the
scale calibration found; the op reads the dequantized value.

Constants of more than ``FOLD_INLINE_ELEMENTS`` elements (as ``fold_constants`` writes
them) go to weight files of their own (one tensor per file, which every chip accepts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from anekit.compression.encode import Encoded
from anekit.compression.layers import Layer
from anekit.mil.graph import FunctionGraph
from anekit.mil.ops import registry
from anekit.mil.ops.traits import ATTRIBUTES
from anekit.mil.program import Function, Operation, Program
from anekit.mil.rewrite import replace_main, substitute
from anekit.mil.types import DType, TensorType
from anekit.mil.values import WEIGHTS_PREFIX, BlobRef, Value
from anekit.mil.verify import check_op
from anekit.passes.fold import FOLD_INLINE_ELEMENTS


@dataclass(frozen=True)
class Choice:
    """What one layer becomes: its encoded weight, and whether its activations go int8."""

    layer: Layer
    encoded: Encoded
    activations: bool = False


def apply(
    program: Program, choices: Mapping[str, Choice], scales: Mapping[str, float] | None = None
) -> Program:
    """``program`` with every chosen weight (by layer name) compressed; see the module docstring.

    ``scales`` maps an activation's name to its int8 step (needed for W8A8 choices).
    """
    if not choices:
        return program
    fn = program.main
    e = _Emitter(fn, dict(scales or {}))
    graph = FunctionGraph(fn)
    int8: dict[int, list[Value]] = {}
    for c in choices.values():
        if c.activations:
            for op, _, v in c.layer.activations(graph):
                int8.setdefault(id(op), []).append(v)
    for op in fn.ops:
        chosen = choices.get(op.outputs[0].name) if len(op.outputs) == 1 else None
        if chosen is not None and chosen.layer.weight is op.outputs[0]:
            e.replace[id(op.outputs[0])] = e.decode(chosen.encoded, op.outputs[0], op.line)
            continue  # find_layers never picks a weight that is also a program output
        local = e.replace
        if id(op) in int8:
            local = {**e.replace, **{id(v): e.int8(v) for v in int8[id(op)]}}
        if any(id(v) in local for v in op.input_values()):
            new = substitute(op, local)
            e.replace.update((id(old), out) for old, out in zip(op.outputs, new.outputs))
            op = new
        e.ops.append(op)
    outputs = tuple(e.replace.get(id(v), v) for v in fn.outputs)
    main = Function(fn.name, fn.inputs, tuple(e.ops), outputs, fn.opset)
    return replace_main(program, main)


class _Emitter:
    """New ops and values for one function: fresh names and weight files, in program order."""

    def __init__(self, fn: Function, scales: dict[str, float]) -> None:
        self.fn = fn
        self.scales = scales
        self.ops: list[Operation] = []
        self.replace: dict[int, Value] = {}
        self._int8: dict[int, Value] = {}
        self.names = {v.name for v in fn.inputs} | {v.name for op in fn.ops for v in op.outputs}
        self.files = {v.blob.path for op in fn.ops for v in op.input_values() if v.blob is not None}

    def decode(self, encoded: Encoded, weight: Value, line: int | None) -> Value:
        """The constexpr op (and its constants) whose result replaces ``weight``."""
        opdef = registry.get(encoded.op_type, self.fn.opset)
        attributes = ATTRIBUTES in opdef.traits
        inputs = {}
        for param, (array, dtype) in encoded.operands.items():
            stem = f"{weight.name}_{param}"
            literal = self._literal(stem, array, dtype)
            inputs[param] = literal if attributes else self._const(stem, literal, line)
        (out_type,) = check_op(opdef, inputs)
        if out_type != weight.type:
            raise AssertionError(
                f"{encoded.op_type} decodes {out_type}, the weight is {weight.type}"
            )
        return self._op(opdef, inputs, weight.name, out_type, line, claim=False)

    def int8(self, v: Value) -> Value:
        """``dequantize(quantize(v))`` with v's calibrated step (made once per activation)."""
        found = self._int8.get(id(v))
        if found is not None:
            return found
        source = self.replace.get(id(v), v)
        dtype = v.type.dtype.numpy
        # quantize needs a non-zero step: the smallest the dtype holds for a silent activation
        step = np.maximum(
            np.asarray(self.scales[v.name], dtype), np.finfo(dtype).smallest_subnormal
        )
        scale = self._const(f"{v.name}_step", Value("", TensorType(v.type.dtype), None, step), None)
        kind = self._const(
            f"{v.name}_int8", Value("", TensorType(DType.string), None, "int8"), None
        )
        line = source.producer.line if source.producer is not None else None
        quantize = registry.get("quantize", self.fn.opset)
        q_in = {"input": source, "scale": scale, "output_dtype": kind}
        q = self._op(quantize, q_in, f"{v.name}_q", check_op(quantize, q_in)[0], line)
        dequantize = registry.get("dequantize", self.fn.opset)
        d_in = {"input": q, "scale": scale}
        d = self._op(dequantize, d_in, f"{v.name}_dq", check_op(dequantize, d_in)[0], line)
        self._int8[id(v)] = d
        return d

    def _literal(self, stem: str, array: np.ndarray, dtype: DType) -> Value:
        blob = None
        if array.size > FOLD_INLINE_ELEMENTS:  # as fold_constants: larger ones go to files
            blob = BlobRef(self._file(stem), 64)
        return Value("", TensorType(dtype, tuple(array.shape)), None, array, blob)

    def _const(self, stem: str, literal: Value, line: int | None) -> Value:
        const = registry.get("const", self.fn.opset)
        value = self._op(const, {"val": literal}, stem, literal.type, line)
        value.const = literal.const
        return value

    def _op(
        self,
        opdef: registry.OpDef,
        inputs: dict[str, Value],
        stem: str,
        out_type: TensorType,
        line: int | None,
        *,
        claim: bool = True,
    ) -> Value:
        name = self._fresh(stem) if claim else stem
        out = Value(name, out_type)
        op = Operation(opdef, inputs, (out,), {"name": name}, line)
        out.producer = op
        self.ops.append(op)
        return out

    def _fresh(self, stem: str) -> str:
        name, i = stem, 1
        while name in self.names:
            name, i = f"{stem}_{i}", i + 1
        self.names.add(name)
        return name

    def _file(self, stem: str) -> str:
        path, i = f"{WEIGHTS_PREFIX}{stem}.bin", 1
        while path in self.files:
            path, i = f"{WEIGHTS_PREFIX}{stem}_{i}.bin", i + 1
        self.files.add(path)
        return path
