"""Which compressed weight encodings each chip streams natively (``data/compression.json``).

A constexpr op (``anekit.mil.ops.constexpr``) declares its :class:`Encoding`: the storage
scheme and the bits of one stored element. Per ANE generation, the data says whether the
compiler keeps such a weight compressed and decompresses it as it streams ("streams": the
weight costs its stored bytes of bandwidth) or folds it to a dense fp16 constant when it
compiles ("folds": correct, but the weight costs its dense bytes). The cost model prices
weights by this; the checker warns where a chip folds an encoding or where no source
says what it does.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType

from anekit.hw.chips import Chip, Fact, get_chip
from anekit.mil.ops.registry import Encoding

VERDICTS = ("streams", "folds")


@dataclass(frozen=True)
class EncodingSupport:
    """One encoding (kind and bits) and what each generation does with it.

    Attributes:
        encoding: the constexpr encoding and its element bits.
        form: the MIL form, in words.
        generations: generation ("H13" ...) -> a Fact whose value is "streams" or "folds".
    """

    encoding: Encoding
    form: str
    generations: Mapping[str, Fact]


def support(encoding: Encoding, chip: str | Chip) -> Fact | None:
    """What ``chip`` does with weights in ``encoding``, or None where no source says."""
    entry = _load().get(tuple(encoding))
    return None if entry is None else entry.generations.get(get_chip(chip).generation)


def streams(encoding: Encoding, chip: str | Chip) -> bool:
    """The chip streams this encoding compressed (True only where a source says so)."""
    fact = support(encoding, chip)
    return fact is not None and fact.value == "streams"


def encodings() -> list[EncodingSupport]:
    """Every encoding with its per-generation verdicts, in the data file's order."""
    return list(_load().values())


@functools.cache
def _load() -> dict[tuple[str, int], EncodingSupport]:
    text = resources.files("anekit.hw").joinpath("data/compression.json").read_text("utf-8")
    raw = json.loads(text)
    sources = raw["sources"]
    table: dict[tuple[str, int], EncodingSupport] = {}
    for entry in raw["encodings"]:
        key = Encoding(entry["encoding"], int(entry["bits"]))
        generations = {}
        for generation, fact in entry["generations"].items():
            if fact["value"] not in VERDICTS or fact["source"] not in sources:
                raise ValueError(
                    f"data/compression.json {key.kind}/{key.bits} {generation}: expected a value "
                    f"in {VERDICTS} and a known source, found {fact}"
                )
            generations[generation] = Fact(
                value=fact["value"],
                source=sources[fact["source"]],
                estimate=bool(fact.get("estimate", False)),
                note=fact.get("note", ""),
            )
        table[tuple(key)] = EncodingSupport(key, entry["form"], MappingProxyType(generations))
    return table
