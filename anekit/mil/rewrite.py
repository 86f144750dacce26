"""The one MIL -> MIL rewrite engine: every pass in ``anekit.passes`` is built on it.

A rewrite never mutates the program it is given. Two ways to make the new one share
this module's helpers:

- :func:`rebuild` replays every live op of each function into a fresh
  :class:`~anekit.mil.Builder` (so the result is verified like any built program), and
  a *rule* may emit other ops in place of one; ops whose results nothing uses are
  dropped on the way (dead-code elimination for free). Passes that change types or
  op patterns use it.
- :func:`substitute` / :func:`rebuild_ops` rewire the ops that read a replaced value
  and keep every other op object as it is (no re-inference): passes that swap a few
  values (constant folding, input packing, compression) use it, and
  :func:`rename_io` renames ``main``'s interface this way.

Consumers of a value come from :class:`anekit.mil.graph.FunctionGraph`, the one index
of a function's uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.builder import Builder
from anekit.mil.graph import FunctionGraph
from anekit.mil.ops import registry
from anekit.mil.ops.traits import CONST
from anekit.mil.program import Function, Operation, Program
from anekit.mil.types import DType
from anekit.mil.values import Value
from anekit.mil.verify import check_function

# constants up to this many elements are written inline; larger ones get a weight file
INLINE_LIMIT = 16


class Rebuild:
    """The state of one function's replay: the Builder and old value -> new value."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.b = Builder(opset=fn.opset, function=fn.name)
        self.env: dict[int, Any] = {}
        self.graph = FunctionGraph(fn)
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
        return self.graph.consumers(v)


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


def _live(fn: Function) -> list[Operation]:
    """The ops some output depends on, in program order."""
    needed = {id(v) for v in fn.outputs}
    live = []
    for op in reversed(fn.ops):
        if any(id(v) in needed for v in op.outputs):
            live.append(op)
            needed.update(id(v) for v in op.input_values())
    return live[::-1]


# -- rewiring: ops that read a replaced value are rebuilt, others kept ---------------------
def substitute(op: Operation, replace: Mapping[int, Value]) -> Operation:
    """A new op like ``op`` reading ``replace[id(v)]`` for each input ``v`` found there.

    Its outputs are new Values (same names and types) produced by the new op, so the
    program that holds ``op`` is left as it was. A replacement must have the type of
    the value it replaces: the op's inference and its consumers depend on it.
    """

    def new(v: Value) -> Value:
        w = replace.get(id(v), v)
        if w.type != v.type:
            raise MilTypeError(
                f"cannot substitute {w.name or 'a literal'!r} ({w.type}) for {v.name!r} ({v.type})",
                op=op.op_type,
                line=op.line,
            )
        return w

    inputs = {
        k: tuple(map(new, v)) if isinstance(v, tuple) else new(v) for k, v in op.inputs.items()
    }
    outputs = tuple(Value(v.name, v.type, None, v.const, v.blob) for v in op.outputs)
    new_op = Operation(op.opdef, inputs, outputs, dict(op.attrs), op.line)
    for v in outputs:
        v.producer = new_op
    return new_op


def rebuild_ops(ops: tuple[Operation, ...], replace: dict[int, Value]) -> tuple[Operation, ...]:
    """``ops`` with every op that reads a replaced value rebuilt (its outputs join ``replace``)."""
    result = []
    for op in ops:
        new = rebuilt(op, replace)
        replace.update((id(old), out) for old, out in zip(op.outputs, new.outputs) if new is not op)
        result.append(new)
    return tuple(result)


def rebuilt(op: Operation, replace: Mapping[int, Value]) -> Operation:
    """``op`` itself if it reads no replaced value, else its substitute."""
    return substitute(op, replace) if any(id(v) in replace for v in op.input_values()) else op


OP_NAMES = ("match", "keep")


def rename_io(
    program: Program,
    inputs: Mapping[str, str],
    outputs: Mapping[str, str],
    *,
    op_names: str = "match",
) -> Program:
    """``program`` with ``main``'s inputs and outputs renamed (old -> new), ops rebuilt.

    An output that is also an input gets an ``identity`` op, so each interface name names
    one value. ``op_names="match"`` also renames the ``name`` attribute of the op that
    produces a renamed output (``o0_y = mul(...)[name = "o0_y"]``), so a compiler that
    binds outputs by op name sees the new names too; ``"keep"`` leaves op names alone.
    """
    if op_names not in OP_NAMES:
        raise ValueError(f"op_names must be one of {OP_NAMES}, found {op_names!r}")
    fn = program.main
    new_inputs = tuple(Value(inputs.get(v.name, v.name), v.type) for v in fn.inputs)
    replace: dict[int, Value] = {id(old): new for old, new in zip(fn.inputs, new_inputs)}
    input_ids = set(replace)
    renamed = {id(v): outputs[v.name] for v in fn.outputs if id(v) not in input_ids}
    ops = []
    for op in fn.ops:
        if any(id(v) in renamed for v in op.outputs):
            new = substitute(op, replace)
            for old, out in zip(op.outputs, new.outputs):
                out.name = renamed.get(id(old), out.name)  # a fresh Value: nothing else holds it
            if op_names == "match" and len(new.outputs) == 1:
                new.attrs["name"] = new.outputs[0].name  # substitute copied the attributes
        else:
            new = rebuilt(op, replace)
        replace.update((id(old), out) for old, out in zip(op.outputs, new.outputs) if new is not op)
        ops.append(new)
    returned = []
    for old in fn.outputs:
        v = replace.get(id(old), old)
        if id(old) in input_ids:
            v = _identity(v, outputs.get(old.name, old.name), fn.opset)
            ops.append(v.producer)
        returned.append(v)
    main = Function(fn.name, new_inputs, tuple(ops), tuple(returned), fn.opset)
    return replace_main(program, main)


def _identity(v: Value, name: str, opset: str) -> Value:
    out = Value(name, v.type)
    out.producer = Operation(registry.get("identity", opset), {"x": v}, (out,), {"name": name})
    return out


def replace_main(program: Program, main: Function) -> Program:
    """``program`` with its ``main`` function replaced by ``main`` (verified first)."""
    check_function(main)
    result = Program(
        {**program.functions, main.name: main},
        version=program.version,
        build_info=program.build_info,
    )
    result.passes_run = program.passes_run  # the rest of the program went through them
    return result
