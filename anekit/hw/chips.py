"""Apple-silicon Neural Engine profiles: what each chip is, where each number comes from.

The numbers live in ``data/chips.json``; every one is a :class:`Fact` carrying its
source and whether it is an estimate. :class:`Chip` exposes the values as typed
fields, the cost-model parameters as :class:`CostParams`, and ``facts`` for provenance.
"""

from __future__ import annotations

import functools
import json
import platform
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from types import MappingProxyType
from typing import Any

DEFAULT_CHIP = "m4"

_MB = 1e6


@dataclass(frozen=True)
class Fact:
    """A published or estimated number with its provenance.

    Attributes:
        value: the number (or string); None where nothing is published.
        source: where it comes from (a URL or a project file), resolved from the data file.
        estimate: True when derived or assumed rather than measured or specified.
        note: what exactly was measured, or how the estimate was made.
        conflict: another source's different value, when the sources disagree.
    """

    value: Any
    source: str
    estimate: bool
    note: str = ""
    conflict: Fact | None = None


# Runtime paths a program can be evaluated through; each pays its own per-call floor.
# "inmem" is the private in-memory path anekit's ane backend uses (what estimates assume);
# Core ML dispatches through the E5 runtime, so it is costed with the e5rt floor.
RUNTIME_PATHS = ("inmem", "e5rt", "coreml")
# The two published readings of the SRAM cliff (ANE_NOTES 1): all of an op's operands and
# its result against the on-chip working set, or each operand against a tiling threshold.
SRAM_CLIFFS = ("working_set", "per_operand")


@dataclass(frozen=True)
class CostParams:
    """Per-chip parameters of the cost model (SI units; see ``anekit.hw.cost``).

    ``floor_s`` is the per-call floor of the path being costed (the in-memory path unless
    :meth:`Chip.on_path` chose another); ``e5rt_floor_s`` is the E5 runtime's. ``band`` is
    the range of predicted / published times when a source is left out of the fit (10-90 %):
    an estimate of ``t`` means a time likely between ``t / band[1]`` and ``t / band[0]``.
    """

    floor_s: float
    peak_flops: float
    int8_speedup: float
    io_bw: float
    weight_bw: float
    dram_bw: float
    spill_flops: float
    vector_flops: float
    host_cast_rate: float
    onchip_tensor_bytes: float
    working_set_bytes: float
    e5rt_floor_s: float
    sram_cliff: str
    operand_tile_bytes: float
    band: tuple[float, float]


@dataclass(frozen=True)
class Chip:
    """One chip profile; ``facts`` holds every field's source (cost parameters under ``cost.*``)."""

    name: str
    marketing_name: str
    generation: str
    ne_cores: int
    rated_tops: float | None
    rated_precision: str | None
    measured_fp16_tflops: float | None
    dram_bw_gbps: float
    ane_dram_bw_gbps: float
    compile_first_ms: float | None
    onchip_tensor_mb: float
    working_set_mb: float
    dialect: str
    max_dim_spatial: int
    max_dim_channel: int
    max_input_channels: int
    weights_ceiling_gb: float
    max_tensor_gib: float
    max_program_gib: float
    max_rank: int
    matmul_k_multiple: int
    fp32_cast: bool
    cost: CostParams
    facts: Mapping[str, Fact]

    def with_sram_cliff(self, reading: str) -> Chip:
        """This chip costed with the other published reading of the SRAM cliff (SRAM_CLIFFS)."""
        if reading not in SRAM_CLIFFS:
            raise ValueError(f"SRAM cliff: expected one of {SRAM_CLIFFS}, found {reading!r}")
        return replace(self, cost=replace(self.cost, sram_cliff=reading))

    def on_path(self, path: str) -> Chip:
        """This chip evaluated through another runtime path (only the per-call floor differs)."""
        if path not in RUNTIME_PATHS:
            raise ValueError(f"runtime path: expected one of {RUNTIME_PATHS}, found {path!r}")
        inmem = self.facts["cost.floor_ms"].value * 1e-3
        floor = inmem if path == "inmem" else self.cost.e5rt_floor_s
        return replace(self, cost=replace(self.cost, floor_s=floor))


def chips() -> list[str]:
    """Return the names of every chip profile, oldest generation first."""
    return list(_load())


def get_chip(name: str | Chip) -> Chip:
    """Return a chip profile by name ("m4", "M4 Pro", "Apple M4 Pro"); ValueError lists valid names."""
    if isinstance(name, Chip):
        return name
    key = normalize_name(name)
    profiles = _load()
    if key not in profiles:
        raise ValueError(f"unknown chip {name!r}; expected one of: {', '.join(profiles)}")
    return profiles[key]


def resolve(chip: str | Chip | None = None) -> Chip:
    """The chip a public entry point works for: a profile as it is, a name looked up, None the
    default (this Mac's chip, else m4: :func:`default_chip`). Below the entry points, functions
    take the :class:`Chip` this returns and never convert again."""
    if isinstance(chip, Chip):
        return chip
    return get_chip(default_chip()[0] if chip is None else chip)


def normalize_name(name: str) -> str:
    """Map a chip spelling ("Apple M4 Pro", "m4_pro", "M4-PRO") to its profile name ("m4-pro")."""
    text = name.strip().lower()
    text = re.sub(r"^apple\s+", "", text)
    return re.sub(r"[\s_]+", "-", text)


def default_chip() -> tuple[str, str]:
    """Return the chip to assume when none is given, and a sentence saying how it was chosen."""
    if platform.system() != "Darwin":
        return DEFAULT_CHIP, f"not running on macOS; assuming the default chip {DEFAULT_CHIP}"
    brand = host_brand_string()
    if brand is None:
        return DEFAULT_CHIP, f"could not read machdep.cpu.brand_string; assuming {DEFAULT_CHIP}"
    detected = chip_from_brand(brand)
    if detected is None:
        return DEFAULT_CHIP, f"host CPU {brand!r} has no profile; assuming {DEFAULT_CHIP}"
    return detected, f"detected from sysctl machdep.cpu.brand_string ({brand!r})"


def host_brand_string() -> str | None:
    """Return macOS's CPU brand string (e.g. "Apple M4 Pro"), or None if it cannot be read."""
    try:
        out = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def chip_from_brand(brand: str) -> str | None:
    """Map a CPU brand string ("Apple M4 Pro") to a profile name, or None if there is none."""
    match = re.search(r"\bM(\d+)(?:\s+(Pro|Max|Ultra))?\b", brand, flags=re.IGNORECASE)
    if match is None:
        return None
    name = f"m{match.group(1)}" + (f"-{match.group(2).lower()}" if match.group(2) else "")
    return name if name in _load() else None


@functools.cache
def _load() -> dict[str, Chip]:
    raw = json.loads(resources.files("anekit.hw").joinpath("data/chips.json").read_text("utf-8"))
    sources = raw["sources"]
    return {name: _chip(name, entry, sources) for name, entry in raw["chips"].items()}


def _fact(raw: dict[str, Any], sources: Mapping[str, str]) -> Fact:
    conflict = raw.get("conflict")
    return Fact(
        value=raw.get("value"),
        source=sources.get(raw["source"], raw["source"]),
        estimate=bool(raw.get("estimate", False)),
        note=raw.get("note", ""),
        conflict=_fact({"estimate": False, **conflict}, sources) if conflict else None,
    )


def _chip(name: str, entry: dict[str, Any], sources: Mapping[str, str]) -> Chip:
    facts = {key: _fact(raw, sources) for key, raw in entry["facts"].items()}
    facts.update({f"cost.{key}": _fact(raw, sources) for key, raw in entry["cost"].items()})
    v = {key: fact.value for key, fact in facts.items()}
    cost = CostParams(
        floor_s=v["cost.floor_ms"] * 1e-3,
        peak_flops=v["cost.peak_fp16_tflops"] * 1e12,
        int8_speedup=v["cost.int8_speedup"],
        io_bw=v["cost.io_bw_gbps"] * 1e9,
        weight_bw=v["cost.weight_bw_gbps"] * 1e9,
        dram_bw=v["ane_dram_bw_gbps"] * 1e9,
        spill_flops=v["cost.spill_tflops"] * 1e12,
        vector_flops=v["cost.vector_tflops"] * 1e12,
        host_cast_rate=v["cost.host_cast_gelem_s"] * 1e9,
        onchip_tensor_bytes=v["onchip_tensor_mb"] * _MB,
        working_set_bytes=v["working_set_mb"] * _MB,
        e5rt_floor_s=v["cost.floor_e5rt_ms"] * 1e-3,
        sram_cliff=v["cost.sram_cliff"],
        operand_tile_bytes=v["cost.operand_tile_mb"] * _MB,
        band=tuple(v["cost.band"]),
    )
    if cost.sram_cliff not in SRAM_CLIFFS:
        raise ValueError(f"{name}: cost.sram_cliff must be one of {SRAM_CLIFFS}")
    fields = {f: v[f] for f in Chip.__dataclass_fields__ if f in v}
    return Chip(
        name=name,
        marketing_name=entry["marketing_name"],
        cost=cost,
        facts=MappingProxyType(facts),
        **fields,
    )
