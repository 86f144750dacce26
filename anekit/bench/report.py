"""Benchmark results as text: console tables, the Markdown report and the JSON file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from anekit.bench.measure import NOISY_SPREAD
from anekit.bench.summary import SOURCES
from anekit.bench.threads import describe
from anekit.files import write_atomic


def write_json(results: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the results as strict JSON (no NaN: missing values are null), atomically."""
    out = Path(path)
    text = json.dumps(results, indent=2, allow_nan=False) + "\n"
    write_atomic(out, text.encode("utf-8"))
    return out


def fmt_time(seconds: float | None) -> str:
    """A time in the unit that suits it (us, ms or s); a dash when there is none."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _fmt_rate(tflops: float | None) -> str:
    if tflops is None:
        return "-"
    return f"{tflops:.3g}" if tflops >= 0.01 else f"{tflops:.2e}"


def case_label(params: dict[str, Any]) -> str:
    """A case as ``key=value`` pairs."""
    return " ".join(f"{k}={v}" for k, v in params.items())


def _published_cell(row: dict[str, Any]) -> str:
    return ", ".join(f"{fmt_time(p['seconds'])} [{p['id']}]" for p in row["published"]) or "-"


HEADER = (
    "case",
    "measured median",
    "min",
    "spread",
    "TFLOPS",
    "predicted",
    "TFLOPS",
    "published",
    "flag",
)
NOISY_FLAG = "NOISY"


def table_cells(row: dict[str, Any]) -> tuple[str, ...]:
    """One row of a suite's table, as the cells under ``HEADER``."""
    m = row["measured"]
    return (
        case_label(row["params"]),
        fmt_time(m["median_s"]),
        fmt_time(m["min_s"]),
        _fmt_spread(m.get("spread")),
        _fmt_rate(row["tflops_measured"]),
        fmt_time(row["predicted_s"]),
        _fmt_rate(row["tflops_predicted"]),
        _published_cell(row),
        NOISY_FLAG if m.get("noisy") else "",
    )


def _fmt_spread(spread: float | None) -> str:
    return f"{spread:.2f}x" if spread is not None else "-"


def noisy_sentence(results: dict[str, Any]) -> str | None:
    """What the NOISY flag means and how many rows carry it, or None when none does."""
    rows = [r for s in results["suites"].values() for r in s["rows"]]
    noisy = sum(bool(r["measured"].get("noisy")) for r in rows)
    if not noisy:
        return None
    return (
        f"{noisy} of {len(rows)} rows are {NOISY_FLAG}: their slow rounds (90th percentile) "
        f"took over {NOISY_SPREAD:g}x their fastest, so the machine changed while they were measured "
        "and their medians (and speed-ups built on them) mean little; the min is the steadier "
        "figure. Re-run on a quieter machine, or with fewer --threads."
    )


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The summary figures as sentences, measured / predicted / published side by side."""
    lines = []
    best = summary["best_tflops"]
    lines.append("best throughput (TFLOPS): " + _triple(best, _fmt_rate))
    for s in summary.get("speedups", []):
        where = case_label(s["params"])
        fastest = s.get("measured_min")
        lines.append(
            f"speed-up of {s['param']}={s['value']} over {s['over']} ({where}): "
            + _triple(s, lambda v: f"{v:.2f}x" if v is not None else "-")
            + (f"; fastest rounds {fastest:.2f}x" if fastest is not None else "")
            + (f" [{NOISY_FLAG}: not meaningful]" if s.get("noisy") else "")
        )
    if "cliff" in summary:
        lines.append(
            "cliff (marginal throughput below half its best so far): "
            + _triple(summary["cliff"], _cliff_at)
        )
        lines.append(
            "steepest fall of the marginal throughput: "
            + _triple(summary["steepest_fall"], _fall_at)
        )
        readings = summary.get("predicted_cliff_by_reading", {})
        if readings:
            lines.append(
                "predicted, by SRAM-cliff reading: "
                + "; ".join(
                    f"{r}: cliff {_cliff_at(c['cliff'])}, steepest fall {_fall_at(c['steepest_fall'])}"
                    for r, c in readings.items()
                )
            )
    return lines


def _cliff_at(c: dict[str, Any] | None) -> str:
    return f"at x={c['x']:.3g}" if c else "none"


def _fall_at(c: dict[str, Any] | None) -> str:
    return f"at x={c['x']:.3g} ({c['fall']:.2f}x the best before)" if c else "none"


def _triple(values: dict[str, Any], fmt: Any) -> str:
    return ", ".join(f"{source} {fmt(values.get(source))}" for source in SOURCES)


def overhead_sentence(results: dict[str, Any]) -> str:
    """The per-call overheads measured on the reference (and the chosen) backend."""
    parts = []
    for backend, o in results["overhead"].items():
        parts.append(
            f"{backend}: run() {fmt_time(o['run_s'])}, kernel(**arrays) {fmt_time(o['call_s'])}, "
            f"submit() {fmt_time(o['submit_s'])}"
        )
    return (
        "Per-call overhead of the smallest program (one relu on [1, 16, 1, 16] fp16), measured: "
        + "; ".join(parts)
        + "."
    )


def console(results: dict[str, Any]) -> str:
    """The results as plain-text tables for the terminal."""
    out = [
        f"anekit bench: measured on the {results['backend']} backend; "
        f"predictions for {results['chip']} ({results['chip_name']})"
        + (" [--quick]" if results["quick"] else ""),
        describe(results["threads"]),
        overhead_sentence(results),
    ]
    for name, suite in results["suites"].items():
        out += ["", f"== {name}: {suite['title']}"]
        rows = [HEADER, *(table_cells(r) for r in suite["rows"])]
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
        out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        out += ["  " + line for line in summary_lines(suite["summary"])]
        out += [f"  rating: {suite['rating']['text']}"] if suite.get("rating") else []
    warning = noisy_sentence(results)
    return "\n".join(out + ([""] + [warning] if warning else [])) + "\n"


def markdown(
    results: dict[str, Any], plots: dict[str, Path] | None = None, base: Path | None = None
) -> str:
    """The Markdown report: setup, overheads, then each suite's table, summary, findings, plot.

    ``plots`` maps suite names to PNG files; links are written relative to ``base`` (the
    report's directory) when given.
    """
    m = results["machine"]
    lines = [
        "# anekit bench report",
        "",
        f"- created: {results['created']}",
        f"- backend measured: **{results['backend']}**"
        + (" (`--quick` sizes)" if results["quick"] else " (full sizes)"),
        f"- cost model and published figures for: **{results['chip']}** ({results['chip_name']})",
        f"- machine: {m['system']} {m['release']} {m['machine']}, {m['cpu_count']} CPUs, "
        f"Python {m['python']}, NumPy {m['numpy']}, anekit {m['anekit']}",
        f"- {describe(results['threads'])}",
        "",
        "Times are per evaluation: the median and the min over rounds after warm-up; cases "
        "that are compared ran interleaved, in rotating order, in the same rounds. *Spread* "
        f"is the 90th-percentile round over the fastest; rows above {NOISY_SPREAD:g}x are flagged "
        f"{NOISY_FLAG}. TFLOPS are the program's FLOPs (from the cost model's "
        "accounting) over the time. *Predicted* is `anekit.hw` cost model's estimate for the "
        "chip above; *published* are measurements of the same program on that chip, with "
        "their sources listed under each suite.",
        "",
        "## Per-call overhead",
        "",
        overhead_sentence(results),
        "",
    ]
    warning = noisy_sentence(results)
    lines += [f"**{warning}**", ""] if warning else []
    if not results["published_available"]:
        lines += [
            "Published figures were not found (anekit/bench/data/published.json is missing).",
            "",
        ]
    for name, suite in results["suites"].items():
        lines += _suite_markdown(name, suite, plots or {}, base)
    return "\n".join(lines).rstrip() + "\n"


def _suite_markdown(
    name: str, suite: dict[str, Any], plots: dict[str, Path], base: Path | None
) -> list[str]:
    lines = [f"## `{name}`: {suite['title']}", "", suite["question"], ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(table_cells(r)) + " |" for r in suite["rows"]]
    lines.append("")
    lines += [f"- {line}" for line in summary_lines(suite["summary"])]
    if suite.get("rating"):
        r = suite["rating"]
        lines.append(f"- rating: {r['text']} (rating: {r['rating_source']})")
    lines.append("")
    if suite["note"]:
        lines += [suite["note"], ""]
    sources = {p["id"]: p for r in suite["rows"] for p in r["published"]}
    if sources:
        lines.append("Published measurements:")
        lines += [
            f"- `{i}`: {p['reported']} on {p['machine']}; {p['source']}" for i, p in sources.items()
        ]
        lines.append("")
    if suite["findings"]:
        lines.append("Published findings:")
        for f in suite["findings"]:
            chip = "" if f["same_chip"] else f" (measured on {f['chip']})"
            lines.append(f"- {f['text']}{chip}; {f['source']}")
        lines.append("")
    if name in plots:
        path = plots[name]
        link = os.path.relpath(path, base) if base is not None else str(path)
        lines += [f"![{name}]({Path(link).as_posix()})", ""]
    return lines


def write_markdown(
    results: dict[str, Any], path: str | os.PathLike[str], plots: dict[str, Path] | None = None
) -> Path:
    """Write the Markdown report atomically; plot links are relative to its directory."""
    out = Path(path)
    text = markdown(results, plots, out.resolve().parent)
    write_atomic(out, text.encode("utf-8"))
    return out
