"""Published ANE measurements the benchmark rows are shown beside, each with its source.

Timings of whole programs come from ``anekit/bench/data/published.json`` (collected for the
cost model; ANE_NOTES section 7 and more): a row gets every entry whose chip and
program description equal its own. Findings that are not the time of one program
(a ratio, a floor, a limit) are :data:`FINDINGS`, shown as notes under their suite.

Every entry names the runtime path it was measured through (:data:`PATHS`) and its split
(:func:`split_of`): the cost model's per-chip parameters may be fit to "fit" entries, never
to "holdout" ones, which are how its bias is judged.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from anekit.hw.chips import normalize_name

# Package data beside its reader; benchmarks/cost_model.py reads it through this name too.
PUBLISHED_JSON = resources.files("anekit.bench").joinpath("data/published.json")

MADERIX_README = "https://github.com/maderix/ANE (README)"
MADERIX_PART2 = "https://maderix.substack.com/p/inside-the-m4-apple-neural-engine-615"


# The runtime paths the published timings were measured through (the per-call floor differs).
PATHS = ("inmem", "e5rt", "coreml")
SPLITS = ("calibration", "fit", "holdout")


def split_of(entry: dict[str, Any]) -> str:
    """The split an entry belongs to, by a rule fixed before any fit looked at the timings.

    Section-7 entries are the calibration targets; entries that ``sets`` a chip parameter
    were fit to already; of the rest, those whose id's SHA-256 is divisible by 3 are held
    out. Hashing the id keeps the choice independent of the timings and of the model.
    """
    if entry.get("section7"):
        return "calibration"
    if entry.get("sets"):
        return "fit"
    digest = int(hashlib.sha256(entry["id"].encode("utf-8")).hexdigest(), 16)
    return "holdout" if digest % 3 == 0 else "fit"


@dataclass(frozen=True)
class PublishedFinding:
    """A published result about a suite as a whole, with where it was published."""

    chip: str
    text: str
    source: str


FINDINGS: dict[str, tuple[PublishedFinding, ...]] = {
    "dispatch": (
        PublishedFinding(
            "m4",
            "host overhead per evaluation (XPC to aned + IOKit) is ~0.095 ms; "
            "a 256^2 matmul with fp32 I/O takes 0.101 ms in total",
            MADERIX_PART2,
        ),
    ),
    "peak": (
        PublishedFinding(
            "m4",
            "a single large op reaches only ~27-30 % of peak (2048^2 matmul 5.7 TFLOPS); "
            "depth and fusion matter more than op size",
            MADERIX_PART2,
        ),
    ),
    "sram": (
        PublishedFinding(
            "m4",
            "performance falls when a working set exceeds on-chip memory, ~32 MB inferred on M4",
            MADERIX_PART2,
        ),
        PublishedFinding(
            "m4",
            "other sources describe a 2 MiB per-operand tiling threshold instead",
            "ANE_NOTES.md section 1",
        ),
    ),
    "int8": (
        PublishedFinding(
            "m4",
            "W8A8 (int8 activations between layers) is 1.88x faster than fp16 at 128 convs and "
            "1.85x at 64 convs (512 ch, 64x64)",
            MADERIX_README,
        ),
    ),
    "io_dtype": (
        PublishedFinding("m4", "fp16 direct I/O is ~37 % faster than fp32 I/O", MADERIX_README),
    ),
    "queue": (
        PublishedFinding(
            "m4",
            "the ANE request queue is 127 evaluations deep",
            "ANE_NOTES.md section 1 (Asahi Linux ANE driver documentation)",
        ),
    ),
}


def findings(suite: str, chip: str) -> list[dict[str, str]]:
    """The suite's published findings, as JSON rows; those measured on another chip say so."""
    key = normalize_name(chip)
    return [
        {"chip": f.chip, "text": f.text, "source": f.source, "same_chip": f.chip == key}
        for f in FINDINGS.get(suite, ())
    ]


def lookup(chip: str, description: dict[str, Any]) -> list[dict[str, Any]]:
    """Every published measurement of exactly this program on this chip (maybe none)."""
    key = normalize_name(chip)
    return [
        {
            "id": e["id"],
            "seconds": float(e["seconds"]),
            "reported": e["reported"],
            "machine": e["machine"],
            "source": e["source"],
        }
        for e in _entries()
        if e["chip"] == key and e["program"] == description
    ]


def entries() -> tuple[dict[str, Any], ...]:
    """Every published timing (empty if the data file is missing)."""
    return _entries()


def available() -> bool:
    """Whether the published measurements could be read (false only if the file is missing)."""
    return PUBLISHED_JSON.is_file()


@functools.cache
def _entries() -> tuple[dict[str, Any], ...]:
    if not PUBLISHED_JSON.is_file():
        return ()
    return tuple(json.loads(PUBLISHED_JSON.read_text("utf-8"))["entries"])
