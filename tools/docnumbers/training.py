"""The training figures in docs/training.md: predicted steps (anekit/train/published.json)
and the measured speed of the reference backend (benchmarks/results/train.json)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

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


def _scaling_module() -> Any:
    """``benchmarks/train_scaling.py`` as a module (benchmarks/ is not a package)."""
    name = "train_scaling_benchmark"
    if name not in sys.modules:
        root = Path(__file__).resolve().parents[2]
        spec = importlib.util.spec_from_file_location(
            name, root / "benchmarks" / "train_scaling.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@generates("training-scaling")
def training_scaling() -> str:
    """Predicted step for W Macs (``benchmarks/train_scaling.py --predict``)."""
    ts = _scaling_module()
    tb5, tb4, eth = list(ts.LINKS)
    lines = ["| stories110m, per step | W = 1 | W = 2 | W = 4 | W = 8 |", "|---|---|---|---|---|"]
    for chip, label, link in (("m4", "M4, Thunderbolt 5", tb5), ("m4", "M4, Thunderbolt 4", tb4),
                              ("m4", "M4, 10 Gb Ethernet", eth),
                              ("m3-ultra", "M3 Ultra, Thunderbolt 5", tb5)):  # fmt: skip
        what = ts.step_ms("stories110m", chip)[1]
        rows = ts.scaling("stories110m", chip, link)
        cells = [f"{rows[0][1]:.0f} ms"] + [f"{ms:.0f} ms ({eff:.2f})" for _, ms, eff in rows[1:]]
        note = "" if what == "whole step" else " (kernels only)"
        lines.append(f"| {label}{note} | " + " | ".join(cells) + " |")
    accum = ts.scaling("stories110m", "m4", tb5, (2,), accum=4)[0][2]
    small = ts.scaling("stories15m", "m4", tb5, (2,))[0][2]
    small_ms = ts.step_ms("stories15m", "m4")[0]
    lines += ["", f"(scaling efficiency in brackets.) With `--grad-accum 4` two M4 Macs over "
              f"Thunderbolt 5 are predicted at {accum:.2f}; `stories15m` ({small_ms:.0f} ms a "
              f"step at batch 1 on M4) at {small:.2f} for two Macs over Thunderbolt 5."]  # fmt: skip
    return "\n".join(lines)
