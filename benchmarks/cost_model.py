"""Calibration of the cost model: predicted vs published ANE timings.

Rebuilds every program described in ``anekit/bench/data/published.json`` with ``mil.Builder``,
costs it with ``anekit.hw.estimate`` on the published chip, and prints the ratio
predicted / published. Entries marked ``section7`` are ANE_NOTES section 7 (target:
within 1.25x each); the rest are the validation set (target: median within 1.25x).

    python benchmarks/cost_model.py            # the table and the summary
    python benchmarks/cost_model.py --json     # machine-readable rows
    python benchmarks/cost_model.py --fit      # re-fit the M4 parameters to section 7
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from anekit import mil
from anekit.bench.published import PUBLISHED_JSON
from anekit.hw import cost
from anekit.hw.chips import Chip, get_chip

TARGET = 1.25


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


def evaluate(entries: list[dict[str, Any]], chips: dict[str, Chip] | None = None) -> list[dict]:
    """Predict every entry; returns rows with the ratio predicted / published."""
    rows = []
    works = {}
    for e in entries:
        key = json.dumps(e["program"], sort_keys=True)
        if key not in works:
            works[key] = cost.analyze(build(e["program"]))
        chip = (chips or {}).get(e["chip"]) or get_chip(e["chip"])
        predicted = cost.estimate_work(works[key], chip).seconds
        rows.append(
            {
                "id": e["id"],
                "chip": e["chip"],
                "published_s": e["seconds"],
                "predicted_s": predicted,
                "ratio": predicted / e["seconds"],
                "section7": bool(e.get("section7")),
                "sets": e.get("sets", ""),
            }
        )
    return rows


def summary(rows: list[dict]) -> str:
    """Max and median ratio error of section 7 and of the validation set."""

    def err(r: dict) -> float:
        return max(r["ratio"], 1 / r["ratio"])

    def line(label: str, subset: list[dict]) -> str:
        errs = [err(r) for r in subset]
        inside = sum(e <= TARGET for e in errs)
        return (
            f"{label}: n={len(errs)}  median x{float(np.median(errs)):.3f}  "
            f"max x{max(errs):.2f}  within {TARGET}x: {inside}/{len(errs)}"
        )

    s7 = [r for r in rows if r["section7"]]
    val = [r for r in rows if not r["section7"]]
    independent = [r for r in val if not r["sets"]]
    return "\n".join(
        [
            line("section 7 (calibration)", s7),
            line("validation, all", val),
            line("validation, excluding entries that set a chip parameter", independent),
        ]
    )


def print_table(rows: list[dict]) -> None:
    print(f"{'id':32} {'chip':9} {'published':>12} {'predicted':>12} {'ratio':>6}")
    for r in rows:
        flag = "" if max(r["ratio"], 1 / r["ratio"]) <= TARGET else "  <-- outside 1.25x"
        print(
            f"{r['id']:32} {r['chip']:9} {r['published_s'] * 1e3:10.3f}ms "
            f"{r['predicted_s'] * 1e3:10.3f}ms {r['ratio']:6.2f}{flag}"
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
    args = parser.parse_args(argv)
    entries = load_entries()
    if args.fit:
        fit_m4(entries)
        return 0
    rows = evaluate(entries)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print_table(rows)
    print_section7_facts()
    print()
    print(summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
