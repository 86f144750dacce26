"""Numerics profiles: each catalogued value (docs/numerics.md) asserted on its chip family.

The expected values are the published observations (ANEForge, coremltools, anemll-forge,
cited per row in ``anekit/hw/data/numerics.json``), not outputs of anekit: 2049 ones sum
to 2050 (N4), a matmul summing to 33000 is inf while 32000 is exact (N1), round(1024) is
1025 (N5), softplus(10.3984) is 0 on M4 (N9), log(inf) is 0 and mul(inf, x) is -52416
(N8). The engine's storage is also checked against a rounding written here from
NumPy's own float16 conversion on a sample of every float32 exponent.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends.reference.device import CHUNK, DeviceRounder, storage_for
from anekit.errors import UsageError
from anekit.hw import numerics
from anekit.hw.numerics import MASK_MIN, numerics_profile, save_profile

A16 = ("m4", "m5")  # the family where N1, N5, N8 and N9 were seen
BEFORE_A16 = ("m1", "m2")


def run(build, numerics_name: str, **inputs: np.ndarray) -> tuple[dict, anekit.Kernel]:
    b = mil.Builder()
    build(b)
    kernel = anekit.compile(b.build(), backend="reference", numerics=numerics_name)
    return kernel(**inputs), kernel


def matmul_of_ones(k: int, total: float):
    def build(b):
        x = b.input("x", (1, k), "fp16")
        w = np.full((k, 2), total / k, np.float16)
        b.output(b.matmul(x=x, y=w, name="mm"), "y")

    return build


@pytest.mark.parametrize("chip", [*A16, "m2-pro"])
@pytest.mark.parametrize("k", [4, 8, 32, 64, 128])
def test_n1_matmul_saturates_above_32752_whatever_the_inner_dimension(chip: str, k: int) -> None:
    ones = np.ones((1, k), np.float16)
    exact, _ = run(matmul_of_ones(k, 32000.0), chip, x=ones)
    assert np.all(exact["y"] == 32000.0)
    over, kernel = run(matmul_of_ones(k, 33024.0), chip, x=ones)
    assert np.all(np.isposinf(over["y"]))
    assert kernel.events.first.op_type == "matmul" and kernel.events.saturated == 2
    ideal, _ = run(matmul_of_ones(k, 33024.0), "ideal", x=ones)
    assert np.all(ideal["y"] == 33024.0)  # IEEE fp16 holds it


def sum_of(n: int):
    def build(b):
        b.output(b.reduce_sum(x=b.input("x", (1, n), "fp16"), axes=[1]), "y")

    return build


@pytest.mark.parametrize("chip", ["m2-pro", "m5"])
def test_n4_2049_ones_sum_to_2050_and_2048_stay_exact(chip: str) -> None:
    got, _ = run(sum_of(2049), chip, x=np.ones((1, 2049), np.float16))
    assert got["y"][0] == 2050.0
    exact, _ = run(sum_of(2048), chip, x=np.ones((1, 2048), np.float16))
    assert exact["y"][0] == 2048.0
    ideal, _ = run(sum_of(2049), "ideal", x=np.ones((1, 2049), np.float16))
    assert ideal["y"][0] == 2048.0  # round to nearest even


def test_ties_go_away_from_zero_on_non_integer_ties_too() -> None:
    def build(b):
        b.output(b.add(x=b.input("x", (2,), "fp16"), y=np.float16(2.0**-11)), "y")

    x = np.array([1.0, -1.0 - 2.0**-10], np.float16)
    away, _ = run(build, "m4", x=x)
    assert away["y"].tolist() == [1.0 + 2.0**-10, -1.0 - 2.0**-10]
    even, _ = run(build, "ideal", x=x)
    assert even["y"].tolist() == [1.0, -1.0]


def rounding(b):
    b.output(b.round(x=b.input("x", (7,), "fp16")), "y")


@pytest.mark.parametrize("chip", A16)
def test_n5_round_is_half_away_and_corrupts_from_1024(chip: str) -> None:
    x = np.array([1024, -2047, 2.5, -0.5, 0.5, 1023.5, 7.25], np.float16)
    got, _ = run(rounding, chip, x=x)
    assert got["y"].tolist() == [1025, -2048, 3, -1, 1, 1024, 7]
    ideal, _ = run(rounding, "ideal", x=x)
    assert ideal["y"].tolist() == [1024, -2047, 2, -0.0, 0, 1024, 7]


def width_slice(begin_last: int):
    def build(b):
        x = b.input("x", (1, 2, 8), "fp16")
        y = b.slice_by_index(x=x, begin=[0, 0, begin_last], end=[1, 2, begin_last + 4])
        b.output(b.add(x=y, y=np.float16(0.0)), "y")
        z = b.slice_by_size(x=x, begin=[0, 0, begin_last], size=[1, 2, 4])
        b.output(b.add(x=z, y=np.float16(0.0)), "z")

    return build


@pytest.mark.parametrize("chip", BEFORE_A16)
def test_n7_width_offset_slices_clamp_above_4094_before_a16(chip: str) -> None:
    x = np.full((1, 2, 8), 5000.0, np.float16)
    x[..., ::2] = -4000.0
    got, kernel = run(width_slice(2), chip, x=x)
    for name in ("y", "z"):
        assert np.all(np.isposinf(got[name][..., 1::2])) and np.all(got[name][..., ::2] == -4000)
    assert {r.op_type for r in kernel.events.rows} == {"slice_by_index", "slice_by_size"}
    at_zero, _ = run(width_slice(0), chip, x=x)
    assert np.all(at_zero["y"][..., 1::2] == 5000.0)  # no width offset: no clamp
    m5, _ = run(width_slice(2), "m5", x=x)
    assert np.all(m5["y"][..., 1::2] == 5000.0)  # absent on A16


def test_n8_no_nan_comes_out_and_the_published_non_finite_values() -> None:
    inf = np.array([np.inf], np.float16)

    def build(b):
        x = b.input("x", (1,), "fp16")
        b.output(b.log(x=x), "log")
        b.output(b.softplus(x=x), "softplus")
        b.output(b.mul(x=x, y=np.float16(3.0)), "mul")
        b.output(b.cos(x=x), "cos")
        b.output(b.sub(x=x, y=x), "sub")

    got, kernel = run(build, "m5", x=inf)
    assert {k: float(v[0]) for k, v in got.items()} == {
        "log": 0.0,
        "softplus": 0.0,
        "mul": -52416.0,
        "cos": 0.0,
        "sub": 0.0,
    }
    rows = {r.name: (r.saturated, r.replaced) for r in kernel.events.rows}
    assert rows == {"log": (0, 1), "softplus": (1, 0), "mul": (0, 1), "cos": (0, 1), "sub": (0, 1)}
    ideal, _ = run(build, "ideal", x=inf)
    assert np.isposinf(ideal["log"][0]) and np.isnan(ideal["sub"][0])


@pytest.mark.parametrize("chip", ["m4", "m4-pro"])
def test_n9_softplus_drops_to_zero_between_10_3906_and_10_3984(chip: str) -> None:
    def build(b):
        x = b.input("x", (2,), "fp16")
        b.output(b.softplus(x=x), "sp")
        b.output(b.exp(x=x), "e")

    got, _ = run(build, chip, x=np.array([10.3906, 10.3984], np.float16))
    assert got["sp"][0] == np.float16(10.3906) and got["sp"][1] == 0.0
    assert 32500 < got["e"][0] < 32752 and np.isposinf(got["e"][1])


def test_n10_channel_logsumexp_overflows_where_32_exp_x_passes_65504() -> None:
    def build(b):
        b.output(b.reduce_log_sum_exp(x=b.input("x", (2, 32), "fp16"), axes=[1]), "y")

    x = np.stack([np.full(32, 7.6), np.full(32, 7.7)]).astype(np.float16)
    got, _ = run(build, "m4", x=x)
    assert abs(got["y"][0] - (7.6 + math.log(32))) < 0.02 and np.isposinf(got["y"][1])
    ideal, _ = run(build, "ideal", x=x)
    assert np.all(np.isfinite(ideal["y"]))


def test_n12_subnormal_results_are_flushed_and_counted() -> None:
    def build(b):
        x = b.input("x", (3,), "fp16")
        b.output(b.mul(x=x, y=x, name="sq"), "y")

    x = np.array([1e-3, -2e-3, 0.5], np.float16)
    got, kernel = run(build, "m4", x=x)
    assert got["y"].tolist() == [0.0, 0.0, 0.25]
    assert np.signbit(got["y"][1]) is np.False_  # (-2e-3)^2 is positive: a +0
    row = kernel.events.first
    assert (row.name, row.op_type, row.flushed, row.saturated) == ("y", "mul", 2, 0)
    ideal, _ = run(build, "ideal", x=x)
    assert ideal["y"][0] != 0.0


def fp16_away_written_here(x: np.ndarray) -> np.ndarray:
    """Nearest fp16 with ties away, from NumPy's round-to-even conversion, in float64."""
    x64 = x.astype(np.float64)
    even = x.astype(np.float16)
    away = np.nextafter(even, np.copysign(np.float16(np.inf), even)).astype(np.float64)
    e64 = even.astype(np.float64)
    tie = np.isfinite(e64) & (np.abs(x64 - e64) == np.abs(away - x64)) & (e64 != away)
    return np.where(tie, away, e64)


@pytest.mark.parametrize("tie", ["even", "away"])
@pytest.mark.parametrize(
    "low, high",
    [
        (0x33000000, 0x47900000),  # 2^-25 .. 2^16: every chunk meets a cliff
        (0x38800000, 0x477FE000),  # 2^-14 .. 65504: none does (the common case)
        (0x387F0000, 0x38810000),  # around 2^-14: [2^-14 - 2^-25, 2^-14) rounds up to it
    ],
)
@pytest.mark.parametrize("zeros", [True, False])
@pytest.mark.filterwarnings("ignore:overflow")
def test_the_storage_equals_a_rounding_written_from_numpys_conversion(
    tie: str, low: int, high: int, zeros: bool
) -> None:
    rng = np.random.default_rng(7)
    bits = rng.integers(low, high, 3 * CHUNK, dtype=np.uint32)
    bits[::3] &= 0xFFFFF000  # many exact ties
    bits[1::3] |= 0x80000000
    bits[-3:] = (0x387FF000,) + ((0, 0x80000000) if zeros else (1, 0x80000001))  # zeros or not
    bits[CHUNK - 3 : CHUNK] = (0x387FE000, 0x387FEFFF, 0xB87FF000)  # the 2^-14 edge
    x = bits.view(np.float32)
    profile = replace(numerics.families()["A16"], tie=tie)
    st = storage_for("add", None, profile)
    got = x.copy()
    counts = np.zeros(3, np.int64)
    DeviceRounder()(got, st, counts)
    want = fp16_away_written_here(x) if tie == "away" else x.astype(np.float16).astype(np.float64)
    want = np.where(np.abs(want) < 2.0**-14, 0.0, want)  # flushed (N12)
    assert np.array_equal(got.astype(np.float64), want)
    assert counts[1] == np.count_nonzero((np.abs(want) == 0) & (x != 0))
    assert counts[0] == np.count_nonzero(np.isinf(want))


def test_profiles_resolve_chips_aliases_families_and_the_environment(monkeypatch) -> None:
    assert numerics_profile("Apple M4 Pro").family == "A16"
    assert numerics_profile("m1").family == "A13" and numerics_profile("m1").slice_clamp == 4094
    assert numerics_profile("M5 Max").slice_clamp is None
    assert numerics_profile("ideal").is_ideal
    monkeypatch.setenv("ANEKIT_NUMERICS", "m2")
    assert numerics_profile().name == "m2"
    monkeypatch.setenv("ANEKIT_NUMERICS", "ideal")
    assert anekit.compile(_tiny(), backend="reference").numerics == "ideal"
    monkeypatch.delenv("ANEKIT_NUMERICS")
    assert anekit.compile(_tiny(), backend="reference").numerics == "m4"  # not on a Mac
    with pytest.raises(UsageError, match="expected 'ideal', a chip"):
        numerics_profile("m9")


def test_unmeasured_rows_are_labelled_assumed() -> None:
    a13 = {r.field: r.status for r in numerics_profile("m1").assumed()}
    assert {"matmul_saturation", "exp_saturation", "nonfinite", "round_ties"} <= set(a13)
    a16 = {r.field for r in numerics_profile("m4").assumed()}
    assert "matmul_saturation" not in a16 and "conv_saturation" in a16
    for row in numerics_profile("m2").rows.values():
        assert row.source and row.catalogue.startswith("N")


def test_a_profile_file_round_trips_and_bad_files_are_usage_errors(tmp_path) -> None:
    path = save_profile(numerics_profile("m2"), tmp_path / "p.json")
    loaded = numerics_profile(str(path))
    assert loaded == numerics_profile("m2") and loaded.origin == str(path)
    raw = json.loads(path.read_text())
    raw["version"] = 2
    (tmp_path / "v2.json").write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="expected version 1, found 2"):
        numerics_profile(str(tmp_path / "v2.json"))
    raw["version"] = 1
    raw["rows"]["tie"]["value"] = "up"
    (tmp_path / "tie.json").write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="row 'tie'"):
        numerics_profile(str(tmp_path / "tie.json"))


def _tiny() -> mil.Program:
    b = mil.Builder()
    b.output(b.add(x=b.input("x", (2,), "fp16"), y=np.float16(1.0)), "y")
    return b.build()


def test_storage_fp32_implies_ideal() -> None:
    assert anekit.compile(_tiny(), backend="reference", storage="fp32").numerics == "ideal"
    with pytest.raises(UsageError, match="implies numerics='ideal'"):
        anekit.compile(_tiny(), backend="reference", storage="fp32", numerics="m4")


def test_the_mask_constant_is_fp16_exact_and_inside_the_matmul_range() -> None:
    assert float(np.float16(MASK_MIN)) == MASK_MIN
    assert abs(MASK_MIN) < numerics_profile("m4").matmul_saturation
