"""Cases for reduce_*, reduce_argmax/argmin, softmax, topk, argsort and cumsum.

Expected values are computed independently: NumPy formulas in float64 written
here, torch float64 for softmax, and a stable torch sort for topk and argsort
(ties: first occurrence first, as the op promises).

Tolerances: the generic test feeds both sides the same fp16-rounded inputs, so
the only difference is the op's fp32 arithmetic and the final rounding to fp16.
That rounding is at most half an ulp, 2**-11 ~ 4.9e-4 relative; fp32 accumulation
over the <= 60 elements used here adds at most ~60 * 2**-24 * sum|x| ~ 1e-5
absolute. rtol = atol = 2e-3 (the Case default) covers both with a 4x margin and
still fails on any wrong axis, missing keep_dims or misplaced term, which change
results by O(1).
"""

from __future__ import annotations

import numpy as np
import torch

from tests.opcases import Case

SHAPE = (2, 3, 4)

# (label, axes, keep_dims, hand-computed output shape for SHAPE)
AXES_CONFIGS = [
    ("all", None, False, ()),
    ("all-keep", None, True, (1, 1, 1)),
    ("axis1", [1], False, (2, 4)),
    ("axis-1-keep", [-1], True, (2, 3, 1)),
    ("axes0,2", [0, 2], False, (3,)),
    ("axes-3,2-keep", [-3, 2], True, (1, 3, 1)),
    ("axes-2,-1", [-2, -1], False, (2,)),
]
# Every single axis of SHAPE, positive and negative, for reduce_sum.
SINGLE_AXES = [
    (0, (3, 4)),
    (1, (2, 4)),
    (2, (2, 3)),
    (-1, (2, 3)),
    (-2, (2, 4)),
    (-3, (3, 4)),
]


def _tuple(axes):
    return None if axes is None else tuple(axes)


# Independent float64 formulas; `axis` is a tuple or None, as NumPy takes it.
FORMULAS = {
    "reduce_sum": lambda x, axis, keep: np.sum(x, axis=axis, keepdims=keep),
    "reduce_mean": lambda x, axis, keep: np.mean(x, axis=axis, keepdims=keep),
    "reduce_max": lambda x, axis, keep: np.max(x, axis=axis, keepdims=keep),
    "reduce_min": lambda x, axis, keep: np.min(x, axis=axis, keepdims=keep),
    "reduce_prod": lambda x, axis, keep: np.prod(x, axis=axis, keepdims=keep),
    "reduce_l1_norm": lambda x, axis, keep: np.sum(np.abs(x), axis=axis, keepdims=keep),
    "reduce_l2_norm": lambda x, axis, keep: np.sqrt(np.sum(x * x, axis=axis, keepdims=keep)),
    "reduce_log_sum": lambda x, axis, keep: np.log(np.sum(x, axis=axis, keepdims=keep)),
    # the naive formula: float64 cannot overflow on these inputs
    "reduce_log_sum_exp": lambda x, axis, keep: np.log(np.sum(np.exp(x), axis=axis, keepdims=keep)),
    "reduce_sum_square": lambda x, axis, keep: np.sum(x * x, axis=axis, keepdims=keep),
}


def _positive(rng):
    return {"x": rng.uniform(0.5, 2.0, SHAPE).astype(np.float16)}


def _near_one(rng):
    """Magnitudes in [0.5, 1.5] with random signs: a product of 24 stays near 1."""
    sign = np.where(rng.random(SHAPE) < 0.5, -1.0, 1.0)
    return {"x": (sign * rng.uniform(0.5, 1.5, SHAPE)).astype(np.float16)}


def _small_ints(rng):
    """Integers in [-2, 2]: products of 24 of them fit in int32 (2**24)."""
    return {"x": rng.integers(-2, 3, SHAPE).astype(np.int32)}


INPUTS = {"reduce_log_sum": _positive, "reduce_prod": _near_one}


def _reduce_case(op, label, axes, keep, shape, dtype="fp16", make_inputs=None, integer=False):
    def build(b):
        b.output(getattr(b, op)(x=b.input("x", SHAPE, dtype), axes=axes, keep_dims=keep), "y")

    def expect(x):
        y = FORMULAS[op](x.astype(np.float64), _tuple(axes), keep)
        # integer results of mean/sqrt/log round toward zero
        return {"y": np.trunc(y) if integer else y}

    return Case(op, label, build, {"y": shape}, expect, make_inputs or INPUTS.get(op))


CASES = [
    _reduce_case(op, label, axes, keep, shape)
    for op in FORMULAS
    for label, axes, keep, shape in AXES_CONFIGS
]
CASES += [
    _reduce_case("reduce_sum", f"single-axis{axis}", [axis], False, shape)
    for axis, shape in SINGLE_AXES
]
CASES += [
    _reduce_case("reduce_sum", "fp32-axes0,1", [0, 1], False, (4,), dtype="fp32"),
    _reduce_case("reduce_max", "fp32-all", None, False, (), dtype="fp32"),
]
CASES += [
    _reduce_case(op, f"int32-{label}", axes, keep, shape, "int32", _small_ints, integer=True)
    for op in (
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "reduce_min",
        "reduce_prod",
        "reduce_l1_norm",
        "reduce_l2_norm",
        "reduce_sum_square",
    )
    for label, axes, keep, shape in (AXES_CONFIGS[0], AXES_CONFIGS[3], AXES_CONFIGS[4])
]


# -- reduce_argmax / reduce_argmin ----------------------------------------------------------------

ARG_SHAPE = (3, 4, 5)
# (axis, keep_dims, hand-computed output shape for ARG_SHAPE)
ARG_CONFIGS = [
    (0, False, (4, 5)),
    (1, True, (3, 1, 5)),
    (2, False, (3, 4)),
    (-1, True, (3, 4, 1)),
    (-2, False, (3, 5)),
    (-3, True, (1, 4, 5)),
]


def _first_index(x, axis, keep, pick):
    """Index of the first element equal to pick(x) along axis, without np.argmax."""
    n = x.shape[axis]
    positions = np.arange(n).reshape([n if i == axis % x.ndim else 1 for i in range(x.ndim)])
    hit = x == pick(x, axis=axis, keepdims=True)
    return np.min(np.where(hit, positions, n), axis=axis, keepdims=keep)


def _arg_case(op, label, axis, keep, shape, in_shape=ARG_SHAPE, dtype="fp16", **extra):
    pick = np.max if op == "reduce_argmax" else np.min

    def build(b):
        x = b.input("x", in_shape, dtype)
        b.output(getattr(b, op)(x=x, axis=axis, keep_dims=keep, **extra), "y")

    return Case(op, label, build, {"y": shape}, lambda x: {"y": _first_index(x, axis, keep, pick)})


CASES += [
    _arg_case(op, f"axis{axis}{'-keep' if keep else ''}", axis, keep, shape)
    for op in ("reduce_argmax", "reduce_argmin")
    for axis, keep, shape in ARG_CONFIGS
]
CASES += [
    # ints in [-5, 5] along 9 elements: ties are certain, the first one must win
    _arg_case(op, "int32-ties", -1, False, (4,), in_shape=(4, 9), dtype="int32")
    for op in ("reduce_argmax", "reduce_argmin")
]
CASES += [
    _arg_case("reduce_argmax", "uint16-output", 0, False, (5,), (7, 5), output_dtype="uint16"),
]


# -- softmax ---------------------------------------------------------------------------------------


def _softmax_case(label, axis, dtype="fp16", shape=SHAPE):
    def build(b):
        x = b.input("x", shape, dtype)
        b.output(b.softmax(x=x) if axis is None else b.softmax(x=x, axis=axis), "y")

    def expect(x):
        dim = -1 if axis is None else axis
        return {"y": torch.softmax(torch.from_numpy(x), dim=dim).numpy()}

    return Case("softmax", label, build, {"y": shape}, expect)


CASES += [
    _softmax_case("default-axis", None),
    _softmax_case("axis0", 0),
    _softmax_case("axis1", 1),
    _softmax_case("axis-2", -2),
    _softmax_case("fp32-axis2", 2, "fp32"),
    _softmax_case("rank1", 0, shape=(7,)),
]


# -- topk and argsort -------------------------------------------------------------------------------


def _stable_sort(x, axis, ascending):
    """Values and indices sorted along axis, equal values in their original order."""
    values, indices = torch.sort(
        torch.from_numpy(np.asarray(x, dtype=np.float64)),
        dim=axis,
        descending=not ascending,
        stable=True,
    )
    return values.numpy(), indices.numpy()


def _topk_case(label, in_shape, out_shape, dtype="fp16", *, take=None, axis=-1, **params):
    """``take``: how many sorted entries the op returns (k, or the axis length for k = -1)."""
    ascending = params.get("ascending", False)
    with_indices = params.get("return_indices", True)

    def build(b):
        out = b.topk(x=b.input("x", in_shape, dtype), axis=axis, **params)
        values, indices = out if with_indices else (out, None)
        b.output(values, "values")
        if with_indices:
            b.output(indices, "indices")

    def expect(x):
        values, indices = _stable_sort(x, axis, ascending)
        first = np.arange(take or params.get("k", 1))
        want = {"values": np.take(values, first, axis=axis)}
        if with_indices:
            want["indices"] = np.take(indices, first, axis=axis)
        return want

    shapes = {"values": out_shape, "indices": out_shape} if with_indices else {"values": out_shape}
    return Case("topk", label, build, shapes, expect)


CASES += [
    _topk_case("defaults", (2, 3, 4), (2, 3, 1)),
    _topk_case("k2-last", (3, 5), (3, 2), k=2),
    _topk_case("k3-axis0-ascending", (4, 3, 2), (3, 3, 2), axis=0, ascending=True, k=3),
    _topk_case("k-all-axis1", (2, 6, 3), (2, 6, 3), axis=1, k=6),
    _topk_case("axis-2", (2, 5, 3), (2, 2, 3), axis=-2, k=2),
    _topk_case("fp32", (2, 7), (2, 3), "fp32", k=3),
    _topk_case("int32-ties", (3, 9), (3, 4), "int32", k=4),
    _topk_case("int32-ties-ascending", (3, 9), (3, 4), "int32", ascending=True, k=4),
    _topk_case("int8-ios17", (2, 6), (2, 3), "int8", k=3),
    _topk_case("values-only", (3, 5), (3, 2), k=2, return_indices=False),
    _topk_case("k-minus-one", (2, 5), (2, 5), take=5, k=-1),
    _topk_case("uint16-indices", (2, 5), (2, 2), k=2, output_indices_dtype="uint16"),
]


def _argsort_case(label, shape, dtype="fp16", axis=None, ascending=None):
    params = {k: v for k, v in (("axis", axis), ("ascending", ascending)) if v is not None}

    def build(b):
        b.output(b.argsort(x=b.input("x", shape, dtype), **params), "y")

    def expect(x):
        return {"y": _stable_sort(x, -1 if axis is None else axis, bool(ascending))[1]}

    return Case("argsort", label, build, {"y": shape}, expect)


CASES += [
    _argsort_case("defaults", (3, 5)),
    _argsort_case("axis0-ascending", (4, 3), axis=0, ascending=True),
    _argsort_case("axis-2", (3, 4, 2), axis=-2),
    _argsort_case("int32-ties", (2, 9), "int32", axis=1),
    _argsort_case("int32-ties-ascending", (2, 9), "int32", ascending=True),
]


# -- cumsum ----------------------------------------------------------------------------------------


def _cumsum_case(label, axis=None, exclusive=None, reverse=None, dtype="fp16", shape=SHAPE):
    given = (("axis", axis), ("exclusive", exclusive), ("reverse", reverse))
    params = {k: v for k, v in given if v is not None}

    def build(b):
        b.output(b.cumsum(x=b.input("x", shape, dtype), **params), "y")

    def expect(x):
        ax = 0 if axis is None else axis
        data = np.flip(x, ax) if reverse else x
        total = np.cumsum(data, axis=ax)
        if exclusive:
            total = total - data  # exact for ints; ~1e-16 relative in float64
        return {"y": np.flip(total, ax) if reverse else total}

    return Case("cumsum", label, build, {"y": shape}, expect)


CASES += [
    _cumsum_case("defaults"),
    _cumsum_case("axis1", axis=1),
    _cumsum_case("axis2-exclusive", axis=2, exclusive=True),
    _cumsum_case("axis-1-reverse", axis=-1, reverse=True),
    _cumsum_case("axis0-exclusive-reverse", axis=0, exclusive=True, reverse=True),
    _cumsum_case("fp32-axis1-reverse", axis=1, reverse=True, dtype="fp32"),
    _cumsum_case("int32-exclusive-reverse", axis=-1, exclusive=True, reverse=True, dtype="int32"),
    _cumsum_case("rank1", axis=0, shape=(9,)),
]
