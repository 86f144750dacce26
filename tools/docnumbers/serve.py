"""The server's measured overhead in docs/serve.md, from benchmarks/results/serve.json.

That file is what ``python benchmarks/serve.py --json benchmarks/results/serve.json``
measured (on a shared machine: its load is recorded beside the figures).
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.docnumbers import generates

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "serve.json"


@generates("serve-overhead")
def serve_overhead() -> str:
    """Time to first token and decode tokens/s in-process and through the server; aggregates."""
    r = json.loads(RESULTS.read_text("utf-8"))
    ttft, tps = r["ttft_ms"], r["decode_tokens_per_s"]
    rows = [
        "| | in-process `session.stream` | through `anekit serve` | server overhead |",
        "|---|---|---|---|",
        f"| time to first token | {ttft['in_process']:.1f} ms | {ttft['server']:.1f} ms | "
        f"{(ttft['server'] / ttft['in_process'] - 1) * 100:+.1f}% |",
        f"| decode | {tps['in_process']:.1f} tok/s | {tps['server']:.1f} tok/s | "
        f"{(tps['server'] / tps['in_process'] - 1) * 100:+.1f}% |",
    ]
    agg = r["aggregate_tokens_per_s"]
    rows += [
        "",
        f"Aggregate decode with 1, 2 and 4 concurrent streaming clients: {agg['1']:.1f}, "
        f"{agg['2']:.1f} and {agg['4']:.1f} tok/s. Model: `{r['model']}`; prompt "
        f"{r['prompt_tokens']} tokens, {r['new_tokens']} new, {r['rounds']} rounds. Load: "
        f"`{r['load_before'].split('load average: ')[-1]}` before, "
        f"`{r['load_after'].split('load average: ')[-1]}` after (1, 5, 15 min).",
    ]
    return "\n".join(rows)


TARGET = 0.10  # benchmarks/serve.py's target: the server's overhead at most 10% on both


@generates("serve-overhead-verdict")
def serve_overhead_verdict() -> str:
    """Whether the measured overhead (time to first token, decode time a token) meets it."""
    r = json.loads(RESULTS.read_text("utf-8"))
    ttft, tps = r["ttft_ms"], r["decode_tokens_per_s"]
    worst = max(ttft["server"] / ttft["in_process"], tps["in_process"] / tps["server"]) - 1
    if worst <= TARGET:
        return f"within the {TARGET:.0%} target on both"
    return f"outside the {TARGET:.0%} target ({worst:+.1%} at worst)"
