"""One PNG per suite: measured, predicted and published time per evaluation against the sweep.

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
        fig = Figure(figsize=(7.5, 4.8), layout="constrained")
        ax = fig.add_subplot()
        _draw(ax, name, suite, results)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        path = out / f"{name}.png"
        write_atomic(path, buf.getvalue())
        written[name] = path
    return written


def _draw(ax: Any, name: str, suite: dict[str, Any], results: dict[str, Any]) -> None:
    series: dict[str, list[dict[str, Any]]] = {}
    for row in suite["rows"]:
        series.setdefault(row["series"], []).append(row)
    for i, (label, rows) in enumerate(series.items()):
        color = f"C{i}"
        rows = sorted(rows, key=lambda r: r["x"])
        tag = f" ({label})" if label else ""
        x = [r["x"] for r in rows]
        med = [r["measured"]["median_s"] * 1e3 for r in rows]
        err = [
            [m - r["measured"]["p25_s"] * 1e3 for m, r in zip(med, rows)],
            [r["measured"]["p75_s"] * 1e3 - m for m, r in zip(med, rows)],
        ]
        ax.errorbar(x, med, yerr=err, color=color, marker="o", capsize=3, label=f"measured{tag}")
        ax.plot(
            x,
            [r["predicted_s"] * 1e3 for r in rows],
            color=color,
            linestyle="--",
            marker="x",
            label=f"predicted{tag}",
        )
        pub = [(r["x"], p["seconds"] * 1e3) for r in rows for p in r["published"]]
        if pub:
            px, py = zip(*pub)
            ax.scatter(px, py, color=color, marker="*", s=110, zorder=3, label=f"published{tag}")
    ax.set_yscale("log")
    if all(r["x"] > 0 for r in suite["rows"]) and _log_x(suite):
        ax.set_xscale("log", base=2)
    ax.set_xlabel(suite["x_label"])
    ax.set_ylabel("time per evaluation (ms)")
    ax.set_title(
        f"{name}: {suite['title']}\nmeasured on {results['backend']}; "
        f"predicted and published for {results['chip']}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)


def _log_x(suite: dict[str, Any]) -> bool:
    xs = sorted({r["x"] for r in suite["rows"]})
    return len(xs) > 1 and xs[-1] / xs[0] >= 8
