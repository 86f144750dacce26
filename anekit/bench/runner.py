"""Run benchmark suites on a backend, beside the cost model's prediction and published numbers.

The result is one JSON-ready dict (schema in ``docs/bench.md``)::

    {"schema": "anekit-bench/1", "machine": {...}, "backend": "reference", "chip": "m4",
     "quick": true, "overhead": {...}, "suites": {name: {"rows": [...], ...}}}
"""

from __future__ import annotations

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
    load_buffers,
    per_call_overhead,
    random_inputs,
    time_queue,
    time_run,
)
from anekit.bench.suites import SUITES, Case, Suite
from anekit.bench.summary import summarize
from anekit.hw import estimate, get_chip
from anekit.hw.chips import host_brand_string

SCHEMA = "anekit-bench/1"

# Called after each case with (suite name, case parameters, row).
Progress = Callable[[str, Case, dict[str, Any]], None]


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
        progress (callable): called after each case with (suite, params, row).
    """
    work = plan(names, quick, cases)
    backend = resolve_backend(backend)
    profile = get_chip(chip)
    settings = settings or (QUICK if quick else FULL)
    overhead = {"reference": per_call_overhead("reference", settings)}
    if backend != "reference":
        overhead[backend] = per_call_overhead(backend, settings)
    suites: dict[str, Any] = {}
    for suite, suite_cases in work:
        rows = []
        for params in suite_cases:
            row = measure_case(suite, params, backend, profile.name, settings)
            rows.append(row)
            if progress is not None:
                progress(suite.name, params, row)
        suites[suite.name] = {
            "title": suite.title,
            "question": suite.question,
            "mode": suite.mode,
            "x_label": suite.x_label,
            "note": suite.note,
            "findings": published.findings(suite.name, profile.name),
            "summary": summarize(suite, rows),
            "rows": rows,
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
            "published_available": published.available(),
            "overhead": overhead,
            "suites": suites,
        }
    )


def measure_case(
    suite: Suite, params: Case, backend: str, chip: str, settings: Settings
) -> dict[str, Any]:
    """Build, predict, compile and time one case; return its row."""
    description = suite.program(params)
    program = programs.build(description)
    predicted = estimate(program, chip)
    start = time.perf_counter()
    with compile(program, backend=backend) as kernel:
        compile_s = time.perf_counter() - start
        inputs = random_inputs(kernel)
        if suite.mode == "queue":
            timing = time_queue(kernel, inputs, params["in_flight"], settings)
        else:
            load_buffers(kernel, inputs)
            timing = time_run(kernel, settings)
        hardware = kernel.last_stats()
    measured = timing.as_json()
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
