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


def test_cliff_is_the_first_fall_below_half_the_best_so_far():
    # TFLOPS = flops / seconds / 1e12 with flops = 1e12: 1/seconds
    rows = [
        _row({}, 1.0, 1.0, x=1),
        _row({}, 0.5, 1.0, x=2),  # 2 TFLOPS, the best
        _row({}, 0.8, 1.0, x=4),  # 1.25: a dip, not a cliff
        _row({}, 1.5, 1.0, x=8),  # 0.67 < 1.0: the cliff
        _row({}, 4.0, 1.0, x=16),
    ]
    cliff = summary.cliff(list(reversed(rows)), "measured")
    assert cliff == {"x": 8, "tflops": pytest.approx(1 / 1.5), "best_before": 2.0}
    assert summary.cliff(rows, "predicted") is None
    assert summary.cliff(rows, "published") is None


def test_summarize_follows_the_suite_declaration():
    rows = [_row({"channels": c, "seq": 64}, 1.0, 1.0, x=c) for c in (256, 512)]
    s = summary.summarize(suites.SRAM, rows)
    assert set(s) == {"best_tflops", "cliff"}
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
