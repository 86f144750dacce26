"""anekit.llm's measured speed in docs/llm.md, from benchmarks/results/llm.json.

That file is what ``python benchmarks/llm.py --json benchmarks/results/llm.json`` measured
(sections 1 and 2: the machine's load average is recorded beside the figures).
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.docnumbers import benchmark, generates

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "llm.json"


def _load(pair: list[float]) -> str:
    return ", ".join(f"{x:.1f}" for x in pair)


@generates("llm-reference-speed")
def llm_reference_speed() -> str:
    """Prefill and decode of anekit.llm on the reference backend against transformers."""
    r = json.loads(RESULTS.read_text("utf-8"))
    speed, step, sets = r["speed_ms"], r["step_ms"], r["buffer_sets_ms"]
    ours, theirs = step["anekit"], step["transformers"]
    lo, hi = sorted(ours, key=int)
    prefill_tokens = benchmark("llm").PROMPT  # the prompt the figures were measured on
    rows = [
        "| | anekit.llm reference | transformers fp32 | anekit speed / transformers |",
        "|---|---|---|---|",
        f"| prefill, {prefill_tokens}-token prompt | "
        f"{prefill_tokens / speed['prefill anekit'] * 1e3:.0f} tok/s "
        f"({speed['prefill anekit']:.0f} ms) | "
        f"{prefill_tokens / speed['prefill transformers'] * 1e3:.0f} tok/s "
        f"({speed['prefill transformers']:.0f} ms) | "
        f"{speed['prefill transformers'] / speed['prefill anekit']:.2f}x |",
        f"| decode after 32 tokens, per token | {speed['decode anekit']:.1f} ms | "
        f"{speed['decode transformers']:.1f} ms | "
        f"{speed['decode transformers'] / speed['decode anekit']:.2f}x |",
        f"| decode step at position {lo} / {hi} | {ours[lo]:.1f} / {ours[hi]:.1f} ms "
        f"({ours[hi] / ours[lo]:.2f}x) | {theirs[lo]:.1f} / {theirs[hi]:.1f} ms "
        f"({theirs[hi] / theirs[lo]:.2f}x) | |",
        "",
        f"Decode on the model's resident buffer sets took {sets['resident']:.1f} ms per token "
        f"against {sets['per-call']:.1f} ms with every input passed as an array per call "
        f"({sets['per-call'] / sets['resident']:.2f}x). "
        f"{r['threads']} thread(s) for BLAS and torch, {r['rounds']} interleaved rounds, "
        f"medians. Load average: {_load(r['load_before'])} before, "
        f"{_load(r['load_after'])} after (1, 5, 15 min).",
    ]
    return "\n".join(rows)
