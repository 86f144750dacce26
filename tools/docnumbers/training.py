"""The training-step predictions in docs/training.md, from anekit/train/data/published.json."""

from __future__ import annotations

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
