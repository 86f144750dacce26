"""The reference backend's forward speed against PyTorch in docs/backends.md and
docs/numerics.md, from benchmarks/results/runtime.json.

That file is what ``python benchmarks/runtime.py --forward-only --json
benchmarks/results/runtime.json`` measured (a shared machine: its load is recorded beside
the figures). Targets, as the benchmark states them: the default profile (m4) at most 1.3x
"ideal" (issue 25); anekit at most 1.5x PyTorch fp32's time at seq 64 and 256 (issue 13).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools.docnumbers import generates

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "runtime.json"
M4_OVER_IDEAL, OVER_TORCH = 1.3, 1.5


def _record() -> dict[str, Any]:
    return json.loads(RESULTS.read_text("utf-8"))


def _ratio(c: dict[str, dict[str, float]], a: str, b: str) -> tuple[float, float]:
    """``a``'s time over ``b``'s: by the medians and by the minimums."""
    return c[a]["median_ms"] / c[b]["median_ms"], c[a]["min_ms"] / c[b]["min_ms"]


def _pair(r: tuple[float, float]) -> str:
    return f"{r[0]:.2f}x ({r[1]:.2f}x)"


def _conditions(r: dict[str, Any]) -> str:
    rounds = sorted({f["rounds"] for f in r["forward"].values()}, reverse=True)
    load = ", ".join(f"{v:g}" for v in r["load_before"])
    after = ", ".join(f"{v:g}" for v in r["load_after"])
    spread = max(c["spread"] for f in r["forward"].values() for c in f["candidates"].values())
    return (f"{r['machine']}, {r['threads']} thread each side, "
            f"{' / '.join(map(str, rounds))} interleaved rounds ({r['clock']} time), load "
            f"average {load} before and {after} after (1, 5, 15 min), rounds spread up to "
            f"{spread:.1f}x (max / min)")  # fmt: skip


@generates("reference-forward-table")
def reference_forward_table() -> str:
    """Per sequence length: m4 / ideal and each / PyTorch fp32, median (min), and the verdicts."""
    r = _record()
    m4, ideal, torch = "anekit m4 ({})", "anekit ideal ({})", "PyTorch fp32"
    lines = [
        f"Measured (`benchmarks/results/runtime.json`): {_conditions(r)}. Each cell: the "
        "ratio of the medians (of the minimums).",
        "",
        "| seq | m4 / ideal, PyTorch cast | m4 / ideal, NumPy only | m4 / PyTorch fp32, "
        "PyTorch cast | m4 / PyTorch fp32, NumPy only | ideal / PyTorch fp32, PyTorch cast |",
        "|---|---|---|---|---|---|",
    ]
    ok_ideal, ok_torch = [], []
    for seq, f in r["forward"].items():
        c = f["candidates"]
        cast_ideal = _ratio(c, m4.format("PyTorch cast"), ideal.format("PyTorch cast"))
        numpy_ideal = _ratio(c, m4.format("NumPy only"), ideal.format("NumPy only"))
        cast_torch = _ratio(c, m4.format("PyTorch cast"), torch)
        numpy_torch = _ratio(c, m4.format("NumPy only"), torch)
        ideal_torch = _ratio(c, ideal.format("PyTorch cast"), torch)
        lines.append(f"| {seq} | {_pair(cast_ideal)} | {_pair(numpy_ideal)} | "
                     f"{_pair(cast_torch)} | {_pair(numpy_torch)} | {_pair(ideal_torch)} |")  # fmt: skip
        ok_ideal.append((seq, max(cast_ideal[0], numpy_ideal[0]) <= M4_OVER_IDEAL,
                         max(cast_ideal[1], numpy_ideal[1]) <= M4_OVER_IDEAL))  # fmt: skip
        if int(seq) <= 256:
            ok_torch.append((seq, min(cast_torch[0], numpy_torch[0]) <= OVER_TORCH,
                             min(cast_torch[1], numpy_torch[1]) <= OVER_TORCH))  # fmt: skip

    def verdict(rows: list[tuple[str, bool, bool]]) -> str:
        return "; ".join(f"seq {s}: " + ("met" if med else "by the minimum only" if low
                                         else "not met") for s, med, low in rows)  # fmt: skip

    lines += ["", f"Targets: the default profile at most {M4_OVER_IDEAL}x \"ideal\" on both "
              f"paths: {verdict(ok_ideal)}. The default profile at most {OVER_TORCH}x PyTorch "
              f"fp32's time on either path: {verdict(ok_torch)}."]  # fmt: skip
    return "\n".join(lines)


@generates("reference-forward-summary")
def reference_forward_summary() -> str:
    """One sentence: the default profile's forward time over PyTorch's, per sequence length."""
    r = _record()
    parts = []
    for seq, f in r["forward"].items():
        c = f["candidates"]
        cast = _ratio(c, "anekit m4 (PyTorch cast)", "PyTorch fp32")
        numpy = _ratio(c, "anekit m4 (NumPy only)", "PyTorch fp32")
        parts.append(f"{cast[0]:.2f}x ({numpy[0]:.2f}x) at seq {seq}")
    return (
        f"Measured by `benchmarks/runtime.py` (`benchmarks/results/runtime.json`: "
        f"{_conditions(r)}), a 12-layer transformer forward (dim 256) under the default "
        f"profile takes {', '.join(parts[:-1])} and {parts[-1]} the time of PyTorch fp32 "
        f"(medians; with the NumPy-only rounding in parentheses). The full table is in "
        f'docs/numerics.md ("Cost").' + _memory(r)
    )


def _memory(r: dict[str, Any]) -> str:
    """The peak-memory sentence, if the run measured it."""
    m = r.get("memory")
    if not m:
        return ""
    rise = {side: v["rss_rise"] / 2**20 for side, v in m["sides"].items()}
    return (f" One forward at seq {m['seq']}, each side in a fresh process, raises the resident "
            f"set by {rise['anekit']:.1f} MiB ({rise['anekit-numpy']:.1f} MiB NumPy-only) "
            f"against PyTorch's {rise['torch']:.1f} MiB ({rise['anekit'] / rise['torch']:.2f}x).")  # fmt: skip
