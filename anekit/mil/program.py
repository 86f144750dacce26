"""The MIL IR: values, operations, functions and programs (SSA, immutable once built)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import MilTypeError, UsageError
from anekit.mil.ops import registry
from anekit.mil.ops.registry import Args, OpDef
from anekit.mil.saving import save_model
from anekit.mil.text import print_program
from anekit.mil.values import WEIGHTS_PREFIX, BlobRef, Value
from anekit.mil.weights import Placeholder, layout, stored_values, weight_files

__all__ = ["WEIGHTS_PREFIX", "BlobRef", "Function", "Operation", "Program", "Value"]


class Operation:
    """One op application: registry op, named inputs, output values, attributes, source line."""

    __slots__ = ("opdef", "inputs", "outputs", "attrs", "line")

    def __init__(
        self,
        opdef: OpDef,
        inputs: dict[str, Value | tuple[Value, ...]],
        outputs: tuple[Value, ...],
        attrs: dict[str, Any] | None = None,
        line: int | None = None,
    ) -> None:
        self.opdef = opdef
        self.inputs = inputs
        self.outputs = outputs
        self.attrs = attrs if attrs is not None else {}
        self.line = line

    @property
    def op_type(self) -> str:
        return self.opdef.name

    @property
    def name(self) -> str:
        return self.attrs.get("name") or self.outputs[0].name

    def args(self) -> Args:
        """This op's arguments, with defaults, as ``infer`` and ``cost`` see them."""
        return Args(self.opdef, self.inputs)

    def cost(self) -> registry.Cost:
        """This op's FLOPs and bytes moved."""
        return self.opdef.op_cost(self.args(), tuple(v.type for v in self.outputs))

    def arguments(self) -> Iterator[tuple[str, Value | tuple[Value, ...]]]:
        """Every parameter that has a value, given or by its declared default, in declared order."""
        args = self.args()
        for p in self.opdef.params:
            v = self.inputs.get(p.name)
            if v is None:
                v = getattr(args, p.name)  # the declared default, or None
            if v is not None:
                yield p.name, v

    def input_values(self) -> Iterator[Value]:
        """Every input value, variadic tuples flattened."""
        for v in self.inputs.values():
            yield from v if isinstance(v, tuple) else (v,)

    def __repr__(self) -> str:
        return f"Operation({self.op_type!r}, {[v.name for v in self.outputs]})"


@dataclass(frozen=True)
class Function:
    """A MIL function: typed inputs, ops in SSA order, named outputs."""

    name: str
    inputs: tuple[Value, ...]
    ops: tuple[Operation, ...]
    outputs: tuple[Value, ...]
    opset: str = "ios18"


DEFAULT_BUILD_INFO: dict[str, str] = {
    "coremlc-component-MIL": "3510.2.1",
    "coremlc-version": "3505.4.1",
    "coremltools-component-milinternal": "",
    "coremltools-version": "9.0",
}


class Program:
    """A verified MIL program: one or more functions (``main`` is the entry point)."""

    def __init__(
        self,
        functions: dict[str, Function],
        *,
        version: str = "1.3",
        build_info: dict[str, Any] | None = None,
    ) -> None:
        self.functions = dict(functions)
        self.version = version
        self.build_info = dict(DEFAULT_BUILD_INFO if build_info is None else build_info)
        # the passes a pipeline ran on this program (anekit.passes), so none runs twice on a path
        self.passes_run: frozenset[str] = frozenset()

    @property
    def main(self) -> Function:
        try:
            return self.functions["main"]
        except KeyError:
            raise MilTypeError(
                f"program has no function 'main' (functions: {sorted(self.functions)})"
            ) from None

    @property
    def ops(self) -> tuple[Operation, ...]:
        return self.main.ops

    @property
    def inputs(self) -> tuple[Value, ...]:
        return self.main.inputs

    @property
    def outputs(self) -> tuple[Value, ...]:
        return self.main.outputs

    def to_text(self, dialect: str = "ios18") -> str:
        """Print the program as MIL text (``dialect="legacy"``: program(1.0), ios16)."""
        return print_program(self, dialect=dialect)

    @property
    def weightless(self) -> tuple[str, ...]:
        """Names of the constants that hold zeros in place of weights never read; () if none.

        A program parsed with ``shapes_only=True`` (``anekit fmt``, ``check``, ``estimate``
        read no weight file) has them: printing, checking and estimating need shapes only,
        but running or saving it would use the zeros, so ``compile`` and ``save`` refuse it.
        """
        names = {
            op.outputs[0].name: None  # an op holding a placeholder (or reading one inline)
            for fn in self.functions.values()
            for op in fn.ops
            if op.outputs
            and any(
                isinstance(v.const, Placeholder)
                for v in (*op.outputs, *(x for x in op.input_values() if x.producer is None))
            )
        }
        return tuple(names)

    def require_weights(self, action: str) -> None:
        """UsageError if the program holds placeholders instead of weights (see ``weightless``)."""
        missing = sorted(set(self.weightless))
        if missing:
            shown = ", ".join(repr(n) for n in missing[:3]) + (", ..." if len(missing) > 3 else "")
            raise UsageError(
                f"cannot {action} a program loaded without its weights: {len(missing)} "
                f"constants ({shown}) are zero placeholders (shapes_only=True); it can be "
                "printed, checked and estimated; load it with its weight files to run or save it"
            )

    def weight_files(self) -> dict[str, bytes]:
        """Return every weight file: ``"@model_path/weights/x.bin"`` -> MILBlob bytes.

        UsageError for a program whose weights were never read (``weightless``).
        """
        self.require_weights("serialise the weights of")
        return weight_files(self)

    def save(self, directory: str | os.PathLike[str], dialect: str = "ios18") -> Path:
        """Write ``model.mil`` and ``weights/*.bin`` into ``directory`` (created if needed), all or nothing.

        A kill at any point leaves the directory holding the old model or the new one, never
        a mix (see :mod:`anekit.mil.saving`); other files in it are kept.
        """
        # Everything that can fail on the program runs before the first write, so a
        # rejected save leaves an existing model directory as it was.
        self.require_weights("save")
        text = self.to_text(dialect).encode("utf-8")
        return save_model(directory, text, self.weight_files())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Program):
            return NotImplemented
        return self.to_text() == other.to_text() and _same_weights(self, other)

    def __hash__(self) -> int:
        return hash(self.to_text())

    def __str__(self) -> str:
        return self.to_text()


def _same_weights(a: Program, b: Program) -> bool:
    """Compare the weight arrays at each weight file place, without serialising them."""
    mine, theirs = _weights_by_place(a), _weights_by_place(b)
    return mine.keys() == theirs.keys() and all(_same_bits(mine[k], theirs[k]) for k in mine)


def _weights_by_place(program: Program) -> dict[tuple[str, int], np.ndarray]:
    """(weight file, record offset) -> the array stored there, in the layout the printer writes."""
    places = layout(program)
    return {places[id(v)]: v.const for v in stored_values(program)}


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Same dtype, shape and bytes (so NaN equals itself and -0.0 differs from 0.0, as on disk)."""
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    return bool(
        np.array_equal(
            np.ascontiguousarray(x).view(np.uint8), np.ascontiguousarray(y).view(np.uint8)
        )
    )
