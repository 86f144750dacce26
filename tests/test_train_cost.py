"""The training-step prediction (anekit.train.cost) and the fitted streaming efficiency against
every published figure in the package: each within 1.25x, and not all on one side."""

from __future__ import annotations

import pytest

from anekit.errors import UsageError
from anekit.hw.cost import analyze, input_weight_bytes, stream_efficiency
from anekit.hw.kinds import CostKind
from anekit.llm.cost import compare_published as compare_decode
from anekit.nn.kernels import block_kernels
from anekit.train.config import get_config
from anekit.train.cost import (
    TRAIN_KERNELS,
    WEIGHT_FIELDS,
    compare_published,
    estimate_step,
    packed_work,
)


def _balanced(ratios: list[float]) -> None:
    assert all(1 / 1.25 <= r <= 1.25 for r in ratios), ratios
    assert any(r > 1 for r in ratios) and any(r < 1 for r in ratios), ratios


def test_training_steps_within_target_both_sides() -> None:
    rows = compare_published()
    assert {(r["model"], r["published_ms"]) for r in rows} >= {
        ("stories110m", 91),
        ("stories110m", 111),
        ("qwen3-0.6b", 412),
    }
    assert all(r["source"] for r in rows)
    _balanced([r["ratio"] for r in rows])


def test_llm_decode_and_prefill_within_target_both_sides() -> None:
    rows = compare_decode()
    ratios = [r["ratio"] for r in rows]
    ratios += [
        r["predicted_prefill"] / r["published_prefill"] for r in rows if r["predicted_prefill"]
    ]
    assert len(ratios) > len(rows)  # the prefill figure is compared too
    _balanced(ratios)
    assert 0.5 < stream_efficiency() <= 1.0


def test_packed_weights_stream_as_weights() -> None:
    kd = block_kernels(get_config("tiny").model.block(1), TRAIN_KERNELS)["ffn_forward"]
    plain, packed = analyze(kd.program), packed_work(kd)
    weight_bytes = sum(
        kd.input.channels * f.width * 2 for f in kd.input.fields.values() if f.name in WEIGHT_FIELDS
    )
    assert plain.io_bytes - packed.io_bytes == weight_bytes
    x = kd.program.main.inputs[0]
    of_input = [
        w
        for w, op in zip(packed.ops, kd.program.main.ops)
        if op.op_type == "slice_by_size" and op.inputs["x"] is x
    ]
    assert len(of_input) == 4 and all(w.kind is CostKind.FREE for w in of_input)
    added = sum(p.weight_bytes - o.weight_bytes for p, o in zip(packed.ops, plain.ops))
    assert added == pytest.approx(input_weight_bytes(weight_bytes))


def test_overlap_and_serial() -> None:
    est = estimate_step(get_config("tiny").model, "m4")
    serial = estimate_step(get_config("tiny").model, "m4", overlap=False)
    assert serial.seconds == pytest.approx(
        est.ane_s + est.dw_s + est.classifier_s + est.host_stream_s
    )
    assert est.seconds <= serial.seconds
    low, high = est.likely_s
    assert low < est.seconds < high
    assert est.record()["step_ms"] > 0


def test_chip_without_host_rate_refused() -> None:
    with pytest.raises(UsageError, match="host_fp32_tflops"):
        estimate_step(get_config("tiny").model, "m1")
