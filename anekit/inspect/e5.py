"""E5 bundle descriptors (``H16G.e5`` and kin): a FlatBuffer whose schema is not public.

What is known (ANE_NOTES section 6) is thin and unverified: one description
gives a root table with symbol names, build info, sections and format version
4, and the compiled graph of a cast-wrapped program reads Cast -> AneInference
-> Cast. :data:`E5_SCHEMA` turns each claim into a recognition rule; every
label it puts on a field is a guess and says so. The structure itself comes
from the schema-less walker in :mod:`anekit.inspect.flatbuf`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from anekit.inspect.flatbuf import FbScalar, FbString, FbVector, FlatBuffer, read_flatbuffer, walk

__all__ = ["E5Guess", "E5_SCHEMA", "KNOWN_OP_TYPES", "E5", "read_e5", "label_e5"]

KNOWN_OP_TYPES = ("Cast", "AneInference")
_VERSION = re.compile(r"\d+\.\d+(\.\d+)*")
_NOTES = "ANE_NOTES section 6 (one unverified description of the E5 root table)"


@dataclass(frozen=True)
class E5Guess:
    """What a field might be, how it is recognised, and where the idea comes from."""

    name: str
    rule: str
    source: str
    confidence: str = "guess"


E5_SCHEMA: tuple[E5Guess, ...] = (
    E5Guess("format_version", "a scalar field of the root table equal to 4", _NOTES),
    E5Guess("symbol_names", "a vector of strings in the root table", _NOTES),
    E5Guess("sections", "a vector of tables in the root table", _NOTES),
    E5Guess("build_info", "a string holding a dotted version number", _NOTES),
    E5Guess(
        "op_type",
        f"a string equal to a known E5 op type ({', '.join(KNOWN_OP_TYPES)})",
        "ANE_NOTES section 2.4 (compiled E5 graph Cast -> AneInference -> Cast)",
    ),
)
_BY_NAME = {g.name: g for g in E5_SCHEMA}


@dataclass(frozen=True)
class E5:
    flatbuffer: FlatBuffer
    labels: dict[str, str]  # node path -> guessed meaning
    strings: tuple[tuple[str, str], ...]  # (path, text) of every string found
    op_types: tuple[str, ...]


def _label(name: str) -> str:
    return f"{name}? ({_BY_NAME[name].confidence}: {_BY_NAME[name].rule})"


def label_e5(fb: FlatBuffer) -> dict[str, str]:
    """Apply :data:`E5_SCHEMA` to a walked buffer: path -> label, every label a guess."""
    labels = {}
    for path, node in walk(fb):
        in_root = path.count(".") == 1 and "[" not in path
        if in_root and isinstance(node, FbScalar) and node.value == 4:
            labels[path] = _label("format_version")
        elif in_root and isinstance(node, FbVector) and node.kind in ("strings", "tables"):
            labels[path] = _label("symbol_names" if node.kind == "strings" else "sections")
        elif isinstance(node, FbString) and node.value in KNOWN_OP_TYPES:
            labels[path] = _label("op_type")
        elif isinstance(node, FbString) and _VERSION.search(node.value):
            labels[path] = _label("build_info")
    return labels


def read_e5(data: bytes, *, file: str | None = None) -> E5:
    """Walk an E5 descriptor and label what the known claims recognise."""
    fb = read_flatbuffer(data, file=file)
    strings = tuple((path, n.value) for path, n in walk(fb) if isinstance(n, FbString))
    ops = tuple(text for _, text in strings if text in KNOWN_OP_TYPES)
    return E5(fb, label_e5(fb), strings, ops)
