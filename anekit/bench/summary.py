"""What a suite's rows add up to: best throughput, speed-ups over a baseline, cliffs.

Each figure is given three times where it can be: from the measured times, from the
cost model's predictions and from the published times (when the rows have them).
"""

from __future__ import annotations

from typing import Any

from anekit.bench.suites import Suite

SOURCES = ("measured", "predicted", "published")

# A cliff: marginal throughput below this fraction of the best seen at smaller sizes.
CLIFF_DROP = 0.5


def row_seconds(row: dict[str, Any], source: str) -> float | None:
    """A row's time per evaluation from one source, or None where it has none."""
    if source == "measured":
        return row["measured"]["median_s"]
    if source == "predicted":
        return row["predicted_s"]
    return row["published"][0]["seconds"] if row["published"] else None


def summarize(suite: Suite, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The suite's summary figures (see module docstring)."""
    out: dict[str, Any] = {"best_tflops": {s: _best_tflops(rows, s) for s in SOURCES}}
    if suite.compare is not None:
        out["speedups"] = speedups(rows, *suite.compare)
    if suite.find_cliff:
        out["cliff"] = {s: cliff(rows, s) for s in SOURCES}
        out["steepest_fall"] = {s: steepest_fall(rows, s) for s in SOURCES}
        readings = rows[0].get("predicted_by_cliff", {}) if rows else {}
        out["predicted_cliff_by_reading"] = {
            k: {
                "cliff": cliff(rows, "predicted", k),
                "steepest_fall": steepest_fall(rows, "predicted", k),
            }
            for k in readings
        }
    return out


def _best_tflops(rows: list[dict[str, Any]], source: str) -> float | None:
    rates = [_tflops(r, source) for r in rows]
    known = [t for t in rates if t is not None]
    return max(known) if known else None


def _tflops(row: dict[str, Any], source: str) -> float | None:
    seconds = row_seconds(row, source)
    return row["flops"] / seconds / 1e12 if seconds else None


def speedups(rows: list[dict[str, Any]], key: str, baseline: Any) -> list[dict[str, Any]]:
    """For rows equal but for ``key``: time at ``baseline`` / time at each other value."""
    groups: dict[tuple, dict[Any, dict[str, Any]]] = {}
    for row in rows:
        rest = tuple(sorted((k, v) for k, v in row["params"].items() if k != key))
        groups.setdefault(rest, {})[row["params"][key]] = row
    out = []
    for rest, by_value in groups.items():
        base = by_value.get(baseline)
        if base is None:
            continue
        for value, row in by_value.items():
            if value == baseline:
                continue
            entry: dict[str, Any] = {
                "param": key,
                "value": value,
                "over": baseline,
                "params": dict(rest),
            }
            for source in SOURCES:
                t_base, t_row = row_seconds(base, source), row_seconds(row, source)
                entry[source] = t_base / t_row if t_base and t_row else None
            # the fastest rounds are the least disturbed: their ratio is the steadier estimate
            entry["measured_min"] = _ratio(
                base["measured"].get("min_s"), row["measured"].get("min_s")
            )
            entry["noisy"] = bool(base["measured"].get("noisy") or row["measured"].get("noisy"))
            out.append(entry)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def cliff(rows: list[dict[str, Any]], source: str, key: str | None = None) -> dict[str, Any] | None:
    """The first row (by x) where the marginal throughput falls below half the best before.

    The marginal throughput between neighbouring sizes is the extra FLOPs over the extra
    time: unlike the throughput itself, it does not rise just because a fixed per-call
    floor is spread over more work, so a slower regime shows as a fall. ``key`` picks one
    of a row's ``predicted_by_cliff`` readings instead of ``source``.
    """
    for point in _marginal_falls(rows, source, key):
        if point["fall"] < CLIFF_DROP:
            return point
    return None


def steepest_fall(
    rows: list[dict[str, Any]], source: str, key: str | None = None
) -> dict[str, Any] | None:
    """The row (by x) where the marginal throughput fell furthest below the best before it."""
    falls = [p for p in _marginal_falls(rows, source, key) if p["fall"] < 1.0]
    return min(falls, key=lambda p: p["fall"]) if falls else None


def _marginal_falls(rows: list[dict[str, Any]], source: str, key: str | None) -> list[dict]:
    """Each row after the first two: its marginal TFLOPS and its ratio to the best before."""
    out: list[dict[str, Any]] = []
    best = 0.0
    previous: tuple[float, float] | None = None
    for row in sorted(rows, key=lambda r: r["x"]):
        seconds = row["predicted_by_cliff"][key] if key else row_seconds(row, source)
        if seconds is None:
            continue
        if previous is not None and seconds > previous[1]:
            rate = (row["flops"] - previous[0]) / (seconds - previous[1]) / 1e12
            if best:
                out.append(
                    {
                        "x": row["x"],
                        "marginal_tflops": rate,
                        "best_before": best,
                        "fall": rate / best,
                    }
                )
            best = max(best, rate)
        previous = (row["flops"], seconds)
    return out
