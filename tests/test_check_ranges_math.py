"""Range transfers of the ops the first two rounds left unbounded (``anekit.mil.ops.ranges_math``):
the activations with constants, log/rsqrt/inverse, the trig and hyperbolic functions, exp2,
round, mod, floor_div, cumsum, reduce_prod, reduce_log_sum, quantize and dequantize.

The soundness check is ``test_check_ranges_ops.assert_sound`` (every value the golden model
computes, under "ideal" and "m4", lies inside its propagated bound), run over cases whose
range ends are fp16 values (so no sample rounds outside them: tan and atanh are steep).
It catches a wrong transfer: elu bounded as relu, and an inverse that forgets N12's flush.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.hw.ranges import propagate
from anekit.mil.ops.ranges_math import SMALLEST_NORMAL
from tests.test_check_ranges_ops import Case, assert_sound


def _fp16_inside(lo: float, hi: float) -> tuple[float, float]:
    """The fp16 values nearest inside [lo, hi]."""
    a, b = np.float16(lo), np.float16(hi)
    a = a if a >= lo else np.nextafter(a, np.float16(np.inf))
    b = b if b <= hi else np.nextafter(b, np.float16(-np.inf))
    return float(a), float(b)


def _span(rng: np.random.Generator, lo: float, hi: float, sign: bool = False):
    a, b = sorted(rng.uniform(lo, hi, 2).tolist())
    if sign and rng.integers(2):
        a, b = -b, -a
    return _fp16_inside(a, b + 1e-3 * (hi - lo))


def _unary(op: str, lo: float, hi: float, params=lambda rng: {}, shape=(2, 8), sign=False,
           name: str | None = None) -> Case:  # fmt: skip
    def case(rng):
        b = mil.Builder()
        x = b.input("x", shape, "fp16")
        b.output(b.add_op(op, {"x": x, **params(rng)}), "y")
        return b.build(), {"x": _span(rng, lo, hi, sign)}

    case.__name__ = name or op
    return case


def _f16(rng, lo, hi) -> np.float16:
    return np.float16(rng.uniform(lo, hi))


def _binary(op: str) -> Case:
    def case(rng):
        b = mil.Builder()
        x, y = b.input("x", (2, 8), "fp16"), b.input("z", (2, 8), "fp16")
        b.output(b.add_op(op, {"x": x, "y": y}), "y")
        return b.build(), {"x": _span(rng, -10, 10), "z": _span(rng, 0.5, 4, sign=True)}

    case.__name__ = op
    return case


def flushed_then_inverted(rng):
    """exp of [-12, -9.7] is below 2^-14: m4 flushes it to 0 and inverse gives 1/epsilon."""
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    e = b.add_op("exp", {"x": x})
    b.output(b.add_op("inverse", {"x": e, "epsilon": np.float16(1e-3)}), "y")
    return b.build(), {"x": (-12.0, -9.75)}


def rms(rng):
    """RMSNorm's 1 / sqrt(mean(x^2) + eps) with a normal eps: bounded though x^2 may be 0."""
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    m = b.add_op("reduce_mean", {"x": b.add_op("square", {"x": x}), "axes": np.array([-1])})
    b.output(b.add_op("rsqrt", {"x": m, "epsilon": np.float16(1e-3)}), "y")
    return b.build(), {"x": _span(rng, -4, 4)}


def running(rng):
    b = mil.Builder()
    x = b.input("x", (3, 6), "fp16")
    flags = {"exclusive": bool(rng.integers(2)), "reverse": bool(rng.integers(2))}
    axis = np.array(int(rng.choice([0, 1, -1])), np.int32)
    b.output(b.add_op("cumsum", {"x": x, "axis": axis, **flags}), "y")
    return b.build(), {"x": _span(rng, -4, 4)}


def quantized(rng):
    """quantize (int8 output, checked too) then dequantize with another scale."""
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    scale = np.float16(rng.uniform(0.02, 0.1) * rng.choice([-1, 1]))
    params = {"input": x, "scale": scale, "zero_point": np.int8(3), "output_dtype": "int8"}
    q = b.add_op("quantize", params)
    back = {"input": q, "scale": np.float16(0.5), "zero_point": np.int8(-2)}
    b.output(q, "q")
    b.output(b.add_op("dequantize", back), "y")
    return b.build(), {"x": _span(rng, -6, 6)}


def _reduce(op: str, lo: float, hi: float) -> Case:
    return _unary(op, lo, hi, lambda rng: {"axes": np.array([-1], np.int32)}, shape=(2, 3, 4))


CASES: list[Case] = [
    _unary("softsign", -20, 20),
    _unary("elu", -6, 6, lambda rng: {"alpha": _f16(rng, -2, 2)}),
    _unary("leaky_relu", -6, 6, lambda rng: {"alpha": _f16(rng, -1, 1)}),
    _unary(
        "prelu",
        -6,
        6,
        lambda rng: {"alpha": rng.uniform(-2, 2, 3).astype(np.float16)},
        shape=(1, 3, 2, 4),
    ),  # fmt: skip
    _unary(
        "linear_activation",
        -6,
        6,
        lambda rng: {"alpha": _f16(rng, -3, 3), "beta": _f16(rng, -3, 3)},
    ),  # fmt: skip
    _unary(
        "scaled_tanh", -6, 6, lambda rng: {"alpha": _f16(rng, -2, 2), "beta": _f16(rng, -2, 2)}
    ),  # fmt: skip
    _unary(
        "sigmoid_hard", -6, 6, lambda rng: {"alpha": _f16(rng, -1, 1), "beta": _f16(rng, -1, 1)}
    ),  # fmt: skip
    _unary("threshold", -6, 6, lambda rng: {"alpha": _f16(rng, -2, 2)}),
    _unary("log", 0.01, 50),
    _unary("rsqrt", 0.01, 100),
    _unary("inverse", 0.05, 10, sign=True),
    _unary("exp2", -10, 10),
    _unary("round", -40, 40),
    _unary("tan", -1.3, 1.3),
    _unary("tan", 1.9, 4.3, name="tan_second_branch"),
    _unary("asin", -0.95, 0.95),
    _unary("acos", -0.95, 0.95),
    _unary("atan", -20, 20),
    _unary("atanh", -0.9, 0.9),
    _unary("sinh", -8, 8),
    _unary("cosh", -8, 8),
    _unary("tanh", -5, 5),
    _binary("mod"),
    _binary("floor_div"),
    running,
    _reduce("reduce_prod", -1.5, 1.5),
    _reduce("reduce_log_sum", 0.01, 5),
    quantized,
    flushed_then_inverted,
    rms,
]


@pytest.mark.parametrize("numerics", ["ideal", "m4"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_every_golden_model_value_lies_inside_its_bound(case: Case, numerics: str) -> None:
    assert_sound(case, numerics)


def _with_transfer(case: Case, op_type: str, transfer: Callable) -> Case:
    def wrong(rng):
        program, ranges = case(rng)
        for op in program.main.ops:
            if op.op_type == op_type:
                op.opdef = op.opdef.evolve(ranges=transfer)
        return program, ranges

    return wrong


def _naive_inverse(a, bound):  # 1 / (x + epsilon) without N12's flush of x
    x, e = bound(a.x), float(a.const("epsilon"))
    return (1.0 / (x[1] + e), 1.0 / (x[0] + e))


def test_the_check_catches_a_wrong_bound():
    elu_as_relu = _with_transfer(CASES[1], "elu", lambda a, bound: (0.0, max(bound(a.x)[1], 0.0)))
    for numerics in ("ideal", "m4"):
        with pytest.raises(AssertionError, match="elu"):
            assert_sound(elu_as_relu, numerics)
    naive = _with_transfer(flushed_then_inverted, "inverse", _naive_inverse)
    assert_sound(naive, "ideal")  # IEEE keeps the subnormals: the naive bound holds there
    with pytest.raises(AssertionError, match="inverse"):
        assert_sound(naive, "m4")  # flushed to 0: 1 / epsilon, above the naive bound


def _bound(op: str, interval, **params):
    b = mil.Builder()
    x = b.input("x", (4,), "fp16")
    b.output(b.add_op(op, {"x": x, **params}), "y")
    return propagate(b.build().main, {"x": interval}).by_name["y"]


def test_no_finite_bound_is_unbounded():
    assert _bound("log", (0.0, 4.0)) is None  # log(0): -inf (epsilon 1e-45 is 0 in fp16)
    assert _bound("log", (SMALLEST_NORMAL / 2, 4.0)) is None  # may be flushed to 0
    assert _bound("log", (SMALLEST_NORMAL, 4.0)) == pytest.approx((np.log(2.0**-14), np.log(4)))
    assert _bound("rsqrt", (-1.0, 4.0)) is None
    assert _bound("rsqrt", (0.0, 4.0), epsilon=np.float16(1e-5)) is None  # eps flushed too
    assert _bound("rsqrt", (0.0, 4.0), epsilon=np.float16(0.25)) == pytest.approx(
        (0.4851, 2.0), 1e-3
    )
    assert _bound("inverse", (-1.0, 1.0)) is None
    assert _bound("asin", (-1.01, 0.5)) is None and _bound("atanh", (0.0, 1.0)) is None
    assert _bound("tan", (1.0, 2.0)) is None  # across pi/2
    assert _bound("tan", (2.0, 4.0)) == pytest.approx((np.tan(2.0), np.tan(4.0)))
    assert _bound("cosh", (-1.0, 2.0)) == pytest.approx((1.0, np.cosh(2.0)))


def test_round_holds_n5s_half_away_store_exactly():
    """m4 rounds 1100 to 1101 (N5: the fp16 store of 1100.5 is a tie, away from zero): every
    fp16 value in [1000, 1100] and its negative against the bound, without slack."""
    values = (1000 + np.arange(201) / 2).astype(np.float16)
    assert _bound("round", (1000.0, 1100.0)) == (1000.0, 1101.0)
    assert _bound("round", (-1100.0, -1000.0)) == (-1101.0, -1000.0)
    b = mil.Builder()
    b.output(b.add_op("round", {"x": b.input("x", values.shape, "fp16")}), "y")
    program = b.build()
    for numerics, top in (("ideal", 1100.0), ("m4", 1101.0)):
        with anekit.compile(program, backend="reference", numerics=numerics) as kernel:
            got = np.asarray(kernel(x=values)["y"], np.float64)
            assert got.min() >= 1000.0 and got.max() == top
            got = np.asarray(kernel(x=-values)["y"], np.float64)
            assert got.max() <= -1000.0 and got.min() == -top


def test_mod_of_a_value_below_its_divisor_is_itself_and_quantize_clips():
    b = mil.Builder()
    x, y = b.input("x", (4,), "fp16"), b.input("z", (4,), "fp16")
    b.output(b.add_op("mod", {"x": x, "y": y}), "y")
    program = b.build()
    assert propagate(program.main, {"x": (0.5, 1.5), "z": (2.0, 3.0)}).by_name["y"] == (0.5, 1.5)
    assert propagate(program.main, {"x": (-4.0, 1.5), "z": (2.0, 3.0)}).by_name["y"] == (0.0, 3.0)
    assert propagate(program.main, {"x": (0.5, 1.5), "z": (-1.0, 3.0)}).by_name["y"] is None
    b = mil.Builder()
    q = {"input": b.input("x", (4,), "fp16"), "scale": np.float16(0.01), "output_dtype": "uint8"}
    b.output(b.add_op("quantize", q), "q")
    program = b.build()
    assert propagate(program.main, {"x": (-5.0, 0.5)}).by_name["q"] == (0.0, 50.0)
    assert propagate(program.main, {}).by_name["q"] == (0.0, 255.0)


def decompressed(rng):
    """linear layers whose weights are constexpr ops (affine per channel, blockwise with an
    offset): bounded through the decompressed weight's bound (K max|w| max|x|)."""
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    affine = {
        "quantized_data": rng.integers(-128, 128, (6, 8)).astype(np.int8),
        "zero_point": rng.integers(-5, 5, 6).astype(np.int8),
        "scale": rng.uniform(0.001, 0.02, 6).astype(np.float16),
        "axis": np.array(0, np.int32),
    }
    h = b.add_op("linear", {"x": x, "weight": b.add_op("constexpr_affine_dequantize", affine)})
    blockwise = {
        "data": rng.integers(-128, 128, (4, 6)).astype(np.int8),
        "scale": rng.uniform(0.001, 0.02, (4, 2)).astype(np.float16),
        "offset": rng.integers(-5, 5, (4, 2)).astype(np.int8),
    }
    w = b.add_op("constexpr_blockwise_shift_scale", blockwise)
    b.output(b.add_op("linear", {"x": h, "weight": w}), "y")
    return b.build(), {"x": _span(rng, -4, 4)}


@pytest.mark.parametrize("numerics", ["ideal", "m4"])
def test_linears_of_decompressed_weights_are_bounded(numerics):
    assert_sound(decompressed, numerics)
    program, _ = decompressed(np.random.default_rng(0))
    op = next(op for op in program.main.ops if op.op_type == "constexpr_affine_dequantize")
    a = op.args()
    want = (
        a.const("quantized_data").astype(np.float64) - a.const("zero_point")[:, None]
    ) * a.const("scale").astype(np.float64)[:, None]
    lo, hi = propagate(program.main, {"x": (-1.0, 1.0)}).by_name[op.outputs[0].name]
    assert lo <= want.min() and want.max() <= hi


def test_a_lut_weight_is_bounded_by_its_table():
    b = mil.Builder()
    x = b.input("x", (2, 8), "fp16")
    lut = np.linspace(-3, 2, 256).astype(np.float16).reshape(1, 1, 256, 1)
    indices = (np.arange(48).reshape(6, 8) * 5).astype(np.uint8)
    w = b.add_op("constexpr_lut_to_dense", {"indices": indices, "lut": lut})
    b.output(b.add_op("linear", {"x": x, "weight": w}), "y")
    bounds = propagate(b.build().main, {"x": (-1.0, 1.0)}).by_name
    assert bounds[w.name] == (-3.0, 2.0) and bounds["y"] == (-24.0, 24.0)
