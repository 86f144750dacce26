"""The ane_layout pass: linear layers as 1x1 convs on ``[1, C, 1, S]`` tensors.

A tensor of PyTorch shape ``[..., C]`` (``N`` = the product of the leading dims) has an
*ANE form* ``[1, C, 1, N]``: channels on axis 1, tokens on the last axis, the layout
the ANE's convolution engine streams (Apple's ml-ane-transformers; ANE_NOTES 3).

- ``linear(x, W)`` and ``matmul(x, W)`` with a constant ``W`` become ``conv`` with
  weight ``[O, I, 1, 1]`` on the ANE form of ``x``; their result exists only in ANE form.
- Ops that read only ANE-form values stay in ANE form (the rule table below):
  elementwise unary ops and activations; binary elementwise ops whose other operand is
  in ANE form, a constant broadcast over channels, or a scalar; ``layer_norm``,
  ``softmax`` and channel reductions over the last PyTorch axis (axis 1 in ANE form).
- Any other op reads the PyTorch form, made once per value (``transpose`` + ``reshape``)
  when it is first needed; so do the program's outputs. Layout changes therefore happen
  only where the data leaves the channel/token world: at the program's edges and where
  attention splits heads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anekit.hw import Chip
from anekit.mil.ops.traits import BINARY, CONST, ELEMENTWISE, REDUCTION, UNARY
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.mil.values import Value

_PERM = [0, 3, 2, 1]  # [1, N, 1, C] <-> [1, C, 1, N]


def _ane_shape(shape: tuple[Any, ...]) -> tuple[int, int, int, int] | None:
    """``[1, C, 1, N]`` for a static PyTorch shape ``[..., C]`` (None if dynamic or rank 0)."""
    if not shape or not all(isinstance(d, int) for d in shape):
        return None
    return (1, shape[-1], 1, math.prod(shape[:-1]))


def _last_axis_only(axes: Any, rank: int) -> bool:
    got = [int(a) % rank for a in np.atleast_1d(np.asarray(axes))]
    return got == [rank - 1]


class _Layout:
    """The pass's state: the ANE form of each original value that has one."""

    def __init__(self) -> None:
        self.ane: dict[int, Value] = {}  # id(original value) -> its [1, C, 1, N] form
        self.shape: dict[int, tuple[int, ...]] = {}  # id(original) -> PyTorch shape

    # -- moving between the two forms -----------------------------------------------------
    def torch(self, rb: Rebuild, v: Any) -> Any:
        """The PyTorch-form new value of original ``v`` (made from its ANE form if needed)."""
        if isinstance(v, tuple):
            return tuple(self.torch(rb, x) for x in v)
        if id(v) in rb.env or id(v) not in self.ane:
            return rb.get(v)
        a, shape = self.ane[id(v)], self.shape[id(v)]
        b = rb.b
        moved = b.transpose(x=a, perm=_PERM, name=f"{v.name}_tokens")
        back = b.reshape(x=moved, shape=np.array(shape, np.int32), name=f"{v.name}_torch")
        rb.set(v, back)
        return back

    def to_ane(self, rb: Rebuild, v: Value) -> Value | None:
        """The ANE form of original ``v`` (made from its PyTorch form if it has none)."""
        if id(v) in self.ane:
            return self.ane[id(v)]
        target = _ane_shape(v.shape)
        if target is None:
            return None
        b, t = rb.b, self.torch(rb, v)
        _, c, _, n = target
        if v.const is not None:  # constants are rearranged here, not in the program
            arr = np.asarray(v.const).reshape(n, c).T.reshape(target)
            new = rb.const(np.ascontiguousarray(arr), f"{v.name}_ane")
        else:
            rows = b.reshape(x=t, shape=np.array([1, n, 1, c], np.int32), name=f"{v.name}_rows")
            new = b.transpose(x=rows, perm=_PERM, name=f"{v.name}_ane")
        self.record(v, new)
        return new

    def record(self, old: Value, new: Value) -> None:
        self.ane[id(old)] = new
        self.shape[id(old)] = tuple(int(d) for d in old.shape)

    def has_ane(self, v: Any) -> bool:
        return isinstance(v, Value) and id(v) in self.ane

    # -- the rule ----------------------------------------------------------------------------
    def __call__(self, rb: Rebuild, op: Operation) -> bool:
        if CONST in op.opdef.traits:
            return False  # copied as they are; an ANE form is made on demand
        rule = _RULES.get(op.op_type) or _trait_rule(op)
        if rule is not None and rule(self, rb, op):
            return True
        params = {k: self.torch(rb, v) for k, v in op.inputs.items()}
        rb.set_outputs(op, rb.b.add_op(op.op_type, params, op.name))
        return True

    def finish(self, rb: Rebuild) -> None:
        for v in rb.fn.outputs:
            self.torch(rb, v)


# -- rules: each returns True when it emitted the op in ANE form -------------------------------
def _conv(layout: _Layout, rb: Rebuild, op: Operation, weight: np.ndarray, bias: Any) -> bool:
    x = op.inputs["x"]
    if _ane_shape(x.shape) is None or x.rank < 1:
        return False
    out = op.outputs[0]
    ax = layout.to_ane(rb, x)
    w = rb.const(np.ascontiguousarray(weight[:, :, None, None]), f"{op.name}_w")
    conv = rb.b.conv(x=ax, weight=w, bias=bias, name=rb.name_for(op))
    layout.record(out, conv)
    return True


def _linear(layout: _Layout, rb: Rebuild, op: Operation) -> bool:
    """linear(x, W[O, I], b) -> conv(x in [1, I, 1, N], W[O, I, 1, 1], b)."""
    weight, bias = op.inputs["weight"], op.inputs.get("bias")
    if weight.const is None:
        return False
    return _conv(layout, rb, op, np.asarray(weight.const), None if bias is None else rb.get(bias))


def _matmul(layout: _Layout, rb: Rebuild, op: Operation) -> bool:
    """matmul(x, W[I, O]) with a constant 2-D W -> conv with W^T (transposes honoured)."""
    y = op.inputs["y"]
    tx, ty = (
        op.inputs.get(k) is not None and bool(np.asarray(op.inputs[k].const))
        for k in ("transpose_x", "transpose_y")
    )
    if y.const is None or y.rank != 2 or tx or op.inputs["x"].rank < 2:
        return False
    w = np.asarray(y.const)
    return _conv(layout, rb, op, w if ty else w.T, None)


def _unary(layout: _Layout, rb: Rebuild, op: Operation) -> bool:
    """f(x) in ANE form when x has one; other parameters are constants, copied."""
    x = op.inputs["x"]
    if not layout.has_ane(x) or any(
        v.const is None for k, v in op.inputs.items() if k != "x" and isinstance(v, Value)
    ):
        return False
    params = {k: (layout.ane[id(v)] if k == "x" else rb.get(v)) for k, v in op.inputs.items()}
    layout.record(op.outputs[0], rb.b.add_op(op.op_type, params, rb.name_for(op)))
    return True


def _operand(layout: _Layout, rb: Rebuild, v: Value, out: tuple[int, ...]) -> Value | None:
    """A binary op's operand in ANE form for a result of PyTorch shape ``out``, if possible."""
    shape = tuple(v.shape)
    if layout.has_ane(v):  # same tokens; one channel broadcasts (an RMSNorm scale)
        same_tokens = len(shape) == len(out) and shape[:-1] == out[:-1]
        return layout.ane[id(v)] if same_tokens and shape[-1] in (1, out[-1]) else None
    if v.const is not None:
        arr = np.asarray(v.const)
        if all(d == 1 for d in shape):  # a scalar
            return rb.const(arr.reshape(1, 1, 1, 1), f"{v.name}_ane")
        if all(d == 1 for d in shape[:-1]) and shape[-1] == out[-1]:  # one value per channel
            return rb.const(np.ascontiguousarray(arr.reshape(1, -1, 1, 1)), f"{v.name}_ane")
    if shape == out and all(isinstance(d, int) for d in shape):
        return layout.to_ane(rb, v)  # a runtime tensor of the result's shape: move it once
    return None


def _binary(layout: _Layout, rb: Rebuild, op: Operation) -> bool:
    x, y = op.inputs["x"], op.inputs["y"]
    if not (layout.has_ane(x) or layout.has_ane(y)):
        return False
    out = tuple(op.outputs[0].shape)
    ax, ay = _operand(layout, rb, x, out), _operand(layout, rb, y, out)
    if ax is None or ay is None:
        return False
    layout.record(op.outputs[0], rb.b.add_op(op.op_type, {"x": ax, "y": ay}, rb.name_for(op)))
    return True


def _axis_param(name: str, keep_dims: bool) -> Any:
    """layer_norm / softmax / reduce_* over the last PyTorch axis -> over axis 1 in ANE form."""

    def rule(layout: _Layout, rb: Rebuild, op: Operation) -> bool:
        x, axes = op.inputs["x"], op.inputs.get(name)
        if not layout.has_ane(x) or axes is None or not _last_axis_only(axes.const, x.rank):
            return False  # no axes given means every axis: not a channel-only op
        keep = op.inputs.get("keep_dims")
        if keep_dims and (keep is None or not bool(np.asarray(keep.const))):
            return False  # dropping the channel axis changes N's meaning: leave it
        params = {k: rb.get(v) for k, v in op.inputs.items() if k not in ("x", name)}
        params["x"] = layout.ane[id(x)]
        params[name] = [1] if name == "axes" else 1
        layout.record(op.outputs[0], rb.b.add_op(op.op_type, params, rb.name_for(op)))
        return True

    return rule


# Rules by MIL op type; ops not named here are matched by trait in _trait_rule.
_RULES = {
    "linear": _linear,  # linear(x, W, b) -> conv 1x1
    "matmul": _matmul,  # matmul(x, W) -> conv 1x1 (constant 2-D W)
    "layer_norm": _axis_param("axes", keep_dims=False),  # over C: axes [1]
    "softmax": _axis_param("axis", keep_dims=False),  # over C: axis 1
}


def _trait_rule(op: Operation) -> Any:
    """Rules for whole families, by trait: reductions, elementwise ops."""
    traits = op.opdef.traits
    if REDUCTION in traits:  # reduce_*: over C, keeping it: [1, 1, 1, N]
        return _axis_param("axes", keep_dims=True)
    if ELEMENTWISE in traits and UNARY in traits:
        return _unary
    if ELEMENTWISE in traits and BINARY in traits:
        return _binary
    return None


def to_ane_layout(program: Program) -> Program:
    """Rewrite ``program`` as the module docstring says; outputs keep their PyTorch shapes."""
    layout = _Layout()
    return rebuild(program, layout, finish=layout.finish)


def ane_layout(program: Program, chip: Chip) -> Program:
    """Linear layers as 1x1 convs in the [1, C, 1, S] layout (the module docstring)."""
    return to_ane_layout(program)
