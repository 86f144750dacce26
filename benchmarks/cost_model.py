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
    python benchmarks/cost_model.py --fit-floors # re-fit each chip's per-path floor
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
MIN_SMALL = 3  # small entries a (chip, path) needs before its floor is re-fit
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


def _works(entries: list[dict[str, Any]]) -> dict[str, cost.ProgramWork]:
    """Each distinct program's work, analysed once (many entries share a program)."""
    works: dict[str, cost.ProgramWork] = {}
    for e in entries:
        if _key(e) not in works:
            works[_key(e)] = cost.analyze(build(e["program"]))
    return works


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
        "  Stories110M training step 91-115 ms: not predicted; it is dominated by CPU work "
        "(dW, optimizer) outside the ANE cost model"
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


def fit_floors(entries: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Re-fit each chip's per-call floor per runtime path to its small "fit" entries.

    For every (chip, path) with at least ``MIN_SMALL`` fit or calibration entries published
    under ``SMALL_S`` (latency-bound programs, where the floor matters), the floor minimises
    the squared log ratios of those entries, with every section-7 entry kept within 1.25x;
    other (chip, path) pairs keep their floor. Held-out entries are never read. Returns
    floors in seconds.
    """
    usable = [e for e in entries if e["split"] in ("fit", "calibration")]
    works = _works(usable)
    before = previous_chips()
    fitted = {}
    for chip_name, path in sorted({(e["chip"], e["path"]) for e in usable}):
        group = [e for e in usable if e["chip"] == chip_name and e["path"] == path]
        small = [e for e in group if e["seconds"] < SMALL_S]
        if path == "coreml" or len(small) < MIN_SMALL:
            continue  # Core ML shares the e5rt floor; its entries here are 16 ms GEMVs
        base = before[chip_name].on_path(path)
        # the floor is one additive term: time(floor) = time without a floor + floor
        rest = {
            e["id"]: cost.estimate_work(works[_key(e)], base).seconds - base.cost.floor_s
            for e in group
        }
        calibration = [e for e in group if e["split"] == "calibration"]

        def logs(floor: float, subset: list[dict[str, Any]], rest=rest) -> np.ndarray:
            return np.log([(rest[e["id"]] + floor) / e["seconds"] for e in subset])

        def loss(floor: float, small=small, calibration=calibration) -> float:
            if calibration and np.abs(logs(floor, calibration)).max() > math.log(TARGET):
                return math.inf
            return float(np.sum(logs(floor, small) ** 2))

        floor = fitted[(chip_name, path)] = float(min(FLOOR_GRID_S, key=loss))
        before_bias = bias([{"ratio": math.exp(x)} for x in logs(base.cost.floor_s, small)])
        print(
            f"  {chip_name:9} {path:6} n={len(small):2}  floor {floor * 1e3:.4f} ms "
            f"(previous {base.cost.floor_s * 1e3:.4f})  small entries: {before_bias} -> "
            f"{bias([{'ratio': math.exp(x)} for x in logs(floor, small)])}"
        )
    return fitted


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
        "--fit-floors", action="store_true", help="re-fit every chip's per-path floor (fit split)"
    )
    args = parser.parse_args(argv)
    entries = load_entries()
    if args.fit:
        fit_m4(entries)
        return 0
    if args.fit_floors:
        fit_floors(entries)
        return 0
    rows = evaluate(entries)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print_table(rows)
    print_section7_facts()
    print()
    print(summary(rows))
    print()
    print("bias, before -> after the per-chip, per-path floor re-fit (chips.json `previous`):")
    print(bias_table(evaluate(entries, previous_chips()), rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
