"""The training figures in docs/training.md: predicted steps (anekit/train/data/published.json)
and the measured speed of the reference backend (benchmarks/results/train.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tools.docnumbers import generates


@generates("training-step-table")
def training_step_table() -> str:
    """Every published training step beside the prediction (anekit.train.cost)."""
    from anekit.train.cost import compare_published, published

    sources = published()["sources"]
    rows = compare_published()
    lines = ["| model | chip | published | predicted | predicted / published | of which ANE | "
             "anekit's serial schedule | source |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['model']} | {r['chip']} | {r['published_ms']:g} ms | "
                     f"{r['predicted_ms']:.1f} ms | {r['ratio']:.2f} | {r['ane_ms']:.1f} ms | "
                     f"{r['serial_ms']:.1f} ms | {sources[r['source']].split(' (')[0]} |")  # fmt: skip
    ratios = [r["ratio"] for r in rows]
    inside = sum(max(x, 1 / x) <= 1.25 for x in ratios)
    above = sum(x > 1 for x in ratios)
    lines += ["", f"{inside} of {len(rows)} within 1.25x; predicted slower than published "
              f"{above} times, faster {len(rows) - above} times (median "
              f"{float(np.median(ratios)):.2f})."]  # fmt: skip
    return "\n".join(lines)


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "train.json"


@generates("training-throughput")
def training_throughput() -> str:
    """anekit's training speed on the reference backend against PyTorch fp32, as measured
    by ``python benchmarks/train.py --configs tiny --json benchmarks/results/train.json``."""
    r = json.loads(RESULTS.read_text("utf-8"))
    lines = []
    for config, m in r["configs"].items():
        med, tokens = m["median_ms"], m["tokens_per_step"]
        ours, numpy_only, torch = (
            med["anekit (PyTorch cast)"],
            med["anekit (NumPy only)"],
            med["PyTorch fp32"],
        )
        lines.append(
            f"`{config}` ({tokens} tokens per step): anekit on the reference backend "
            f"{tokens / ours * 1e3:,.0f} tokens/s ({ours:.0f} ms per step; NumPy only "
            f"{tokens / numpy_only * 1e3:,.0f}), the same model in PyTorch fp32 "
            f"{tokens / torch * 1e3:,.0f} tokens/s ({torch:.0f} ms): {torch / ours:.2f}x."
        )
    load = ", ".join(f"{x:g}" for x in r["load_before"])
    lines.append(
        f"Medians of {r['rounds']} interleaved rounds, {r['threads']} BLAS thread, "
        f"{r['machine']}, load average {load} (1, 5, 15 min) when it started: the machine was "
        "shared, so the ratio means more than the absolute speeds."
    )
    return "\n".join(lines)
