"""Measurements that hold on a busy machine: interleaved rotating rounds, spread, thread pins.

No timing is asserted: the candidates record the order they ran in, and spreads are
computed from hand-made samples.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from anekit.bench import measure, report, runner, suites, threads
from anekit.bench.measure import Candidate, Settings, Timing
from anekit.errors import UsageError

ROUNDS = Settings(warmup=1, min_reps=4, max_reps=4, budget_s=0.0, min_sample_s=0.0)


def test_candidates_are_interleaved_in_rotating_order():
    calls: list[str] = []
    candidates = [Candidate(lambda n=n: calls.append(n)) for n in "abc"]
    timings = measure.time_interleaved(candidates, ROUNDS)
    # one warm-up and one calibration call each, then 4 rounds, round r starting at r mod 3
    assert calls[:6] == list("abcabc")
    rounds = ["".join(calls[6 + 3 * r : 9 + 3 * r]) for r in range(4)]
    assert rounds == ["abc", "bca", "cab", "abc"]
    assert [len(t.samples) for t in timings] == [4, 4, 4]


def test_queue_candidates_count_their_evaluations():
    seen = []

    class Kernel:
        def submit(self, **inputs):
            seen.append(inputs)
            return types.SimpleNamespace(result=lambda: None)

    c = measure.queue_candidate(Kernel(), {"x": 1}, 3)
    c.fn()
    assert (c.evaluations, len(seen)) == (3, 3)
    with pytest.raises(ValueError, match="at least 1"):
        measure.queue_candidate(Kernel(), {}, 0)


def test_spread_is_the_slow_rounds_over_the_fastest():
    steady = Timing((1.0, 1.1, 1.05, 1.2, 1.0, 1.1, 1.0, 1.1, 1.05, 1.0, 9.0), 1)
    # one stray pause in eleven rounds leaves the 90th percentile at 1.2
    assert steady.spread == pytest.approx(float(np.percentile(steady.samples, 90)))
    assert steady.spread < measure.NOISY_SPREAD and not steady.noisy
    busy = Timing((1.0, 3.0, 2.5, 1.1, 2.8), 1)
    assert busy.spread == pytest.approx(float(np.percentile(busy.samples, 90)) / 1.0)
    assert busy.noisy
    j = busy.as_json()
    assert (j["min_s"], j["noisy"], j["spread"]) == (1.0, True, busy.spread)


def test_pinned_limits_blas_threads_and_restores_them():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads() -> set[int]:
        return {
            p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"
        }

    before = blas_threads()
    with threads.pinned(1) as got:
        assert blas_threads() == {1}
        assert got["pinned"] and got["threads"] == 1
        assert got["pools"] and all(p["threads"] == 1 for p in got["pools"])
    assert blas_threads() == before
    assert threads.describe(got).startswith("threads: pinned to 1 (")


def test_pinned_pins_torch_only_if_already_imported(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(get_num_threads=lambda: 8, set_num_threads=calls.append)
    monkeypatch.setitem(sys.modules, "torch", fake)
    with threads.pinned(2) as got:
        assert calls == [2] and got["torch"] == 2
    assert calls == [2, 8]
    monkeypatch.delitem(sys.modules, "torch")
    with threads.pinned(2) as got:
        assert got["torch"] is None and "torch" not in sys.modules


def test_without_threadpoolctl_the_report_says_nothing_was_pinned(monkeypatch):
    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # import fails
    with threads.pinned(1) as got:
        assert not got["pinned"] and got["pools"] == []
    assert "NOT pinned" in threads.describe(got) and "threadpoolctl" in threads.describe(got)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_thread_counts_are_checked(bad):
    with pytest.raises(UsageError, match="threads: expected a whole number"):
        with threads.pinned(bad):
            pass


def test_compared_cases_are_grouped_and_others_are_alone():
    cases = [
        {"w8a8": q, "channels": 16, "height": 4, "width": 4, "io_dtype": "fp16", "depth": d}
        for d in (2, 3)
        for q in (False, True)
    ]
    assert runner.compare_groups(suites.INT8, cases) == [[0, 1], [2, 3]]
    assert runner.compare_groups(suites.SRAM, cases) == [[0], [1], [2], [3]]


TINY = Settings(warmup=1, min_reps=3, max_reps=3, budget_s=0.0, min_sample_s=0.0)
INT8_CASES = [
    {"w8a8": q, "channels": 16, "height": 4, "width": 4, "io_dtype": "fp16", "depth": 2}
    for q in (False, True)
]


@pytest.fixture(scope="module")
def int8_results():
    return runner.run(["int8"], backend="reference", cases={"int8": INT8_CASES}, settings=TINY)


def test_results_record_the_thread_pinning(int8_results):
    pinning = int8_results["threads"]
    assert pinning["threads"] == 1
    assert pinning["pinned"] == (sys.modules.get("threadpoolctl") is not None)
    speedup = int8_results["suites"]["int8"]["summary"]["speedups"][0]
    rows = int8_results["suites"]["int8"]["rows"]
    assert speedup["measured_min"] == pytest.approx(
        rows[0]["measured"]["min_s"] / rows[1]["measured"]["min_s"]
    )
    assert speedup["noisy"] == any(r["measured"]["noisy"] for r in rows)
    with pytest.raises(UsageError, match="threads"):
        runner.run(["int8"], backend="reference", cases={"int8": INT8_CASES}, threads=0)


def test_noisy_rows_and_their_speedups_are_flagged(int8_results):
    import copy

    results = copy.deepcopy(int8_results)
    suite = results["suites"]["int8"]
    for row in suite["rows"]:
        row["measured"]["noisy"] = False
    suite["summary"]["speedups"][0]["noisy"] = False
    quiet = report.console(results)
    assert report.NOISY_FLAG not in quiet
    suite["rows"][1]["measured"]["noisy"] = True
    suite["summary"]["speedups"][0]["noisy"] = True
    loud = report.console(results)
    assert loud.count(report.NOISY_FLAG) == 3  # the row, the speed-up, the closing warning
    assert "1 of 2 rows are NOISY" in loud
    assert "1 of 2 rows are NOISY" in report.markdown(results)
