"""What Apple's Neural Engine rating ("38 TOPS" on M4) amounts to, by model and by measurement.

Apple rates each Neural Engine in TOPS without saying at which precision or on what
program. The measurements that come closest are deep chains of 1x1 convs (maderix/ANE:
128 convs, 512 channels, 64x64, fp16 I/O), run with fp16 activations and with int8
activations between layers (W8A8). :func:`rated_finding` sets the rating beside the cost
model's throughput on those two programs and the published one, where there is one.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from anekit.bench import programs, published
from anekit.bench.suites import conv_chain
from anekit.hw.chips import get_chip
from anekit.hw.cost import ProgramWork, analyze, estimate_work
from anekit.hw.kinds import CostKind

# The deepest chain the published W8A8 table measured (ANE_NOTES section 7).
CHAIN = {"channels": 512, "height": 64, "width": 64, "depth": 128, "io_dtype": "fp16"}


def rated_finding(chip: str) -> dict[str, Any]:
    """The chip's rating beside fp16 and W8A8 chain throughput, predicted and published.

    Returns ``{"rated_tops", "rated_precision", "rating_source", "predicted": {"fp16",
    "w8a8"}, "published": {"fp16", "w8a8"}, "published_ids", "text"}`` with rates in
    T(FL)OPS (None where nothing is published).
    """
    profile = get_chip(chip)
    predicted, measured, ids = {}, {}, []
    for label, w8a8 in (("fp16", False), ("w8a8", True)):
        description = conv_chain(**CHAIN, w8a8=w8a8)
        work = _work(json.dumps(description, sort_keys=True))
        # the convs' multiply-adds, as the published TOPS count them (not the casts between)
        flops = sum(op.flops for op in work.ops if op.kind is CostKind.MAC)
        predicted[label] = flops / estimate_work(work, profile).seconds / 1e12
        hits = published.lookup(profile.name, description)
        measured[label] = flops / hits[0]["seconds"] / 1e12 if hits else None
        ids += [h["id"] for h in hits[:1]]
    rating = profile.facts["rated_tops"]
    return {
        "rated_tops": profile.rated_tops,
        "rated_precision": profile.rated_precision,
        "rating_source": rating.source,
        "predicted": predicted,
        "published": measured,
        "published_ids": ids,
        "text": _sentence(profile.marketing_name, profile.rated_tops, predicted, measured),
    }


@functools.lru_cache(maxsize=4)
def _work(description: str) -> ProgramWork:
    """The chain's work, analysed once per process (building 128 convs takes a second)."""
    return analyze(programs.build(json.loads(description)))


def _sentence(
    name: str,
    rated: float | None,
    predicted: dict[str, float],
    measured: dict[str, float | None],
) -> str:
    def pair(d: dict[str, Any]) -> str:
        fp16, w8a8 = (f"{d[k]:.1f}" if d[k] is not None else "-" for k in ("fp16", "w8a8"))
        return f"{fp16} fp16 / {w8a8} W8A8"

    chain = "128 chained 1x1 convs (512 ch, 64x64)"
    head = f"{name} is rated {rated:g} TOPS" if rated else f"{name} has no published TOPS rating"
    text = f"{head}; on {chain} the cost model gives {pair(predicted)} T(FL)OPS"
    if any(v is not None for v in measured.values()):
        text += f", the published timings {pair(measured)}"
    if rated:
        shares = measured if measured["w8a8"] and measured["fp16"] else predicted
        which = "published" if shares is measured else "predicted"
        text += (
            f"; the {which} W8A8 rate is {shares['w8a8'] / rated:.0%} of the rating and "
            f"the fp16 rate {shares['fp16'] / rated:.0%}"
        )
    return text
