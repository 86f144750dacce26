"""Plots: what this machine measured and what the chip is predicted to do never share an axis."""

from __future__ import annotations

import pytest

from tests.test_cli_bench import _fake_results

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402

from anekit.bench import plots  # noqa: E402


def _panels():
    results = _fake_results()
    fig = Figure()
    axes = fig.subplots(2, 2, sharex=True)
    plots._draw(axes, results["suites"]["one"], results)
    return axes, results


def _labels(ax) -> set[str]:
    return {h.get_label().split(" (")[0] for h in ax.get_legend_handles_labels()[0]}


def test_measured_and_chip_panels_are_separate_in_time_and_throughput():
    (here_t, chip_t), (here_r, chip_r) = _panels()[0]
    assert _labels(here_t) == {"median", "NOISY"}
    assert _labels(here_r) == {"median", "fastest round"}
    assert _labels(chip_t) == _labels(chip_r) == {"predicted", "published", "a threshold"}
    assert "measured here: reference" in here_t.get_title()
    assert "m4 (Apple M4)" in chip_t.get_title()
    assert here_r.get_ylabel() == chip_r.get_ylabel() == "TFLOPS"


def test_throughput_panels_plot_flops_over_time():
    (_, chip_t), (here_r, chip_r) = _panels()[0]
    median = next(line for line in here_r.get_lines() if line.get_label() == "median (a)")
    # row x: 1e9 x FLOPs in 1e-3 x s -> 1e12 FLOPS = 1 TFLOPS at every x
    assert list(median.get_ydata()) == pytest.approx([1.0] * 4)
    predicted = next(line for line in chip_r.get_lines() if line.get_label() == "predicted (a)")
    assert list(predicted.get_ydata()) == pytest.approx([2.0] * 4)  # half the time
    times = next(line for line in chip_t.get_lines() if line.get_label() == "predicted (a)")
    assert list(times.get_ydata()) == pytest.approx([0.5, 1.0, 2.0, 4.0])  # ms
