"""The cost model's figures in docs/hw.md and docs/llm.md, from benchmarks/cost_model.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit.hw import cost
from tools.docnumbers import benchmark, generates


@generates("cost-model-summary")
def cost_model_summary() -> str:
    """The floors per generation, the ratio summary before and after, and the LOSO spread."""
    bench = benchmark("cost_model")
    entries = bench.load_entries()
    floors = bench.family_floors(entries)
    lines = ["| generation | path | floor (ms) |", "|---|---|---|"]
    for (generation, path), floor in sorted(floors.items()):
        lines.append(f"| {generation} | {path} | {floor * 1e3:.4f} |")
    before = bench.evaluate(entries, bench.previous_chips())
    after = bench.evaluate(entries)
    lines += ["", "| entries | each chip's own floor (before) | one per generation (after) |",
              "|---|---|---|"]  # fmt: skip
    for label, pick in (
        ("section 7", lambda r: r["split"] == "calibration"),
        ("fit split", lambda r: r["split"] == "fit"),
        ("held-out split", lambda r: r["split"] == "holdout"),
        ("latency-bound (< 1 ms), fit + held-out", bench._small),
    ):
        cells = [_cell(bench, [r for r in rows if pick(r)]) for rows in (before, after)]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    lines += ["", bench.spread(bench.leave_one_source_out(entries)) + "."]
    return "\n".join(lines)


def _cell(bench: Any, rows: list[dict]) -> str:
    errs = [bench._err(r) for r in rows]
    inside = sum(e <= bench.TARGET for e in errs)
    return f"{len(rows)}: {inside} within 1.25x, median x{float(np.median(errs)):.3f}; {bench.bias(rows)}"


@generates("llm-decode-table")
def llm_decode_table() -> str:
    """Predicted decode and prefill beside every published figure (anekit/llm/data/published.json)."""
    from anekit.llm.cost import compare_published

    rows = compare_published()
    lines = ["| model | chip | figure | published | predicted | predicted / published | source |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    ratios = []
    for kind in ("decode", "prefill"):
        for r in rows:
            if not r[f"predicted_{kind}"]:
                continue
            ratio = r[f"predicted_{kind}"] / r[f"published_{kind}"]
            ratios.append(ratio)
            what = (
                kind if kind == "decode" else f"prefill, {r['prefill_prompt_tokens']}-token prompt"
            )
            lines.append(f"| {r['model']} | {r['chip']} | {what} | {r[f'published_{kind}']:g} tok/s | "
                         f"{r[f'predicted_{kind}']:.1f} | {ratio:.2f} | {r['source']} |")  # fmt: skip
    inside = sum(max(x, 1 / x) <= 1.25 for x in ratios)
    above = sum(x > 1 for x in ratios)
    lines += ["", f"{inside} of {len(ratios)} within 1.25x; predicted faster than published "
              f"{above} times, slower {len(ratios) - above} times (median "
              f"{float(np.median(ratios)):.2f}). Weights taken as inputs stream at "
              f"{cost.stream_efficiency():.3f} of the ANE's measured DRAM bandwidth (fitted to "
              "the decode figures, every source weighted alike; 1.0 before)."]  # fmt: skip
    return "\n".join(lines)


@generates("cost-model-section7")
def cost_model_section7() -> str:
    """Every section-7 (calibration) entry: published, predicted, ratio; and the summary."""
    bench = benchmark("cost_model")
    rows = [r for r in bench.evaluate(bench.load_entries()) if r["split"] == "calibration"]
    lines = ["| entry | path | published | predicted | predicted / published |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['id']} | {r['path']} | {r['published_s'] * 1e3:.3f} ms | "
                     f"{r['predicted_s'] * 1e3:.3f} ms | {r['ratio']:.2f} |")  # fmt: skip
    lines += ["", f"{_cell(bench, rows)}."]
    return "\n".join(lines)
