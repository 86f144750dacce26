"""``auto``: the cost model picks, per layer, the schemes that make it faster on the chip.

For each layer the candidates are the schemes whose stored encoding the chip streams
compressed (``anekit.hw.compression``, from the per-family evidence) in a form the
program's opset has. Each is costed with the chip's cost model (``anekit.hw.cost``):
the layer's ops with the weight at its stored bytes and, for W8A8, on the int8 datapath.
A scheme is a candidate only where it is faster than fp16 by at least ``MIN_GAIN``: a
weight-only scheme gains only where the layer is bound by streaming its weight, W8A8
only where the chip's int8 rate beats fp16, and only on an int8 *chain*: a W8A8 layer
needs another W8A8 layer next to it (through pointwise ops), or the conversions at each
end would be all it has.

A layer's ladder is its candidates from fastest to slowest, each more accurate than the
one before (``Scheme.accuracy``); fp16 is the rung after the last. The accuracy gate
starts every layer on its first rung and moves layers down their ladders.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from anekit.compression.layers import Layer
from anekit.compression.schemes import SCHEMES, Options, Scheme
from anekit.errors import UsageError
from anekit.hw.chips import Chip
from anekit.hw.compression import streams
from anekit.hw.cost import POINTWISE_TRAITS, OpWork, analyze, op_estimate
from anekit.hw.kinds import CostKind
from anekit.mil.graph import FunctionGraph
from anekit.mil.ops.traits import MAC
from anekit.mil.program import Operation, Program

MIN_GAIN = 0.02  # a scheme must cut the layer's predicted time by 2% to be worth its error
Rung = tuple[Scheme, str]  # a scheme and the granularity it uses


def layer_seconds(works: Iterable[OpWork], chip: Chip) -> float:
    """Predicted seconds of a layer's ops."""
    return sum(op_estimate(w, chip).seconds for w in works)


def compressed_work(
    work: OpWork, layer: Layer, scheme: Scheme, granularity: str, options: Options
) -> OpWork:
    """One op's work with the layer's weight stored as ``scheme`` would store it."""
    itemsize = layer.array.dtype.itemsize
    stored = scheme.stored_bytes(layer.shape, layer.axis, itemsize, granularity, options)
    saved = max(layer.dense_bytes - stored, 0)
    return dataclasses.replace(
        work,
        compressed=(*work.compressed, (scheme.encoding(granularity), float(saved))),
        int8=work.int8 or (scheme.activations and work.kind is CostKind.MAC),
    )


def ladders(
    program: Program, layers: list[Layer], chip: Chip, options: Options
) -> dict[str, list[Rung]]:
    """Each layer's ladder of (scheme, granularity) on ``chip`` (see the module docstring)."""
    fn = program.main
    works = dict(zip((id(op) for op in fn.ops), analyze(program).ops))
    opset = fn.opset
    result: dict[str, list[Rung]] = {}
    for layer in layers:
        mine = [works[id(op)] for op in layer.ops]
        base = layer_seconds(mine, chip)
        timed = []
        for scheme in SCHEMES.values():
            try:
                granularity = scheme.granularity(options, opset)
            except UsageError:
                continue  # the program's opset has no form of it
            if not streams(scheme.encoding(granularity), chip):
                continue  # the chip folds it to dense fp16: no gain, only error
            seconds = layer_seconds(
                (compressed_work(w, layer, scheme, granularity, options) for w in mine), chip
            )
            if seconds < base * (1 - MIN_GAIN):
                timed.append((seconds, scheme.accuracy, scheme, granularity))
        result[layer.name] = _monotone(timed)
    _int8_chains(fn, layers, result)
    return result


def _monotone(timed: list[tuple[float, int, Scheme, str]]) -> list[Rung]:
    """Fastest first; each later rung strictly more accurate than the one before."""
    ladder: list[Rung] = []
    for _, accuracy, scheme, granularity in sorted(timed, key=lambda t: (t[0], t[1])):
        if not ladder or accuracy < ladder[-1][0].accuracy:
            ladder.append((scheme, granularity))
    return ladder


def neighbours(fn, layers: list[Layer]) -> dict[str, set[str]]:
    """Layer -> the layers whose results reach it, or that it reaches, through pointwise ops."""
    graph = FunctionGraph(fn)
    owner = {id(op): layer.name for layer in layers for op in layer.ops}
    near: dict[str, set[str]] = {layer.name: set() for layer in layers}
    for layer in layers:
        for op in layer.ops:
            for upstream in _feeding_macs(op, graph):
                other = owner.get(id(upstream))
                if other is not None and other != layer.name:
                    near[layer.name].add(other)
                    near[other].add(layer.name)
    return near


def lonely_int8(rungs: dict[str, Rung], near: dict[str, set[str]]) -> set[str]:
    """W8A8 layers with no W8A8 neighbour, after removing such layers until none is left."""
    int8 = {name for name, rung in rungs.items() if rung[0].activations}
    alone: set[str] = set()
    while True:
        found = {name for name in int8 if not near[name] & int8}
        if not found:
            return alone
        int8 -= found
        alone |= found


def _int8_chains(fn, layers: list[Layer], result: dict[str, list[Rung]]) -> None:
    """Drop W8A8 from layers without a W8A8 neighbour (see the module docstring)."""
    firsts = {name: ladder[0] for name, ladder in result.items() if ladder}
    for name in lonely_int8(firsts, neighbours(fn, layers)):
        result[name] = [rung for rung in result[name] if not rung[0].activations]


def _feeding_macs(op: Operation, graph: FunctionGraph) -> list[Operation]:
    """The MAC ops whose results reach ``op``'s runtime operands through pointwise ops only."""
    found, stack, seen = [], [v for v in op.input_values() if not graph.is_const(v)], set()
    while stack:
        v = stack.pop()
        producer = v.producer
        if producer is None or id(producer) in seen:
            continue
        seen.add(id(producer))
        if producer.opdef.traits & MAC:
            found.append(producer)
        elif producer.opdef.traits & POINTWISE_TRAITS:
            stack.extend(x for x in producer.input_values() if not graph.is_const(x))
    return found
