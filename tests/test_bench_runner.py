"""``anekit.bench.runner``: every suite at a tiny size on the reference backend.

Sizes come from the runner's ``cases`` override and a tiny timing budget, so the whole
file runs in seconds; the real ``--quick`` sweeps are exercised in test_bench_cli.py.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from anekit import hw
from anekit.bench import programs, published, runner, suites
from anekit.bench.measure import Settings

TINY = Settings(warmup=1, min_reps=2, max_reps=3, budget_s=1e-4, min_sample_s=0.0)

TINY_CASES = {
    "dispatch": [{"channels": 16, "seq": 8}],
    "matmul_scaling": [{"io_dtype": d, "n": 16} for d in ("fp16", "fp32")],
    "conv_vs_matmul": [{"form": f, "channels": 16, "seq": 8} for f in programs.PROJECTION_FORMS],
    "peak": [
        {"channels": 16, "height": 4, "width": 4, "io_dtype": "fp16", "depth": d} for d in (1, 3)
    ],
    "sram": [{"channels": c, "seq": 8} for c in (16, 32)],
    "int8": [
        {"w8a8": q, "channels": 16, "height": 4, "width": 4, "io_dtype": "fp16", "depth": 2}
        for q in (False, True)
    ],
    "io_dtype": [{"io_dtype": d, "channels": 16, "seq": 8} for d in ("fp16", "fp32")],
    "queue": [{"in_flight": n, "channels": 16, "seq": 8, "depth": 2} for n in (1, 3)],
}


@pytest.fixture(scope="module")
def results():
    return runner.run(backend="reference", chip="m4", cases=TINY_CASES, settings=TINY)


def _numbers(value, path="$"):
    """Every number in a JSON value, with where it is."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path, value


def test_schema(results):
    assert {"machine", "backend", "chip", "suites"} <= set(results)
    assert results["schema"] == runner.SCHEMA
    assert (results["backend"], results["chip"], results["quick"]) == ("reference", "m4", False)
    assert list(results["suites"]) == list(suites.SUITES)
    assert set(results["overhead"]) == {"reference"}
    assert set(results["overhead"]["reference"]) == {"run_s", "call_s", "submit_s"}
    for name, suite in results["suites"].items():
        assert {"title", "question", "rows", "summary", "findings", "x_label"} <= set(suite)
        assert len(suite["rows"]) == len(TINY_CASES[name])
        for row, params in zip(suite["rows"], TINY_CASES[name]):
            assert row["params"] == params
            assert row["program"] == suites.SUITES[name].program(params)
            assert {"median_s", "p25_s", "p75_s", "min_s", "max_s", "reps"} <= set(row["measured"])
            assert row["hardware"] is None  # the reference backend has no hardware clock


def test_json_is_strict_and_every_value_finite(results):
    text = json.dumps(results, allow_nan=False)  # raises on NaN or inf
    assert json.loads(text) == results
    for where, number in _numbers(results):
        assert math.isfinite(number), where
    for suite in results["suites"].values():
        for row in suite["rows"]:
            m = row["measured"]
            assert 0 < m["min_s"] <= m["p25_s"] <= m["median_s"] <= m["p75_s"] <= m["max_s"]
            assert m["reps"] >= TINY.min_reps
            for key in ("flops", "bytes", "predicted_s", "tflops_measured", "tflops_predicted"):
                assert row[key] is not None and row[key] > 0, key


def test_predictions_come_from_the_cost_model(results):
    for suite in results["suites"].values():
        for row in suite["rows"]:
            est = hw.estimate(programs.build(row["program"]), "m4")
            assert row["predicted_s"] == pytest.approx(est.seconds, rel=1e-12)
            assert (row["flops"], row["bytes"]) == (
                pytest.approx(est.flops),
                pytest.approx(est.bytes),
            )
            assert row["tflops_predicted"] == pytest.approx(est.flops / est.seconds / 1e12)
            m = row["measured"]["median_s"]
            assert row["tflops_measured"] == pytest.approx(row["flops"] / m / 1e12)


def test_flops_are_the_programs_work(results):
    # independent counts: 2 C^2 (H W) per 1x1 conv, 2 N^3 per matmul
    for row in results["suites"]["peak"]["rows"]:
        p = row["params"]
        assert row["flops"] == 2 * p["channels"] ** 2 * p["height"] * p["width"] * p["depth"]
    for row in results["suites"]["matmul_scaling"]["rows"]:
        assert row["flops"] == 2 * row["params"]["n"] ** 3
    conv_flops = {r["flops"] for r in results["suites"]["conv_vs_matmul"]["rows"]}
    assert conv_flops == {2 * 16 * 16 * 8}  # equal FLOPs across the three forms


def test_a_different_chip_changes_only_the_prediction():
    cases = {"peak": TINY_CASES["peak"][:1]}
    r = runner.run(["peak"], backend="reference", chip="M1", cases=cases, settings=TINY)
    assert r["chip"] == "m1"
    row = r["suites"]["peak"]["rows"][0]
    program = programs.build(row["program"])
    assert row["predicted_s"] == pytest.approx(hw.estimate(program, "m1").seconds)
    assert row["predicted_s"] != pytest.approx(hw.estimate(program, "m4").seconds)


def test_rows_carry_the_published_measurement_of_the_same_program():
    # one 1x1 conv, 256 channels, 64 tokens, fp32 I/O: maderix/ANE issue 3 on a Mac mini M4
    cases = {"dispatch": [{"channels": 256, "seq": 64}, {"channels": 16, "seq": 8}]}
    r = runner.run(["dispatch"], backend="reference", chip="m4", cases=cases, settings=TINY)
    hit, miss = r["suites"]["dispatch"]["rows"]
    assert [p["id"] for p in hit["published"]] == ["m4-single1x1-256"]
    assert hit["published"][0]["seconds"] == pytest.approx(0.106e-3)
    assert "github.com/maderix/ANE/issues/3" in hit["published"][0]["source"]
    assert miss["published"] == []
    assert r["suites"]["dispatch"]["summary"]["best_tflops"]["published"] == pytest.approx(
        2 * 256 * 256 * 64 / 0.106e-3 / 1e12
    )


def test_full_sweeps_cover_the_calibration_numbers():
    # ANE_NOTES section 7 timings our experiments reproduce, found by description alone
    matched = {
        p["id"]
        for suite in suites.SUITES.values()
        for params in suite.full
        for p in published.lookup("m4", suite.program(params))
    }
    expected = {"s7-chain128", "s7-chain64", "s7-w8a8-128", "s7-w8a8-64", "s7-matmul256"}
    expected |= {"s7-matmul2048", "s7-matmul4096", "s7-gemm512", "s7-gemm1024", "s7-gemm2048"}
    expected |= {"s7-gemm4096", "m4-single1x1-256", "m4-single1x1-4096", "m4-sp64-128x512"}
    assert expected <= matched


def test_quick_cases_build_and_are_costed():
    for suite in suites.SUITES.values():
        assert suite.quick and suite.full
        for params in suite.quick:
            est = hw.estimate(programs.build(suite.program(params)), "m4")
            assert est.seconds > 0 and est.flops > 0


def test_findings_name_their_sources(results):
    for name in ("dispatch", "int8", "io_dtype", "queue"):
        findings = results["suites"][name]["findings"]
        assert findings and all(f["source"] and f["text"] for f in findings)
    assert any("37 %" in f["text"] for f in results["suites"]["io_dtype"]["findings"])
    assert all(f["same_chip"] for f in results["suites"]["int8"]["findings"])
    other = published.findings("int8", "m5")
    assert other and not any(f["same_chip"] for f in other)


def test_plan_rejects_unknown_suites_and_keeps_order():
    names = [s.name for s, _ in runner.plan(["queue", "dispatch", "queue"], quick=True)]
    assert names == ["queue", "dispatch"]
    with pytest.raises(ValueError, match="unknown suite"):
        runner.plan(["matmul"])


def test_finite_json_replaces_non_finite_numbers():
    value = {"a": [np.float32(1.5), float("nan"), np.inf], "b": np.int64(3), "c": np.bool_(True)}
    assert runner.finite_json(value) == {"a": [1.5, None, None], "b": 3, "c": True}


def test_the_peak_suite_says_what_the_rating_means(results):
    rating = results["suites"]["peak"]["rating"]
    assert all(s["rating"] is None for n, s in results["suites"].items() if n != "peak")
    macs = 2 * 512 * 512 * 64 * 64 * 128  # 128 1x1 convs, 512 -> 512 channels, 64x64
    assert rating["rated_tops"] == 38 and rating["rated_precision"] == "int8"
    assert rating["published"]["fp16"] == pytest.approx(macs / 14.8e-3 / 1e12)  # 18.6 TFLOPS
    assert rating["published"]["w8a8"] == pytest.approx(macs / 7.8e-3 / 1e12)  # 35.1 TOPS
    for label, w8a8 in (("fp16", False), ("w8a8", True)):
        program = programs.build(suites.conv_chain(512, 64, 64, 128, "fp16", w8a8))
        expected = macs / hw.estimate(program, "m4").seconds / 1e12
        assert rating["predicted"][label] == pytest.approx(expected)
    assert "rated 38 TOPS" in rating["text"] and "93% of the rating" in rating["text"]
