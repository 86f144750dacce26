"""The cost model without contradictions: one floor per chip, a likely range, compression facts."""

from __future__ import annotations

import json

import pytest

from anekit import mil
from anekit.cli import main
from anekit.hw.chips import chips, get_chip
from anekit.hw.cost import estimate
from anekit.llm.config import config_from_hf
from anekit.llm.cost import estimate_llm, published


def _relu() -> mil.Program:
    b = mil.Builder()
    b.output(b.relu(x=b.input("x", (1, 64, 1, 64), "fp16")), "y")
    return b.build()


def test_chips_shows_the_floor_estimate_uses(capsys) -> None:
    assert main(["chips", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["chips"]
    for name in chips():
        (call,) = [r for r in estimate(_relu(), name).rows if r.op == "(call)"]
        assert call.seconds == pytest.approx(shown[name]["cost.floor_ms"]["value"] * 1e-3)
        assert "per_call_floor_ms" not in shown[name]  # the second, contradicting floor is gone


def test_chips_of_one_generation_share_their_floors() -> None:
    by_generation: dict[str, set[tuple[float, float]]] = {}
    for name in chips():
        chip = get_chip(name)
        by_generation.setdefault(chip.generation, set()).add(
            (chip.cost.floor_s, chip.cost.e5rt_floor_s)
        )
    assert all(len(floors) == 1 for floors in by_generation.values()), by_generation
    m4, m4_max = (estimate(_relu(), c).seconds for c in ("m4", "m4-max"))
    assert m4_max < 1.5 * m4  # one engine: not 3x slower per call (0.0736 vs 0.2376 ms before)


def test_every_estimate_carries_the_likely_range() -> None:
    est = estimate(_relu(), "m5")
    under, over = get_chip("m5").cost.band
    assert under < 1 < over
    assert (est.low_s, est.high_s) == pytest.approx((est.seconds / over, est.seconds / under))


@pytest.mark.parametrize(("chip", "folds"), [("m1", True), ("m4", False)])
def test_estimate_streams_what_the_chip_keeps_compressed(chip: str, folds: bool) -> None:
    cfg = config_from_hf(published()["models"]["qwen2.5-0.5b"]["config"])
    int8 = estimate_llm(cfg, chip, prompt_tokens=16, compress="int8")
    dense = estimate_llm(cfg, chip, prompt_tokens=16, compress="fp16")
    assert int8.weight_bytes < 0.6 * dense.weight_bytes  # stored as int8 either way
    # M1 folds int8 to fp16 at compile time (ANEForge): its decode streams the dense bytes
    assert int8.streamed_bytes == (dense.streamed_bytes if folds else int8.weight_bytes)
    assert int8.weights_s == pytest.approx(int8.streamed_bytes / get_chip(chip).cost.dram_bw)


def test_first_call_costs_are_reported_apart_from_the_steady_time() -> None:
    import time

    from anekit.bench.measure import Candidate, Settings, time_interleaved

    calls = []

    def slow_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.05)  # a lazy import, say

    (timing,) = time_interleaved([Candidate(slow_once)], Settings(1, 3, 3, budget_s=0.0))
    assert timing.first_s >= 0.05 and timing.median < 0.01
    assert timing.as_json()["first_call_s"] == timing.first_s


def test_run_reports_its_first_call_apart(tmp_path, capsys) -> None:
    from tests.clitools import GOOD_MIL

    model = mil.parse(GOOD_MIL).save(tmp_path / "m")
    assert main(["run", str(model), "--random", "--backend", "reference", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["first_call_ms"] > 0 and record["repeat"] == 1 and record["compile_ms"] > 0
