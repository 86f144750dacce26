"""Residual-stream scaling: hold a transformer's residual stream at ``alpha * x`` so it fits fp16.

Real transformers carry "massive activations": a few residual channels far above the rest
(Qwen3-1.7B peaks at 14,858, Gemma-3 at 104,162; ANE_NUMERICS.md 1b). In fp16 a stream
above 65504 is inf, and a projection writing more than 32752 into it saturates on the
engine (N1). Scaling the whole stream by a power of two alpha changes nothing the model
computes *when every read of the stream is scale invariant*: RMSNorm and LayerNorm are,
once their epsilon is ``eps * alpha**2``. One implementation serves both kinds of program:

- ``anekit.llm`` builds its block programs scaled (``LlmConfig.residual_scale``; the host
  scales the embeddings, :func:`to_residual` the input of every residual-writing
  projection, whose weights are program inputs there; its norms are
  :func:`prescaled_rmsnorm`);
- :func:`scale_residual` rewrites a converted program (``from_torch``) the same way: the
  input of every projection writing into the stream (a conv/linear/matmul with constant
  weights, the embedding's one-hot product included) is multiplied by alpha
  (``to_residual``) and its bias scaled, and every norm reading the stream becomes the
  max-abs prescaled RMSNorm (:func:`prescaled_rmsnorm`, safe at any fp16
  magnitude) with ``eps * alpha**2``; a stream value that is a program output is scaled
  back by ``1 / alpha``.

:func:`find_stream` decides soundness before anything is rewritten: starting from the
inputs of the norms it grows the stream through residual ``add`` ops and layout ops
(reshape, transpose, squeeze, expand_dims) in both directions; every value in it must be
made by an add, a layout op or a projection with constant weights, and read only by an
add, a layout op, a matched norm or the program's outputs. Anything else (a stream read
by a matmul, a stream starting at a program input, a constant added to it) leaves the
program as it is, with the reason (:class:`Stream.unsound`).

The norm pattern matched is torch's RMSNorm as exported (Llama, Qwen, Mistral, T5):
``x * pow(mean(x * x | x ** 2 | square(x)) + eps, -0.5)`` (or ``rsqrt``), each
intermediate read once. LayerNorm (the ``layer_norm`` op) is matched too: its epsilon
is scaled; its own arithmetic is the engine's.

alpha: :func:`choose_alpha`, the largest power of two keeping a measured peak under
:data:`PEAK_LIMIT` (a quarter of the matmul saturation: a projection's output is at most
the difference of two stream values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anekit.mil.builder import Builder
from anekit.mil.graph import FunctionGraph
from anekit.mil.program import Function, Operation, Program
from anekit.mil.rewrite import Rebuild, rebuild
from anekit.mil.values import Value

__all__ = [
    "MIN_SCALE",
    "PEAK_LIMIT",
    "Norm",
    "Stream",
    "choose_alpha",
    "find_stream",
    "prescaled_rmsnorm",
    "scale_residual",
    "to_residual",
]

# A quarter of the matmul saturation (32752, N1): a projection's output is at most the
# difference of two stream values, so it stays under half the cliff. The norms reading the
# stream are max-abs prescaled: no RMS limit of their own.
PEAK_LIMIT = 32752.0 / 4
MIN_SCALE = 2.0**-24  # fp16's smallest step: no stream needs more
LAYOUT = frozenset({"reshape", "transpose", "squeeze", "expand_dims", "identity"})
WRITERS = frozenset({"conv", "linear", "matmul"})


# fp16's smallest normal: the floor of a row's max-abs in prescaled_rmsnorm (an all-zero row)
_ROW_FLOOR = 2.0**-14
_FP16_TINY = 2.0**-24  # the smallest fp16 step: epsilon terms below it are held at it


def prescaled_rmsnorm(
    b: Builder, x: Value, gain: Value | None, eps: float, name: str, axes: tuple[int, ...] = (2,)
) -> Value:
    """RMSNorm safe at any fp16 magnitude: ``x / m`` normalised, ``m`` each token's max |x|.

    ``rmsnorm`` needs RMS(x) < 256 (its sum of squares is stored in fp16); here the squares
    are of ``|x / m| <= 1``, so the sum is at most the channel count, and
    ``x / sqrt(mean(x^2) + eps) = (x/m) / sqrt(mean((x/m)^2) + (sqrt(eps)/m)^2)`` exactly.
    The max-abs prescale of tmc/apple's MIL norm (ANE_NUMERICS.md 1b), used where the
    residual stream is read (large "massive activation" channels, ``anekit.llm.residual``;
    converted programs' norms, ``anekit.passes.residual``). ``axes``: the normalised axes
    (default: the channel axis of ``[1, 1, C, N]``, ``anekit.nn``'s activations); ``gain``
    None: the unit norm alone.
    """
    d = math.prod(x.shape[a] for a in axes)
    m = b.reduce_max(x=b.abs(x=x, name=f"{name}_abs"), axes=list(axes), keep_dims=True,
                     name=f"{name}_max")  # fmt: skip
    m = b.maximum(x=m, y=_ROW_FLOOR, name=f"{name}_m")
    xs = b.real_div(x=x, y=m, name=f"{name}_xs")
    ss = b.reduce_sum_square(x=xs, axes=list(axes), keep_dims=True, name=f"{name}_ss")
    eps_m = b.square(x=b.real_div(x=max(math.sqrt(eps), _FP16_TINY), y=m), name=f"{name}_em")
    ms = b.add(x=b.mul(x=ss, y=1.0 / d, name=f"{name}_ms"), y=eps_m, name=f"{name}_eps")
    rstd = b.pow(x=ms, y=-0.5, name=f"{name}_rstd")
    if gain is None:
        return b.mul(x=xs, y=rstd, name=name)
    return b.mul(x=b.mul(x=xs, y=rstd, name=f"{name}_unit"), y=gain, name=name)


def to_residual(b: Builder, x: Value, alpha: float, name: str) -> Value:
    """``x`` scaled by alpha, the residual stream's scale, before it is projected into it.

    Scaling a projection's input scales its output, whether its weight is a program input
    or a constant, so the product itself stays inside the matmul range (N1 in
    docs/numerics.md; ``anekit.llm.residual``).
    """
    return x if alpha == 1.0 else b.mul(x=x, y=alpha, name=f"{name}_scaled")


def choose_alpha(peak: float) -> float:
    """The largest power of two <= 1 that keeps ``peak`` under :data:`PEAK_LIMIT`."""
    need = max(peak / PEAK_LIMIT, 1.0)
    if not math.isfinite(need):
        return MIN_SCALE
    return max(2.0 ** -math.ceil(math.log2(need)), MIN_SCALE)


@dataclass(frozen=True)
class Norm:
    """A norm reading the stream value ``x``: RMSNorm as exported, or a ``layer_norm`` op.

    ``out`` is the op whose output is ``x`` normalised (before any gain); ``inner`` the ops
    between (dropped when the norm is rewritten); ``eps`` and ``axes`` its own.
    """

    x: Value
    out: Operation
    inner: tuple[Operation, ...]
    eps: float
    axes: tuple[int, ...]
    kind: str  # "rms" | "layer_norm"


@dataclass
class Stream:
    """The residual stream of a function, as :func:`find_stream` found it."""

    values: dict[int, Value] = field(default_factory=dict)  # by id
    writers: dict[int, Operation] = field(default_factory=dict)  # projections writing into it
    norms: list[Norm] = field(default_factory=list)
    unsound: str | None = None  # why the program cannot be scaled (None: it can)

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.values.values()]


def _const(v: Any) -> np.ndarray | None:
    c = getattr(v, "const", None)
    return None if c is None or isinstance(c, str) else np.asarray(c)


def _scalar(v: Any) -> float | None:
    c = _const(v)
    return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None


def _only(graph: FunctionGraph, v: Value) -> Operation | None:
    users = graph.consumers(v)
    return users[0] if len(users) == 1 else None


def _rms_norm(graph: FunctionGraph, r: Operation) -> Norm | None:
    """The RMSNorm whose ``pow(., -0.5)`` / ``rsqrt`` is ``r``, or None."""
    if r.op_type == "pow" and _scalar(r.inputs.get("y")) != -0.5:
        return None
    e = r.inputs["x"].producer
    if e is None or e.op_type != "add":
        return None
    a, c = e.inputs["x"], e.inputs["y"]
    if _scalar(a) is not None:
        a, c = c, a
    eps, m = _scalar(c), a.producer
    if eps is None or m is None or m.op_type != "reduce_mean":
        return None
    sq = m.inputs["x"].producer
    if sq is None:
        return None
    if sq.op_type == "pow" and _scalar(sq.inputs.get("y")) == 2.0:
        x = sq.inputs["x"]
    elif sq.op_type == "mul" and sq.inputs["x"] is sq.inputs["y"]:
        x = sq.inputs["x"]
    elif sq.op_type == "square":
        x = sq.inputs["x"]
    else:
        return None
    u = _only(graph, r.outputs[0])
    if (
        u is None
        or u.op_type != "mul"
        or {id(u.inputs["x"]), id(u.inputs["y"])}
        != {
            id(x),
            id(r.outputs[0]),
        }
    ):
        return None
    inner = (sq, m, e, r)
    if any(_only(graph, op.outputs[0]) is None for op in inner):
        return None  # an intermediate read elsewhere: not only a norm
    axes = _const(m.inputs.get("axes"))
    keep = _const(m.inputs.get("keep_dims"))
    if axes is None or keep is None or not bool(keep):
        return None
    rank = len(x.shape)
    return Norm(x, u, inner, eps, tuple(int(a) % rank for a in axes.reshape(-1)), "rms")


def _layer_norm(op: Operation) -> Norm | None:
    eps = _scalar(op.inputs.get("epsilon"))
    axes = _const(op.inputs.get("axes"))
    if eps is None or axes is None:
        return None
    x = op.inputs["x"]
    return Norm(x, op, (), eps, tuple(int(a) % len(x.shape) for a in axes.reshape(-1)),
                "layer_norm")  # fmt: skip


def find_norms(fn: Function) -> list[Norm]:
    """Every RMSNorm (as exported) and ``layer_norm`` op of ``fn``, in program order."""
    graph = FunctionGraph(fn)
    norms = []
    for op in fn.ops:
        if op.op_type in ("pow", "rsqrt"):
            norm = _rms_norm(graph, op)
        elif op.op_type == "layer_norm":
            norm = _layer_norm(op)
        else:
            norm = None
        if norm is not None:
            norms.append(norm)
    return norms


def _writer(op: Operation) -> bool:
    """A projection whose output can be scaled through its input: constant weights."""
    if op.op_type in ("conv", "linear"):
        return _const(op.inputs.get("weight")) is not None
    if op.op_type == "matmul":  # one constant operand, the other the activation
        return (_const(op.inputs.get("x")) is None) != (_const(op.inputs.get("y")) is None)
    return False


def find_stream(fn: Function) -> Stream:
    """The residual stream of ``fn`` read by its norms, and whether scaling it is sound."""
    graph = FunctionGraph(fn)
    stream = Stream(norms=find_norms(fn))
    if not stream.norms:
        stream.unsound = "no RMSNorm or LayerNorm reads a residual stream"
        return stream
    readers = {id(op) for n in stream.norms for op in (n.out, *n.inner[:1])}
    todo = [n.x for n in stream.norms]
    while todo and stream.unsound is None:
        v = todo.pop()
        if id(v) in stream.values:
            continue
        if _const(v) is not None:
            stream.unsound = f"the constant {v.name!r} is added to the residual stream"
            break
        stream.values[id(v)] = v
        p = v.producer
        if p is None:
            stream.unsound = f"the residual stream starts at the program input {v.name!r}"
        elif p.op_type == "add":
            todo += [p.inputs["x"], p.inputs["y"]]
        elif p.op_type in LAYOUT:
            todo.append(p.inputs["x"])
        elif _writer(p):
            stream.writers[id(p)] = p
        else:
            stream.unsound = (
                f"{p.op_type} {p.name!r} writes into the residual stream and cannot be scaled"
            )
        for c in graph.consumers(v):
            if c.op_type == "add" or c.op_type in LAYOUT:
                todo.append(c.outputs[0])
            elif id(c) not in readers:
                stream.unsound = (
                    f"{c.op_type} {c.name!r} reads the residual stream {v.name!r} and is not "
                    "scale invariant"
                )
    return stream


def scale_residual(program: Program, alpha: float, stream: Stream | None = None) -> Program:
    """``program`` with its residual stream held at ``alpha`` (the module docstring).

    Raises ValueError when the stream cannot be scaled soundly (``find_stream``'s reason).
    ``alpha == 1`` still rewrites the norms into their prescaled form.
    """
    fn = program.main
    stream = find_stream(fn) if stream is None else stream
    if stream.unsound is not None:
        raise ValueError(stream.unsound)
    by_out = {id(n.out): n for n in stream.norms}
    dropped = {id(op) for n in stream.norms if n.kind == "rms" for op in n.inner}

    def rule(rb: Rebuild, op: Operation) -> bool:
        if id(op) in dropped:
            return True  # the exported norm's intermediates: replaced with it
        norm = by_out.get(id(op))
        if norm is not None:
            return _scaled_norm(rb, op, norm, alpha)
        if id(op) in stream.writers and alpha != 1.0:
            return _scaled_writer(rb, op, alpha)
        return False

    def finish(rb: Rebuild) -> None:
        if alpha == 1.0:
            return
        for v in fn.outputs:
            if id(v) in stream.values:
                rb.set(v, rb.b.mul(x=rb.get(v), y=1.0 / alpha, name=f"{v.name}_unscaled"))

    scaled = rebuild(Program({fn.name: fn}, version=program.version), rule, finish=finish)
    functions = {**program.functions, "main": scaled.functions[fn.name]}
    info = {**program.build_info, "anekit-residual-scale": f"{alpha:g}"}
    return Program(functions, version=program.version, build_info=info)


def _scaled_norm(rb: Rebuild, op: Operation, norm: Norm, alpha: float) -> bool:
    x = rb.get(norm.x)
    eps = norm.eps * alpha**2
    if norm.kind == "rms":
        rb.set(op.outputs[0], prescaled_rmsnorm(rb.b, x, None, eps, rb.name_for(op), norm.axes))
        return True
    params = {k: rb.get(v) for k, v in op.inputs.items()}
    params["epsilon"] = rb.b.const(np.asarray(eps, norm.x.dtype.numpy), name=f"{op.name}_eps")
    rb.set_outputs(op, rb.b.add_op(op.op_type, params, op.name))
    return True


def _scaled_writer(rb: Rebuild, op: Operation, alpha: float) -> bool:
    params = {k: rb.get(v) for k, v in op.inputs.items()}
    key = "x"
    if op.op_type == "matmul" and _const(op.inputs["x"]) is not None:
        key = "y"
    params[key] = to_residual(rb.b, params[key], alpha, f"{op.name}_in")
    bias = _const(op.inputs.get("bias"))
    if bias is not None:
        scaled = (bias.astype(np.float32) * np.float32(alpha)).astype(bias.dtype)
        params["bias"] = rb.const(scaled, f"{op.name}_bias_scaled")
    rb.set_outputs(op, rb.b.add_op(op.op_type, params, op.name))
    return True
