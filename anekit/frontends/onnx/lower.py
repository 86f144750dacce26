"""Convert a checked ONNX graph to a MIL program: one walk over the nodes, one lowering per op.

Every ONNX value is either a MIL ``Value`` (it depends on a graph input) or a NumPy array
(an initializer, a ``Constant``, or a node whose inputs are all constant: evaluated here by
``onnx.reference``, the ONNX package's own implementation). ``Shape`` and ``Size`` of a
runtime value are constants too (shapes are static), so the shape arithmetic exporters
emit (``Shape -> Gather -> Concat -> Reshape``, masks built with ``Range`` and
``ConstantOfShape``) folds away. Only nodes that depend on a graph input need a lowering
(:data:`anekit.frontends.onnx.ops.OPS`); every missing one is reported at once, naming the
node, its op type and its domain.

The program is faithful to ONNX: fp32 stays fp32 and tensors keep their layout; the ANE
passes run afterwards, as for ``from_torch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from anekit import mil
from anekit.errors import ConversionError, MilTypeError
from anekit.frontends.emit import Emitter
from anekit.frontends.onnx.model import OnnxModel, mil_name
from anekit.mil import DType, Value
from anekit.passes.provenance import note_spellings

ProgressFn = Callable[[int, int], None]
INLINE_LIMIT = 16  # constants up to this many elements are written inline, larger get a file
_INT32 = np.iinfo(np.int32)
# ops whose result is a constant even for a runtime input: shapes are static
SHAPE_OPS = frozenset({"Shape", "Size"})

_MIL_DTYPE = {
    TensorProto.FLOAT: DType.fp32,
    TensorProto.DOUBLE: DType.fp32,
    TensorProto.BFLOAT16: DType.fp32,
    TensorProto.FLOAT16: DType.fp16,
    TensorProto.INT64: DType.int32,
    TensorProto.INT32: DType.int32,
    TensorProto.INT16: DType.int32,
    TensorProto.INT8: DType.int32,
    TensorProto.UINT8: DType.int32,
    TensorProto.BOOL: DType.bool,
}


def mil_dtype(elem_type: int, what: str) -> DType:
    """The MIL dtype an ONNX element type becomes: floats fp32 (fp16 stays), integers int32."""
    dtype = _MIL_DTYPE.get(elem_type)
    if dtype is None:
        name = TensorProto.DataType.Name(elem_type) if elem_type else "UNDEFINED"
        raise ConversionError(f"{what}: ONNX type {name} has no MIL type here")
    return dtype


def array_dtype(arr: np.ndarray) -> DType:
    """The MIL dtype a NumPy constant becomes."""
    if arr.dtype == np.float16:
        return DType.fp16
    if arr.dtype.kind == "f":
        return DType.fp32
    if arr.dtype == np.bool_:
        return DType.bool
    if arr.dtype.kind in "iu":
        return DType.int32
    raise ConversionError(f"a constant of NumPy type {arr.dtype} has no MIL type")


def node_label(node: onnx.NodeProto) -> tuple[str, str, str]:
    """``(node name, op type, where)`` for ConversionError.problems."""
    domain = node.domain or "ai.onnx"
    return (node.name or node.output[0], f"{domain}::{node.op_type}", f"domain {domain!r}")


class Lower(Emitter):
    """What a lowering sees: the Builder, the current node and helpers to make MIL values."""

    def __init__(self, builder: mil.Builder, model: OnnxModel) -> None:
        self.b = builder
        self.model = model
        self.node: onnx.NodeProto | None = None
        self._consts: dict[int, tuple[np.ndarray, dict[DType, Value]]] = {}
        self.const_names: dict[int, str] = {id(a): n for n, a in model.tensors.items()}
        self.reserved = set(model.names.values())  # I/O names: outputs take theirs at the end

    def name(self, suffix: str = "") -> str:
        """An op name derived from the node's first output (the Builder makes it unique)."""
        base = (
            self.node.output[0] if self.node.output and self.node.output[0] else self.node.op_type
        )
        return self.free(base + (f"_{suffix}" if suffix else ""))

    def free(self, name: str) -> str:
        """``name``, with ``_`` appended while it would take an input's or output's name."""
        while mil_name(name) in self.reserved:
            name += "_"
        return name

    def fail(self, message: str) -> ConversionError:
        """A ConversionError naming the current node, its op type and its domain."""
        label = node_label(self.node)
        return ConversionError(
            f"cannot convert {label[1]} node {label[0]!r}: {message}", problems=(label,)
        )

    def v(self, x: Any, dtype: DType | None = None) -> Value:
        """``x`` (a Value or a constant array) as a MIL value of ``dtype`` when given."""
        if isinstance(x, Value):
            return x if dtype is None or x.dtype is dtype else self.cast(x, dtype)
        if x is None:
            raise self.fail("a required input is missing")
        arr = np.asarray(x)
        return self._const(arr, dtype or array_dtype(arr))

    def _const(self, arr: np.ndarray, dtype: DType) -> Value:
        """A constant as a const op of ``dtype``, made once per array and dtype."""
        held = self._consts.setdefault(id(arr), (arr, {}))
        cached = held[1].get(dtype)
        if cached is not None:
            return cached
        converted = self._convert(arr, dtype)
        name = self.free(self.const_names.get(id(arr)) or self.name("c"))
        if converted.size <= INLINE_LIMIT or converted.dtype == np.bool_:
            value = self.b.const(converted, name=name)
        else:
            value = self.b.weight(name, converted)
        held[1][dtype] = value
        return value

    def _convert(self, arr: np.ndarray, dtype: DType) -> np.ndarray:
        if dtype is DType.int32 and arr.dtype.kind in "iub":
            if arr.size and (arr.min() < _INT32.min or arr.max() > _INT32.max):
                raise self.fail(f"integer values in [{arr.min()}, {arr.max()}] do not fit int32")
            return arr.astype(np.int32)
        if dtype.is_int and arr.dtype.kind == "f" and not np.array_equal(arr, np.trunc(arr)):
            raise self.fail(f"a constant with fractions cannot become {dtype.value}")
        with np.errstate(over="ignore", invalid="ignore"):
            new = arr.astype(dtype.numpy)
        if dtype.is_float and (np.isinf(new) & ~np.isinf(arr)).any():
            raise self.fail(f"a constant overflows {dtype.value}")
        return new

    def dtype_of(self, x: Any) -> DType:
        return x.dtype if isinstance(x, Value) else array_dtype(np.asarray(x))

    def shape_of(self, x: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in x.shape)

    def const_ints(self, x: Any, what: str) -> list[int]:
        """A constant integer input (axes, shape, pads) as a list; a runtime one fails."""
        if isinstance(x, Value):
            raise self.fail(f"{what} must be a constant, found a value computed at run time")
        return [int(i) for i in np.asarray(x).reshape(-1)]


# -- the graph walk ----------------------------------------------------------------------------
def unsupported_nodes(model: OnnxModel, table: dict[str, Any]) -> list[onnx.NodeProto]:
    """Nodes that depend on a graph input and have no lowering (constant ones fold)."""
    runtime = set(model.input_shapes)
    missing = []
    for node in model.graph.node:
        if node.op_type in SHAPE_OPS and node.domain in ("", "ai.onnx"):
            continue
        if any(i in runtime for i in node.input if i):
            runtime.update(node.output)
            if node.domain not in ("", "ai.onnx") or node.op_type not in table:
                missing.append(node)
    return missing


def convert_model(
    model: OnnxModel,
    table: dict[str, Any],
    *,
    name: str = "main",
    progress: ProgressFn | None = None,
) -> mil.Program:
    """Lower a checked ONNX model to a verified MIL program (ONNX's dtypes and layout)."""
    missing = unsupported_nodes(model, table)
    if missing:
        ops = sorted({node_label(n)[1] for n in missing})
        raise ConversionError(
            f"{len(missing)} node(s) use {len(ops)} op(s) with no lowering ({', '.join(ops)}); "
            "add them to anekit/frontends/onnx/ops.py (docs/onnx.md)",
            problems=tuple(node_label(n) for n in missing),
        )
    b = mil.Builder(function=name)
    ctx = Lower(b, model)
    env: dict[str, Any] = dict(model.tensors)
    for onnx_name, shape in model.input_shapes.items():
        dtype = mil_dtype(model.input_types[onnx_name], f"input {onnx_name!r}")
        env[onnx_name] = b.input(model.names[onnx_name], shape, dtype)
    nodes = list(model.graph.node)
    for i, node in enumerate(nodes):
        ctx.node = node
        results = _node(ctx, node, env, table)
        for out, result in zip(node.output, results):
            if out:
                env[out] = result
        if progress is not None:
            progress(i + 1, len(nodes))
    _outputs(ctx, env)
    try:
        return note_spellings(b.build())  # the MIL spellings chosen here, for `anekit check`
    except MilTypeError as e:  # a lowering made an inconsistent program: our bug, say where
        raise ConversionError(f"the converted program does not verify: {e}") from e


def _inputs_of(ctx: Lower, node: onnx.NodeProto, env: dict[str, Any]) -> list[Any]:
    values = []
    for name in node.input:
        if not name:
            values.append(None)  # an optional input left out
        elif name not in env:
            raise ctx.fail(f"reads {name!r}, which no earlier node produces (graph not sorted?)")
        else:
            values.append(env[name])
    return values


_UNREAD_ATTRIBUTES = frozenset({
    onnx.AttributeProto.TENSORS, onnx.AttributeProto.SPARSE_TENSOR,
    onnx.AttributeProto.SPARSE_TENSORS,
})  # fmt: skip


def attributes(ctx: Lower, node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values (tensors as arrays, strings decoded)."""
    attrs = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            attrs[a.name] = ctx.model.array(a.t, f"attribute {a.name!r} of node {ctx.name()!r}")
        elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise ctx.fail("control flow (subgraph attributes) is not converted")
        elif a.type in _UNREAD_ATTRIBUTES:  # tensors whose bytes this reader does not check
            kind = onnx.AttributeProto.AttributeType.Name(a.type)
            raise ctx.fail(f"attribute {a.name!r} of type {kind} is not read")
        else:
            value = helper.get_attribute_value(a)
            attrs[a.name] = value.decode() if isinstance(value, bytes) else value
    return attrs


def _node(ctx: Lower, node: onnx.NodeProto, env: dict[str, Any], table: dict) -> tuple:
    inputs = _inputs_of(ctx, node, env)
    attrs = attributes(ctx, node)  # tensors read (and checked) here, before anything folds
    if node.op_type in SHAPE_OPS and isinstance(inputs[0], Value):
        shape = np.array(ctx.shape_of(inputs[0]), dtype=np.int64)
        if node.op_type == "Size":
            return (np.array(int(np.prod(shape)), dtype=np.int64),)
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return (shape[start:end],)
    if not any(isinstance(x, Value) for x in inputs):
        return _fold(ctx, node, inputs, attrs)
    result = table[node.op_type](ctx, *inputs, **attrs)
    results = result if isinstance(result, tuple) else (result,)
    extra = [o for o in node.output[len(results) :] if o]
    if extra:
        raise ctx.fail(f"outputs {extra} are not produced by this lowering")
    return results


def _fold(ctx: Lower, node: onnx.NodeProto, inputs: list[Any], attrs: dict[str, Any]) -> tuple:
    """Evaluate a node whose inputs are all constant with ``onnx.reference``; tensor
    attributes are passed as the arrays already read (never their external-data names)."""
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if n else "" for i, n in enumerate(node.input)]
    copy = helper.make_node(node.op_type, names, [f"out{i}" for i in range(len(node.output))],
                            domain=node.domain)  # fmt: skip
    copy.attribute.extend(
        helper.make_attribute(a.name, numpy_helper.from_array(attrs[a.name]))
        if a.type == onnx.AttributeProto.TENSOR else a
        for a in node.attribute
    )  # fmt: skip
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs) if n}
    graph = helper.make_graph(
        [copy], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in copy.output],
    )  # fmt: skip
    proto = helper.make_model(graph, opset_imports=ctx.model.proto.opset_import)
    try:
        return tuple(np.asarray(r) for r in ReferenceEvaluator(proto).run(None, feeds))
    except Exception as e:  # the reference implementation rejects these constants
        raise ctx.fail(f"folding this constant node failed: {type(e).__name__}: {e}") from e


def _outputs(ctx: Lower, env: dict[str, Any]) -> None:
    seen: set[int] = set()
    for out in ctx.model.graph.output:
        name = ctx.model.names[out.name]
        if out.name not in env:
            raise ConversionError(f"output {out.name!r} is not produced by any node")
        value = ctx.v(env[out.name])
        if id(value) in seen or value.producer is None or value.const is not None:
            value = ctx.b.identity(x=value, name=f"{name}_copy")  # an input, a const or a repeat
        seen.add(id(value))
        ctx.b.output(value, name)
