"""The precise variants (``numerics="m4:precise"``): every product of a dot product stored
in fp16 before the wide sum (N3, with N12's flush inside the dot product), checked against a
NumPy recipe written here (float64, rounding ties away from zero by hand, not with anekit's
fp16 helpers)."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.errors import UsageError
from anekit.hw.numerics import load_profile, numerics_profile, save_profile
from anekit.mil.program import Program

SATURATION = 32752.0  # N1, the m4 family's matmul saturation


def fp16_away(v: np.ndarray) -> np.ndarray:
    """Round float64 values to fp16 with ties away from zero, by hand: the quantum of each
    value's binade (subnormals share 2^-24), half a quantum up, overflow to inf."""
    a = np.abs(v)
    finite = np.isfinite(a)
    e = np.maximum(np.floor(np.log2(np.where(finite & (a > 0), a, 1.0))), -14.0)
    q = 2.0 ** (e - 10)
    r = np.where(finite, np.floor(a / q + 0.5) * q, a)
    return np.copysign(np.where(r > 65504.0, np.inf, r), v)


def flush(v: np.ndarray) -> np.ndarray:
    return np.where(np.abs(v) < 2.0**-14, 0.0 * v, v)


def engine_product(p: np.ndarray) -> np.ndarray:
    """N3 and N12: a product as the m4 engine holds it before summing."""
    return flush(fp16_away(p))


def engine_store(s: np.ndarray, saturation: float = SATURATION) -> np.ndarray:
    """An output as the m4 engine stores it: N1's saturation, ties away, flush."""
    return np.where(np.abs(s) > saturation, np.copysign(np.inf, s), flush(fp16_away(s)))


def spread(rng: np.random.Generator, shape) -> np.ndarray:
    """fp16 values over many binades (products reach the subnormal range and get flushed)."""
    mantissa = rng.uniform(-1, 1, shape)
    return (mantissa * 10.0 ** rng.uniform(-3.5, 1.5, shape)).astype(np.float16)


def run(program: Program, numerics: str, **inputs) -> dict[str, np.ndarray]:
    with anekit.compile(program, backend="reference", numerics=numerics) as k:
        return {name: np.asarray(v, np.float64) for name, v in k(**inputs).items()}


def test_the_precise_profile_is_the_family_profile_with_products_rounded():
    p, base = numerics_profile("m4:precise"), numerics_profile("m4")
    assert (p.name, p.family, p.products, base.products) == ("m4:precise", "A16", "fp16", "exact")
    assert p.rows["products"].catalogue == "N3" and p.rows["products"].status == "observed"
    assert numerics_profile("m2:precise").rows["products"].status == "assumed"  # A14: not seen
    assert numerics_profile("A13:precise").products == "fp16"
    assert numerics_profile(p) is p and not p.is_ideal
    with pytest.raises(UsageError, match="ideal:precise"):
        numerics_profile("ideal:precise")


def test_a_precise_profile_file_reads_back(tmp_path):
    path = save_profile(numerics_profile("m1:precise"), tmp_path / "p.json")
    back = load_profile(path)
    assert back == numerics_profile("m1:precise") and back.products == "fp16"


def matmul_program(m: int, k: int, n: int) -> Program:
    b = mil.Builder()
    x, y = b.input("x", (2, m, k), "fp16"), b.input("y", (2, k, n), "fp16")
    b.output(b.matmul(x=x, y=y, name="mm"), "out")
    return b.build()


@pytest.mark.parametrize("seed", range(3))
def test_matmul_matches_the_recipe(seed):
    rng = np.random.default_rng(seed)
    x, y = spread(rng, (2, 5, 48)), spread(rng, (2, 48, 7))
    products = x.astype(np.float64)[..., :, :, None] * y.astype(np.float64)[..., None, :, :]
    want = engine_store(engine_product(products).sum(axis=-2))
    got = run(matmul_program(5, 48, 7), "m4:precise", x=x, y=y)["out"]
    np.testing.assert_array_equal(got, want)
    plain = run(matmul_program(5, 48, 7), "m4", x=x, y=y)["out"]
    assert not np.array_equal(plain, want)  # the cheap default does not round the products


def test_linear_with_bias_and_conv_match_the_recipe():
    rng = np.random.default_rng(5)
    w, bias = spread(rng, (6, 32)), spread(rng, (6,))
    b = mil.Builder()
    x = b.input("x", (3, 32), "fp16")
    b.output(b.add_op("linear", {"x": x, "weight": b.weight("w", w), "bias": b.weight("b", bias)}))
    xv = spread(rng, (3, 32))
    products = xv.astype(np.float64)[:, None, :] * w.astype(np.float64)[None, :, :]
    want = engine_store(engine_product(products).sum(axis=-1) + bias.astype(np.float64))
    got = next(iter(run(b.build(), "m4:precise", x=xv).values()))
    np.testing.assert_array_equal(got, want)

    wc = spread(rng, (4, 3, 2, 3))  # [C_out, C_in, kh, kw], valid padding, stride 1
    b = mil.Builder()
    x = b.input("x", (1, 3, 4, 5), "fp16")
    b.output(b.conv(x=x, weight=b.weight("w", wc)), "y")
    xv = spread(rng, (1, 3, 4, 5))
    windows = np.lib.stride_tricks.sliding_window_view(xv.astype(np.float64), (2, 3), axis=(2, 3))
    # [n, C_in, H', W', kh, kw] x [C_out, C_in, kh, kw] -> [n, C_out, C_in, H', W', kh, kw]
    products = windows[:, None] * wc.astype(np.float64)[None, :, :, None, None, :, :]
    want = engine_store(engine_product(products).sum(axis=(2, 5, 6)), SATURATION)
    got = run(b.build(), "m4:precise", x=xv)["y"]
    np.testing.assert_array_equal(got, want)


def test_einsum_matches_the_recipe():
    rng = np.random.default_rng(9)
    x, y = spread(rng, (3, 2, 16)), spread(rng, (16, 2, 4))  # chw,whr->chr
    b = mil.Builder()
    xi, yi = b.input("x", x.shape, "fp16"), b.input("y", y.shape, "fp16")
    b.output(b.add_op("einsum", {"values": (xi, yi), "equation": "chw,whr->chr"}), "out")
    # out[c, h, r] = sum_w x[c, h, w] y[w, h, r]
    products = x.astype(np.float64)[:, :, :, None] * np.moveaxis(y, 0, 1).astype(np.float64)[None]
    want = engine_store(engine_product(products).sum(axis=2))
    np.testing.assert_array_equal(run(b.build(), "m4:precise", x=x, y=y)["out"], want)


def dot(k: int, x: float, w: float) -> tuple[Program, np.ndarray]:
    b = mil.Builder()
    xi = b.input("x", (1, k), "fp16")
    weight = b.weight("w", np.full((2, k), w, np.float16))
    b.output(b.add_op("linear", {"x": xi, "weight": weight}), "y")
    return b.build(), np.full((1, k), x, np.float16)


def test_subnormal_products_are_flushed_inside_the_dot_product():
    """N12 inside the dot product (anemll-forge's DeltaNet q.S): 256 products of 1e-5 each are
    below 2^-14, so the precise profile sums zeros where the exact sum 2.56e-3 is normal."""
    program, x = dot(256, 0.01, 0.001)
    assert run(program, "m4", x=x)["y"] == pytest.approx(np.full((1, 2), 2.56e-3), rel=2e-3)
    np.testing.assert_array_equal(run(program, "m4:precise", x=x)["y"], np.zeros((1, 2)))
    with anekit.compile(program, backend="reference", numerics="m4:precise") as k:
        k(x=x)  # the golden model says where the engine silently lost them
        row = k.events.first
        assert (row.op_type, row.flushed, row.saturated) == ("linear", 2 * 256, 0)
    np.testing.assert_array_equal(run(program, "m1:precise", x=x)["y"], np.zeros((1, 2)))


def test_overflowing_products_saturate_and_are_counted():
    program, x = dot(4, 300.0, 300.0)  # each product 90,000 > 65504; the sum is inf either way
    with anekit.compile(program, backend="reference", numerics="m4:precise") as k:
        assert np.all(np.isposinf(k(x=x)["y"]))
        assert k.events.first.op_type == "linear" and k.events.saturated >= 8  # 2 x 4 products


def test_conv_transpose_rounds_its_products_too():
    b = mil.Builder()  # the dot above as a conv_transpose: a 1x1 kernel over 256 channels
    xi = b.input("x", (1, 256, 1, 2), "fp16")
    weight = b.weight("w", np.full((256, 2, 1, 1), 0.001, np.float16))
    b.output(b.add_op("conv_transpose", {"x": xi, "weight": weight}), "y")
    xv = np.full((1, 256, 1, 2), 0.01, np.float16)
    assert run(b.build(), "m4", x=xv)["y"] == pytest.approx(
        np.full((1, 2, 1, 2), 2.56e-3), rel=2e-3
    )
    np.testing.assert_array_equal(run(b.build(), "m4:precise", x=xv)["y"], np.zeros((1, 2, 1, 2)))


def test_the_default_profile_keeps_its_fast_forms():
    """Only the precise variant pays for the products: under m4 the matmul runs its planned
    form; under m4:precise it runs the registry reference through the products hook."""
    program = matmul_program(4, 8, 4)
    with anekit.compile(program, backend="reference", numerics="m4") as k:
        assert k.plan.steps[0].form is not None
    with anekit.compile(program, backend="reference", numerics="m4:precise") as k:
        assert k.plan.steps[0].form is None and k.numerics == "m4:precise"


def test_diff_names_the_first_op_whose_products_were_flushed():
    program, x = dot(256, 0.01, 0.001)
    report = anekit.diff(program, {"x": x}, a="m4", b="m4:precise")
    assert report.b == "m4:precise" and report.first.op_type == "linear"
    assert report.first.max_error == pytest.approx(1.0)


def test_the_fast_product_store_agrees_with_the_general_one_and_the_recipe():
    """Every family stores ties away and flushes: that store runs on the float32 bits; the
    general one (any tie rule, e.g. a calibrated file) on NumPy's rounding. Both agree with the
    recipe, edges included (the band just below 2^-14, 65504 to 65520, inf, NaN)."""
    from dataclasses import replace

    from anekit.mil.ops.device import store_products

    rng = np.random.default_rng(3)
    values = rng.standard_normal(20000) * 10.0 ** rng.uniform(-9, 5, 20000)
    edges = [2.0**-14, 2.0**-14 - 2.0**-25, 2.0**-14 - 2.0**-26, 2.0**-14 - 2.0**-24, 65504.0,
             65519.0, 65520.0, 1e6, np.inf, -np.inf, 0.0, -0.0, 1.0 + 2.0**-11]  # fmt: skip
    p = np.concatenate([values, edges, [-e for e in edges]]).astype(np.float32)
    profile = numerics_profile("m4:precise")
    fast, general = p.copy(), np.asfortranarray(np.stack([p, p]))[0]  # not C-contiguous
    saturated, flushed = store_products(fast, profile)
    store_products(general, profile)
    want = engine_product(p.astype(np.float64))
    np.testing.assert_array_equal(fast, want)
    np.testing.assert_array_equal(general, want)
    assert saturated == int(np.sum(np.isfinite(p) & np.isinf(want)))
    assert flushed == int(np.sum((p != 0) & (want == 0)))
    even = p.copy()
    store_products(even, replace(profile, tie="even", flush_subnormals=False))
    np.testing.assert_array_equal(even, p.astype(np.float16).astype(np.float32))  # IEEE's
    nan = np.array([np.nan], np.float32)
    store_products(nan, profile)
    assert np.isnan(nan[0])


def test_attention_rounds_the_products_of_both_its_matmuls():
    """scaled_dot_product_attention under m4:precise: the scores' products and the products of
    the (fp16-rounded) softmax weights with the values, as the recipe does in float64."""
    rng = np.random.default_rng(11)
    q, k, v = (spread(rng, (1, 2, 4, 16)) for _ in range(3))
    b = mil.Builder()
    qi, ki, vi = (b.input(n, (1, 2, 4, 16), "fp16") for n in "qkv")
    b.output(b.add_op("scaled_dot_product_attention", {"query": qi, "key": ki, "value": vi}), "o")
    got = run(b.build(), "m4:precise", q=q, k=k, v=v)["o"]
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    scores = engine_product(q64[..., :, None, :] * k64[..., None, :, :]).sum(-1) / 4.0
    e = np.exp(scores - scores.max(-1, keepdims=True))
    weights = fp16_away(e / e.sum(-1, keepdims=True))
    want = engine_store(engine_product(weights[..., :, :, None] * v64[..., None, :, :]).sum(-2))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-6)
    plain = run(b.build(), "m4", q=q, k=k, v=v)["o"]
    assert not np.array_equal(plain, got)
