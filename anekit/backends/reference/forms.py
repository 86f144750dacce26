"""Planned forms: ops rewritten to write into preallocated buffers, bit-identical to the registry.

An elementwise op declares its NumPy ufunc (or an ``out=`` formula) once, on its ``OpDef``
(:class:`~anekit.mil.ops.registry.Ufunc`): :func:`ufunc_form` derives its form from that.
Every other op with a form has an entry in :data:`FORMS` (conv, matmul, linear, softmax,
reductions and layout ops), mapping its name to a factory. At compile time a factory gets
a :class:`~anekit.backends.reference.planner.Context` (the op's value slots, its constants
already held as the reference receives them, its output types) and returns a
:class:`Form`, or None where this op instance has no planned form (another dtype, a
runtime weight, ...): the executor then calls the op's registry ``reference``.

Why these forms live here and not on ``OpDef``: they are execution strategies of this
backend (scratch buffers, views, resolved window geometry), and ``mil/`` must not learn
about buffers; a ufunc is a fact about the op. The registry stays the one definition of
what an op computes: every form replays its op's reference step by step on the same
operands (same NumPy calls in the same order, same memory layouts), only writing with
``out=``, so the results are the same bits. ``tests/test_reference_executor.py`` proves it
on every op case against the readable interpreter, and checks that every entry names a
registered op exercised by a case and that every ufunc op runs its derived form.

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


# -- elementwise: derived from the op's registry.Ufunc ----------------------------------------
def ufunc_form(c: Any) -> Form | None:
    """The form of an op that declares a :class:`~anekit.mil.ops.registry.Ufunc`.

    A ufunc runs on the tensor operands (``x``, or ``x`` and ``y`` broadcasting) into the
    output buffer, where NumPy would compute in the buffer's dtype (or the output is bool);
    an ``into`` formula runs on float32 ``x`` and float32 constant attributes.
    """
    spec = c.op.opdef.ufunc
    o = c.out()
    operands = tuple(c.slot(n) for n in ("x", "y") if n in c.op.opdef.by_name)
    dtypes = [c.dtype(s) for s in operands]
    if spec.floats and not _float32(*dtypes):
        return None
    inplace = c.same_layout(o, *operands) if spec.inplace else ()
    if spec.ufunc is not None:
        ufunc, out_dtype = spec.ufunc, c.dtype(o)
        if out_dtype != np.bool_ and np.result_type(*dtypes) != out_dtype:
            return None  # NumPy would compute in another dtype than the buffer's
        if len(operands) == 1:
            (x,) = operands
            return Form(lambda env: ufunc(env[x], out=env[o]), ordered=operands, inplace=inplace)
        x, y = operands
        return Form(
            lambda env: ufunc(env[x], env[y], out=env[o]), ordered=operands, inplace=inplace
        )
    (x,) = operands
    attrs = {n: c.const(n) for n in c.op.opdef.by_name if n != "x"}
    if not _float32(c.dtype(x), c.dtype(o), *(np.asarray(v).dtype for v in attrs.values())):
        return None
    into = spec.into
    return Form(lambda env: into(env[o], env[x], **attrs), ordered=(x,), inplace=inplace)


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
    # a lookup made a matmul (passes/gather.py): worth a look for one-hot columns
    lookup = plain and single and ch >= ONE_HOT_FROM and bool(np.isfinite(w0).all())

    def run(env: Env) -> None:
        xs, ys = env[x], env[o]
        if not (lookup and _one_hot_product(w0, xs.reshape(ch, -1), ys.reshape(y_shape))):
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


ONE_HOT_FROM = 1024  # input channels from which a 1x1 conv checks for one-hot columns


def _one_hot_product(w: np.ndarray, cols: np.ndarray, y: np.ndarray) -> bool:
    """``y = w @ cols`` by gathering w's columns where each column of ``cols`` is one-hot.

    Each output of such a product sums one ``w[c, k] * 1`` and zeros, exactly, so the
    BLAS product is ``w[c, k]``, or +0 where that is -0 or the column is all zeros (the
    accumulator starts at +0): the same bits, without the matmul (a one-hot embedding
    over a 16k-row chunk of BERT's vocabulary: 28 ms as a product, 2.5 ms so). ``w``
    must be finite (0 x inf is NaN in the product). False, and ``y`` untouched, where a
    column has more than one non-zero or a value other than 1.
    """
    tokens = cols.T  # token-major: the memory order of a lookup's one-hot (a transpose)
    bits = tokens.view(np.uint32)  # -0 counts as non-zero: it is no one-hot value
    if np.count_nonzero(bits[0]) > 1:
        return False  # an activation, rejected in microseconds
    nonzero = np.count_nonzero(bits)
    if nonzero > len(tokens):
        return False
    rows = bits.argmax(axis=1)  # each token's non-zero, if it has one
    token = np.arange(len(tokens))
    hit = bits[token, rows] != 0
    if np.count_nonzero(hit) != nonzero:
        return False  # a token with two non-zeros (then another has none)
    where, rows = token[hit], rows[hit]
    if not (tokens[where, rows] == 1).all():
        return False
    if where.size < len(tokens):
        y.fill(0)
    y[:, where] = np.take(w, rows, axis=1)
    y += np.float32(0)  # -0 + 0 = +0: as the product sums
    return True


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


# Elementwise ops have no entry: their form derives from their registry.Ufunc (ufunc_form).
FORMS: dict[str, Callable[[Any], Form | None]] = {
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
