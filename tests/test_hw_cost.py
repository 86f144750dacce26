"""The cost model: each mechanism term, checked against the formula written out here,
and the section-7 calibration as a regression guard (no timing is measured)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.hw.chips import chips, get_chip
from anekit.hw.cost import analyze, estimate, padded_bytes

M4 = get_chip("m4")


def zeros(shape: tuple[int, ...], dtype=np.float16) -> np.ndarray:
    return np.broadcast_to(np.zeros((), dtype=dtype), shape)


def conv_chain(
    depth: int, c: int = 512, h: int = 64, w: int = 64, io: str = "fp16", w8a8: bool = False
):
    b = mil.Builder()
    x = b.input("x", (1, c, h, w), io)
    act = b.cast(x=x, dtype="fp16") if io == "fp32" else x
    for i in range(depth):
        if w8a8:
            weight = b.constexpr_affine_dequantize(
                quantized_data=zeros((c, c, 1, 1), np.int8),
                zero_point=np.int8(0),
                scale=np.float16(0.1),
                axis=0,
            )
            if i:
                act = b.dequantize(
                    input=b.quantize(input=act, scale=np.float16(0.1), output_dtype="int8"),
                    scale=np.float16(0.1),
                )
        else:
            weight = b.weight(f"w{i}", zeros((c, c, 1, 1)))
        act = b.conv(x=act, weight=weight)
    b.output(b.cast(x=act, dtype="fp32") if io == "fp32" else act, "y")
    return b.build()


def test_padding_rounds_the_last_axis_up_to_64_bytes():
    assert padded_bytes((1, 64, 1, 1), 2) == 64 * 64  # 2 bytes of data per row, 64 stored
    assert padded_bytes((1, 64, 1, 32), 2) == 64 * 64
    assert padded_bytes((3, 40), 2) == 3 * 128  # 80 bytes -> 128
    assert padded_bytes((), 4) == 4


def test_each_extra_conv_costs_its_flops_at_peak():
    c, hw = 512, 64 * 64
    deeper = estimate(conv_chain(128), "m4").seconds - estimate(conv_chain(64), "m4").seconds
    assert deeper == pytest.approx(64 * 2 * c * c * hw / M4.cost.peak_flops, rel=1e-9)


def test_int8_chains_run_at_the_int8_rate():
    fp16 = estimate(conv_chain(64), "m4").seconds - estimate(conv_chain(32), "m4").seconds
    int8 = (
        estimate(conv_chain(64, w8a8=True), "m4").seconds
        - estimate(conv_chain(32, w8a8=True), "m4").seconds
    )
    assert fp16 / int8 == pytest.approx(M4.cost.int8_speedup, rel=1e-9)


def test_a_single_op_pays_floor_and_io_so_deep_chains_get_closer_to_peak():
    one, deep = estimate(conv_chain(1), "m4"), estimate(conv_chain(128), "m4")
    io = 2 * 512 * 64 * 64 * 2
    assert one.seconds == pytest.approx(
        M4.cost.floor_s + io / M4.cost.io_bw + 2 * 512 * 512 * 4096 / M4.cost.peak_flops, rel=1e-9
    )
    assert (
        one.tflops < 0.4 * M4.cost.peak_flops / 1e12 < 0.9 * M4.cost.peak_flops / 1e12 < deep.tflops
    )


def test_fp32_io_is_slower_by_the_host_conversion():
    fp16, fp32 = estimate(conv_chain(4), "m4"), estimate(conv_chain(4, io="fp32"), "m4")
    elements = 2 * 512 * 64 * 64
    assert fp32.seconds - fp16.seconds == pytest.approx(elements / M4.cost.host_cast_rate, rel=1e-9)


def gemv(rows: int, cols: int, batch: int = 1):
    b = mil.Builder()
    x = b.input("x", (1, batch, cols), "fp16")
    b.output(b.matmul(x=x, y=b.weight("w", zeros((cols, rows)))), "y")
    return b.build()


def test_large_weights_stream_at_the_ane_dram_bandwidth():
    batched, big = estimate(gemv(512, 512, batch=4096), "m4"), estimate(gemv(32768, 4096), "m4")
    weight_s = 32768 * 4096 * 2 / M4.cost.dram_bw
    io_s = (padded_bytes((1, 1, 4096), 2) + padded_bytes((1, 1, 32768), 2)) / M4.cost.io_bw
    assert big.seconds == pytest.approx(M4.cost.floor_s + io_s + weight_s, rel=1e-9)
    assert batched.rows[-1].bound == "compute" and big.rows[-1].bound == "memory"


def matmul(n: int):
    b = mil.Builder()
    x, y = b.input("a", (1, n, n), "fp16"), b.input("b", (1, n, n), "fp16")
    b.output(b.matmul(x=x, y=y), "y")
    return b.build()


def test_the_sram_cliff_slows_ops_whose_working_set_overflows():
    rate = {n: (2 * n**3) / estimate(matmul(n), "m4").rows[-1].seconds for n in (2048, 4096, 8192)}
    assert rate[2048] == pytest.approx(M4.cost.peak_flops)  # 24 MB fits in the 32 MB
    assert rate[2048] > rate[4096] > rate[8192]
    # beyond the cliff everything runs at the spill rate: 1 / (1/peak + 1/spill)
    assert rate[8192] == pytest.approx(1 / (1 / M4.cost.peak_flops + 1 / M4.cost.spill_flops))


def test_large_intermediates_round_trip_dram():
    def two_convs(spatial: int) -> float:
        return estimate(conv_chain(2, c=64, h=1, w=spatial), "m4").seconds

    small = two_convs(16384)  # 2 MiB intermediate: stays on chip
    big = two_convs(65536)  # 8 MiB intermediate: written out and read back
    inter = 64 * 65536 * 2
    scale = 4  # every other term grows 4x with the spatial size
    assert big - scale * (small - M4.cost.floor_s) - M4.cost.floor_s == pytest.approx(
        2 * inter / M4.cost.io_bw, rel=1e-6
    )


def test_pointwise_ops_next_to_a_conv_are_fused_and_standalone_ones_are_not():
    b = mil.Builder()
    x = b.input("x", (1, 512, 1, 64), "fp16")
    b.output(b.relu(x=b.conv(x=x, weight=b.weight("w", zeros((512, 512, 1, 1))))), "y")
    fused = {r.op: r.seconds for r in estimate(b.build(), "m4").rows}
    assert fused["relu"] == 0.0
    b = mil.Builder()
    b.output(b.relu(x=b.input("x", (1, 512, 1, 64), "fp16")), "y")
    alone = {r.op: r.seconds for r in estimate(b.build(), "m4").rows}
    assert alone["relu"] == pytest.approx(512 * 64 / M4.cost.vector_flops)


def test_rows_add_up_and_name_their_bound():
    est = estimate(conv_chain(3, io="fp32"), "m4")
    assert est.seconds == pytest.approx(sum(r.seconds for r in est.rows))
    assert est.flops == pytest.approx(3 * 2 * 512 * 512 * 4096)
    assert {r.bound for r in est.rows} == {"compute", "memory", "overhead"}
    assert [r.op for r in est.rows[:3]] == ["(call)", "(io)", "(host cast)"]


def test_parsed_and_built_programs_cost_the_same():
    program = conv_chain(2)
    parsed = mil.parse(program.to_text(), {p: d for p, d in program.weight_files().items()})
    assert analyze(parsed).io_bytes == analyze(program).io_bytes
    assert estimate(parsed, "m5").seconds == pytest.approx(estimate(program, "m5").seconds)
    assert all(r.line is not None for r in estimate(parsed, "m5").rows if not r.op.startswith("("))


def test_every_chip_estimates_and_newer_chips_are_not_slower_on_deep_chains():
    seconds = {name: estimate(conv_chain(16), name).seconds for name in chips()}
    assert all(s > 0 and math.isfinite(s) for s in seconds.values())
    assert seconds["m1"] > seconds["m4"]
    with pytest.raises(ValueError, match="unknown chip"):
        estimate(conv_chain(1), "m9")


def load_benchmark():
    path = Path(__file__).parents[1] / "benchmarks" / "cost_model.py"
    spec = importlib.util.spec_from_file_location("cost_model_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_section7_calibration_stays_within_target():
    bench = load_benchmark()
    rows = bench.evaluate([e for e in bench.load_entries() if e.get("section7")])
    assert len(rows) == 16
    worst = max(rows, key=lambda r: max(r["ratio"], 1 / r["ratio"]))
    assert max(worst["ratio"], 1 / worst["ratio"]) <= 1.25, worst


def test_published_entries_follow_the_declared_split_and_name_their_path():
    from anekit.bench import published

    entries = published.entries()
    assert all(e["split"] == published.split_of(e) for e in entries)
    assert all(e["path"] in published.PATHS for e in entries)
    assert {e["split"] for e in entries} == set(published.SPLITS)


def _assert_unbiased(rows: list[dict]) -> None:
    """Median predicted/published within [0.9, 1.1]; neither side holds over 2/3 of them."""
    ratios = np.array([r["ratio"] for r in rows])
    above, below = int(np.sum(ratios > 1)), int(np.sum(ratios < 1))
    assert 0.9 <= float(np.median(ratios)) <= 1.1, (float(np.median(ratios)), above, below)
    assert max(above, below) <= 2 * len(rows) / 3, (above, below)


def test_held_out_predictions_are_not_biased():
    bench = load_benchmark()
    rows = bench.evaluate([e for e in bench.load_entries() if e["split"] == "holdout"])
    assert len(rows) >= 30
    _assert_unbiased(rows)


def test_latency_bound_programs_are_not_under_predicted():
    # before the per-path floor re-fit, 46 of these 60 were predicted too fast
    bench = load_benchmark()
    small = [
        e
        for e in bench.load_entries()
        if e["split"] in ("fit", "holdout") and e["seconds"] < bench.SMALL_S
    ]
    assert len(small) >= 50
    _assert_unbiased(bench.evaluate(small))


def test_the_floor_depends_on_the_runtime_path():
    m4 = get_chip("m4")
    inmem, e5rt = m4.facts["cost.floor_ms"].value, m4.facts["cost.floor_e5rt_ms"].value
    assert m4.cost.floor_s == m4.on_path("inmem").cost.floor_s == pytest.approx(inmem * 1e-3)
    assert m4.on_path("e5rt").cost.floor_s == m4.on_path("coreml").cost.floor_s
    assert m4.on_path("e5rt").cost.floor_s == pytest.approx(e5rt * 1e-3) != m4.cost.floor_s
    program = conv_chain(1, c=64, h=1, w=64)
    assert estimate(program, m4).rows[0].seconds == pytest.approx(inmem * 1e-3)
    gap = estimate(program, m4).seconds - estimate(program, m4.on_path("e5rt")).seconds
    assert gap == pytest.approx((inmem - e5rt) * 1e-3)
    with pytest.raises(ValueError, match="runtime path"):
        m4.on_path("coreml5")


def test_the_floor_fit_reads_no_held_out_entry_and_reproduces_the_profile():
    bench = load_benchmark()
    entries = bench.load_entries()
    fitted = bench.family_floors(entries)
    scrambled = [
        {**e, "seconds": e["seconds"] * 100} if e["split"] == "holdout" else e for e in entries
    ]
    assert bench.family_floors(scrambled) == fitted
    for name in ("m4", "m4-pro", "m4-max"):  # one engine, one floor: chips and estimate alike
        chip = get_chip(name)
        assert fitted[("H16", "inmem")] == pytest.approx(chip.cost.floor_s, rel=0.01)
        assert fitted[("H16", "e5rt")] == pytest.approx(chip.cost.e5rt_floor_s, rel=0.01)


def test_leaving_a_source_out_changes_only_what_it_fitted():
    bench = load_benchmark()
    entries = bench.load_entries()
    source = bench._source(next(e for e in entries if e["chip"] == "m4-max"))
    without = bench.family_floors(entries, leave_out=source)
    alone = [e for e in entries if bench._source(e) != source]
    assert without == bench.family_floors(alone)  # the source's entries are not read at all


def test_the_sram_cliff_reading_is_a_switch_between_both_published_thresholds():
    # 2048^2 matmul: operands of 8 MiB each, 24 MiB together
    n, rate = 2048, {}
    for reading in ("working_set", "per_operand"):
        chip = M4.with_sram_cliff(reading)
        rate[reading] = 2 * n**3 / estimate(matmul(n), chip).rows[-1].seconds
    assert M4.cost.sram_cliff == "working_set"  # the reading the section-7 GEMMs fit
    assert rate["working_set"] == pytest.approx(M4.cost.peak_flops)  # 24 MiB fit in 32 MB
    # per operand: 8 MiB / 2 MiB = 4x over the tile, 0.21 * 3 of the work at the spill rate
    spilled = 0.21 * (n * n * 2 / M4.cost.operand_tile_bytes - 1)
    seconds = 2 * n**3 * (1 / M4.cost.peak_flops + spilled / M4.cost.spill_flops)
    assert rate["per_operand"] == pytest.approx(2 * n**3 / seconds)
    with pytest.raises(ValueError, match="SRAM cliff"):
        M4.with_sram_cliff("tiles")
