"""Timing bookkeeping and suite summaries, on hand-made numbers and a counting kernel."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.bench import measure, programs, suites, summary
from anekit.bench.measure import Settings, Timing


def _row(params, measured, predicted, published=None, flops=1e12, x=0.0):
    return {
        "params": params,
        "x": x,
        "flops": flops,
        "measured": {"median_s": measured},
        "predicted_s": predicted,
        "published": [{"seconds": published}] if published else [],
    }


def test_timing_quartiles():
    samples = (5.0, 1.0, 4.0, 2.0, 3.0)
    j = Timing(samples, 2).as_json()
    assert (j["min_s"], j["p25_s"], j["median_s"], j["p75_s"], j["max_s"]) == (1, 2, 3, 4, 5)
    assert (j["reps"], j["evaluations_per_rep"]) == (5, 2)


def test_speedups_pair_rows_equal_but_for_the_compared_parameter():
    rows = [
        _row({"w8a8": False, "depth": 64}, 8.0, 4.0, published=7.5e-3),
        _row({"w8a8": True, "depth": 64}, 4.0, 2.5, published=4.0e-3),
        _row({"w8a8": False, "depth": 16}, 3.0, 1.0),
        _row({"w8a8": True, "depth": 16}, 1.0, 1.0),
        _row({"w8a8": True, "depth": 8}, 1.0, 1.0),  # no fp16 baseline: no entry
    ]
    got = summary.speedups(rows, "w8a8", False)
    assert [(s["params"], s["value"], s["over"]) for s in got] == [
        ({"depth": 64}, True, False),
        ({"depth": 16}, True, False),
    ]
    assert (got[0]["measured"], got[0]["predicted"]) == (2.0, 1.6)
    assert got[0]["published"] == pytest.approx(7.5 / 4.0)
    assert (got[1]["measured"], got[1]["predicted"], got[1]["published"]) == (3.0, 1.0, None)


def _sized(flops, seconds, x):
    return {**_row({}, seconds, seconds, x=x), "flops": flops}


def test_cliff_is_the_first_fall_of_the_marginal_rate_below_half_its_best():
    # a floor of 1 s, then 1e12 FLOPs per second: throughput rises with size but the
    # marginal rate (extra FLOPs over extra time) is flat at 1 TFLOPS until x=8
    rows = [
        _sized(1e12, 2.0, 1),
        _sized(2e12, 3.0, 2),  # marginal 1.0
        _sized(4e12, 5.0, 4),  # marginal 1.0
        _sized(8e12, 13.0, 8),  # marginal 4e12 / 8 s = 0.5: not below half
        _sized(16e12, 33.0, 16),  # marginal 8e12 / 20 s = 0.4 < 0.5: the cliff
    ]
    got = summary.cliff(list(reversed(rows)), "measured")
    assert got == {"x": 16, "marginal_tflops": pytest.approx(0.4), "best_before": 1.0, "fall": 0.4}
    assert summary.steepest_fall(rows[:4], "measured")["x"] == 8  # 0.5x, not yet a cliff
    # absolute throughput never falls here: 0.5, 0.67, 0.8, 0.62, 0.48 TFLOPS
    assert summary.cliff(rows[:4], "measured") is None
    assert summary.cliff(rows, "published") is None


def test_cliff_by_reading_uses_each_prediction():
    rows = [_sized(1e12 * x, 1.0 * x, x) for x in (1, 2, 4)]
    for r, slow in zip(rows, (1.0, 2.0, 10.0), strict=True):
        r["predicted_by_cliff"] = {"a": r["predicted_s"], "b": slow}
    s = summary.summarize(suites.SRAM, rows)
    assert s["predicted_cliff_by_reading"]["a"] == {"cliff": None, "steepest_fall": None}
    assert s["predicted_cliff_by_reading"]["b"]["cliff"]["x"] == 4


def test_summarize_follows_the_suite_declaration():
    rows = [_row({"channels": c, "seq": 64}, 1.0, 1.0, x=c) for c in (256, 512)]
    s = summary.summarize(suites.SRAM, rows)
    assert set(s) == {"best_tflops", "cliff", "steepest_fall", "predicted_cliff_by_reading"}
    s = summary.summarize(suites.INT8, [])
    assert set(s) == {"best_tflops", "speedups"}
    assert s["best_tflops"] == {"measured": None, "predicted": None, "published": None}


class _Counting(anekit.Kernel):
    """A kernel that only counts its evaluations."""

    backend = "counting"

    def __init__(self, program):
        super().__init__(program)
        self.evaluations = 0
        self.buffer = np.zeros((1, 16, 1, 16), np.float16)

    def evaluate(self, inputs):
        self.evaluations += 1
        return {"y": inputs["x"]}

    def run(self):
        self.evaluations += 1

    def input_buffer(self, name):
        return self.buffer

    def output_buffer(self, name):
        return self.buffer


SETTINGS = Settings(warmup=2, min_reps=3, max_reps=3, budget_s=0.0, min_sample_s=0.0)


def test_time_run_counts_warmup_calibration_and_repetitions():
    with _Counting(programs.floor_program()) as k:
        t = measure.time_run(k, SETTINGS)
        assert len(t.samples) == 3 and t.evaluations == 1
        assert k.evaluations == 2 + 1 + 3


def test_time_queue_samples_are_per_evaluation():
    with _Counting(programs.floor_program()) as k:
        inputs = measure.random_inputs(k)
        t = measure.time_queue(k, inputs, 5, SETTINGS)
        assert len(t.samples) == 3 and t.evaluations == 5
        assert k.evaluations == 5 * (2 + 1 + 3)
        with pytest.raises(ValueError, match="at least 1"):
            measure.time_queue(k, inputs, 0, SETTINGS)


def test_fast_calls_are_batched_to_the_minimum_sample_time():
    with _Counting(programs.floor_program()) as k:
        t = measure.time_run(k, Settings(0, 2, 2, budget_s=0.0, min_sample_s=0.01))
        assert t.evaluations > 1
        assert k.evaluations == 1 + 2 * t.evaluations


def test_load_buffers_writes_the_inputs_in_place():
    with anekit.compile(programs.floor_program(), backend="reference") as k:
        inputs = measure.random_inputs(k, seed=3)
        measure.load_buffers(k, inputs)
        k.run()
        np.testing.assert_array_equal(k.output_buffer("y"), np.maximum(inputs["x"], 0))
