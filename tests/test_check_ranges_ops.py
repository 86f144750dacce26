"""Range transfer functions of the ops #25's first round left unbounded: einsum,
conv_transpose, the norms other than layer_norm, pooling, attention, pow, gelu, silu,
gather and the movement ops that also write values of their own (pad, band_part, concat,
one_hot, space_to_batch); and identity, cast, select, topk, relu6, clip, softplus, abs,
sign, square and the reductions l1/l2 norm, sum of squares and log-sum-exp. Each is declared once in the registry (``OpDef.ranges``).

Soundness: on random inputs inside random ranges, every value the golden model computes
(under "ideal" and under "m4") lies inside its propagated bound. Each case's op must get
a bound at all (unbounded would pass trivially).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.hw.ranges import propagate
from anekit.mil.program import Program

SEEDS = range(4)
Case = Callable[[np.random.Generator], tuple[Program, dict[str, tuple[float, float]]]]


def _uniform(rng: np.random.Generator, shape, lo: float, hi: float, dtype=np.float16):
    return rng.uniform(lo, hi, shape).astype(dtype)


def _ranges(rng: np.random.Generator, names, scale: float = 4.0, positive: bool = False):
    out = {}
    for name in names:
        a, b = sorted(rng.uniform(0.0 if positive else -scale, scale, 2).tolist())
        out[name] = (a, b + 0.25)
    return out


def _single(op: str, shape, extra: Callable[[mil.Builder, np.random.Generator, object], dict]):
    def case(rng):
        b = mil.Builder()
        x = b.input("x", shape, "fp16")
        b.output(b.add_op(op, {"x": x, **extra(b, rng, x)}), "y")
        return b.build(), _ranges(rng, ["x"])

    case.__name__ = op
    return case


def einsum_const(rng):
    b = mil.Builder()
    x = b.input("x", (3, 2, 5), "fp16")
    y = b.weight("w", _uniform(rng, (5, 2, 4), -2, 2))
    b.output(b.add_op("einsum", {"values": (x, y), "equation": "chw,whr->chr"}), "y")
    return b.build(), _ranges(rng, ["x"])


def einsum_runtime(rng):
    b = mil.Builder()
    x = b.input("x", (1, 3, 2, 5), "fp16")
    y = b.input("z", (1, 5, 2, 4), "fp16")
    b.output(b.add_op("einsum", {"values": (x, y), "equation": "nchw,nwhu->nchu"}), "y")
    return b.build(), _ranges(rng, ["x", "z"])


def conv_transpose(rng):
    b = mil.Builder()
    x = b.input("x", (1, 4, 3, 3), "fp16")
    params = {
        "x": x,
        "weight": b.weight("w", _uniform(rng, (4, 3, 2, 2), -1, 1)),
        "bias": b.weight("b", _uniform(rng, (6,), -1, 1)),
        "strides": np.array([2, 1], np.int32),
        "groups": np.array(2, np.int32),
    }
    b.output(b.add_op("conv_transpose", params), "y")
    return b.build(), _ranges(rng, ["x"])


def sdpa(rng):
    b = mil.Builder()
    q = b.input("q", (1, 2, 3, 4), "fp16")
    k = b.input("k", (1, 2, 5, 4), "fp16")
    v = b.input("v", (1, 2, 5, 6), "fp16")
    mask = b.weight("m", _uniform(rng, (3, 5), -3, 3))
    params = {"query": q, "key": k, "value": v, "attn_mask": mask}
    b.output(b.add_op("scaled_dot_product_attention", params), "y")
    return b.build(), _ranges(rng, ["q", "k", "v"])


def pow_positive(rng):
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    y = b.input("z", (2, 8), "fp16")
    b.output(b.add_op("pow", {"x": x, "y": y}), "y")
    ranges = _ranges(rng, ["x"], positive=True)
    ranges["x"] = (ranges["x"][0] + 0.1, ranges["x"][1])  # 0 ** negative is unbounded
    return b.build(), {**ranges, "z": (-2.0, 2.5)}


def pow_integer(rng):
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    exponent = np.array([[2.0], [3.0]], np.float16)
    b.output(b.add_op("pow", {"x": x, "y": b.weight("e", exponent)}), "y")
    return b.build(), _ranges(rng, ["x"])


def movement(rng):
    b = mil.Builder()
    x = b.input("x", (1, 2, 4, 4), "fp16")
    z = b.input("z", (1, 2, 4, 4), "fp16")
    c = b.add_op("concat", {"values": (x, z), "axis": np.array(1, np.int32)})
    s = b.add_op("stack", {"values": (x, z), "axis": np.array(0, np.int32)})
    pad = {"x": c, "pad": np.array([1, 1, 0, 2], np.int32), "constant_val": np.float16(9.0)}
    p = b.add_op("pad", pad)
    band = b.add_op(
        "band_part", {"x": p, "lower": np.array(0, np.int32), "upper": np.array(1, np.int32)}
    )
    g = b.add_op(
        "gather",
        {"x": band, "indices": np.array([3, 0, 2], np.int32), "axis": np.array(2, np.int32)},
    )
    blocks = {
        "x": x,
        "block_shape": np.array([2, 2], np.int32),
        "paddings": np.array([[0, 2], [2, 0]], np.int32),
    }
    stb = b.add_op("space_to_batch", blocks)
    for i, v in enumerate((s, g, stb)):
        b.output(v, f"y{i}")
    return b.build(), _ranges(rng, ["x", "z"])


def one_hot(rng):
    b = mil.Builder()
    i = b.input("i", (3,), "int32")
    params = {
        "indices": i,
        "one_hot_vector_size": np.array(4, np.int32),
        "on_value": np.float16(7.0),
        "off_value": np.float16(-2.0),
    }
    b.output(b.add_op("one_hot", params), "y")
    return b.build(), {"i": (0.0, 3.0)}


def _pool(op: str, **extra):
    def params(b, rng, x):
        return {
            "kernel_sizes": np.array([2, 3], np.int32),
            "strides": np.array([1, 2], np.int32),
            "pad_type": "same",
            **extra,
        }

    return _single(op, (1, 3, 5, 6), params)


def passing(rng):
    """identity, cast, select and topk pass values through; relu6 and clip clamp them."""
    b = mil.Builder()
    x, z = b.input("x", (2, 8), "fp16"), b.input("z", (2, 8), "fp16")
    h = b.add_op("identity", {"x": x})
    wide = b.add_op("cast", {"x": h, "dtype": "fp32"})
    narrow = b.add_op("cast", {"x": wide, "dtype": "fp16"})
    pick = b.add_op("select", {"cond": b.add_op("less", {"x": x, "y": z}), "a": narrow, "b": z})
    values, _ = b.add_op("topk", {"x": pick, "k": np.array(3, np.int32)})
    r6 = b.add_op("relu6", {"x": values})
    c = b.add_op("clip", {"x": pick, "alpha": np.float16(-1.5), "beta": np.float16(2.0)})
    b.output(r6, "y0")
    b.output(c, "y1")
    return b.build(), _ranges(rng, ["x", "z"], scale=8.0)


def softplus(rng):
    """Past x = 10.39 the m4 engine's exp saturates and softplus drops to 0 (N9): the bound
    must hold 0 as well."""
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    b.output(b.add_op("softplus", {"x": x}), "y")
    lo, hi = sorted(rng.uniform(-20.0, 20.0, 2).tolist())
    return b.build(), {"x": (lo, hi + 12.0)}


def reductions(rng):
    """abs, sign, square, then reduce_l1_norm, reduce_l2_norm, reduce_sum_square and
    reduce_log_sum_exp (its input kept where the engine's unshifted sum stays finite)."""
    b = mil.Builder()
    x = b.input("x", (2, 3, 8), "fp16")
    axes = {"axes": np.array([-1], np.int32), "keep_dims": True}
    for i, op in enumerate(("abs", "sign", "square")):
        b.output(b.add_op(op, {"x": x}), f"u{i}")
    for i, op in enumerate(("reduce_l1_norm", "reduce_l2_norm", "reduce_sum_square")):
        b.output(b.add_op(op, {"x": x, **axes}), f"r{i}")
    b.output(b.add_op("reduce_log_sum_exp", {"x": x, **axes}), "lse")
    lo, hi = sorted(rng.uniform(-6.0, 6.0, 2).tolist())
    return b.build(), {"x": (lo, hi + 0.25)}


CASES: list[Case] = [
    einsum_const,
    einsum_runtime,
    conv_transpose,
    _single(
        "batch_norm",
        (1, 3, 2, 2),
        lambda b, rng, x: {
            "mean": _uniform(rng, (3,), -1, 1),
            "variance": _uniform(rng, (3,), 0.1, 2),
            "gamma": _uniform(rng, (3,), -2, 2),
            "beta": _uniform(rng, (3,), -1, 1),
        },
    ),
    _single(
        "instance_norm",
        (1, 3, 2, 4),
        lambda b, rng, x: {"gamma": _uniform(rng, (3,), -2, 2), "beta": _uniform(rng, (3,), -1, 1)},
    ),
    _single("l2_norm", (2, 3, 2, 2), lambda b, rng, x: {}),
    _single(
        "local_response_norm",
        (1, 5, 2, 2),
        lambda b, rng, x: {"size": np.array(3, np.int32), "k": np.float16(0.5)},
    ),
    _pool("avg_pool"),
    _pool("avg_pool", exclude_padding_from_average=True),
    _pool("max_pool"),
    _pool("l2_pool"),
    _single(
        "upsample_bilinear",
        (1, 2, 3, 3),
        lambda b, rng, x: {
            "scale_factor_height": np.float32(2.0),
            "scale_factor_width": np.float32(1.5),
        },
    ),
    sdpa,
    pow_positive,
    pow_integer,
    _single("gelu", (4, 8), lambda b, rng, x: {"mode": "EXACT"}),
    _single("gelu", (4, 8), lambda b, rng, x: {"mode": "TANH_APPROXIMATION"}),
    _single("gelu", (4, 8), lambda b, rng, x: {"mode": "SIGMOID_APPROXIMATION"}),
    _single("silu", (4, 8), lambda b, rng, x: {}),
    movement,
    one_hot,
    passing,
    softplus,
    reductions,
]


def _sample(rng: np.random.Generator, program: Program, ranges) -> dict[str, np.ndarray]:
    inputs = {}
    for v in program.inputs:
        lo, hi = ranges[v.name]
        shape = tuple(v.type.shape)
        if v.type.dtype.is_float:
            value = rng.uniform(lo, hi, shape)
            value[..., 0] = lo  # the end points are the hard cases
            value[..., -1] = hi
            inputs[v.name] = value.astype(np.float16)
        else:
            inputs[v.name] = rng.integers(int(lo), int(hi) + 1, shape).astype(np.int32)
    return inputs


def assert_sound(case: Case, numerics: str, seeds=SEEDS) -> None:
    """Every value the golden model computes for ``case`` lies inside its bound (float outputs
    must be bounded; integer ones are checked where bounded)."""
    checked = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        program, ranges = case(rng)
        bounds = propagate(program.main, ranges)
        with anekit.compile(program, backend="reference", numerics=numerics) as kernel:
            for op, outs in kernel.taps(_sample(rng, program, ranges)):
                for name, array in outs.items():
                    kind = np.asarray(array).dtype.kind
                    bound = bounds.by_name.get(name)
                    if kind not in "fiu" or (kind != "f" and bound is None):
                        continue
                    assert bound is not None, f"{op.op_type} {name!r} is unbounded"
                    lo, hi = bound
                    slack = 2e-3 * max(abs(lo), abs(hi), 1.0)  # fp16 storage rounding
                    got = np.asarray(array, np.float64)
                    assert np.all(np.isfinite(got)), (op.op_type, name)
                    assert lo - slack <= got.min() and got.max() <= hi + slack, (
                        op.op_type,
                        name,
                        (lo, hi),
                        (float(got.min()), float(got.max())),
                    )
                    checked += 1
    assert checked >= len(seeds)


@pytest.mark.parametrize("numerics", ["ideal", "m4"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_every_golden_model_value_lies_inside_its_bound(case: Case, numerics: str) -> None:
    assert_sound(case, numerics)


def test_the_bounds_are_the_ones_derived_by_hand():
    """A few bounds computed here independently: einsum with a constant operand, conv_transpose
    per output channel, batch_norm per channel, l2_pool, pow with an odd integer exponent."""
    rng = np.random.default_rng(7)
    program, _ = einsum_const(rng)
    op = next(op for op in program.main.ops if op.op_type == "einsum")
    w = op.args().values[1].const.astype(np.float64)
    got = propagate(program.main, {"x": (-3.0, 2.0)}).by_name["y"]
    want = 3.0 * np.abs(w).sum(axis=0).max()
    assert got == pytest.approx((-want, want))

    program, _ = conv_transpose(rng)
    op = next(op for op in program.main.ops if op.op_type == "conv_transpose")
    w = np.abs(op.args().weight.const.astype(np.float64))  # [C_in 4, C_out/g 3, 2, 2], g 2
    per_out = [w[g * 2 : g * 2 + 2, c].sum() for g in range(2) for c in range(3)]
    bias = np.abs(op.args().bias.const.astype(np.float64)).max()
    want = 2.0 * max(per_out) + bias
    got = propagate(program.main, {"x": (-2.0, 1.0)}).by_name["y"]
    assert got == pytest.approx((-want, want))

    program = CASES[3](rng)[0]  # batch_norm
    op = next(op for op in program.main.ops if op.op_type == "batch_norm")
    m, v, g, b = (
        op.args().const(n).astype(np.float64) for n in ("mean", "variance", "gamma", "beta")
    )
    s = g / np.sqrt(v + np.float64(np.float16(1e-5)))
    ends = np.stack([(-1.0 - m) * s + b, (2.0 - m) * s + b])
    got = propagate(program.main, {"x": (-1.0, 2.0)}).by_name["y"]
    assert got == pytest.approx((ends.min(), ends.max()), rel=1e-4)

    program = _pool("l2_pool")(rng)[0]
    got = propagate(program.main, {"x": (-3.0, 1.0)}).by_name["y"]
    assert got == pytest.approx((0.0, np.sqrt(6) * 3.0))

    b = mil.Builder()
    x = b.input("x", (2,), "fp16")
    b.output(b.add_op("pow", {"x": x, "y": b.weight("e", np.array([3.0], np.float16))}), "y")
    assert propagate(b.build().main, {"x": (-2.0, 1.5)}).by_name["y"] == (-8.0, 8.0)


def test_pow_of_a_value_that_may_be_negative_by_a_fraction_is_unbounded():
    b = mil.Builder()
    x = b.input("x", (2,), "fp16")
    b.output(b.add_op("pow", {"x": x, "y": b.weight("e", np.array([0.5], np.float16))}), "y")
    assert propagate(b.build().main, {"x": (-1.0, 4.0)}).by_name["y"] is None
    assert propagate(b.build().main, {"x": (1.0, 4.0)}).by_name["y"] == (1.0, 2.0)


def test_log_sum_exp_is_unbounded_where_the_unshifted_sum_may_overflow():
    """N10: 32 exps of 7.7 pass 65504 in the engine's unshifted sum (it gives inf there)."""
    b = mil.Builder()
    x = b.input("x", (1, 32), "fp16")
    b.output(b.add_op("reduce_log_sum_exp", {"x": x, "axes": np.array([-1], np.int32)}), "y")
    program = b.build()
    assert propagate(program.main, {"x": (-1.0, 7.7)}).by_name["y"] is None
    lo, hi = propagate(program.main, {"x": (-1.0, 7.6)}).by_name["y"]
    assert (lo, hi) == pytest.approx((-1.0, 7.6 + np.log(32)))


def test_fp16_saturation_now_fires_after_an_einsum_and_a_conv_transpose():
    from anekit.hw.compat import check

    program, _ = einsum_const(np.random.default_rng(0))
    hits = [d for d in check(program, "m4", {"x": (-3e4, 3e4)}) if d.rule == "fp16-saturation"]
    assert [d.op for d in hits] == ["einsum"] and "assumed" in hits[0].message
    program, _ = conv_transpose(np.random.default_rng(0))
    hits = [d for d in check(program, "m4", {"x": (-3e4, 3e4)}) if d.rule == "fp16-saturation"]
    assert [d.op for d in hits] == ["conv_transpose"]
