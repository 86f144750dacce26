"""Rebuild a MIL function op by op through a Builder, letting a rule replace any op.

The rewrite passes never mutate a program: :func:`rebuild` replays every live op of
each function into a fresh :class:`~anekit.mil.Builder` (so the result is verified
like any built program), and a *rule* may emit other ops in place of one. Ops whose
results nothing uses are dropped on the way (dead-code elimination for free).

``anekit.mil.passes`` rewires a parsed copy instead; this module exists so the
front-end passes need nothing from that module while it is being rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from anekit import mil
from anekit.mil import DType, Function, Operation, Program, Value
from anekit.mil.ops.traits import CONST

# constants up to this many elements are written inline; larger ones get a weight file
INLINE_LIMIT = 16


class Rebuild:
    """The state of one function's replay: the Builder and old value -> new value."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.b = mil.Builder(opset=fn.opset, function=fn.name)
        self.env: dict[int, Any] = {}
        self.uses = _uses(fn)
        self._outputs = {id(v) for v in fn.outputs}

    def get(self, v: Any) -> Any:
        """The new value of an old one (tuples mapped; inline literals stay as they are)."""
        if isinstance(v, tuple):
            return tuple(self.get(x) for x in v)
        return self.env.get(id(v), v)

    def name_for(self, op: Operation) -> str:
        """A name for an op standing in for ``op`` whose result is not the output itself
        (an output's name is left free for the value finally bound to it)."""
        if any(id(v) in self._outputs for v in op.outputs):
            return f"{op.name}_inner"
        return op.name

    def set(self, old: Value, new: Value) -> None:
        self.env[id(old)] = new

    def copy(self, op: Operation) -> None:
        """Replay ``op`` unchanged (const ops keep their weight file or inline form)."""
        if CONST in op.opdef.traits:
            val = op.inputs["val"]
            arr = val.const
            if isinstance(arr, str):
                new = self.b.const(arr, name=op.name)
            elif val.blob is not None:
                new = self.b.weight(op.name, np.asarray(arr))
            else:
                new = self.b.const(np.asarray(arr), name=op.name)
            self.set(op.outputs[0], new)
            return
        params = {k: self.get(v) for k, v in op.inputs.items()}
        out = self.b.add_op(op.op_type, params, op.name)
        self.set_outputs(op, out)

    def set_outputs(self, op: Operation, out: Any) -> None:
        """Map ``op``'s outputs to ``out`` (one value or a tuple, as the Builder returns)."""
        outs = out if isinstance(out, tuple) else (out,)
        for old, new in zip(op.outputs, outs, strict=True):
            self.set(old, new)

    def const(self, array: np.ndarray, name: str) -> Value:
        """A new constant: inline when small (or bool), else in its own weight file."""
        if array.size <= INLINE_LIMIT or array.dtype == np.bool_:
            return self.b.const(array, name=name)
        return self.b.weight(name, array)

    def consumers(self, v: Value) -> list[Operation]:
        """The ops of the original function that read ``v``."""
        return self.uses.get(id(v), [])


Rule = Callable[[Rebuild, Operation], bool]
InputRule = Callable[[Value], tuple[tuple[Any, ...], DType]]


def rebuild(
    program: Program,
    rule: Rule | None = None,
    *,
    input_type: InputRule | None = None,
    finish: Callable[[Rebuild], None] | None = None,
) -> Program:
    """Replay every function of ``program``; ``rule(rb, op)`` returns True when it replaced op.

    ``input_type(v)`` may give an input a new (shape, dtype); ``finish(rb)`` runs
    before the outputs are bound (to turn values back into their original form).
    """
    functions = {}
    for name, fn in program.functions.items():
        rb = Rebuild(fn)
        for v in fn.inputs:
            shape, dtype = input_type(v) if input_type else (v.shape, v.dtype)
            rb.set(v, rb.b.input(v.name, shape, dtype))
        for op in _live(fn):
            if rule is None or not rule(rb, op):
                rb.copy(op)
        if finish is not None:
            finish(rb)
        _bind_outputs(rb)
        functions[name] = rb.b.build().functions[name]
    return Program(functions, version=program.version, build_info=program.build_info)


def _bind_outputs(rb: Rebuild) -> None:
    seen: set[int] = set()
    for old in rb.fn.outputs:
        new = rb.get(old)
        if id(new) in seen or new.producer is None:  # an input, or an output given twice
            new = rb.b.identity(x=new, name=f"{old.name}_copy")
        seen.add(id(new))
        rb.b.output(new, old.name)


def _uses(fn: Function) -> dict[int, list[Operation]]:
    uses: dict[int, list[Operation]] = {}
    for op in fn.ops:
        for v in op.input_values():
            uses.setdefault(id(v), []).append(op)
    return uses


def _live(fn: Function) -> list[Operation]:
    """The ops some output depends on, in program order."""
    needed = {id(v) for v in fn.outputs}
    live = []
    for op in reversed(fn.ops):
        if any(id(v) in needed for v in op.outputs):
            live.append(op)
            needed.update(id(v) for v in op.input_values())
    return live[::-1]
