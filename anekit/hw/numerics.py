"""Numerics profiles: how a chip family's Neural Engine stores fp16 results, as published.

The reference backend computes every op in fp32 and stores its output in fp16. The
``"ideal"`` profile stores as IEEE does (round to nearest even, subnormals kept, NaN
propagated); a chip family's profile stores as the engine was observed to: matmul outputs
saturating to inf above 32752 (N1), ties rounded away from zero (N4, N5), subnormals
flushed (N12), exp saturating (N9), width-offset slices clamped before A16 (N7) and no NaN
ever coming out (N8). The rows are data (``data/numerics.json``, a source for each and
whether it was observed on that family or assumed); the op registry declares which row
each op reads (``OpDef.numerics``). ``docs/numerics.md`` is the catalogue.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit.config import env_numerics
from anekit.errors import UsageError
from anekit.files import read_regular, write_atomic
from anekit.hw.chips import Chip, chips, default_chip, get_chip

# The project's one attention-mask value for "masked out": far enough below any real score
# that softmax gives it weight 0 (exp(-30000) underflows), fp16-exact, and inside the
# engine's safe range: a larger |mask| summed with a score can pass N1's 32752 matmul cliff
# and N8's non-finite table turns what overflows into a finite garbage value. -30000 is the
# Rust ANE builder's MASK_OFF (ANE_NUMERICS.md 1b, "Attention mask values"); Apple's rules
# use -40000 and maderix -65504, which N1 punishes.
MASK_MIN = -30000.0

FORMAT = "anekit-numerics"
VERSION = 1
TIE_RULES = ("even", "away")
PRODUCTS = ("exact", "fp16")
PRECISE = ":precise"  # "m4:precise": the chip's profile with every product rounded (N3)
STATUSES = ("observed", "assumed")
IDEAL = "ideal"
_FILE_LIMIT = 1 << 20  # bytes: a profile file is a few kilobytes
_NONFINITE_KINDS = ("nan", "+inf", "-inf")


@dataclass(frozen=True)
class Row:
    """One behaviour of a profile: its value, catalogue entry, source and whether it was seen."""

    field: str
    value: Any
    status: str  # "observed" on this family, or "assumed" (the side that predicts the failure)
    catalogue: str  # "N1" ... "N24" (docs/numerics.md)
    source: str
    note: str = ""


@dataclass(frozen=True)
class NumericsProfile:
    """How one chip family (or IEEE, ``"ideal"``) stores fp16 op results; see the module docstring.

    Saturation fields are magnitudes above which an output becomes +-inf (None: only fp16's
    own overflow at 65520). ``nonfinite`` maps an op type (``"*"``: every other op) to what
    its NaN, +inf and -inf outputs become. ``products`` is "exact" (a dot product's products
    are summed exactly: the default profiles, cheap) or "fp16" (each product stored in fp16
    with the tie rule and the flush before the wide sum, N3 and N12: the dearer precise
    variants, ``"m4:precise"``).
    """

    name: str
    family: str
    matmul_saturation: float | None = None
    conv_saturation: float | None = None
    exp_saturation: float | None = None
    tie: str = "even"
    round_ties: str = "even"
    flush_subnormals: bool = False
    slice_clamp: float | None = None
    logsumexp_shift: bool = True
    nonfinite: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    accumulator: str = "fp32"
    products: str = "exact"  # "fp16": every product of a dot product stored in fp16 (N3, precise)
    rows: Mapping[str, Row] = field(default_factory=dict, compare=False)
    origin: str = field(default="built-in", compare=False)  # or the file it was read from
    provenance: str = field(default="", compare=False)  # a calibrated file: where, how measured

    @property
    def is_ideal(self) -> bool:
        """Whether this profile stores as IEEE does (nothing of the engine modelled)."""
        return self == _ideal()

    def saturation(self, kind: str) -> float | None:
        """The magnitude above which an output of ``kind`` ("matmul", "conv", "exp") becomes inf."""
        return getattr(self, f"{kind}_saturation")

    def nonfinite_for(self, op_type: str) -> dict[str, float]:
        """What an op's non-finite outputs become: {"nan": v, "+inf": v, "-inf": v} (absent: kept)."""
        table = dict(self.nonfinite.get("*", {}))
        table.update(self.nonfinite.get(op_type, {}))
        return table

    def assumed(self) -> list[Row]:
        """The rows that were not observed on this family."""
        return [r for r in self.rows.values() if r.status != "observed"]

    def as_dict(self) -> dict[str, Any]:
        """The profile as its file holds it (``save_profile``, ``anekit chips --numerics --json``)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "family": self.family,
            "provenance": self.provenance,
            "rows": {
                k: {
                    "value": _plain(getattr(self, k)),
                    **{a: getattr(r, a) for a in ("status", "catalogue", "source", "note")},
                }
                for k, r in self.rows.items()
            },
        }


# the fields a profile file's rows set (the others say what the profile is and where from)
_BEHAVIOURS = tuple(
    f.name
    for f in fields(NumericsProfile)
    if f.name not in ("name", "family", "rows", "origin", "provenance")
)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


@functools.cache
def _ideal() -> NumericsProfile:
    return NumericsProfile(name=IDEAL, family=IDEAL)


def ideal() -> NumericsProfile:
    """IEEE fp16 storage: round to nearest even, subnormals kept, NaN propagated."""
    return _ideal()


def numerics_profile(spec: str | NumericsProfile | Chip | None = None) -> NumericsProfile:
    """Resolve a numerics profile: ``"ideal"``, a chip ("m1", "Apple M4 Pro"), a family ("A16"),
    or a profile file (``*.json``, written by ``save_profile`` or the numerics ladder rung).

    Any of these but "ideal" with ``:precise`` appended ("m4:precise", "A13:precise") is its
    dearer precise variant (:func:`precise`), for ``anekit diff`` and tests.

    None: ``$ANEKIT_NUMERICS``, else the default chip's profile (the host's chip on a Mac,
    else m4). An unknown name is a UsageError listing what is accepted.
    """
    if isinstance(spec, NumericsProfile):
        return spec
    if isinstance(spec, Chip):
        return _chip_profile(spec)
    if spec is None:
        spec = env_numerics() or default_chip()[0]
    text = str(spec).strip()
    if text.lower().endswith(PRECISE):
        return precise(numerics_profile(text[: -len(PRECISE)]))
    if text.lower() == IDEAL:
        return ideal()
    if text.endswith(".json") or "/" in text or Path(text).is_file():
        return load_profile(text)
    families = _families()
    if text.upper() in families:
        return families[text.upper()]
    try:
        chip = get_chip(text)
    except ValueError:
        raise UsageError(
            f"numerics: expected 'ideal', a chip ({', '.join(chips())}), a family "
            f"({', '.join(families)}) or a profile file (*.json); found {text!r}"
        ) from None
    return _chip_profile(chip)


def precise(profile: NumericsProfile) -> NumericsProfile:
    """The precise variant of a chip family's profile: every product of a matmul, linear,
    conv, conv_transpose and einsum is stored in fp16 (tie rule, overflow, flush) before the
    wide sum, as ANEForge describes the engine (N3; N12 inside the dot product). It costs a
    tensor of products per output block, so it is for ``anekit diff`` and tests, not the
    default."""
    if profile.is_ideal:
        raise UsageError(
            "numerics: 'ideal:precise' means nothing: the precise variant rounds products as a "
            "chip family's engine does; name a chip or family ('m4:precise')"
        )
    if profile.products == "fp16":
        return profile
    observed = profile.family in ("A13", "A16")  # ANEForge saw it on M1 and M5
    row = Row(
        field="products",
        value="fp16",
        status="observed" if observed else "assumed",
        catalogue="N3",
        source=_data()["sources"]["aneforge-numerics"],
        note="each product rounded to fp16 before the wide sum; subnormal products flushed (N12)",
    )
    return replace(
        profile,
        name=profile.name + PRECISE,
        products="fp16",
        rows=MappingProxyType({**profile.rows, "products": row}),
    )


def _chip_profile(chip: Chip) -> NumericsProfile:
    family = _generations().get(chip.generation)
    if family is None:
        raise UsageError(
            f"numerics: chip {chip.name!r} is of generation {chip.generation!r}, which no "
            f"numerics family covers ({', '.join(_generations())})"
        )
    return replace(_families()[family], name=chip.name)


def require_device_chip(spec: Any, chip: Chip, backend: str) -> None:
    """Refuse ``numerics=`` on a backend running the device's own arithmetic unless ``spec`` names
    that device's chip (the engine cannot compute by another profile: asking for one is a bug)."""
    if spec is None:
        return
    named = spec if isinstance(spec, Chip) else None
    if isinstance(spec, str):
        try:
            named = get_chip(spec)
        except ValueError:
            named = None
    if named is None or named.name != chip.name:
        raise UsageError(
            f"backend {backend!r} computes with the {chip.name} Neural Engine's own arithmetic: "
            f"numerics= may only name that chip ({chip.name!r}); found {spec!r} (profiles other "
            "than the device's are for backend='reference')"
        )


def families() -> dict[str, NumericsProfile]:
    """Every built-in family profile by family name ("A13" ... "A16")."""
    return dict(_families())


@functools.cache
def _data() -> dict[str, Any]:
    text = resources.files("anekit.hw").joinpath("data/numerics.json").read_text("utf-8")
    return json.loads(text)


@functools.cache
def _generations() -> dict[str, str]:
    return dict(_data()["generations"])


@functools.cache
def _families() -> Mapping[str, NumericsProfile]:
    raw = _data()
    sources = raw["sources"]
    return MappingProxyType(
        {
            name: _profile(name, name, entry["rows"], sources, "built-in", "data/numerics.json")
            for name, entry in raw["families"].items()
        }
    )


def _profile(
    name: str,
    family: str,
    rows: Mapping[str, Any],
    sources: Mapping[str, str],
    origin: str,
    where: str,
    provenance: str = "",
) -> NumericsProfile:
    if not isinstance(rows, Mapping):
        raise UsageError(f"numerics profile: 'rows' must be an object, found {rows!r}", path=where)
    unknown = sorted(set(rows) - set(_BEHAVIOURS))
    if unknown:
        raise UsageError(
            f"numerics profile: unknown rows {unknown}; expected some of {list(_BEHAVIOURS)}",
            path=where,
        )
    parsed = {k: _row(k, raw, sources, where) for k, raw in rows.items()}
    values = {k: _checked(k, r.value, where) for k, r in parsed.items()}
    return NumericsProfile(
        name=name,
        family=family,
        rows=MappingProxyType(parsed),
        origin=origin,
        provenance=provenance,
        **values,
    )


def _row(key: str, raw: Any, sources: Mapping[str, str], where: str) -> Row:
    if not isinstance(raw, Mapping) or "value" not in raw:
        raise UsageError(f"numerics row {key!r}: expected an object with a value", path=where)
    status = raw.get("status", "assumed")
    if status not in STATUSES:
        raise UsageError(
            f"numerics row {key!r}: status must be one of {STATUSES}, found {status!r}", path=where
        )
    source = str(raw.get("source", ""))
    return Row(
        field=key,
        value=raw["value"],
        status=status,
        catalogue=str(raw.get("catalogue", "")),
        source=sources.get(source, source),
        note=str(raw.get("note", "")),
    )


def _checked(key: str, value: Any, where: str) -> Any:
    """A row's value, checked against what the field holds (a UsageError names the row)."""

    def bad(expected: str) -> UsageError:
        return UsageError(f"numerics row {key!r}: expected {expected}, found {value!r}", path=where)

    if key.endswith("_saturation") or key == "slice_clamp":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a positive magnitude or null")
        if not 0 < value <= 65504:
            raise bad("a magnitude in (0, 65504]")
        return float(value)
    if key in ("tie", "round_ties"):
        if value not in TIE_RULES:
            raise bad(f"one of {TIE_RULES}")
        return value
    if key in ("flush_subnormals", "logsumexp_shift"):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key == "accumulator":
        if value not in ("fp32", "fp16"):
            raise bad("'fp32' or 'fp16'")
        return value
    if key == "products":
        if value not in PRODUCTS:
            raise bad(f"one of {PRODUCTS}")
        return value
    return _nonfinite_table(value, bad)


def _nonfinite_table(value: Any, bad: Any) -> Mapping[str, Mapping[str, float]]:
    if not isinstance(value, Mapping):
        raise bad("an object: op type -> {nan, +inf, -inf: value}")
    table = {}
    for op, entry in value.items():
        if not isinstance(entry, Mapping) or set(entry) - set(_NONFINITE_KINDS):
            raise bad(f"for op {op!r} an object with keys among {_NONFINITE_KINDS}")
        row = {}
        for kind, v in entry.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise bad(f"for op {op!r} {kind} a finite number")
            if float(np.float16(v)) != v:
                raise bad(f"for op {op!r} {kind} an fp16 value")
            row[kind] = float(v)
        table[str(op)] = MappingProxyType(row)
    return MappingProxyType(table)


def load_profile(path: str | Path) -> NumericsProfile:
    """Read a profile file (``save_profile``'s format, version 1); a UsageError names what is wrong."""
    where = str(path)
    data = read_regular(path, limit=_FILE_LIMIT, what="a numerics profile (JSON)")
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise UsageError(f"numerics profile: not JSON ({e})", path=where) from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise UsageError(f"numerics profile: expected format {FORMAT!r}", path=where)
    if raw.get("version") != VERSION:
        raise UsageError(
            f"numerics profile: expected version {VERSION}, found {raw.get('version')!r}",
            path=where,
        )
    name, family = raw.get("name"), raw.get("family")
    if not isinstance(name, str) or not name or not isinstance(family, str):
        raise UsageError("numerics profile: expected a name and a family (strings)", path=where)
    provenance = raw.get("provenance", "")
    if not isinstance(provenance, str):
        raise UsageError("numerics profile: provenance must be a string", path=where)
    return _profile(name, family, raw.get("rows"), {}, where, where, provenance)


def save_profile(profile: NumericsProfile, path: str | Path) -> Path:
    """Write a profile file atomically (what ``numerics=PATH`` reads back)."""
    target = Path(path)
    text = json.dumps(profile.as_dict(), indent=1, allow_nan=False)
    write_atomic(target, (text + "\n").encode("utf-8"))
    return target
