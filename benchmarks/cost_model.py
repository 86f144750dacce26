"""Calibration of the cost model: predicted vs published ANE timings, and its bias.

Rebuilds every program described in ``anekit/bench/data/published.json`` with ``mil.Builder``,
costs it with ``anekit.hw.estimate`` on the published chip and runtime path, and prints the
ratio predicted / published. Entries of the ``calibration`` split are ANE_NOTES section 7
(target: within 1.25x each); ``fit`` entries may set per-chip parameters; ``holdout``
entries never do, and are where the bias (median ratio, predictions above vs below) is
judged. The split is a rule on the entry id (``anekit.bench.published.split_of``). Nothing
is timed here, so no threads need pinning.

    python benchmarks/cost_model.py              # the table, the summary, bias before/after
    python benchmarks/cost_model.py --json       # machine-readable rows
    python benchmarks/cost_model.py --fit        # re-fit the M4 mechanism to section 7
    python benchmarks/cost_model.py --fit-floors # the per-generation floors, fitted again
    python benchmarks/cost_model.py --write-floors  # ... and written into chips.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from typing import Any

import numpy as np

from anekit import mil
from anekit.bench.published import PUBLISHED_JSON
from anekit.hw import cost
from anekit.hw.chips import Chip, get_chip

TARGET = 1.25
SMALL_S = 1e-3  # a program published under 1 ms is latency-bound: its floor is a large share
FLOOR_GRID_S = np.geomspace(5e-6, 1e-3, 801)  # candidate floors, 0.7 % apart

CHIPS_JSON = resources.files("anekit.hw").joinpath("data/chips.json")


def build(spec: dict[str, Any]) -> mil.Program:
    """Build the program a published entry describes (weights are zero-stride views: no memory)."""
    return _BUILDERS[spec["kind"]](spec)


def _weight(b: mil.Builder, name: str, shape: tuple[int, ...], dtype: str = "fp16") -> mil.Value:
    return b.weight(name, np.broadcast_to(np.zeros((), dtype=np.dtype(_NP[dtype])), shape))


_NP = {"fp16": np.float16, "int8": np.int8}


def _io_in(b: mil.Builder, name: str, shape: tuple[int, ...], io_dtype: str) -> mil.Value:
    x = b.input(name, shape, io_dtype)
    return b.cast(x=x, dtype="fp16") if io_dtype == "fp32" else x


def _io_out(b: mil.Builder, y: mil.Value, io_dtype: str) -> mil.Program:
    b.output(b.cast(x=y, dtype="fp32") if io_dtype == "fp32" else y, "y")
    return b.build()


def _conv_chain(s: dict[str, Any]) -> mil.Program:
    b = mil.Builder()
    c = s["channels"]
    h = _io_in(b, "x", (1, c, s["height"], s["width"]), s["io_dtype"])
    for i in range(s["depth"]):
        if s["w8a8"]:
            q = _weight(b, f"q{i}", (c, c, 1, 1), "int8")
            w = b.constexpr_affine_dequantize(
                quantized_data=q, zero_point=np.int8(0), scale=np.float16(0.01), axis=0
            )
        else:
            w = _weight(b, f"w{i}", (c, c, 1, 1))
        if s["w8a8"] and i > 0:
            # int8 activations between layers: the W8A8 pattern of maderix's ane_int8_bench.m
            q8 = b.quantize(input=h, scale=np.float16(0.05), output_dtype="int8")
            h = b.dequantize(input=q8, scale=np.float16(0.05))
        h = b.conv(x=h, weight=w)
    return _io_out(b, h, s["io_dtype"])


def _conv(s: dict[str, Any]) -> mil.Program:
    b = mil.Builder()
    c, k = s["channels"], s["kernel"]
    x = b.input("x", (s["batch"], c, s["height"], s["width"]), s["io_dtype"])
    y = b.conv(x=x, weight=_weight(b, "w", (c, c, k, k)), pad_type="same")
    return _io_out(b, y, "fp16")


def _matmul(s: dict[str, Any]) -> mil.Program:
    b = mil.Builder()
    x = _io_in(b, "a", (1, s["m"], s["k"]), s["io_dtype"])
    y = _io_in(b, "b", (1, s["k"], s["n"]), s["io_dtype"])
    return _io_out(b, b.matmul(x=x, y=y), s["io_dtype"])


def _elementwise(s: dict[str, Any]) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", tuple(s["shape"]), "fp16")
    b.output(b.add_op(s["op"], {"x": x}), "y")
    return b.build()


def _gemv(s: dict[str, Any]) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 1, s["in"]), "fp16")
    part = s["out"] // s["split"]
    for i in range(s["split"]):
        b.output(b.matmul(x=x, y=_weight(b, f"w{i}", (s["in"], part))), f"y{i}")
    return b.build()


_BUILDERS: dict[str, Callable[[dict[str, Any]], mil.Program]] = {
    "conv_chain": _conv_chain,
    "conv": _conv,
    "matmul": _matmul,
    "elementwise": _elementwise,
    "gemv": _gemv,
}


def load_entries() -> list[dict[str, Any]]:
    return json.loads(PUBLISHED_JSON.read_text("utf-8"))["entries"]


_WORKS: dict[str, cost.ProgramWork] = {}  # program description -> its work, analysed once


def _works(entries: list[dict[str, Any]]) -> dict[str, cost.ProgramWork]:
    """Each distinct program's work, analysed once per process (many entries share one)."""
    for e in entries:
        if _key(e) not in _WORKS:
            _WORKS[_key(e)] = cost.analyze(build(e["program"]))
    return _WORKS


def evaluate(entries: list[dict[str, Any]], chips: dict[str, Chip] | None = None) -> list[dict]:
    """Predict every entry on its chip and runtime path; rows with the ratio predicted / published."""
    works = _works(entries)
    rows = []
    for e in entries:
        chip = ((chips or {}).get(e["chip"]) or get_chip(e["chip"])).on_path(e["path"])
        predicted = cost.estimate_work(works[_key(e)], chip)
        rows.append(
            {
                "id": e["id"],
                "chip": e["chip"],
                "path": e["path"],
                "split": e["split"],
                "published_s": e["seconds"],
                "predicted_s": predicted.seconds,
                "ratio": predicted.seconds / e["seconds"],
                "section7": bool(e.get("section7")),
                "sets": e.get("sets", ""),
                "source": _source(e),
            }
        )
    return rows


def _err(r: dict) -> float:
    return max(r["ratio"], 1 / r["ratio"])


def summary(rows: list[dict]) -> str:
    """Max and median ratio error of the calibration, fit and held-out entries."""

    def line(label: str, subset: list[dict]) -> str:
        errs = [_err(r) for r in subset]
        inside = sum(e <= TARGET for e in errs)
        return (
            f"{label}: n={len(errs)}  median x{float(np.median(errs)):.3f}  "
            f"max x{max(errs):.2f}  within {TARGET}x: {inside}/{len(errs)}  {bias(subset)}"
        )

    independent = [r for r in rows if r["split"] != "calibration" and not r["sets"]]
    return "\n".join(
        [
            line("section 7 (calibration)", [r for r in rows if r["split"] == "calibration"]),
            line("fit split", [r for r in rows if r["split"] == "fit"]),
            line("held-out split", [r for r in rows if r["split"] == "holdout"]),
            line("not calibration, no `sets`", independent),
        ]
    )


def bias(rows: list[dict]) -> str:
    """Median predicted / published and how many predictions lie above and below."""
    if not rows:
        return "-"
    above = sum(r["ratio"] > 1 for r in rows)
    median = float(np.median([r["ratio"] for r in rows]))
    return f"median ratio {median:.2f}, {above} above / {len(rows) - above} below"


def bias_table(before: list[dict], after: list[dict]) -> str:
    """Per-chip bias of the fit and held-out splits, before and after the floor re-fit."""
    lines = [f"{'chip':9} {'split':8} {'n':>3}  {'before':40} after"]
    pairs = list(zip(before, after, strict=True))
    groups = [(c, s) for c in dict.fromkeys(r["chip"] for r in after) for s in ("fit", "holdout")]
    groups += [("all", "fit"), ("all", "holdout"), ("all", "small")]
    for chip, split in groups:
        chosen = [
            (b, a)
            for b, a in pairs
            if chip in ("all", a["chip"])
            and (a["split"] == split or (split == "small" and _small(a)))
        ]
        if chosen:
            b, a = zip(*chosen)
            lines.append(f"{chip:9} {split:8} {len(a):3}  {bias(list(b)):40} {bias(list(a))}")
    lines.append(f"(small: fit and held-out entries published under {SMALL_S * 1e3:g} ms)")
    return "\n".join(lines)


def _small(row: dict) -> bool:
    return row["split"] in ("fit", "holdout") and row["published_s"] < SMALL_S


def print_table(rows: list[dict]) -> None:
    print(f"{'id':30} {'chip':9} {'path':6} {'split':11} {'published':>11} {'predicted':>11} ratio")
    for r in rows:
        flag = "" if _err(r) <= TARGET else "  <-- outside 1.25x"
        print(
            f"{r['id']:30} {r['chip']:9} {r['path']:6} {r['split']:11} "
            f"{r['published_s'] * 1e3:9.3f}ms {r['predicted_s'] * 1e3:9.3f}ms {r['ratio']:5.2f}{flag}"
        )


def print_section7_facts() -> None:
    """The section-7 rows that are chip facts or outside an ANE-only model."""
    notes = {"m1": 11, "m2": 15.8, "m3": 15.8, "m4": 38}
    bw = {"m1": 68, "m2": 100, "m3": 100, "m4": 120, "m4-pro": 273, "m4-max": 546, "m5": 153}
    print("\nsection 7, chip facts (ANE_NOTES value vs profile):")
    for name, tops in notes.items():
        fact = get_chip(name).facts["rated_tops"]
        print(f"  Apple rating {name}: notes {tops} TOPS, profile {fact.value} ({fact.source})")
    for name, gbs in bw.items():
        print(f"  DRAM bandwidth {name}: notes {gbs} GB/s, profile {get_chip(name).dram_bw_gbps}")
    print(
        f"  first compile M4: notes 20-40 ms, profile {get_chip('m4').compile_first_ms} ms (a table value, not modelled)"
    )
    print(
        "  Stories110M training step 91-115 ms: predicted by anekit.train.cost (table at the end)"
    )


def previous_chips() -> dict[str, Chip]:
    """Every chip with the cost parameters it had before the floor re-fit (``previous``)."""
    raw = json.loads(CHIPS_JSON.read_text("utf-8"))["chips"]
    out = {}
    for name, entry in raw.items():
        chip = get_chip(name)
        old = {k: f["previous"]["value"] for k, f in entry["cost"].items() if "previous" in f}
        floor = old.get("floor_ms", chip.facts["cost.floor_ms"].value) * 1e-3
        # before the re-fit every path paid the one floor
        e5rt = old.get("floor_e5rt_ms", floor * 1e3) * 1e-3
        fields = {"floor_s": floor, "e5rt_floor_s": e5rt}
        facts = dict(chip.facts)
        facts["cost.floor_ms"] = replace(facts["cost.floor_ms"], value=floor * 1e3)
        out[name] = replace(chip, cost=replace(chip.cost, **fields), facts=facts)
    return out


def _source(e: dict[str, Any]) -> str:
    """An entry's source: its document, without the parenthesised details."""
    return e["source"].split(" (")[0]


def family_floors(
    entries: list[dict[str, Any]], leave_out: str | None = None
) -> dict[tuple[str, str], float]:
    """One per-call floor per ANE generation and runtime path, every source weighted alike.

    The chips of one generation share their Neural Engine (and the software in front of it),
    so they share one floor; fitting it per chip let one source's machine set a chip's floor
    alone (the M4 Max's came out 3x the M4's). Each (generation, path) floor minimises the
    mean over sources of each source's mean squared log ratio on its small (latency-bound)
    fit and calibration entries, so no one source outweighs the others by its entry count.
    ``leave_out`` drops a source (leave-one-source-out validation). Held-out entries are
    never read. Returns floors in seconds.
    """
    usable = [e for e in entries if e["split"] in ("fit", "calibration") and e["path"] != "coreml"
              and e["seconds"] < SMALL_S and _source(e) != leave_out]  # fmt: skip
    # section 7's entries bound every floor (within 1.25x), small or not
    usable += [e for e in entries if e["split"] == "calibration" and e["seconds"] >= SMALL_S
               and e["path"] != "coreml" and _source(e) != leave_out]  # fmt: skip
    works = _works(usable)
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], float]]] = {}
    for e in usable:
        chip = get_chip(e["chip"]).on_path(e["path"])
        rest = cost.estimate_work(works[_key(e)], chip).seconds - chip.cost.floor_s
        groups.setdefault((chip.generation, e["path"]), []).append((e, rest))
    floors = {}
    for group, members in groups.items():
        by_source: dict[str, list[tuple[dict[str, Any], float]]] = {}
        for e, rest in members:
            if e["seconds"] < SMALL_S:
                by_source.setdefault(_source(e), []).append((e, rest))

        def loss(floor: float, by_source=by_source) -> float:
            return float(np.mean([np.mean([math.log((rest + floor) / e["seconds"]) ** 2
                                           for e, rest in m]) for m in by_source.values()]))  # fmt: skip

        def section7_holds(floor: float, members=members) -> bool:
            return all(abs(math.log((rest + floor) / e["seconds"])) <= math.log(TARGET)
                       for e, rest in members if e["split"] == "calibration")  # fmt: skip

        allowed = [f for f in FLOOR_GRID_S if section7_holds(f)] or list(FLOOR_GRID_S)
        floors[group] = float(min(allowed, key=loss))
    return floors


def with_floors(floors: dict[tuple[str, str], float]) -> dict[str, Chip]:
    """Every chip with its generation's fitted floors (others keep theirs)."""
    out = {}
    for name in json.loads(CHIPS_JSON.read_text("utf-8"))["chips"]:
        chip = get_chip(name)
        inmem = floors.get((chip.generation, "inmem"), chip.facts["cost.floor_ms"].value * 1e-3)
        e5rt = floors.get((chip.generation, "e5rt"), chip.cost.e5rt_floor_s)
        facts = dict(chip.facts)
        facts["cost.floor_ms"] = replace(facts["cost.floor_ms"], value=inmem * 1e3)
        fields = {"floor_s": inmem, "e5rt_floor_s": e5rt}
        out[name] = replace(chip, cost=replace(chip.cost, **fields), facts=facts)
    return out


def leave_one_source_out(entries: list[dict[str, Any]]) -> list[dict]:
    """Each source's entries predicted with floors fitted without that source."""
    rows = []
    for source in sorted({_source(e) for e in entries}):
        mine = [e for e in entries if _source(e) == source]
        for r in evaluate(mine, with_floors(family_floors(entries, leave_out=source))):
            rows.append({**r, "source": source})
    return rows


def per_source_table(before: list[dict], after: list[dict], loso: list[dict]) -> str:
    """Per chip and source: median ratio and bias before, after, and left out of the fit."""
    lines = [f"{'chip':9} {'source':62} {'n':>3}  {'before':34} {'after':34} left out"]
    keyed = {}
    for label, rows in (("before", before), ("after", after), ("loso", loso)):
        for r in rows:
            keyed.setdefault((r["chip"], r["source"]), {}).setdefault(label, []).append(r)
    for (chip, source), groups in sorted(keyed.items()):
        cells = [bias(groups.get(k, [])) for k in ("before", "after", "loso")]
        lines.append(f"{chip:9} {source[-62:]:62} {len(groups['after']):3}  {cells[0]:34} "
                     f"{cells[1]:34} {cells[2]}")  # fmt: skip
    return "\n".join(lines)


def spread(loso: list[dict]) -> str:
    """How far the left-out sources' predictions scatter: per-source medians and quantiles."""
    medians = {}
    for r in loso:
        medians.setdefault(r["source"], []).append(r["ratio"])
    per_source = [float(np.median(v)) for v in medians.values()]
    ratios = [r["ratio"] for r in loso]
    inside = sum(_err(r) <= TARGET for r in loso)
    low, high = np.quantile(ratios, [0.1, 0.9])
    return (f"leave-one-source-out: {len(medians)} sources, per-source median ratio "
            f"{min(per_source):.2f}-{max(per_source):.2f}; entries {inside}/{len(loso)} within "
            f"{TARGET}x; 10-90% of ratios {low:.2f}-{high:.2f}")  # fmt: skip


def contradictions(entries: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """Pairs of one source's entries that no cost model can put both within 1.25x.

    ``(a, b)``: same source, chip, path and program kind, ``a`` at least as large as ``b``
    in every size of the program description (so at least as much work, for any model that
    does not get faster with more work), yet published more than 1.25^2 times faster than
    ``b``: a prediction within 1.25x of ``b`` is then more than 1.25x off ``a``.
    """
    out = []
    for a in entries:
        for b in entries:
            if (
                a is b
                or _source(a) != _source(b)
                or (a["chip"], a["path"]) != (b["chip"], b["path"])
            ):
                continue
            pa, pb = a["program"], b["program"]
            if pa.keys() != pb.keys() or pa == pb:
                continue
            sizes = [k for k, v in pa.items() if isinstance(v, int) and not isinstance(v, bool)]
            same = all(pa[k] == pb[k] for k in pa if k not in sizes)
            if (
                same
                and all(pa[k] >= pb[k] for k in sizes)
                and a["seconds"] * TARGET**2 < b["seconds"]
            ):
                out.append((a, b))
    return out


def contradiction_table(entries: list[dict[str, Any]]) -> str:
    """Per source, the published pairs no cost model can fit together (``contradictions``)."""
    pairs = contradictions(entries)
    if not pairs:
        return "  none"
    lines = []
    for a, b in sorted(pairs, key=lambda p: (_source(p[0]), p[0]["id"])):
        lines.append(f"  {a['chip']:7} {a['id']:28} {a['seconds'] * 1e3:7.3f} ms  <  {b['id']:28} "
                     f"{b['seconds'] * 1e3:7.3f} ms / 1.25^2 (x{b['seconds'] / a['seconds']:.2f}): "
                     f"more work published faster  [{_source(a)[-40:]}]")  # fmt: skip
    return "\n".join(lines)


def write_floors(entries: list[dict[str, Any]], path: Any = CHIPS_JSON) -> None:
    """Write the family floors and the leave-one-source-out band into ``chips.json``.

    Each changed floor keeps the value it replaces under ``previous`` (what ``previous_chips``
    and the before/after tables read); the band is the 10-90 % range of the left-out
    sources' ratios, the same for every chip (too few sources per chip to say more).
    """
    floors = family_floors(entries)
    ratios = [r["ratio"] for r in leave_one_source_out(entries)]
    low, high = (round(float(q), 2) for q in np.quantile(ratios, [0.1, 0.9]))
    raw = json.loads(path.read_text("utf-8"))
    for entry in raw["chips"].values():
        generation = entry["facts"]["generation"]["value"]
        for key, route in (("floor_ms", "inmem"), ("floor_e5rt_ms", "e5rt")):
            if (generation, route) not in floors:
                continue
            fact = entry["cost"][key]
            value = round(floors[(generation, route)] * 1e3, 4)
            if value != fact["value"]:
                fact["previous"] = {"value": fact["value"], "source": fact["source"]}
            fact.update(value=value, source="fit-floors-family", estimate=True,
                        note=f"one floor for every {generation} chip ({route} path): the "
                        "sources' small programs weighted alike, section 7 within 1.25x")  # fmt: skip
        entry["cost"]["band"] = {
            "value": [low, high], "source": "fit-floors-family", "estimate": True,
            "note": "predicted / published, 10-90 % of the entries of each source left out of "
                    "the floor fit (benchmarks/cost_model.py --loso)",
        }  # fmt: skip
    path.write_text(json.dumps(raw, indent=1) + "\n", "utf-8")


def _key(e: dict[str, Any]) -> str:
    return json.dumps(e["program"], sort_keys=True)


def fit_m4(entries: list[dict[str, Any]]) -> dict[str, float]:
    """Re-fit the M4 cost parameters to section 7 (log-space Nelder-Mead); prints the result."""
    s7 = [e for e in entries if e.get("section7")]
    works = [cost.analyze(build(e["program"])) for e in s7]
    base = get_chip("m4")
    names = ["peak_flops", "io_bw", "floor_s", "spill_flops", "int8_speedup"]

    def chip_for(x: np.ndarray) -> Chip:
        return replace(base, cost=replace(base.cost, **dict(zip(names, np.exp(x), strict=True))))

    def loss(x: np.ndarray) -> float:
        c = chip_for(x)
        logs = np.array(
            [
                math.log(cost.estimate_work(w, c).seconds / e["seconds"])
                for w, e in zip(works, s7, strict=True)
            ]
        )
        return float(np.sum(logs**2) + 5 * np.sum(np.maximum(np.abs(logs) - math.log(1.2), 0) ** 2))

    x = _nelder_mead(loss, np.log([getattr(base.cost, n) for n in names]))
    fitted = dict(zip(names, np.exp(x), strict=True))
    for n, v in fitted.items():
        print(f"  {n:14} {v:.4g}   (profile {getattr(base.cost, n):.4g})")
    return fitted


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, iters: int = 3000) -> np.ndarray:
    """Minimise f from x0 (downhill simplex; small problems only)."""
    pts = [x0] + [x0 + 0.1 * np.eye(len(x0))[i] for i in range(len(x0))]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centre = np.mean(pts[:-1], axis=0)
        reflected = 2 * centre - pts[-1]
        fr = f(reflected)
        if fr < vals[0]:
            expanded = 3 * centre - 2 * pts[-1]
            fe = f(expanded)
            pts[-1], vals[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = reflected, fr
        else:
            contracted = (centre + pts[-1]) / 2
            fc = f(contracted)
            if fc < vals[-1]:
                pts[-1], vals[-1] = contracted, fc
            else:
                pts = [pts[0] + (p - pts[0]) / 2 for p in pts]
                vals = [f(p) for p in pts]
    return pts[int(np.argmin(vals))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    parser.add_argument("--fit", action="store_true", help="re-fit the M4 parameters to section 7")
    parser.add_argument(
        "--fit-floors",
        action="store_true",
        help="fit one floor per generation and path (fit split), and print it",
    )
    parser.add_argument("--write-floors", action="store_true",
                        help="fit the floors and the band, and write them into chips.json")  # fmt: skip
    parser.add_argument("--write-stream", action="store_true",
                        help="fit the streaming efficiency of weights taken as inputs to the "
                        "published decode figures, and write it into anekit/llm/data")  # fmt: skip
    parser.add_argument("--llm", action="store_true", help="only the LLM and training tables")
    args = parser.parse_args(argv)
    if args.write_stream:
        print(f"streaming efficiency {write_stream():.3f}")
        return 0
    if args.llm:
        print(llm_table())
        print(training_table())
        return 0
    entries = load_entries()
    if args.fit:
        fit_m4(entries)
        return 0
    if args.fit_floors or args.write_floors:
        for (generation, path), floor in sorted(family_floors(entries).items()):
            print(f"  {generation} {path:6} floor {floor * 1e3:.4f} ms")
        if args.write_floors:
            write_floors(entries)
            print(f"written to {CHIPS_JSON}")
        return 0
    rows = evaluate(entries)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print_table(rows)
    print_section7_facts()
    print()
    print(summary(rows))
    before = evaluate(entries, previous_chips())
    print("\nbefore the per-generation floors (each chip's own, chips.json `previous`):")
    print(summary(before))
    print("\nbias, before -> after, per chip and split:")
    print(bias_table(before, rows))
    loso = leave_one_source_out(entries)
    print("\nper chip and source: before, after, and with the source left out of the fit:")
    print(per_source_table(before, rows, loso))
    print(spread(loso))
    print("\npublished pairs no monotone cost model can fit within 1.25x together (same source):")
    print(contradiction_table(entries))
    print("\nlanguage models: predicted decode vs published (anekit/llm/data/published.json):")
    print(llm_table())
    print("\ntraining steps: predicted vs published (anekit/train/published.json):")
    print(training_table())
    return 0


def _llm_source(fig: dict[str, Any]) -> str:
    """A decode figure's source: its project (ANEForge, maderix/ANE, ...)."""
    return fig["source"].split()[0]


def llm_terms() -> list[dict[str, Any]]:
    """Each published decode figure with its predicted step split as ``a + b / efficiency``.

    A decode step is bandwidth-bound: only the weights taken as inputs depend on the
    streaming efficiency, linearly in its inverse (checked against a direct evaluation by
    :func:`llm_table`). Evaluated at efficiency 1 and 1/2.
    """
    from anekit.llm import cost as llm_cost

    rows = []
    for eff in (1.0, 0.5):
        cost._EFFICIENCY = eff
        try:
            rows.append(llm_cost.compare_published())
        finally:
            cost._EFFICIENCY = None
    out = []
    for one, half, fig in zip(*rows, llm_cost.published()["figures"], strict=True):
        t1, t2 = 1 / one["predicted_decode"], 1 / half["predicted_decode"]
        out.append({**one, "a": 2 * t1 - t2, "b": t2 - t1, "published_s": 1 / fig["decode_tokens_per_s"],
                    "source": _llm_source(fig)})  # fmt: skip
    return out


STREAM_GRID = np.round(np.arange(0.40, 1.0001, 0.005), 3)


def fit_stream(terms: list[dict[str, Any]], leave_out: str | None = None) -> float:
    """The streaming efficiency that minimises the mean over sources of each source's mean
    squared log ratio (predicted / published decode time); ``leave_out`` drops a source."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for t in terms:
        if t["source"] != leave_out:
            by_source.setdefault(t["source"], []).append(t)

    def loss(eff: float) -> float:
        return float(np.mean([np.mean([math.log((t["a"] + t["b"] / eff) / t["published_s"]) ** 2
                                       for t in m]) for m in by_source.values()]))  # fmt: skip

    return float(min(STREAM_GRID, key=loss))


def _llm_rows(efficiency: float) -> list[dict[str, Any]]:
    """Every published decode and prefill figure's prediction at ``efficiency`` (evaluated):
    rows of (label, source, published and predicted seconds per token)."""
    from anekit.llm import cost as llm_cost

    cost._EFFICIENCY = efficiency
    try:
        compared = llm_cost.compare_published()
    finally:
        cost._EFFICIENCY = None
    rows = []
    for kind in ("decode", "prefill"):
        for r in compared:
            if r[f"predicted_{kind}"]:
                rows.append({"label": f"{r['model']} {kind}", "chip": r["chip"],
                             "source": r["source"].split()[0],
                             "published_s": 1 / r[f"published_{kind}"],
                             "predicted_s": 1 / r[f"predicted_{kind}"]})  # fmt: skip
    return rows


def llm_table() -> str:
    """Each published decode and prefill figure beside the prediction before (efficiency 1)
    and after the fit, and with the efficiency fitted without its source. Only the decode
    figures are fitted; prefill (one published figure) is a check."""
    terms = llm_terms()
    eff = cost.stream_efficiency()
    loso = {s: fit_stream(terms, leave_out=s) for s in sorted({t["source"] for t in terms})}
    at = {e: _llm_rows(e) for e in {1.0, eff, *loso.values()}}
    lines = [f"  streaming efficiency of weights taken as inputs: {eff:.3f} (fitted to decode; "
             "1.0 before); left out: " + ", ".join(f"{s} {e:.3f}" for s, e in loso.items()),
             f"  {'figure':22} {'chip':8} {'source':24} {'published':>9}  predicted tok/s and "
             "time ratio: before | after | source left out"]  # fmt: skip
    cols: dict[str, list[float]] = {"before": [], "after": [], "loso": []}
    for i, r in enumerate(at[eff]):
        cells = []
        for key, e in (("before", 1.0), ("after", eff), ("loso", loso[r["source"]])):
            ratio = at[e][i]["predicted_s"] / r["published_s"]
            cols[key].append(ratio)
            cells.append(f"{1 / at[e][i]['predicted_s']:7.1f} x{ratio:.2f}")
        lines.append(f"  {r['label']:22} {r['chip']:8} {r['source']:24} "
                     f"{1 / r['published_s']:9.1f}  " + " | ".join(cells))  # fmt: skip
    for key, ratios in cols.items():
        lines.append(f"  {key:7} {_ratio_summary(ratios)}")
    for source in sorted({r["source"] for r in at[eff]}):
        mine = [i for i, r in enumerate(at[eff]) if r["source"] == source]
        cells = [f"{key} {float(np.median([cols[key][i] for i in mine])):.2f}" for key in cols]
        lines.append(
            f"  per source, median time ratio: {source} ({len(mine)}): " + ", ".join(cells)
        )
    return "\n".join(lines)


def _ratio_summary(ratios: list[float]) -> str:
    inside = sum(max(x, 1 / x) <= TARGET for x in ratios)
    above = sum(x > 1 for x in ratios)
    return (f"{inside}/{len(ratios)} within {TARGET}x; median time ratio "
            f"{float(np.median(ratios)):.2f}, {above} above / {len(ratios) - above} below")  # fmt: skip


def write_stream(path: Any = CHIPS_JSON) -> float:
    """Fit the streaming efficiency and store it in ``chips.json`` (``shared_cost``)."""
    cost._EFFICIENCY = None
    terms = llm_terms()
    eff = fit_stream(terms)
    loso = [fit_stream(terms, leave_out=s) for s in sorted({t["source"] for t in terms})]
    raw = json.loads(path.read_text("utf-8"))
    fact = raw["shared_cost"]["input_weight_stream_efficiency"]
    if fact.get("source") == "fit-llm-decode":
        previous = fact.get("previous", 1.0)
    else:
        previous = fact["value"]
    raw["shared_cost"]["input_weight_stream_efficiency"] = {
        "value": eff, "source": "fit-llm-decode", "estimate": True, "previous": previous,
        "note": "fraction of ane_dram_bw_gbps that weights taken as program inputs reach (LLM "
                "and training kernels): fitted to the published decode figures "
                "(anekit/llm/data/published.json), every source weighted alike "
                "(benchmarks/cost_model.py --write-stream); fits leaving one source out "
                f"{min(loso):.3f}-{max(loso):.3f}",
    }  # fmt: skip
    path.write_text(json.dumps(raw, indent=1) + "\n", "utf-8")
    cost._EFFICIENCY = None
    return eff


def training_table() -> str:
    """Each published training-step figure beside the prediction: before (the kernels alone,
    packed weights through the activation path, as the package predicted before), after
    (kernels with packed weights streamed as weights, plus the host work, published schedule),
    and anekit's own schedule (everything serial)."""
    from anekit.nn.kernels import block_kernels
    from anekit.train.config import get_config
    from anekit.train.cost import compare_published
    from anekit.train.model import TRAIN_KERNELS

    lines = [f"  {'model':12} {'chip':5} {'source':24} {'published':>9}  {'before':>14} "
             f"{'after':>14} {'anekit serial':>14}  after = ANE + dW beyond ANE + host"]  # fmt: skip
    cols: dict[str, list[float]] = {"before": [], "after": [], "serial": []}
    for r in compare_published():
        cfg = get_config(r["model"]).model
        kernels = block_kernels(cfg.block(1), TRAIN_KERNELS)
        old = cfg.n_layers * sum(cost.estimate(kd.program, r["chip"]).seconds
                                 for kd in kernels.values()) * 1e3  # fmt: skip
        cells = []
        for key, ms in (("before", old), ("after", r["predicted_ms"]), ("serial", r["serial_ms"])):
            cols[key].append(ms / r["published_ms"])
            cells.append(f"{ms:6.1f} x{ms / r['published_ms']:.2f}")
        lines.append(f"  {r['model']:12} {r['chip']:5} {r['source']:24} {r['published_ms']:7.1f}ms  "
                     + " ".join(f"{c:>14}" for c in cells)
                     + f"  = {r['ane_ms']} + {max(r['dw_ms'] - r['ane_ms'], 0):.1f} + {r['host_ms']}")  # fmt: skip
    for key, ratios in cols.items():
        lines.append(f"  {key:7} {_ratio_summary(ratios)}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
