"""The ``numerics`` rung: measure the engine's catalogued fp16 behaviours and write a profile.

Small programs probe each behaviour of :class:`anekit.hw.numerics.NumericsProfile`: the
matmul saturation threshold (N1), the tie rule on the non-integer tie 1 + 2^-11 (N4), the
reduce_sum accumulator on 2049 ones (N3/N4), ``round``'s ties (N5), the width-offset slice
clamp (N7), the non-finite table (N8: log(inf), mul(inf, 3), softplus(inf), sub(inf, inf)),
the exp cliff (N9), logsumexp's shift (N10) and the subnormal flush (N12). The result is a
versioned profile file with provenance that ``numerics=PATH`` reads back. ``measure`` takes
any ``run(program, inputs) -> outputs``: the rung passes the ANE, tests a stand-in.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from anekit.config import cache_dir
from anekit.hw.chips import Chip
from anekit.hw.numerics import NumericsProfile, Row, numerics_profile, save_profile
from anekit.ladder.runner import Context
from anekit.mil import Builder, Program

Runner = Callable[[Program, dict[str, np.ndarray]], dict[str, np.ndarray]]
SOURCE = "anekit doctor --ladder, numerics rung"
_INF = np.array([np.inf], np.float16)
_FP16_OVERFLOW = 65520.0  # where IEEE fp16 rounding itself gives inf


def _fp16_between(lo: float, hi: float) -> np.ndarray:
    """Every fp16 value in [lo, hi], ascending (the candidates a threshold is read from)."""
    bits = np.arange(np.float16(lo).view(np.uint16), np.float16(hi).view(np.uint16) + 1)
    return bits.astype(np.uint16).view(np.float16)


def _last_finite(candidates: np.ndarray, got: np.ndarray) -> float | None:
    """The largest candidate stored finite below the first one that was not (None: no cliff)."""
    bad = np.flatnonzero(~np.isfinite(got.astype(np.float32)))
    if bad.size == 0:
        return None
    if bad[0] == 0:
        raise ValueError(f"every candidate from {float(candidates[0]):g} up was stored non-finite")
    return float(candidates[bad[0] - 1])


def _matmul_saturation(run: Runner) -> tuple[float | None, str]:
    values = _fp16_between(16384, 65504)
    b = Builder()
    x = b.input("x", (values.size, 1), "fp16")
    b.output(b.matmul(x=x, y=np.ones((1, 2), np.float16)), "y")
    got = run(b.build(), {"x": values[:, None]})["y"][:, 0]
    found = _last_finite(values, got)
    return found, f"matmul of every fp16 value in [16384, 65504] by 1: last finite {found}"


def _exp_saturation(run: Runner, matmul: float | None) -> tuple[float | None, str]:
    xs = _fp16_between(9.0, 11.1)
    b = Builder()
    b.output(b.exp(x=b.input("x", xs.shape, "fp16")), "y")
    got = run(b.build(), {"x": xs})["y"].astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(got))
    over = float(np.exp(np.float32(xs[bad[0]]))) if bad.size else np.inf
    if over >= _FP16_OVERFLOW:
        return None, "exp finite up to fp16's own overflow: no cliff"
    finite = float(got[bad[0] - 1]) if bad[0] > 0 else 0.0
    # fp16 inputs step exp by ~0.8% here: the threshold is only bracketed; N1's threshold is
    # taken when it lies in the bracket (the same datapath), else the largest finite output
    value = matmul if matmul is not None and finite <= matmul < over else finite
    return value, f"exp finite at {finite:g}, inf from exact {over:g}; threshold {value:g}"


def _stored(run: Runner, build: Callable[[Builder, Any], Any], x: np.ndarray) -> np.ndarray:
    b = Builder()
    b.output(build(b, b.input("x", x.shape, "fp16")), "y")
    return run(b.build(), {"x": x})["y"].astype(np.float32)


def _tie(run: Runner) -> tuple[str, str]:
    got = _stored(run, lambda b, x: b.add(x=x, y=np.float16(2.0**-11)), np.ones(2, np.float16))
    rule = {1.0: "even", 1.0 + 2.0**-10: "away"}.get(float(got[0]))
    if rule is None:
        raise ValueError(f"1 + 2^-11 stored as {float(got[0])!r}: neither tie rule")
    return rule, f"1 + 2^-11 stored as {float(got[0])!r}"


def _round_ties(run: Runner) -> tuple[str, str]:
    got = _stored(run, lambda b, x: b.round(x=x), np.array([2.5, -0.5], np.float16))
    rule = "away" if got.tolist() == [3.0, -1.0] else "even"
    return rule, f"round(2.5), round(-0.5) = {got.tolist()}"


def _accumulator(run: Runner, tie: str) -> tuple[str, str]:
    ones = np.ones((1, 2049), np.float16)
    got = float(_stored(run, lambda b, x: b.reduce_sum(x=x, axes=[1]), ones)[0])
    wide = 2050.0 if tie == "away" else 2048.0  # 2049 summed exactly, then stored by the tie rule
    return ("fp32" if got == wide else "fp16"), f"reduce_sum of 2049 ones = {got:g}"


def _flush(run: Runner) -> tuple[bool, str]:
    x = np.full(2, 1e-3, np.float16)
    got = float(_stored(run, lambda b, v: b.mul(x=v, y=v), x)[0])
    return got == 0.0, f"1e-3 * 1e-3 (subnormal in fp16) stored as {got!r}"


def _slice_clamp(run: Runner) -> tuple[float | None, str]:
    values = _fp16_between(1024, 65504)
    x = np.concatenate([[0.0], values]).astype(np.float16)[None, :]
    got = _stored(run, lambda b, v: b.slice_by_index(x=v, begin=[0, 1], end=[1, x.shape[1]]), x)
    found = _last_finite(values, got[0])
    return (
        found,
        f"slice with width offset 1 over fp16 values in [1024, 65504]: last finite {found}",
    )


def _logsumexp_shift(run: Runner) -> tuple[bool, str]:
    x = np.full((1, 32), 7.7, np.float16)  # 32 exp(7.7) = 70,700: past 65504 unless shifted
    got = float(_stored(run, lambda b, v: b.reduce_log_sum_exp(x=v, axes=[1]), x)[0])
    return bool(np.isfinite(got)), f"logsumexp of 32 x 7.7 = {got!r}"


# (table key, output kind, how the op is applied to +inf)
_NONFINITE_PROBES = (
    ("*", "nan", lambda b, x: b.sub(x=x, y=x)),
    ("log", "+inf", lambda b, x: b.log(x=x)),
    ("mul", "+inf", lambda b, x: b.mul(x=x, y=np.float16(3.0))),
    ("softplus", "+inf", lambda b, x: b.softplus(x=x)),
)


def _nonfinite(run: Runner) -> tuple[dict[str, dict[str, float]], str]:
    table: dict[str, dict[str, float]] = {}
    seen = []
    for op, kind, build in _NONFINITE_PROBES:
        got = float(_stored(run, build, _INF)[0])
        seen.append(f"{op} {kind} -> {got!r}")
        if np.isfinite(got):  # IEEE gives a non-finite value: the engine replaced it
            table.setdefault(op, {})[kind] = got
    return table, "; ".join(seen)


def measure(run: Runner, chip: Chip, provenance: str) -> NumericsProfile:
    """Measure every behaviour through ``run`` and return the profile, each row "observed"
    (conv's saturation is the matmul threshold, "assumed": the same datapath)."""
    published = numerics_profile(chip)
    matmul = _matmul_saturation(run)
    tie = _tie(run)
    found: dict[str, tuple[Any, str]] = {
        "matmul_saturation": matmul,
        "conv_saturation": (matmul[0], "taken from the matmul threshold (shared datapath)"),
        "exp_saturation": _exp_saturation(run, matmul[0]),
        "tie": tie,
        "round_ties": _round_ties(run),
        "accumulator": _accumulator(run, tie[0]),
        "flush_subnormals": _flush(run),
        "slice_clamp": _slice_clamp(run),
        "logsumexp_shift": _logsumexp_shift(run),
        "nonfinite": _nonfinite(run),
    }
    rows = {
        key: Row(
            field=key,
            value=value,
            status="assumed" if key == "conv_saturation" else "observed",
            catalogue=published.rows[key].catalogue if key in published.rows else "",
            source=SOURCE,
            note=note,
        )
        for key, (value, note) in found.items()
    }
    table = MappingProxyType({op: MappingProxyType(v) for op, v in found["nonfinite"][0].items()})
    values = {k: v for k, (v, _) in found.items() if k != "nonfinite"}
    return replace(
        published,
        **values,
        nonfinite=table,
        rows=MappingProxyType(rows),
        origin="measured",
        provenance=provenance,
    )


def numerics(ctx: Context) -> None:
    """The rung: measure on the ANE and write the profile (``numerics_out``, else the cache
    directory's ``numerics/CHIP.json``)."""
    import anekit
    from anekit.backends.ane import dialect
    from anekit.doctor.ane_rungs import _compile

    chip = dialect.host_chip()

    def on_engine(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with _compile(ctx, program, check=False) as k:
            return k(**inputs)

    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    provenance = f"measured by anekit {anekit.__version__} ({SOURCE}) on {chip.name} at {when}"
    profile = measure(on_engine, chip, provenance)
    default = cache_dir() / "numerics" / f"{chip.name}.json"
    path = Path(ctx.options.get("numerics_out") or default)
    path.parent.mkdir(parents=True, exist_ok=True)
    ctx.observe("profile", str(save_profile(profile, path)))
    ctx.observe("rows", {k: r.note for k, r in profile.rows.items()})
    published = numerics_profile(chip)
    ctx.observe(
        "differs_from_published",
        [k for k in profile.rows if getattr(profile, k) != getattr(published, k)],
    )
