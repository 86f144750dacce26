"""Range analysis in the checker: each range rule fires where a bound (computed here
independently, in NumPy) crosses the engine's envelope, and stays silent below it."""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.errors import UsageError
from anekit.hw.compat import check
from anekit.hw.numerics import numerics_profile
from anekit.hw.ranges import observed, propagate
from anekit.mil.program import Program

RANGE_RULES = {"fp16-saturation", "fp16-overflow", "slice-clamp", "subnormal-flush"}


def linear(w: np.ndarray, b: np.ndarray) -> Program:
    builder = mil.Builder()
    x = builder.input("x", (2, w.shape[1]), "fp16")
    y = builder.add_op(
        "linear", {"x": x, "weight": builder.weight("w", w), "bias": builder.weight("b", b)}
    )
    builder.output(builder.add_op("relu", {"x": y}), "y")
    return builder.build()


def rule_hits(diagnostics, rule):
    return [d for d in diagnostics if d.rule == rule]


def test_linear_bound_is_max_row_sum_of_abs_weights_times_input_plus_bias():
    rng = np.random.default_rng(0)
    w = rng.uniform(-3, 3, (4, 16)).astype(np.float16)
    b = rng.uniform(-1, 1, 4).astype(np.float16)
    prog = linear(w, b)
    ranges = propagate(prog.main, {"x": (-2.0, 5.0)})
    linear_out = prog.main.ops[-2].outputs[0]
    expected = (
        5.0 * np.abs(w.astype(np.float64)).sum(axis=1).max() + np.abs(b.astype(np.float64)).max()
    )
    assert ranges.bound(linear_out) == pytest.approx((-expected, expected))
    assert ranges.bound(prog.main.ops[-1].outputs[0]) == pytest.approx((0.0, expected))  # relu


def test_fp16_saturation_fires_above_the_family_limit_and_not_below():
    w = np.full((4, 16), 2.0, np.float16)  # row sum of |w| = 32
    b = np.zeros(4, np.float16)
    limit = numerics_profile("m4").matmul_saturation
    over = limit / 32 * 1.01  # bound just above the saturation
    under = limit / 32 * 0.99
    hits = rule_hits(check(linear(w, b), "m4", {"x": (-over, over)}), "fp16-saturation")
    assert len(hits) == 1 and hits[0].severity == "warning" and hits[0].op == "linear"
    assert f"{over * 32:.6g}" in hits[0].message and "not observed" in hits[0].message
    assert not rule_hits(check(linear(w, b), "m4", {"x": (-under, under)}), "fp16-saturation")


def test_range_rules_stay_silent_without_ranges():
    w = np.full((4, 16), 2.0e3, np.float16)
    found = check(linear(w, np.zeros(4, np.float16)), "m4")
    assert not {d.rule for d in found} & RANGE_RULES


def test_fp16_overflow_on_any_op():
    builder = mil.Builder()
    x = builder.input("x", (1, 8), "fp16")
    builder.output(builder.add_op("mul", {"x": x, "y": x}), "y")
    prog = builder.build()
    hits = rule_hits(check(prog, "m4", {"x": (-300.0, 200.0)}), "fp16-overflow")
    assert len(hits) == 1 and f"{300.0 * 300.0:.6g}" in hits[0].message  # (-300)^2 = 90000
    assert not rule_hits(check(prog, "m4", {"x": (-250.0, 250.0)}), "fp16-overflow")  # 62500


def slice_program(begin_width: int) -> Program:
    builder = mil.Builder()
    x = builder.input("x", (1, 4, 1, 64), "fp16")
    s = builder.add_op(
        "slice_by_index",
        {
            "x": x,
            "begin": np.array([0, 0, 0, begin_width], np.int32),
            "end": np.array([1, 4, 1, 64], np.int32),
        },
    )
    builder.output(s, "y")
    return builder.build()


def test_slice_clamp_fires_on_a_width_offset_slice_on_a_clamping_family_only():
    clamp = numerics_profile("m1").slice_clamp
    assert clamp is not None and numerics_profile("m4").slice_clamp is None
    big = {"x": (-clamp * 2, clamp * 2)}
    assert len(rule_hits(check(slice_program(8), "m1", big), "slice-clamp")) == 1
    assert not rule_hits(check(slice_program(0), "m1", big), "slice-clamp")  # no width offset
    assert not rule_hits(check(slice_program(8), "m4", big), "slice-clamp")  # family does not clamp
    small = {"x": (-clamp / 2, clamp / 2)}
    assert not rule_hits(check(slice_program(8), "m1", small), "slice-clamp")


def rmsnorm(eps: float) -> Program:
    builder = mil.Builder()
    x = builder.input("x", (1, 16), "fp16")
    sq = builder.add_op("mul", {"x": x, "y": x})
    mean = builder.add_op(
        "reduce_mean", {"x": sq, "axes": np.array([-1], np.int32), "keep_dims": True}
    )
    shifted = builder.add_op("add", {"x": mean, "y": np.array(eps, np.float16)})
    inv = builder.add_op("rsqrt", {"x": shifted})
    builder.output(builder.add_op("mul", {"x": x, "y": inv}), "y")
    return builder.build()


@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_subnormal_flush_fires_on_rmsnorm_eps_below_2_to_minus_14(eps):
    hits = rule_hits(check(rmsnorm(eps), "m4", {"x": (-1.0, 1.0)}), "subnormal-flush")
    assert len(hits) == 1 and hits[0].op == "rsqrt"
    assert f"{float(np.float16(eps)):.6g}" in hits[0].message  # the bound's low end is eps


def test_subnormal_flush_silent_with_a_normal_eps():
    assert 1e-3 > 2.0**-14
    assert not rule_hits(check(rmsnorm(1e-3), "m4", {"x": (-1.0, 1.0)}), "subnormal-flush")


def test_observed_overflow_is_an_error():
    w = np.full((4, 16), 2.0, np.float16)
    prog = linear(w, np.zeros(4, np.float16))
    seen = observed(
        [[("x", np.zeros((2, 16))), (prog.main.ops[-2].outputs[0].name, np.full((2, 4), 4.0e4))]]
    )
    hits = rule_hits(check(prog, "m4", observed=seen), "fp16-saturation")
    assert (
        len(hits) == 1
        and hits[0].severity == "error"
        and "observed [40000, 40000]" in hits[0].message
    )


def test_bad_ranges_are_usage_errors():
    prog = rmsnorm(1e-3)
    with pytest.raises(UsageError, match="not inputs"):
        check(prog, "m4", {"z": (0, 1)})
    with pytest.raises(UsageError, match="lo <= hi"):
        check(prog, "m4", {"x": (1, 0)})


def argmax_program(length: int) -> Program:
    builder = mil.Builder()
    x = builder.input("x", (2, length), "fp16")
    builder.output(builder.add_op("reduce_argmax", {"x": x, "axis": np.array(-1, np.int32)}), "i")
    return builder.build()


def test_index_precision_needs_no_ranges_and_fires_above_2048_only():
    hits = rule_hits(check(argmax_program(2049), "m4"), "index-precision")
    assert len(hits) == 1 and hits[0].op == "reduce_argmax" and "2049" in hits[0].message
    assert not rule_hits(check(argmax_program(2048), "m4"), "index-precision")


def conv_norm_program(w: np.ndarray, gamma: np.ndarray, eps: float = 1e-3) -> Program:
    builder = mil.Builder()
    x = builder.input("x", (1, 4, 1, 8), "fp16")
    h = builder.conv(x=x, weight=builder.weight("w", w))
    n = builder.add_op(
        "layer_norm",
        {
            "x": h,
            "axes": np.array([1], np.int32),
            "gamma": builder.weight("g", gamma),
            "epsilon": np.array(eps, np.float16),
        },
    )
    e = builder.add_op("exp", {"x": n})
    p = builder.add_op("softmax", {"x": e, "axis": np.array(1, np.int32)})
    builder.output(builder.add_op("reduce_sum", {"x": p, "axes": np.array([1, 3], np.int32)}), "y")
    return builder.build()


def test_conv_and_layer_norm_bounds_and_every_observed_value_inside_its_bound():
    import anekit

    rng = np.random.default_rng(1)
    w = rng.uniform(-1, 1, (6, 4, 1, 1)).astype(np.float16)
    gamma = rng.uniform(-2, 2, 6).astype(np.float16)
    prog = conv_norm_program(w, gamma)
    ranges = propagate(prog.main, {"x": (-3.0, 2.0)})
    ops = {op.op_type: op.outputs[0] for op in prog.main.ops}
    conv_bound = 3.0 * np.abs(w.astype(np.float64)).sum(axis=(1, 2, 3)).max()
    assert ranges.bound(ops["conv"]) == pytest.approx((-conv_bound, conv_bound))
    norm_bound = (
        np.sqrt(6 - 1) * np.abs(gamma.astype(np.float64)).max()
    )  # |standardized| <= sqrt(N-1)
    assert ranges.bound(ops["layer_norm"]) == pytest.approx((-norm_bound, norm_bound))
    assert ranges.bound(ops["reduce_sum"]) == (0.0, 48.0)  # softmax in [0, 1], 6 * 8 summed
    kernel = anekit.compile(prog, backend="reference", numerics="ideal")
    for seed in range(5):  # soundness: what the golden model computes lies inside the bounds
        x = np.random.default_rng(seed).uniform(-3, 2, (1, 4, 1, 8)).astype(np.float16)
        for op, outs in kernel.taps({"x": x}):
            for name, array in outs.items():
                lo, hi = ranges.by_name[name] or (-np.inf, np.inf)
                slack = 1e-3 * max(abs(lo), abs(hi), 1.0)  # fp16 storage rounding
                assert lo - slack <= float(np.min(array)) and float(np.max(array)) <= hi + slack, (
                    op.op_type
                )


def test_layer_norm_eps_below_2_to_minus_14_is_flagged():
    def flush_hits(eps):
        prog = conv_norm_program(np.ones((6, 4, 1, 1), np.float16), np.ones(6, np.float16), eps)
        return rule_hits(check(prog, "m4", {"x": (-1.0, 1.0)}), "subnormal-flush")

    hits = flush_hits(1e-5)
    assert len(hits) == 1 and hits[0].op == "layer_norm" and "epsilon" in hits[0].message
    assert not flush_hits(1e-3)


def test_conv_saturation_is_reported_as_assumed():
    prog = conv_norm_program(np.full((6, 4, 1, 1), 2.0, np.float16), np.ones(6, np.float16))
    limit = numerics_profile("m4").saturation("conv")
    x = limit / 8 * 1.01  # gain: sum |w| = 4 * 2
    hits = rule_hits(check(prog, "m4", {"x": (-x, x)}), "fp16-saturation")
    assert len(hits) == 1 and hits[0].op == "conv" and "assumed" in hits[0].message
    assert not rule_hits(check(prog, "m4", {"x": (-x / 1.02, x / 1.02)}), "fp16-saturation")
