"""One PNG per suite: time and throughput, measured here and predicted for the chip.

Each figure has four panels. The left column is what was measured on this machine (the
backend's median per evaluation, with a bar from the fastest round to the 75th
percentile); the right column is the chip: the cost model's prediction and, where there
is one, the published measurement. They never share an axis, because NumPy on a laptop
and an M4's Neural Engine differ by orders of magnitude. The top row is time per
evaluation, the bottom row throughput (TFLOPS, or TOPS for int8). Suites with published
thresholds (the SRAM cliff) mark them on the chip's panels.

matplotlib is an optional extra (``pip install 'anekit[plot]'``); it is imported only
here, only when plotting, and without pyplot, so no global plotting state changes.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from anekit.files import write_atomic

MISSING = "plots need matplotlib, which is not installed: pip install 'anekit[plot]'"


def matplotlib_missing() -> str | None:
    """None when matplotlib can be imported, else the message saying how to get it."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return MISSING
    return None


def write_plots(results: dict[str, Any], directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Write ``<suite>.png`` for every suite into ``directory``; returns suite -> file."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError as e:
        raise ModuleNotFoundError(MISSING) from e
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, suite in results["suites"].items():
        fig = Figure(figsize=(11, 7.5), layout="constrained")
        axes = fig.subplots(2, 2, sharex=True)
        _draw(axes, suite, results)
        for ax in axes.flat:
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        fig.suptitle(f"{name}: {suite['title']}", fontsize=10)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        path = out / f"{name}.png"
        write_atomic(path, buf.getvalue())
        written[name] = path
    return written


def _series(suite: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in suite["rows"]:
        groups.setdefault(row["series"], []).append(row)
    return [(label, sorted(rows, key=lambda r: r["x"])) for label, rows in groups.items()]


def _rate(row: dict[str, Any], seconds: float) -> float:
    return row["flops"] / seconds / 1e12


def _draw(axes: Any, suite: dict[str, Any], results: dict[str, Any]) -> None:
    """Measured (left) and chip (right) panels; time (top) and throughput (bottom)."""
    (here_t, chip_t), (here_r, chip_r) = axes
    for i, (label, rows) in enumerate(_series(suite)):
        color, tag = f"C{i}", f" ({label})" if label else ""
        x = [r["x"] for r in rows]
        m = [r["measured"] for r in rows]
        med = [v["median_s"] for v in m]
        bars = [[a - v["min_s"] for a, v in zip(med, m)], [v["p75_s"] - a for a, v in zip(med, m)]]
        ms = [a * 1e3 for a in med]
        here_t.errorbar(
            x,
            ms,
            yerr=[[b * 1e3 for b in bs] for bs in bars],
            color=color,
            marker="o",
            capsize=3,
            label=f"median{tag}",
        )
        here_r.plot(
            x,
            [_rate(r, a) for r, a in zip(rows, med)],
            color=color,
            marker="o",
            label=f"median{tag}",
        )
        here_r.plot(
            x,
            [_rate(r, v["min_s"]) for r, v in zip(rows, m)],
            color=color,
            linestyle=":",
            label=f"fastest round{tag}",
        )
        noisy = [(r["x"], a * 1e3) for r, a in zip(rows, med) if r["measured"].get("noisy")]
        if noisy:
            here_t.scatter(
                *zip(*noisy), color=color, marker="X", s=80, zorder=3, label=f"NOISY{tag}"
            )
        pred = [r["predicted_s"] for r in rows]
        chip_t.plot(
            x,
            [p * 1e3 for p in pred],
            color=color,
            linestyle="--",
            marker="x",
            label=f"predicted{tag}",
        )
        chip_r.plot(
            x,
            [_rate(r, p) for r, p in zip(rows, pred)],
            color=color,
            linestyle="--",
            marker="x",
            label=f"predicted{tag}",
        )
        pub = [(r["x"], r, p["seconds"]) for r in rows for p in r["published"]]
        if pub:
            px = [x for x, _, _ in pub]
            chip_t.scatter(
                px,
                [s * 1e3 for _, _, s in pub],
                color=color,
                marker="*",
                s=110,
                zorder=3,
                label=f"published{tag}",
            )
            chip_r.scatter(
                px,
                [_rate(r, s) for _, r, s in pub],
                color=color,
                marker="*",
                s=110,
                zorder=3,
                label=f"published{tag}",
            )
    for ax in (chip_t, chip_r):
        for j, mark in enumerate(suite.get("marks", [])):
            ax.axvline(
                mark["x"],
                color="0.4",
                linestyle=(0, (4, 2 + 2 * j)),
                linewidth=1,
                label=mark["label"],
            )
    chip = f"{results['chip']} ({results['chip_name']})"
    here_t.set_title(f"measured here: {results['backend']} backend", fontsize=9)
    chip_t.set_title(f"{chip}: cost model and published", fontsize=9)
    log_x = all(r["x"] > 0 for r in suite["rows"]) and _log_x(suite)
    for ax, ylabel in (
        (here_t, "ms per evaluation"),
        (chip_t, "ms per evaluation"),
        (here_r, "TFLOPS"),
        (chip_r, "TFLOPS"),
    ):
        ax.set_yscale("log")
        if log_x:
            ax.set_xscale("log", base=2)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    for ax in (here_r, chip_r):
        ax.set_xlabel(suite["x_label"])


def _log_x(suite: dict[str, Any]) -> bool:
    xs = sorted({r["x"] for r in suite["rows"]})
    return len(xs) > 1 and xs[-1] / xs[0] >= 8
