"""Inputs to measure on, runs on the reference backend, output error and activation steps.

The reference backend is the golden model: a compressed program evaluated there gives
what the ANE would compute from the same decoded weights (fp16 storage semantics), so
the error measured here is the error compression causes, not a backend difference.

The error of a program against its uncompressed original is the relative L2 error
``||y - y_ref|| / ||y_ref||`` of each output, over every calibration sample together,
and the largest over the outputs (each output must stay within a budget).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from anekit import backends
from anekit.compression.encode import INT8_LEVELS
from anekit.errors import UsageError
from anekit.mil.program import Function, Program, Value

Inputs = dict[str, np.ndarray]
RANDOM_SAMPLES = 2  # random inputs when no calibration is given


def sample_inputs(
    program: Program, calibration: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None, seed: int
) -> list[Inputs]:
    """The calibration samples (one mapping, or a list), or seeded standard-normal ones."""
    fn = program.main
    if calibration is None:
        rng = np.random.default_rng(seed)
        samples = []
        for _ in range(RANDOM_SAMPLES):
            sample = {}
            for v in fn.inputs:
                if not v.type.dtype.is_float:
                    raise UsageError(
                        f"input {v.name!r} is {v.type.dtype}: random inputs are only drawn for "
                        "float inputs; pass calibration= samples"
                    )
                shape = tuple(int(d) for d in v.type.shape)
                sample[v.name] = rng.standard_normal(shape).astype(v.type.dtype.numpy)
            samples.append(sample)
        return samples
    given = [calibration] if isinstance(calibration, Mapping) else list(calibration)
    if not given:
        raise UsageError("calibration holds no samples; give at least one mapping of inputs")
    names = sorted(v.name for v in fn.inputs)
    for i, sample in enumerate(given):
        if sorted(sample) != names:
            raise UsageError(
                f"calibration sample {i} has inputs {sorted(sample)}; the program takes {names}"
            )
    return [{k: np.asarray(a) for k, a in sample.items()} for sample in given]


def run(program: Program, samples: Sequence[Inputs], probes: Iterable[Value] = ()) -> list[Inputs]:
    """Every output (and every probed value) of ``program`` on each sample, as float32."""
    probed = _with_outputs(program, list(probes))
    # IEEE storage: the error of a compression is measured apart from the engine's cliffs
    kernel = backends.compile(probed, backend="reference", numerics="ideal")
    try:
        results = []
        for sample in samples:
            out = kernel(**sample)
            results.append({k: np.asarray(a, dtype=np.float32) for k, a in out.items()})
        return results
    finally:
        kernel.close()


def _with_outputs(program: Program, probes: list[Value]) -> Program:
    """``program`` also returning the probed values (program inputs are probed already)."""
    fn = program.main
    have = {id(v) for v in (*fn.inputs, *fn.outputs)}
    extra = tuple(v for v in dict.fromkeys(probes) if id(v) not in have)
    if not extra:
        return program
    main = Function(fn.name, fn.inputs, fn.ops, fn.outputs + extra, fn.opset)
    return Program({**program.functions, "main": main}, version=program.version)


def output_error(
    reference: Sequence[Inputs], runs: Sequence[Inputs], names: Iterable[str]
) -> float:
    """The worst channel's relative L2 error over the named outputs, all samples together.

    Per channel (axis 1 of an output of two or more dimensions), so that one channel of huge
    values cannot hide the others' errors as a whole-tensor norm would: each channel's error
    is measured against its own norm or the median channel's, whichever is larger (a channel
    ReLU left near zero is judged on the typical channel's scale, not on its own). Non-finite
    values (in either) make the error infinite: never a pass.
    """
    worst = 0.0
    for name in names:
        ref = np.concatenate([_channels_first(r[name]) for r in reference], axis=1)
        got = np.concatenate([_channels_first(r[name]) for r in runs], axis=1)
        if not (np.isfinite(got).all() and np.isfinite(ref).all()):
            return float("inf")
        norms = np.linalg.norm(ref, axis=1)
        floor = float(np.median(norms))
        diffs = np.linalg.norm(got - ref, axis=1)
        if floor > 0:
            worst = max(worst, float((diffs / np.maximum(norms, floor)).max()))
        else:  # every reference channel is (mostly) zero: the absolute error
            worst = max(worst, float(diffs.max()))
    return worst


def _channels_first(a: np.ndarray) -> np.ndarray:
    """``a`` as float64 ``[channels, values]``: axis 1 is the channel axis of 2-D and up."""
    a = np.asarray(a, np.float64)
    if a.ndim < 2:
        return a.reshape(1, -1)
    return np.moveaxis(a, 1, 0).reshape(a.shape[1], -1)


def activation_steps(
    program: Program, values: Sequence[Value], samples: Sequence[Inputs]
) -> dict[str, float]:
    """The symmetric int8 step of each value: its largest magnitude on the samples / 127."""
    runs = run(program, samples, values)
    steps = {}
    for v in values:
        peak = max(float(np.abs(_observed(v, r, s)).max()) for r, s in zip(runs, samples))
        steps[v.name] = peak / INT8_LEVELS if peak > 0 else 1.0
    return steps


def _observed(v: Value, result: Inputs, sample: Inputs) -> np.ndarray:
    return result[v.name] if v.name in result else np.asarray(sample[v.name], dtype=np.float32)
