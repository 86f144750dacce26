"""Run benchmark suites on a backend, beside the cost model's prediction and published numbers.

The result is one JSON-ready dict (schema in ``docs/bench.md``)::

    {"schema": "anekit-bench/2", "machine": {...}, "backend": "reference", "chip": "m4",
     "quick": true, "threads": {...}, "overhead": {...}, "suites": {name: {"rows": [...]}}}

Everything is measured with BLAS (and OpenMP, and torch if imported) pinned to one thread
count (``threads``). Cases a suite compares (equal but for its ``compare`` parameter) are
compiled together and timed in the same rotating rounds (``measure.time_interleaved``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

import anekit
from anekit.backends import compile, resolve_backend
from anekit.bench import programs, published
from anekit.bench.measure import (
    FULL,
    QUICK,
    Settings,
    Timing,
    load_buffers,
    per_call_overhead,
    queue_candidate,
    random_inputs,
    run_candidate,
    time_interleaved,
)
from anekit.bench.rating import rated_finding
from anekit.bench.suites import SUITES, Case, Suite
from anekit.bench.summary import summarize
from anekit.bench.threads import DEFAULT_THREADS, pinned
from anekit.hw import estimate, get_chip
from anekit.hw.chips import SRAM_CLIFFS, host_brand_string
from anekit.mil.program import Program

SCHEMA = "anekit-bench/2"

# Called after each case with (suite name, case parameters, row).
Progress = Callable[[str, Case, dict[str, Any]], None]


BASELINE = "reference"  # the backend every report states its per-call overhead beside


def plan(
    names: Iterable[str] | None = None,
    quick: bool = False,
    cases: Mapping[str, Sequence[Case]] | None = None,
) -> list[tuple[Suite, tuple[Case, ...]]]:
    """The suites to run, in order, each with its cases (``cases`` overrides a suite's own)."""
    chosen = list(names) if names else list(SUITES)
    unknown = [n for n in chosen if n not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; expected any of: {', '.join(SUITES)}")
    overrides = cases or {}
    return [
        (SUITES[n], tuple(overrides[n]) if n in overrides else SUITES[n].cases(quick))
        for n in dict.fromkeys(chosen)
    ]


def run(
    names: Iterable[str] | None = None,
    *,
    backend: str | None = None,
    chip: str = "m4",
    quick: bool = False,
    cases: Mapping[str, Sequence[Case]] | None = None,
    settings: Settings | None = None,
    threads: int = DEFAULT_THREADS,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure every case of the chosen suites and return the results (see module docstring).

    Args:
        names (list[str]): suites to run, in order. Default: all of them.
        backend (str): where to measure (see ``anekit.backends.resolve_backend``).
        chip (str): the chip profile the cost model predicts for. Default: "m4".
        quick (bool): the small sweeps, sized for the reference backend. Default: False.
        cases (dict): suite name -> cases to run instead of its own (tests, custom sweeps).
        settings (Settings): repetitions and time budget. Default: QUICK or FULL.
        threads (int): BLAS / OpenMP / torch threads while measuring. Default: 1.
        progress (callable): called after each case with (suite, params, row).
    """
    work = plan(names, quick, cases)
    backend = resolve_backend(backend)
    profile = get_chip(chip)
    settings = settings or (QUICK if quick else FULL)
    with pinned(threads) as pinning:
        # the per-call overhead of the golden model, and of the backend measured if another
        names = dict.fromkeys((BASELINE, backend))
        overhead = {name: per_call_overhead(name, settings) for name in names}
        suites = {
            suite.name: _run_suite(suite, suite_cases, backend, profile.name, settings, progress)
            for suite, suite_cases in work
        }
    return finite_json(
        {
            "schema": SCHEMA,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(),
            "backend": backend,
            "chip": profile.name,
            "chip_name": profile.marketing_name,
            "quick": quick,
            "settings": dataclasses.asdict(settings),
            "threads": pinning,
            "published_available": published.available(),
            "overhead": overhead,
            "suites": suites,
        }
    )


def _run_suite(
    suite: Suite,
    cases: Sequence[Case],
    backend: str,
    chip: str,
    settings: Settings,
    progress: Progress | None,
) -> dict[str, Any]:
    rows: list[dict[str, Any] | None] = [None] * len(cases)
    for group in compare_groups(suite, cases):
        measured = measure_cases(suite, [cases[i] for i in group], backend, chip, settings)
        for i, row in zip(group, measured, strict=True):
            rows[i] = row
            if progress is not None:
                progress(suite.name, cases[i], row)
    done = [r for r in rows if r is not None]
    return {
        "title": suite.title,
        "question": suite.question,
        "mode": suite.mode,
        "x_label": suite.x_label,
        "note": suite.note,
        "findings": published.findings(suite.name, chip),
        "rating": rated_finding(chip) if suite.rating else None,
        "marks": [{"x": x, "label": label} for x, label in suite.marks(get_chip(chip))],
        "summary": summarize(suite, done),
        "rows": done,
    }


def compare_groups(suite: Suite, cases: Sequence[Case]) -> list[list[int]]:
    """Indices of the cases timed together: equal but for the suite's compared parameter.

    A suite that compares nothing times each case on its own.
    """
    if suite.compare is None:
        return [[i] for i in range(len(cases))]
    key = suite.compare[0]
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cases):
        rest = tuple(sorted((k, repr(v)) for k, v in c.items() if k != key))
        groups.setdefault(rest, []).append(i)
    return list(groups.values())


def measure_case(
    suite: Suite, params: Case, backend: str, chip: str, settings: Settings
) -> dict[str, Any]:
    """Build, predict, compile and time one case; return its row."""
    return measure_cases(suite, [params], backend, chip, settings)[0]


def measure_cases(
    suite: Suite, group: Sequence[Case], backend: str, chip: str, settings: Settings
) -> list[dict[str, Any]]:
    """Build, predict and compile every case of a group, time them interleaved; their rows."""
    descriptions = [suite.program(p) for p in group]
    built = [programs.build(d) for d in descriptions]
    with contextlib.ExitStack() as stack:
        kernels, compile_s, candidates = [], [], []
        for program, params in zip(built, group, strict=True):
            start = time.perf_counter()
            kernel = stack.enter_context(compile(program, backend=backend))
            compile_s.append(time.perf_counter() - start)
            inputs = random_inputs(kernel)
            if suite.mode == "queue":
                candidates.append(queue_candidate(kernel, inputs, params["in_flight"]))
            else:
                load_buffers(kernel, inputs)
                candidates.append(run_candidate(kernel))
            kernels.append(kernel)
        timings = time_interleaved(candidates, settings)
        hardware = [k.last_stats() for k in kernels]
    return [
        _row(suite, params, d, p, t, hw, c, chip)
        for params, d, p, t, hw, c in zip(
            group, descriptions, built, timings, hardware, compile_s, strict=True
        )
    ]


def _row(
    suite: Suite,
    params: Case,
    description: dict[str, Any],
    program: Program,
    timing: Timing,
    hardware: Any,
    compile_s: float,
    chip: str,
) -> dict[str, Any]:
    predicted = estimate(program, chip)
    measured = timing.as_json()
    extra = {}
    if suite.find_cliff:  # the sources disagree on the cliff: cost both readings
        profile = get_chip(chip)
        extra["predicted_by_cliff"] = {
            r: estimate(program, profile.with_sram_cliff(r)).seconds for r in SRAM_CLIFFS
        }
    return {
        "params": dict(params),
        "program": description,
        "series": suite.series(params),
        "x": float(suite.x(params)),
        "measured": measured,
        "hardware": hardware,
        "compile_s": compile_s,
        "flops": float(predicted.flops),
        "bytes": float(predicted.bytes),
        "predicted_s": float(predicted.seconds),
        "tflops_measured": _tflops(predicted.flops, measured["median_s"]),
        "tflops_predicted": _tflops(predicted.flops, predicted.seconds),
        "published": published.lookup(chip, description),
        **extra,
    }


def _tflops(flops: float, seconds: float) -> float | None:
    return flops / seconds / 1e12 if seconds > 0 else None


def machine() -> dict[str, Any]:
    """What the measurements were taken on (no host or user names)."""
    info: dict[str, Any] = {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "anekit": anekit.__version__,
    }
    if platform.system() == "Darwin":
        info["cpu_brand"] = host_brand_string()
        info["macos"] = platform.mac_ver()[0] or None
    return info


def finite_json(value: Any) -> Any:
    """The value with NumPy scalars made Python ones and NaN / inf made None (JSON null)."""
    if isinstance(value, dict):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    return value
