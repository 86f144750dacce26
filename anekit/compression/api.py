"""``compress(program, scheme, ...)``: choose, encode, rebuild, gate, and report."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anekit.compression import auto, calibrate
from anekit.compression.auto import Rung
from anekit.compression.encode import Encoded
from anekit.compression.gate import gate
from anekit.compression.layers import MIN_ELEMENTS, Layer, find_layers
from anekit.compression.report import CompressReport, LayerReport
from anekit.compression.rewrite import Choice, apply
from anekit.compression.schemes import AUTO, Options, get_scheme
from anekit.errors import UsageError
from anekit.hw.chips import Chip, resolve
from anekit.hw.cost import estimate
from anekit.mil.graph import FunctionGraph, stored_form
from anekit.mil.program import Program

AUTO_MAX_ERROR = 0.02  # auto's budget when none is given: 2% relative output error


@dataclass(frozen=True)
class Compressed:
    """A compressed program and its report."""

    program: Program
    report: CompressReport


@dataclass
class CompressState:
    """What compressing one program learns that another with the same weights can reuse.

    Programs that differ only in their activation shapes (an LLM's prefill and decode
    segments) share weight names and values and activation names: their weights are
    encoded once (k-means runs once) and their W8A8 steps calibrated once.

    Attributes:
        encodings: (weight name, scheme, granularity, shape, digest of the values) -> Encoded.
        steps: activation name -> int8 step, once calibrated.
    """

    encodings: dict[tuple[Any, ...], Encoded] = field(default_factory=dict)
    steps: dict[str, float] = field(default_factory=dict)


def compress(program: Program, scheme: str, **options: Any) -> Program:
    """The program with its weights compressed by ``scheme``.

    Keywords as :func:`compress_with_report` (``chip``, ``granularity``, ``calibration``,
    ``max_error``, ...); the output error is measured only when ``max_error`` asks for it.
    """
    options.setdefault("measure", options.get("max_error") is not None)
    return compress_with_report(program, scheme, **options).program


def compress_with_report(
    program: Program,
    scheme: str,
    *,
    chip: str | Chip | None = None,
    granularity: str | None = None,
    calibration: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    max_error: float | None = None,
    min_elements: int = MIN_ELEMENTS,
    group_size: int = 16,
    block_size: int = 32,
    seed: int = 0,
    measure: bool = True,
    state: CompressState | None = None,
) -> Compressed:
    r"""Compress the weights of ``program`` and say what that did on ``chip``.

    Args:
        program (Program): the program; it is not changed.
        scheme (str): "int8", "w8a8", "lut6", "lut4" (``anekit.compression.SCHEMES``) for
            every layer, or "auto": per layer, the schemes the cost model finds faster on
            ``chip``, within ``max_error`` (default 0.02).
        chip (str | Chip): the chip to choose and predict for. Default: this Mac's, else m4.
        granularity (str): what one scale or table covers ("per_channel", "per_block",
            "per_tensor", "per_grouped_channel"). Default: the finest the program's opset has.
        calibration: inputs to measure on and to calibrate W8A8 steps with: one mapping
            of input name to array, or a list of them. Default: seeded random inputs.
        max_error (float): the budget on the relative output error; layers fall back
            (largest error first) until it holds. Default: no budget (auto: 0.02).
        min_elements (int): weights with fewer elements stay fp16. Default: 4096.
        group_size (int): output channels sharing one palette. Default: 16.
        block_size (int): elements sharing one scale for per_block int8. Default: 32.
        seed (int): seeds random inputs and k-means. Default: 0.
        measure (bool): measure the output error (each layer's too) for the report.
        state (CompressState): encodings and W8A8 steps to reuse and to add to.
    Returns:
        Compressed: ``.program``, and ``.report`` (:class:`CompressReport`).
    """
    profile = resolve(chip)
    options = Options(granularity, group_size, block_size, seed)
    if max_error is not None and not max_error >= 0:
        raise UsageError(f"max_error must be a non-negative number, found {max_error}")
    layers = find_layers(program, min_elements=min_elements)
    _check_finite(layers)
    unsettled = None
    if scheme == AUTO:
        ladders = auto.ladders(program, layers, profile, options)
        budget = AUTO_MAX_ERROR if max_error is None else max_error
        near = auto.neighbours(program.main, layers)
        unsettled = lambda rungs: auto.lonely_int8(rungs, near)  # noqa: E731
    else:
        chosen = get_scheme(scheme)
        rung = (chosen, chosen.granularity(options, program.main.opset))
        ladders = {layer.name: [rung] for layer in layers}
        budget = max_error
    work = _Work(program, layers, options, calibration, state or CompressState())
    fallbacks: tuple[tuple[str, str, str], ...] = ()
    own: dict[str, float] = {}
    error = None
    if budget is not None:
        result = gate(ladders, work.error, budget, unsettled)
        rungs, error, own, fallbacks = (
            result.rungs,
            result.error,
            dict(result.own),
            result.fallbacks,
        )
    else:
        rungs = {name: ladder[0] for name, ladder in ladders.items() if ladder}
    final = work.build(rungs)
    if measure:
        error = work.error(rungs) if error is None else error
        for name, rung in rungs.items():
            own.setdefault(name, work.error({name: rung}))
    report = _report(
        program, final, layers, rungs, own, profile, scheme, error, budget, fallbacks, work
    )
    return Compressed(final, report)


def _check_finite(layers: Sequence[Layer]) -> None:
    """UsageError naming the first weight holding NaN or inf: no scheme can encode it, and
    the output error it causes could not be measured."""
    for layer in layers:
        bad = int(np.count_nonzero(~np.isfinite(layer.array)))
        if bad:
            raise UsageError(
                f"weight {layer.name!r} {list(layer.shape)} holds {bad} NaN or inf value(s); "
                "compression needs finite weights"
            )


class _Work:
    """Encodings, W8A8 steps, samples and reference outputs, each computed once."""

    def __init__(
        self,
        program: Program,
        layers: list[Layer],
        options: Options,
        calibration: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        state: CompressState,
    ) -> None:
        self.program = program
        self.layers = {layer.name: layer for layer in layers}
        self.options = options
        self.calibration = calibration
        self.samples_kind = "random" if calibration is None else "calibration"
        self.state = state
        self._samples: list[calibrate.Inputs] | None = None
        self._reference: list[calibrate.Inputs] | None = None
        self.measured = False

    def samples(self) -> list[calibrate.Inputs]:
        if self._samples is None:
            self._samples = calibrate.sample_inputs(
                self.program, self.calibration, self.options.seed
            )
        return self._samples

    def build(self, rungs: dict[str, Rung]) -> Program:
        choices = {}
        for name, (scheme, granularity) in rungs.items():
            layer = self.layers[name]
            digest = hashlib.blake2b(layer.array.tobytes(), digest_size=16).digest()
            key = (name, scheme.name, granularity, layer.shape, digest, self.options)
            encoded = self.state.encodings.get(key)
            if encoded is None:
                encoded = self.state.encodings[key] = scheme.encode(
                    layer, granularity, self.options
                )
            choices[name] = Choice(layer, encoded, scheme.activations)
        steps = self.steps() if any(c.activations for c in choices.values()) else None
        return apply(self.program, choices, steps)

    def steps(self) -> dict[str, float]:
        """int8 steps of every activation a layer reads, from the uncompressed program."""
        graph = FunctionGraph(self.program.main)
        values = [v for layer in self.layers.values() for _, _, v in layer.activations(graph)]
        missing = [v for v in values if v.name not in self.state.steps]
        if missing:
            found = calibrate.activation_steps(self.program, missing, self.samples())
            self.state.steps.update(found)
            self.measured = True
        return self.state.steps

    def error(self, rungs: dict[str, Rung]) -> float:
        """Output error of the program compressed as ``rungs`` say."""
        self.measured = True
        if self._reference is None:
            self._reference = calibrate.run(self.program, self.samples())
        runs = calibrate.run(self.build(rungs), self.samples())
        return calibrate.output_error(self._reference, runs, [v.name for v in self.program.outputs])


def weight_bytes(program: Program) -> int:
    """Bytes of every weight the program's runtime ops read, as stored."""
    graph = FunctionGraph(program.main)
    seen: dict[int, int] = {}
    for op in graph.runtime_ops():
        for v in op.input_values():
            if graph.is_const(v) and v.type.is_static and v.type.shape and id(v) not in seen:
                form = stored_form(v)
                seen[id(v)] = form[1] if form is not None else (v.type.nbytes or 0)
    return sum(seen.values())


def _report(
    program: Program,
    final: Program,
    layers: list[Layer],
    rungs: dict[str, Rung],
    own: dict[str, float],
    chip: Chip,
    scheme: str,
    error: float | None,
    budget: float | None,
    fallbacks: tuple[tuple[str, str, str], ...],
    work: _Work,
) -> CompressReport:
    before, after = estimate(program, chip), estimate(final, chip)
    time_before = _by_name(before.rows)
    time_after = _by_name(after.rows)
    stored = {v.name: stored_form(v) for op in final.main.ops for v in op.outputs}
    rows = []
    for layer in layers:
        names = tuple(op.name for op in layer.ops)
        rung = rungs.get(layer.name)
        form = stored.get(layer.name)
        rows.append(
            LayerReport(
                name=layer.name,
                ops=names,
                scheme="fp16" if rung is None else rung[0].name,
                granularity=None if rung is None else rung[1],
                dense_bytes=layer.dense_bytes,
                stored_bytes=form[1] if form is not None else layer.dense_bytes,
                seconds_before=sum(time_before.get(n, 0.0) for n in names),
                seconds_after=sum(time_after.get(n, 0.0) for n in names),
                error=0.0 if rung is None else own.get(layer.name),
            )
        )
    return CompressReport(
        chip=chip.name,
        scheme=scheme,
        layers=tuple(rows),
        weight_bytes_before=weight_bytes(program),
        weight_bytes_after=weight_bytes(final),
        seconds_before=before.seconds,
        seconds_after=after.seconds,
        error=error,
        max_error=budget,
        within=None if budget is None or error is None else error <= budget,
        samples=work.samples_kind if work.measured else None,
        fallbacks=fallbacks,
    )


def _by_name(rows: Sequence[Any]) -> dict[str, float]:
    found: dict[str, float] = {}
    for r in rows:
        found[r.name] = found.get(r.name, 0.0) + r.seconds
    return found
