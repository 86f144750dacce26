"""Convert an exported ATen graph to a MIL program: one walk over the nodes, one lowering per op.

Every node's result is one of: a MIL ``Value`` (it depends on a program input), a
``torch.Tensor`` (a constant: a parameter, a buffer, or a node whose inputs are all
constant, evaluated here by PyTorch itself: position ids, causal masks and other
shape-only subgraphs fold this way), a Python scalar or a tuple of these. Only
nodes that depend on a program input need a lowering; all of them are checked
before anything is built, so one :class:`ConversionError` lists every missing one.

The program this module builds is faithful to PyTorch: fp32 stays fp32, tensors
keep PyTorch's layout. The ANE rewrite passes (:mod:`anekit.passes`) turn
it into an fp16, conv-in-``[1, C, 1, S]`` program afterwards.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from anekit import mil
from anekit.errors import ConversionError, MilTypeError
from anekit.frontends.emit import Emitter
from anekit.frontends.torch.lowerings import LOWERINGS
from anekit.frontends.torch.pytree import leaf_names, select
from anekit.mil import DType, Value
from anekit.passes.provenance import note_spellings

# constants up to this many elements are written inline; larger ones get a weight file
INLINE_LIMIT = 16
ProgressFn = Callable[[int, int], None]

_FLOAT_DTYPES = {torch.float16: DType.fp16}
_INT32 = np.iinfo(np.int32)


def mil_dtype(dtype: torch.dtype) -> DType:
    """The MIL dtype a torch dtype becomes: floats fp32 (fp16 stays), integers int32, bool."""
    if dtype.is_floating_point:
        return _FLOAT_DTYPES.get(dtype, DType.fp32)
    if dtype == torch.bool:
        return DType.bool
    if dtype.is_complex:
        raise ConversionError(f"complex tensors ({dtype}) have no MIL type")
    return DType.int32


def to_numpy(t: torch.Tensor, what: str) -> np.ndarray:
    """A constant tensor as the NumPy array MIL stores (int64 checked to fit int32)."""
    t = t.detach().cpu()
    dtype = mil_dtype(t.dtype)
    if dtype is DType.int32:
        arr = t.to(torch.int64).numpy()
        if arr.size and (arr.min() < _INT32.min or arr.max() > _INT32.max):
            raise ConversionError(
                f"{what}: integer values in [{arr.min()}, {arr.max()}] do not fit int32"
            )
        return arr.astype(np.int32)
    if dtype is DType.bool:
        return t.numpy().astype(np.bool_)
    return t.to(torch.float16 if dtype is DType.fp16 else torch.float32).numpy()


def source_line(node: torch.fx.Node) -> str:
    """Where ``node`` came from: the module path that made it and the user's source line
    ("in module encoder.layer.0 (BertLayer), file:line (function): code"), or ""."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace)
    where = ""
    if frames:
        file, line, func, code = frames[-1]
        where = f"{file}:{line} ({func}): {code.strip()}"
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, kind = list(stack.values())[-1]
        name = re.sub(r"^L\['self'\]\.?", "", str(path)) or "(top)"
        kind_name = getattr(kind, "__name__", str(kind).rsplit(".", 1)[-1].strip("'>"))
        where = f"in module {name} ({kind_name})" + (f", {where}" if where else "")
    return where


def op_name(node: torch.fx.Node) -> str:
    """The ATen overload a node calls, as users read it (``aten.add.Tensor``)."""
    return str(node.target)


class Lower(Emitter):
    """What a lowering sees: the Builder, the current node and helpers to make MIL values."""

    def __init__(self, builder: mil.Builder) -> None:
        self.b = builder
        self.node: torch.fx.Node | None = None
        self._consts: dict[tuple[int, DType | None], tuple[torch.Tensor, Value]] = {}
        self.const_names: dict[int, str] = {}  # id(parameter or buffer) -> its graph name
        # export's unbacked sizes (u0, ...) a lowering fixed (a constant boolean mask's count)
        self.bindings: dict[Any, int] = {}

    # -- the current node ------------------------------------------------------------------
    @property
    def out(self) -> Any:
        """The node's result as PyTorch computed it on fake tensors (``node.meta["val"]``)."""
        return self.node.meta["val"]

    def out_shape(self, index: int | None = None) -> tuple[int, ...]:
        """The static shape of the node's result (or of its ``index``-th result)."""
        val = self.out if index is None else self.out[index]
        return self.static(val.shape)

    def out_dtype(self) -> DType:
        """The MIL dtype of the node's result (of its first result, for several)."""
        val = self.out
        return mil_dtype((val[0] if isinstance(val, (tuple, list)) else val).dtype)

    def name(self, suffix: str = "") -> str:
        """An op name derived from the node's name (the Builder makes it unique)."""
        return self.node.name + (f"_{suffix}" if suffix else "")

    def fail(self, message: str) -> ConversionError:
        """A ConversionError naming the current node, its op and the user's source line."""
        node = self.node
        return ConversionError(
            f"cannot convert {op_name(node)}: {message}",
            problems=((node.name, op_name(node), source_line(node)),),
        )

    def static(self, shape: Sequence[Any]) -> tuple[int, ...]:
        """``shape`` as ints (an unbacked size a lowering bound, ``self.bindings``, resolved);
        a symbolic (dynamic) dimension is a ConversionError here."""
        return tuple(self._static_dim(d, shape) for d in shape)

    def _static_dim(self, d: Any, shape: Sequence[Any]) -> int:
        try:
            return int(d)
        except (TypeError, RuntimeError):  # SymInt without a hint: a dynamic dimension
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is not None and self.bindings:
                value = expr.xreplace(self.bindings)
                if isinstance(value, int) or value.is_number:
                    return int(value)
            raise self.fail(
                f"this op needs a static shape, found {list(shape)}; the ANE compiles static "
                "shapes only"
            ) from None

    def bind(self, symbolic: Sequence[Any], concrete: Sequence[int]) -> None:
        """Fix the unbacked sizes of ``symbolic`` (the node's result shape) to ``concrete``."""
        for d, c in zip(symbolic, concrete, strict=True):
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                self.bindings[expr] = int(c)

    # -- values ------------------------------------------------------------------------------
    def v(self, x: Any, dtype: DType | None = None) -> Value:
        """``x`` as a MIL value (a constant becomes a const op), cast to ``dtype`` if given."""
        if isinstance(x, Value):
            return x if dtype is None or x.dtype is dtype else self.cast(x, dtype)
        if isinstance(x, torch.Tensor):
            value = self._const_tensor(x, dtype)
        elif isinstance(x, (bool, int, float)):
            kind = dtype or self.dtype_of(x)
            value = self.b.const(np.asarray(x, kind.numpy), name=self.name("c"))
        else:
            raise self.fail(f"expected a tensor or a number, found {type(x).__name__} {x!r}")
        return value if dtype is None or value.dtype is dtype else self.cast(value, dtype)

    def dtype_of(self, x: Any) -> DType:
        """The MIL dtype of a lowering argument (value, tensor or Python number)."""
        if isinstance(x, Value):
            return x.dtype
        if isinstance(x, torch.Tensor):
            return mil_dtype(x.dtype)
        if isinstance(x, bool):
            return DType.bool
        return DType.int32 if isinstance(x, int) else DType.fp32

    def shape_of(self, x: Any) -> tuple[int, ...]:
        if isinstance(x, Value):
            return self.static(x.shape)
        if isinstance(x, torch.Tensor):
            return tuple(x.shape)
        return ()

    def _const_tensor(self, t: torch.Tensor, dtype: DType | None) -> Value:
        """A constant tensor as a const op in ``dtype`` (converted here, not by a cast op),
        made once per tensor and dtype (a parameter used twice is stored once)."""
        key = (id(t), dtype)
        cached = self._consts.get(key)
        if cached is not None and cached[0] is t:
            return cached[1]
        arr = to_numpy(t, f"constant used by node {self.node.name!r}")
        if dtype is not None and dtype is not mil_dtype(t.dtype):
            if dtype.is_int and arr.dtype.kind == "f" and not np.array_equal(arr, np.trunc(arr)):
                raise self.fail(f"a constant with fractions cannot become {dtype}")
            with np.errstate(over="ignore"):
                new = arr.astype(dtype.numpy)
            if dtype.is_float and (np.isinf(new) & ~np.isinf(arr)).any():
                raise self.fail(f"a constant overflows {dtype}")
            arr = new
        value = const_value(self.b, arr, self.const_names.get(id(t)) or self.name("c"))
        self._consts[key] = (t, value)  # the tensor is kept so its id stays unique
        return value


def const_value(b: mil.Builder, arr: np.ndarray, name: str) -> Value:
    """A const: inline when small or not storable in a weight file, else its own weight file."""
    if arr.size <= INLINE_LIMIT or arr.dtype == np.bool_:
        return b.const(arr, name=name)
    return b.weight(name, arr)


# -- the graph walk ----------------------------------------------------------------------------
def _user_input_names(exported: torch.export.ExportedProgram) -> list[str]:
    return [
        spec.arg.name
        for spec in exported.graph_signature.input_specs
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT
    ]


def _state(exported: torch.export.ExportedProgram) -> dict[str, Any]:
    """Placeholder name -> constant tensor, for parameters, buffers and lifted constants."""
    kinds = torch.export.graph_signature.InputKind
    result: dict[str, Any] = {}
    for spec in exported.graph_signature.input_specs:
        if spec.kind == kinds.USER_INPUT:
            continue
        if spec.kind in (kinds.PARAMETER, kinds.BUFFER):
            source = exported.state_dict.get(spec.target)
            if source is None:  # a non-persistent buffer
                source = exported.constants[spec.target]
        elif spec.kind in (kinds.CONSTANT_TENSOR, kinds.CUSTOM_OBJ):
            source = exported.constants[spec.target]
        else:
            raise ConversionError(f"unsupported graph input kind {spec.kind} ({spec.arg.name})")
        result[spec.arg.name] = source.detach() if isinstance(source, torch.Tensor) else source
    return result


def unsupported_nodes(exported: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    """Nodes that depend on a program input and have no lowering (constant ones fold)."""
    runtime: set[torch.fx.Node] = set()
    user = set(_user_input_names(exported))
    missing = []
    for node in exported.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            runtime.add(node)
        elif node.target == torch.ops.aten.sym_size.int:
            continue  # a static size (the ANE's shapes are), so what it feeds folds
        elif node.op == "call_function" and any(a in runtime for a in node.all_input_nodes):
            runtime.add(node)
            if node.target is not operator.getitem and node.target not in LOWERINGS:
                missing.append(node)
    return missing


def output_names(exported: torch.export.ExportedProgram, count: int) -> list[str]:
    """Each user output's name from its pytree path (``logits``, ``output_0``, ``output``)."""
    spec = exported.call_spec.out_spec
    names = leaf_names(spec) if spec is not None else []
    if len(names) != count:
        return ["output"] if count == 1 else [f"output_{i}" for i in range(count)]
    return names


def convert_exported(
    exported: torch.export.ExportedProgram,
    *,
    name: str = "main",
    progress: ProgressFn | None = None,
    outputs: Sequence[str] | str | None = None,
) -> mil.Program:
    """Lower a decomposed ExportedProgram to a verified MIL program (fp32, PyTorch layout).

    ``outputs`` keeps some of the outputs, by name (default: all).
    """
    missing = unsupported_nodes(exported)
    if missing:
        ops = sorted({op_name(n) for n in missing})
        raise ConversionError(
            f"{len(missing)} node(s) use {len(ops)} ATen op(s) with no lowering "
            f"({', '.join(ops)}); please open an issue naming the op(s) and the model "
            "(docs/torch.md lists the ops converted today)",
            problems=tuple((n.name, op_name(n), source_line(n)) for n in missing),
        )
    b = mil.Builder(function=name)
    ctx = Lower(b)
    env: dict[torch.fx.Node, Any] = {}
    state = _state(exported)
    user = set(_user_input_names(exported))
    ctx.const_names = {id(t): n for n, t in state.items() if isinstance(t, torch.Tensor)}
    nodes = list(exported.graph.nodes)
    for i, node in enumerate(nodes):
        ctx.node = node
        if node.op == "placeholder":
            env[node] = _input(b, node) if node.name in user else state[node.name]
        elif node.op == "call_function":
            env[node] = _call(ctx, node, env)
        elif node.op == "output":
            _outputs(ctx, exported, node, env, outputs)
        if progress is not None:
            progress(i + 1, len(nodes))
    try:
        return note_spellings(b.build())  # the MIL spellings chosen here, for `anekit check`
    except MilTypeError as e:  # a lowering made an inconsistent program: our bug, say where
        raise ConversionError(f"the converted program does not verify: {e}") from e


def _input(b: mil.Builder, node: torch.fx.Node) -> Any:
    """A tensor argument becomes a program input; a Python value (``use_cache=False``) stays
    the constant ``torch.export`` fixed it to."""
    val = node.meta["val"]
    if val is None or isinstance(val, (bool, int, float, str)):
        return val
    if not isinstance(val, torch.Tensor):
        raise ConversionError(
            f"input {node.name!r}: expected a tensor or a Python constant, found "
            f"{type(val).__name__}"
        )
    dynamic = [str(d) for d in val.shape if not isinstance(d, int)]
    if dynamic:
        raise ConversionError(
            f"input {node.name!r} has dynamic dimensions {dynamic} (shape {list(val.shape)}); "
            "the ANE compiles static shapes only: export with dynamic=None, once per shape",
            problems=((node.name, "placeholder", ""),),
        )
    return b.input(node.name, list(val.shape), mil_dtype(val.dtype))


def _resolve(x: Any, env: dict[torch.fx.Node, Any]) -> Any:
    if isinstance(x, torch.fx.Node):
        return env[x]
    if isinstance(x, (list, tuple)):
        return type(x)(_resolve(i, env) for i in x)
    return x


def _is_runtime(x: Any) -> bool:
    if isinstance(x, Value):
        return True
    if isinstance(x, (list, tuple)):
        return any(_is_runtime(i) for i in x)
    return False


def _call(ctx: Lower, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> Any:
    args = _resolve(node.args, env)
    kwargs = {k: _resolve(v, env) for k, v in node.kwargs.items()}
    if node.target is operator.getitem:
        return args[0][args[1]]
    if not _is_runtime(args) and not _is_runtime(list(kwargs.values())):
        return _fold(ctx, node, args, kwargs)
    return LOWERINGS[node.target](ctx, *args, **kwargs)


def _fold(ctx: Lower, node: torch.fx.Node, args: Any, kwargs: dict[str, Any]) -> Any:
    """Evaluate a node whose inputs are all constant with PyTorch itself."""
    try:
        with torch.no_grad():
            return node.target(*args, **kwargs)
    except Exception as e:  # an op PyTorch itself cannot run on these constants
        raise ctx.fail(f"folding this constant subgraph failed: {type(e).__name__}: {e}") from e


def _outputs(
    ctx: Lower,
    exported: torch.export.ExportedProgram,
    node: torch.fx.Node,
    env: dict,
    wanted: Sequence[str] | str | None,
) -> None:
    kinds = torch.export.graph_signature.OutputKind
    specs = exported.graph_signature.output_specs
    flat = node.args[0]
    results = [env[n] if isinstance(n, torch.fx.Node) else n for n, s in zip(flat, specs)]
    results = [r for r, s in zip(results, specs) if s.kind == kinds.USER_OUTPUT]
    names = output_names(exported, len(results))
    keep = set(select(names, wanted))
    seen: set[int] = set()
    for result, out_name in zip(results, names):
        if out_name not in keep:
            continue
        if not isinstance(result, (Value, torch.Tensor)):
            raise ConversionError(
                f"output {out_name!r}: expected a tensor, found {type(result).__name__}; "
                "leave it out with outputs="
            )
        value = ctx.v(result)
        if id(value) in seen or value.producer is None:  # an input or a repeated output
            value = ctx.b.identity(x=value, name=f"{out_name}_copy")
        seen.add(id(value))
        ctx.b.output(value, out_name)
