"""The chip rating docs/bench.md quotes: `anekit.bench.rating.rated_finding("m4")`, which
reads the rating from anekit/hw/data/chips.json, the published chain timings from
anekit/bench/data/published.json and computes the cost model's prediction."""

from __future__ import annotations

from tools.docnumbers import generates


@generates("bench-rating-m4")
def bench_rating_m4() -> str:
    """M4's rating beside the published and predicted fp16 and W8A8 chain throughput."""
    from anekit.bench import published
    from anekit.bench.rating import rated_finding

    r = rated_finding("m4")
    rated, pub, pred = r["rated_tops"], r["published"], r["predicted"]
    sources = {e["id"]: e["source"] for e in published.entries()}
    names = sorted({sources[i].split("github.com/")[-1].split(" (")[0] for i in r["published_ids"]})
    return (
        f"On M4: rated {rated:g} TOPS; published {pub['fp16']:.1f} TFLOPS fp16 and "
        f"{pub['w8a8']:.1f} TOPS W8A8 ({', '.join(names)} README), so the rating is the "
        f"{r['rated_precision']} rate ({pub['w8a8'] / rated:.0%} of it reached), "
        f"{pub['w8a8'] / pub['fp16']:.1f}x the fp16 one ({pub['fp16'] / rated:.0%}); the cost "
        f"model gives {pred['fp16']:.1f} / {pred['w8a8']:.1f}."
    )


@generates("bench-settings")
def bench_settings() -> str:
    """The quick and full timing settings (``QUICK``, ``FULL`` in anekit/bench/measure.py)."""
    from anekit.bench.measure import FULL, QUICK, Settings

    def one(s: Settings) -> str:
        warm = f"{s.warmup} warm-up" + ("s" if s.warmup != 1 else "")
        return f"{warm}, {s.min_reps}..{s.max_reps} rounds, ~{s.budget_s:g} s"

    return f"(quick: {one(QUICK)}; full: {one(FULL)})"


@generates("bench-batch-below")
def bench_batch_below() -> str:
    """Calls shorter than this are timed in batches (``Settings.min_sample_s``)."""
    from anekit.bench.measure import FULL, QUICK

    if QUICK.min_sample_s != FULL.min_sample_s:
        raise ValueError("docs/bench.md quotes one batching threshold for quick and full")
    return f"{QUICK.min_sample_s * 1e3:g} ms"


@generates("bench-noisy")
def bench_noisy() -> str:
    """The spread above which a timing is flagged NOISY (``NOISY_SPREAD``)."""
    from anekit.bench.measure import NOISY_SPREAD

    return f"{NOISY_SPREAD:g}x"
