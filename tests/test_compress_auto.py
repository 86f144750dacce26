"""auto, the accuracy gate, chip support and the cost model's pricing of compressed weights."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.compression import compress_with_report, find_layers
from anekit.compression.auto import ladders
from anekit.compression.kmeans import kmeans_1d, nearest
from anekit.compression.schemes import Options
from anekit.hw.chips import get_chip
from anekit.hw.compression import encodings, streams, support
from anekit.mil.ops.registry import Encoding

RNG = np.random.default_rng(3)


def chain(tokens: int, channels: int = 256, layers: int = 3) -> mil.Program:
    """1x1 convs with ReLU between them: ``tokens`` 1 streams weights, 4096 is compute-bound."""
    b = mil.Builder()
    h = b.input("x", (1, channels, 1, tokens), "fp16")
    for i in range(layers):
        w = RNG.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels)
        h = b.conv(x=h, weight=b.weight(f"w{i}", w.astype(np.float16)), name=f"conv{i}")
        h = b.relu(x=h, name=f"relu{i}")
    b.output(h, "y")
    return b.build()


def rungs(program, chip):
    lad = ladders(program, find_layers(program), get_chip(chip), Options())
    return {name: [scheme.name for scheme, _ in ladder] for name, ladder in lad.items()}


def test_auto_picks_by_what_bounds_the_layer() -> None:
    # matrix-vector: the weights dominate; a smaller weight is faster, the smallest first
    assert set(map(tuple, rungs(chain(1), "m4").values())) == {("lut4", "lut6", "int8")}
    # 4096 tokens: compute-bound; only W8A8's int8 datapath helps, on a chain of them
    assert set(map(tuple, rungs(chain(4096), "m4").values())) == {("w8a8",)}
    # M1 folds int8 to dense fp16 (ANEForge): only palettes stream there
    assert set(map(tuple, rungs(chain(1), "m1").values())) == {("lut4", "lut6")}
    # one conv alone is no int8 chain: W8A8 would only add conversions at its ends
    assert rungs(chain(4096, layers=1), "m4") == {"w0": []}


def test_auto_compresses_with_the_first_rung_when_the_budget_allows() -> None:
    wide = compress_with_report(chain(1), "auto", chip="m4", max_error=10.0, measure=False)
    assert [r.scheme for r in wide.report.layers] == ["lut4"] * 3
    deep = compress_with_report(chain(4096, 64), "auto", chip="m4", max_error=10.0, measure=False)
    kinds = {op.op_type for op in deep.program.main.ops}
    assert {"quantize", "dequantize"} <= kinds
    assert deep.report.seconds_after < deep.report.seconds_before
    assert [r.scheme for r in deep.report.layers] == ["w8a8"] * 3


def test_the_gate_falls_back_largest_error_first_until_the_budget_holds() -> None:
    program = chain(8, channels=128)
    free = compress_with_report(program, "lut4", chip="m4")
    assert free.report.error > 0.1 and free.report.fallbacks == ()
    budget = 0.95 * free.report.error  # just below: the layer costing the most moves first
    tight = compress_with_report(program, "lut4", chip="m4", max_error=budget)
    report = tight.report
    assert report.error <= budget and report.within
    moved = [name for name, old, new in report.fallbacks]
    assert moved and all(new == "fp16" for _, _, new in report.fallbacks)
    # the first to move was the one whose compression alone cost the most
    own = {r.name: r.error for r in free.report.layers}
    assert moved[0] == max(own, key=own.get)
    kept = [r for r in report.layers if r.scheme == "lut4"]
    assert len(moved) + len(kept) == 3 and kept
    # the measured error is the program's: recompute it here from the two programs
    x = tight_inputs(program)
    with anekit.compile(program, backend="reference") as k0:
        with anekit.compile(tight.program, backend="reference") as k1:
            ref = np.concatenate([k0(x=s)["y"][0, :, 0, :] for s in x], axis=1)
            got = np.concatenate([k1(x=s)["y"][0, :, 0, :] for s in x], axis=1)
    # the worst channel's error, each against its norm or the median channel's if larger
    norms = np.linalg.norm(ref.astype(np.float64), axis=1)
    errors = np.linalg.norm((got - ref).astype(np.float64), axis=1)
    worst = (errors / np.maximum(norms, np.median(norms))).max()
    assert worst == pytest.approx(report.error, rel=1e-6)


def tight_inputs(program) -> list[np.ndarray]:
    """The random inputs compress draws without calibration (seed 0, two samples)."""
    rng = np.random.default_rng(0)
    shape = program.inputs[0].type.shape
    return [rng.standard_normal(shape).astype(np.float16) for _ in range(2)]


def test_auto_steps_down_its_ladder_through_more_accurate_schemes() -> None:
    result = compress_with_report(chain(1, channels=128), "auto", chip="m4", max_error=0.02)
    steps = [(old, new) for _, old, new in result.report.fallbacks]
    assert ("lut4", "lut6") in steps and result.report.error <= 0.02
    assert {r.scheme for r in result.report.layers} <= {"lut6", "int8", "fp16"}


def test_a_scheme_the_chip_folds_gets_the_checkers_warning() -> None:
    small = anekit.compress(chain(1), "int8", chip="m1")
    on_m1 = [d for d in anekit.check(small, chip="m1") if d.rule == "compression-folds"]
    assert len(on_m1) == 3 and all(d.severity == "warning" for d in on_m1)
    assert "m1 (H13) folds this encoding to dense fp16" in on_m1[0].message
    assert not [d for d in anekit.check(small, chip="m4") if d.rule.startswith("compression")]
    palettes = anekit.compress(chain(1), "lut4", chip="m1")
    assert not [d for d in anekit.check(palettes, chip="m1") if d.rule.startswith("compression")]


def test_the_cost_model_prices_compressed_weights_by_their_stored_bytes() -> None:
    program = chain(1, channels=1024, layers=1)  # a 2 MiB weight: streamed from DRAM
    seconds = {}
    for scheme in ("int8", "lut4"):
        small = anekit.compress(program, scheme)
        for chip in ("m1", "m4"):
            seconds[scheme, chip] = anekit.estimate(small, chip=chip).seconds
    for chip in ("m1", "m4"):
        seconds["fp16", chip] = anekit.estimate(program, chip=chip).seconds
    m4 = get_chip("m4").cost
    dense, stored_int8 = 1024 * 1024 * 2, 1024 * 1024 + 1024 * 2
    # on M4 the conv is bound by its weight, which fits on chip (4.72 MB) fp16 and int8
    # alike and streams at the on-chip weight rate: the saving is the bytes not streamed
    assert dense < m4.onchip_tensor_bytes
    saving = (dense - stored_int8) / m4.weight_bw
    assert seconds["fp16", "m4"] - seconds["int8", "m4"] == pytest.approx(saving, rel=1e-6)
    assert seconds["lut4", "m4"] < seconds["int8", "m4"] < seconds["fp16", "m4"]
    # M1 folds int8 to dense fp16: no saving; it streams 4-bit palettes
    assert seconds["int8", "m1"] == pytest.approx(seconds["fp16", "m1"])
    assert seconds["lut4", "m1"] < seconds["fp16", "m1"]


def test_chip_support_is_data_with_sources() -> None:
    table = encodings()
    assert {(e.encoding.kind, e.encoding.bits) for e in table} >= {("lut", 4), ("affine", 8)}
    for entry in table:
        assert set(entry.generations) == {"H13", "H14", "H15", "H16", "H17"}
        for fact in entry.generations.values():
            assert fact.value in ("streams", "folds") and fact.source.startswith("https://")
    assert not streams(Encoding("affine", 8), "m1") and streams(Encoding("affine", 8), "m2")
    assert not streams(Encoding("blockwise", 8), "m2") and streams(Encoding("blockwise", 8), "m3")
    assert support(Encoding("lut", 2), "m4") is None  # no source: nothing claimed
    assert support(Encoding("lut", 6), "m4").estimate  # the 4-bit result, carried over


def test_kmeans_matches_lloyd_written_here() -> None:
    x = RNG.standard_normal((3, 400))
    centroids = kmeans_1d(x, 8, iterations=200, seed=1)
    labels = nearest(x, centroids)
    brute = np.argmin(np.abs(x[:, :, None] - centroids[:, None, :]), axis=2)
    assert np.array_equal(labels, brute)
    for g in range(3):  # converged: every centroid is the mean of its cluster
        means = [x[g][labels[g] == j].mean() for j in range(8)]
        np.testing.assert_allclose(centroids[g], means, rtol=1e-12)
    assert np.array_equal(kmeans_1d(x, 8, seed=1), kmeans_1d(x, 8, seed=1))
    few = kmeans_1d(np.array([[1.0, 1.0, 2.0]]), 4)  # fewer distinct values than clusters
    assert set(np.round(few[0], 6)) <= {1.0, 2.0}
