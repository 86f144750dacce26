"""``anekit chips``: the chip profiles, with where each number comes from."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anekit.hw.chips import Fact

COLUMNS = (
    ("chip", None, ""),
    ("gen", "generation", ""),
    ("NE", "ne_cores", ""),
    ("TOPS", "rated_tops", ""),
    ("fp16 meas.", "measured_fp16_tflops", ""),
    ("DRAM GB/s", "dram_bw_gbps", ""),
    ("ANE GB/s", "ane_dram_bw_gbps", ""),
    ("floor ms", "cost.floor_ms", ""),
    ("e5rt floor ms", "cost.floor_e5rt_ms", ""),
    ("on-chip MB", "onchip_tensor_mb", ""),
    ("dialect", "dialect", ""),
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="every fact with its source, as JSON")
    parser.add_argument(
        "--numerics", action="store_true",
        help="the numerics profile of each chip family: every row, observed or assumed, its source",
    )  # fmt: skip


def numerics(as_json: bool) -> int:
    """Print the numerics families (docs/numerics.md): a table, or every row as JSON."""
    from anekit.hw.numerics import families

    profiles = families()
    if as_json:
        print(json.dumps({name: p.as_dict() for name, p in profiles.items()}, indent=1))
        return 0
    for name, profile in profiles.items():
        print(f"{name}:")
        for row in profile.rows.values():
            value = "table" if isinstance(row.value, dict) else row.value
            print(f"  {row.catalogue:<4} {row.field:<18} {value!s:<8} {row.status:<9} {row.note}")
    print("\nSources: anekit chips --numerics --json; the catalogue: docs/numerics.md.")
    return 0


def run(args: argparse.Namespace) -> int:
    from anekit.hw.chips import chips, default_chip, get_chip

    if args.numerics:
        return numerics(args.json)
    chosen, how = default_chip()
    if args.json:
        out = {
            "default": {"chip": chosen, "how": how},
            "chips": {
                n: {k: dataclasses.asdict(f) for k, f in get_chip(n).facts.items()} for n in chips()
            },
        }
        print(json.dumps(out, indent=1))
        return 0
    rows = [[label for label, _, _ in COLUMNS]]
    for name in chips():
        chip = get_chip(name)
        cells = [name]
        for _, key, unit in COLUMNS[1:]:
            fact = chip.facts[key]
            cells.append(show(fact.value, fact, unit))
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(
        "\n~ marks an estimate, ! a value another source disputes. TOPS is Apple's rating "
        "(int8 from M4 on). Sources and conflicts: anekit chips --json."
    )
    print(f"default chip: {chosen} ({how})")
    return 0


def show(value: object, fact: Fact | None = None, unit: str = "") -> str:
    """A table cell: '-' if unknown, '~' before an estimate, '!' after a value sources dispute."""
    if value is None:
        return "-"
    text = (
        f"{value:.4g}{unit}"
        if isinstance(value, int | float) and not isinstance(value, bool)
        else str(value)
    )
    if fact is None:
        return text
    return ("~" if fact.estimate else "") + text + ("!" if fact.conflict else "")
