"""The facts the ANE backend acts on, read from ``data/facts.json`` (each with its source)."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any


@functools.cache
def _table() -> dict[str, Any]:
    text = resources.files("anekit.backends.ane").joinpath("data/facts.json").read_text("utf-8")
    return json.loads(text)


def value(name: str) -> Any:
    """The value of fact ``name`` (KeyError names the facts there are)."""
    facts = _table()["facts"]
    if name not in facts:
        raise KeyError(f"no ANE fact {name!r}; facts: {sorted(facts)}")
    return facts[name]["value"]


def source(name: str) -> str:
    """Where fact ``name`` comes from, spelled out."""
    table = _table()
    key = table["facts"][name]["source"]
    return table["sources"].get(key, key)
