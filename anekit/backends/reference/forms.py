"""Planned forms: ops rewritten to write into preallocated buffers, bit-identical to the registry.

Each entry of :data:`FORMS` maps an op name to a factory. At compile time the factory gets
a :class:`~anekit.backends.reference.planner.Context` (the op's value slots, its constants
already held as the reference receives them, its output types) and returns a
:class:`Form`, or None where this op instance has no planned form (another dtype, a
runtime weight, ...): the executor then calls the op's registry ``reference``.

Why a table here and not a field of ``OpDef``: a form is an execution strategy of this
backend (buffer slots, ``out=`` aliasing, liveness, in-place reuse), not a fact about the
op, and ``mil/`` must not learn about buffers. The registry stays the one definition of
what an op computes: every form replays its op's reference step by step on the same
operands (same NumPy calls in the same order, same memory layouts), only writing with
``out=``, so the results are the same bits. ``tests/test_reference_executor.py`` proves it
on every op case against the previous executor, and checks that every entry names a
registered op and is exercised by a case.

Layout rule: a NumPy ufunc allocates its result in the memory order of its inputs, so
for a transposed input it is not C-ordered, and SIMD loops and reduction orders follow
layout. A form that writes into a C-ordered buffer lists in ``ordered`` the input slots
whose layout it relies on; where one of them is not C-ordered at run time, the executor
runs the reference for that evaluation instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from anekit.mil.ops.conv import spatial_out, spatial_pads, window_view
from anekit.mil.ops.indexing import slice_items
from anekit.mil.ops.registry import const_ints

Env = list
Run = Callable[[Env], None]


@dataclass(frozen=True)
class Form:
    """A prepared op: ``run(env)`` computes its outputs from the value slots of ``env``.

    Attributes:
        run: writes every output into its buffer ``env[out]`` (``view=False``) or stores
            a new view of an input at ``env[out]`` (``view=True``).
        view: the outputs are views of the inputs (no buffer; they keep the inputs alive).
        ordered: input slots that must be C-ordered at run time (see the module docstring).
        inplace: input slots whose buffer the output may reuse when the input dies here.
    """

    run: Run
    view: bool = False
    ordered: tuple[int, ...] = ()
    inplace: tuple[int, ...] = ()


def _float32(*dtypes: np.dtype) -> bool:
    return all(d == np.float32 for d in dtypes)


# -- elementwise ------------------------------------------------------------------------------
def _binary(ufunc: np.ufunc, *, floats_only: bool = False, boolean: bool = False) -> Callable:
    """``ufunc(x, y)``, broadcasting, as the registry's elementwise binary reference."""

    def factory(c: Any) -> Form | None:
        x, y, o = c.slot("x"), c.slot("y"), c.out()
        dx, dy = c.dtype(x), c.dtype(y)
        if floats_only and not _float32(dx, dy):
            return None
        if not boolean and np.result_type(dx, dy) != c.dtype(o):
            return None  # NumPy would compute in another dtype than the buffer's
        return Form(
            lambda env: ufunc(env[x], env[y], out=env[o]),
            ordered=(x, y),
            inplace=c.same_layout(o, x, y),
        )

    return factory


def _unary(ufunc: np.ufunc, *, floats_only: bool = False) -> Callable:
    """``ufunc(x)``, as the registry's unary references ``lambda x: f(x)``."""

    def factory(c: Any) -> Form | None:
        x, o = c.slot("x"), c.out()
        if c.dtype(x) != c.dtype(o) or (floats_only and not _float32(c.dtype(x))):
            return None
        return Form(lambda env: ufunc(env[x], out=env[o]), ordered=(x,), inplace=(x,))

    return factory


def _float_chain(build: Callable[[int, int, Any], Run], *, inplace: bool = True) -> Callable:
    """A float32 formula of x (and const attributes) written as a chain of ``out=`` ufuncs."""

    def factory(c: Any) -> Form | None:
        x, o = c.slot("x"), c.out()
        if not _float32(c.dtype(x), c.dtype(o)):
            return None
        attrs = {n: c.const(n) for n in c.op.opdef.by_name if n != "x"}
        if not all(_float32(np.asarray(v).dtype) for v in attrs.values()):
            return None
        return Form(build(x, o, attrs), ordered=(x,), inplace=(x,) if inplace else ())

    return factory


def _sigmoid_into(x: np.ndarray, o: np.ndarray) -> None:
    # 1.0 / (1.0 + np.exp(-x)), one ufunc at a time
    np.negative(x, out=o)
    np.exp(o, out=o)
    np.add(o, 1.0, out=o)
    np.divide(1.0, o, out=o)


def _sigmoid(x: int, o: int, a: dict) -> Run:
    return lambda env: _sigmoid_into(env[x], env[o])


def _silu(x: int, o: int, a: dict) -> Run:
    def run(env: Env) -> None:
        _sigmoid_into(env[x], env[o])
        np.multiply(env[x], env[o], out=env[o])

    return run


def _relu(x: int, o: int, a: dict) -> Run:
    return lambda env: np.maximum(env[x], 0, out=env[o])


def _relu6(x: int, o: int, a: dict) -> Run:
    def run(env: Env) -> None:
        np.maximum(env[x], 0, out=env[o])
        np.minimum(env[o], 6, out=env[o])

    return run


def _clip(x: int, o: int, a: dict) -> Run:
    lo, hi = a["alpha"], a["beta"]

    def run(env: Env) -> None:
        np.maximum(env[x], lo, out=env[o])
        np.minimum(env[o], hi, out=env[o])

    return run


def _threshold(x: int, o: int, a: dict) -> Run:
    lo = a["alpha"]
    return lambda env: np.maximum(env[x], lo, out=env[o])


def _rsqrt(x: int, o: int, a: dict) -> Run:
    eps = a["epsilon"]

    def run(env: Env) -> None:  # 1.0 / np.sqrt(x + epsilon)
        np.add(env[x], eps, out=env[o])
        np.sqrt(env[o], out=env[o])
        np.divide(1.0, env[o], out=env[o])

    return run


def _inverse(x: int, o: int, a: dict) -> Run:
    eps = a["epsilon"]

    def run(env: Env) -> None:  # 1.0 / (x + epsilon)
        np.add(env[x], eps, out=env[o])
        np.divide(1.0, env[o], out=env[o])

    return run


def _log(x: int, o: int, a: dict) -> Run:
    eps = a["epsilon"]

    def run(env: Env) -> None:  # np.log(x + epsilon)
        np.add(env[x], eps, out=env[o])
        np.log(env[o], out=env[o])

    return run


def _linear_activation(x: int, o: int, a: dict) -> Run:
    alpha, beta = a["alpha"], a["beta"]

    def run(env: Env) -> None:  # alpha * x + beta
        np.multiply(alpha, env[x], out=env[o])
        np.add(env[o], beta, out=env[o])

    return run


def _scaled_tanh(x: int, o: int, a: dict) -> Run:
    alpha, beta = a["alpha"], a["beta"]

    def run(env: Env) -> None:  # alpha * np.tanh(beta * x)
        np.multiply(beta, env[x], out=env[o])
        np.tanh(env[o], out=env[o])
        np.multiply(alpha, env[o], out=env[o])

    return run


# -- reductions, softmax ----------------------------------------------------------------------
def _axes(c: Any) -> tuple[int, ...] | None:
    given = c.const("axes")
    return None if given is None else tuple(int(v) for v in np.ravel(given))


def _reduce(fn: Callable[..., Any], pre: np.ufunc | None = None, post: np.ufunc | None = None):
    """``post(fn(pre(x), axis, keepdims))`` for float32 x, as ``_reference_over_axes``."""

    def factory(c: Any) -> Form | None:
        x, o = c.slot("x"), c.out()
        if not _float32(c.dtype(x), c.dtype(o)):
            return None
        axis, keep = _axes(c), bool(c.const("keep_dims"))
        t = c.scratch(c.shape(x), np.float32) if pre is not None else x

        def run(env: Env) -> None:
            if pre is not None:
                pre(env[x], out=env[t])
            fn(env[t], axis=axis, keepdims=keep, out=env[o])
            if post is not None:
                post(env[o], out=env[o])

        return Form(run, ordered=(x,))

    return factory


def _softmax(c: Any) -> Form | None:
    x, o = c.slot("x"), c.out()
    if not _float32(c.dtype(x), c.dtype(o)):
        return None
    shape = list(c.shape(x))
    axis = int(c.const("axis"))
    shape[axis] = 1
    m = c.scratch(tuple(shape), np.float32)

    def run(env: Env) -> None:  # e = exp(x - max(x)); e / sum(e)
        xs, out, mm = env[x], env[o], env[m]
        np.max(xs, axis=axis, keepdims=True, out=mm)
        np.subtract(xs, mm, out=out)
        np.exp(out, out=out)
        np.sum(out, axis=axis, keepdims=True, out=mm)
        np.divide(out, mm, out=out)

    return Form(run, ordered=(x,), inplace=(x,))


# -- matrix products --------------------------------------------------------------------------
def _matmul(c: Any) -> Form | None:
    x, y, o = c.slot("x"), c.slot("y"), c.out()
    if not _float32(c.dtype(x), c.dtype(y), c.dtype(o)):
        return None
    tx, ty = bool(c.const("transpose_x")), bool(c.const("transpose_y"))

    def run(env: Env) -> None:
        a, b = env[x], env[y]
        if tx:
            a = np.swapaxes(a, -1, -2)
        if ty:
            b = np.swapaxes(b, -1, -2)
        np.matmul(a, b, out=env[o])

    return Form(run)


def _linear(c: Any) -> Form | None:
    x, o = c.slot("x"), c.out()
    if not c.is_const("weight") or not _float32(c.dtype(x), c.dtype(o)):
        return None
    wt = np.asarray(c.const("weight")).T  # the reference's np.asarray(weight).T, once
    if c.slot("bias") is not None and not c.is_const("bias"):
        return None
    bias = c.const("bias")
    if not _float32(wt.dtype) or (bias is not None and not _float32(np.asarray(bias).dtype)):
        return None

    def run(env: Env) -> None:
        np.matmul(env[x], wt, out=env[o])
        if bias is not None:
            np.add(env[o], bias, out=env[o])

    return Form(run)


def _conv(c: Any) -> Form | None:
    """``_conv_reference`` with the weight reshaped and the window geometry resolved once."""
    x, o = c.slot("x"), c.out()
    if not c.is_const("weight") or not _float32(c.dtype(x), c.dtype(o)):
        return None
    weight = np.asarray(c.const("weight"))
    if c.slot("bias") is not None and not c.is_const("bias"):
        return None  # a runtime bias (iOS17): the reference adds it
    bias = c.const("bias")
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float32).reshape(-1, *([1] * (weight.ndim - 2)))
    kernel, g = weight.shape[2:], int(c.const("groups"))
    strides, dilations = const_ints(c.const("strides")), const_ints(c.const("dilations"))
    n, ch, *sizes = c.shape(x)
    pads = spatial_pads(
        c.const("pad_type"), sizes, kernel, strides, dilations, const_ints(c.const("pad"))
    )
    out = spatial_out(sizes, pads, kernel, strides, dilations)
    nsp, taps, c_out = len(kernel), math.prod(kernel), weight.shape[0]
    plain = taps == 1 and set(strides) == {1} and not any(map(any, pads))
    w = np.asarray(weight, dtype=np.float32).reshape(g, c_out // g, -1)
    single = n == g == 1
    w0 = w[0]
    taps_axes = (range(2 + nsp, 2 + 2 * nsp), range(2, 2 + nsp))
    shape_cols = (n, g, (ch // g) * taps, -1)
    y_shape = (c_out, -1) if single else (n, g, c_out // g, -1)

    def run(env: Env) -> None:
        xs, ys = env[x], env[o]
        windows = xs if plain else window_view(xs, pads, out, kernel, strides, dilations, 0.0)
        if taps > 1:
            windows = np.moveaxis(windows, *taps_axes)
        cols = windows.reshape(shape_cols)
        if single:
            np.matmul(w0, cols[0, 0], out=ys.reshape(y_shape))
        else:
            np.matmul(w, cols, out=ys.reshape(y_shape))
        if bias is not None:
            np.add(ys, bias, out=ys)

    return Form(run)


# -- data movement ----------------------------------------------------------------------------
def _reshaped(c: Any) -> Form:
    """reshape, squeeze, expand_dims, flatten2d: ``x.reshape(output shape)``, a view or a copy."""
    x, o, shape = c.slot("x"), c.out(), c.out_shape()

    def run(env: Env) -> None:
        env[o] = env[x].reshape(shape)

    return Form(run, view=True)


def _transpose(c: Any) -> Form:
    x, o = c.slot("x"), c.out()
    perm = const_ints(c.const("perm")) if c.shape(x) else None

    def run(env: Env) -> None:
        env[o] = np.transpose(env[x], perm)

    return Form(run, view=True)


def _sliced(items: tuple, x: int, o: int) -> Form:
    def run(env: Env) -> None:
        env[o] = env[x][items]

    return Form(run, view=True)


def _slice_by_size(c: Any) -> Form | None:
    if not c.is_const("begin"):
        return None  # a runtime begin: the reference checks the window on every evaluation
    begin, size, shape = c.const("begin"), c.const("size"), c.shape(c.slot("x"))
    starts = const_ints(begin)
    items = []
    for d, b, s in zip(shape, starts, const_ints(size), strict=True):
        b = b + d if b < 0 else b
        items.append(slice(b, d if s == -1 else b + s))
    return _sliced(tuple(items), c.slot("x"), c.out())


def _slice_by_index(c: Any) -> Form:
    spec = {k: c.const(k) for k in c.op.opdef.by_name if k != "x"}
    items = slice_items(c.shape(c.slot("x")), spec)
    return _sliced(items, c.slot("x"), c.out())


def _concat(c: Any) -> Form | None:
    if bool(c.const("interleave")):
        return None
    values, o = c.slots("values"), c.out()
    if any(c.dtype(v) != c.dtype(o) for v in values):
        return None
    axis = int(c.const("axis")) % len(c.out_shape())

    def run(env: Env) -> None:
        np.concatenate([env[v] for v in values], axis=axis, out=env[o])

    return Form(run, ordered=values)


# Integer arithmetic that can overflow or divide by zero has no form: the registry's exact
# integer path (mil/ops/integers.py) runs instead, and raises where int32 would wrap.
FORMS: dict[str, Callable[[Any], Form | None]] = {
    # elementwise binary (elementwise.py _binary)
    "add": _binary(np.add, floats_only=True),
    "sub": _binary(np.subtract, floats_only=True),
    "mul": _binary(np.multiply, floats_only=True),
    "real_div": _binary(np.true_divide, floats_only=True),
    "pow": _binary(np.power, floats_only=True),
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "floor_div": _binary(np.floor_divide, floats_only=True),
    "mod": _binary(np.remainder, floats_only=True),
    "equal": _binary(np.equal, boolean=True),
    "not_equal": _binary(np.not_equal, boolean=True),
    "less": _binary(np.less, boolean=True),
    "less_equal": _binary(np.less_equal, boolean=True),
    "greater": _binary(np.greater, boolean=True),
    "greater_equal": _binary(np.greater_equal, boolean=True),
    "logical_and": _binary(np.logical_and, boolean=True),
    "logical_or": _binary(np.logical_or, boolean=True),
    "logical_xor": _binary(np.logical_xor, boolean=True),
    # elementwise unary (elementwise.py, the unary math loops)
    "exp": _unary(np.exp),
    "sqrt": _unary(np.sqrt),
    "ceil": _unary(np.ceil),
    "floor": _unary(np.floor),
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "tanh": _unary(np.tanh),
    "abs": _unary(np.abs, floats_only=True),
    "square": _unary(np.square, floats_only=True),
    "logical_not": _unary(np.logical_not),
    # activations and attribute formulas
    "relu": _float_chain(_relu),
    "relu6": _float_chain(_relu6),
    "sigmoid": _float_chain(_sigmoid),
    "silu": _float_chain(_silu, inplace=False),
    "clip": _float_chain(_clip),
    "threshold": _float_chain(_threshold),
    "rsqrt": _float_chain(_rsqrt),
    "inverse": _float_chain(_inverse),
    "log": _float_chain(_log),
    "linear_activation": _float_chain(_linear_activation),
    "scaled_tanh": _float_chain(_scaled_tanh),
    # reductions (reduction.py)
    "reduce_sum": _reduce(np.sum),
    "reduce_mean": _reduce(np.mean),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_sum_square": _reduce(np.sum, pre=np.square),
    "reduce_l1_norm": _reduce(np.sum, pre=np.abs),
    "reduce_l2_norm": _reduce(np.sum, pre=np.square, post=np.sqrt),
    "softmax": _softmax,
    # matrix products (linear.py, conv.py)
    "matmul": _matmul,
    "linear": _linear,
    "conv": _conv,
    # data movement (shape.py, indexing.py)
    "reshape": _reshaped,
    "squeeze": _reshaped,
    "expand_dims": _reshaped,
    "flatten2d": _reshaped,
    "transpose": _transpose,
    "slice_by_size": _slice_by_size,
    "slice_by_index": _slice_by_index,
    "concat": _concat,
}
