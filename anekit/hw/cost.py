"""The ANE cost model: how long one evaluation of a MIL program takes on a given chip.

The mechanism, fit to the published measurements in ``anekit/bench/data/published.json``
(ANE_NOTES section 7 and others; ``benchmarks/cost_model.py`` prints the fit):

* every evaluation pays a per-call floor (XPC to ``aned``, IOKit, firmware), which
  differs by runtime path (``Chip.on_path``: the in-memory path unless told otherwise);
* program inputs and outputs stream between DRAM and the engine at the chip's
  activation-path bandwidth, serially with compute. This, not the MAC array, is why
  a single large op reaches only ~30 % of peak while a deep chain, whose I/O is the
  same, approaches peak;
* fp32 program I/O is converted to fp16 outside the engine (the compiled E5 graph is
  Cast -> AneInference -> Cast), at the chip's host conversion rate;
* conv / matmul / attention ops run at the chip's fp16 MAC peak (twice that when the
  activations between layers are int8, W8A8), overlapped with streaming their weights:
  weights small enough to sit on chip come at the on-chip weight rate, larger ones
  at the DRAM bandwidth the ANE reaches; a weight stored compressed (a constexpr op)
  streams its stored bytes on a chip that keeps that encoding compressed, its dense
  bytes on one that folds it (``anekit.hw.compression``), at the rate its dense size
  gives it;
* an op whose working set (all operands and results) exceeds the on-chip memory
  falls off the "SRAM cliff": part of its work re-streams operands and runs at the
  chip's much lower spill rate, a part that grows with the overflow until all of it does
  (the chip's ``sram_cliff`` switch applies instead the other published reading: any one
  operand over the 2 MiB per-operand tiling threshold; see ``Chip.with_sram_cliff``);
* an intermediate tensor larger than the on-chip tensor budget round-trips DRAM;
* pointwise ops next to a conv/matmul are fused into it; other vector ops run at the
  chip's vector rate.

Every tensor is sized as the hardware lays it out: the last axis padded to 64 bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from anekit.errors import MilTypeError
from anekit.hw.chips import Chip, CostParams, resolve
from anekit.hw.compression import streams
from anekit.hw.kinds import CostKind
from anekit.mil.graph import FunctionGraph, stored_form
from anekit.mil.ops.registry import Encoding
from anekit.mil.ops.traits import (
    ACTIVATION,
    BINARY,
    CAST,
    COMPARISON,
    COMPILE_TIME,
    ELEMENTWISE,
    MAC,
    QUANTIZE,
    UNARY,
)
from anekit.mil.types import DType

if TYPE_CHECKING:
    from anekit.mil.program import Function, Operation, Program, Value

# Mechanism constants shared by every chip, fit to ANE_NOTES section 7 (see module doc).
# Fraction of an op's work that runs at the spill rate, per working set beyond the on-chip
# memory (M4 GEMM: none at 2048, ~40 % at 4096 = 3x the memory, all from 6144 up).
CLIFF_SLOPE = 0.21
LAST_AXIS_ALIGN = 64  # bytes; Apple's ml-ane-transformers guide, ANE_NOTES section 1

# ops that fuse into a neighbouring conv/matmul (the engine's per-element post-processing)
POINTWISE_TRAITS = frozenset({ELEMENTWISE, UNARY, BINARY, ACTIVATION, QUANTIZE, CAST, COMPARISON})
_INT8 = frozenset({DType.int8, DType.uint8})


@dataclass(frozen=True, slots=True)
class OpWork:
    """The work of one op, independent of the chip.

    Attributes:
        op: MIL op type.
        name: the op's name (its first output).
        line: 1-based MIL text line, or None for built programs.
        kind: where the work runs (:class:`~anekit.hw.kinds.CostKind`).
        flops: operations (multiply-add counts 2).
        bytes: bytes of every operand and result as laid out on the engine (what it reads
            and writes, and its working set for the SRAM-cliff test).
        weight_bytes: bytes of constant operands (weights).
        spill_candidates: bytes of each intermediate result that must stay on chip.
        int8: the activation input is int8 (W8A8 chains run on the int8 datapath).
        largest_operand: bytes of its largest single operand or result (the per-operand
            SRAM-cliff test).
        compressed: each weight stored compressed by a constexpr op: its encoding and the
            bytes its compression saves (dense minus stored), which count only on a chip
            that streams that encoding (``anekit.hw.compression``).
    """

    op: str
    name: str
    line: int | None
    kind: CostKind
    flops: float = 0.0
    bytes: float = 0.0
    weight_bytes: float = 0.0
    spill_candidates: tuple[float, ...] = ()
    int8: bool = False
    largest_operand: float = 0.0
    compressed: tuple[tuple[Encoding, float], ...] = ()

    def streamed_weight_bytes(self, chip: Chip) -> float:
        """The weight bytes the op streams on ``chip``: compressed where the chip keeps it so."""
        saved = sum(s for encoding, s in self.compressed if streams(encoding, chip))
        return self.weight_bytes - saved


@dataclass(frozen=True, slots=True)
class ProgramWork:
    """A program's work: per-op work, bytes crossing the program boundary, host casts."""

    ops: tuple[OpWork, ...]
    io_bytes: float
    host_cast_elements: float


@dataclass(frozen=True, slots=True)
class OpEstimate:
    """One row of an estimate: an op (or a per-call cost) and its predicted time."""

    op: str
    name: str
    line: int | None
    flops: float
    bytes: float
    seconds: float
    bound: str  # "compute" | "memory" | "overhead"


@dataclass(frozen=True, slots=True)
class Estimate:
    """Predicted time of one evaluation, with the per-op breakdown.

    ``low_s`` and ``high_s`` bound the likely time: the prediction scaled by the chip's
    ``cost.band``, how far predictions of published timings scatter when their source is
    left out of the fit (see ``benchmarks/cost_model.py``).
    """

    chip: str
    seconds: float
    flops: float
    bytes: float
    rows: tuple[OpEstimate, ...]
    low_s: float
    high_s: float

    @property
    def tflops(self) -> float:
        """Achieved throughput implied by the estimate (TFLOPS, or TOPS for int8)."""
        return self.flops / self.seconds / 1e12 if self.seconds > 0 else 0.0


def padded_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes of a tensor laid out with its last axis padded to 64 bytes."""
    if not shape:
        return itemsize
    rows = math.prod(shape[:-1])
    row = shape[-1] * itemsize
    return rows * (-(-row // LAST_AXIS_ALIGN) * LAST_AXIS_ALIGN)


def spill_fraction(working_set: float, onchip: float) -> float:
    """Fraction of an op's work that re-streams operands because its working set overflows."""
    if working_set <= onchip:
        return 0.0
    return min(1.0, CLIFF_SLOPE * (working_set / onchip - 1.0))


def estimate(program: Program, chip: str | Chip | None = None) -> Estimate:
    """Predict the time of one evaluation of ``program`` on ``chip`` (None: this Mac's, else m4),
    with a per-op breakdown."""
    return estimate_work(analyze(program), resolve(chip))


def analyze(program: Program) -> ProgramWork:
    """Extract the chip-independent work of a program's ``main`` function."""
    return _Analysis(program.main).work()


class _Analysis(FunctionGraph):
    """Classifies a function's values (inputs, weights, edges) and ops (mac, vector, fused, free)."""

    def __init__(self, fn: Function) -> None:
        super().__init__(fn)
        self.kinds: dict[int, CostKind] = {}
        for op in fn.ops:
            self.kinds[id(op)] = self._kind(op)

    def work(self) -> ProgramWork:
        io_bytes = 0.0
        casts = 0.0
        for v in (*self.fn.inputs, *self.fn.outputs):
            shape = _static_shape(v, None)
            fp32 = v.type.dtype is DType.fp32
            # fp32 I/O is converted to fp16 outside the engine (ANE_NOTES 2.4): the engine moves fp16.
            io_bytes += padded_bytes(shape, 2 if fp32 else v.type.dtype.itemsize)
            casts += math.prod(shape) if fp32 else 0
        return ProgramWork(tuple(self._op_work(op) for op in self.fn.ops), io_bytes, casts)

    def _op_work(self, op: Operation) -> OpWork:
        kind = self.kinds[id(op)]
        if kind is CostKind.FREE:
            return OpWork(op.op_type, op.name, op.line, kind)
        acts = [v for v in _tensor_inputs(op) if not self.is_const(v)]
        weights = [v for v in _tensor_inputs(op) if self.is_const(v)]
        operands = [_padded(v, op) for v in (*acts, *op.outputs)]
        operands += [math.prod(_static_shape(v, op)) * v.type.dtype.itemsize for v in weights]
        act_bytes = sum(operands[: len(acts)])
        out_bytes = sum(operands[len(acts) : len(acts) + len(op.outputs)])
        weight_bytes = sum(operands[len(acts) + len(op.outputs) :])
        spills = tuple(_padded(v, op) for v in op.outputs if self._materialized(v))
        compressed = []
        for v, dense in zip(weights, operands[len(acts) + len(op.outputs) :]):
            form = stored_form(v)
            if form is not None:
                compressed.append((form[0], max(dense - form[1], 0.0)))
        return OpWork(
            op=op.op_type,
            name=op.name,
            line=op.line,
            kind=kind,
            flops=float(op.cost().flops),
            bytes=act_bytes + out_bytes + weight_bytes,
            weight_bytes=weight_bytes,
            spill_candidates=spills,
            int8=kind is CostKind.MAC and any(_int8_activation(v) for v in acts),
            largest_operand=max(operands, default=0),
            compressed=tuple(compressed),
        )

    def _kind(self, op: Operation) -> CostKind:
        traits = op.opdef.traits
        if traits & COMPILE_TIME or (CAST in traits and self.at_boundary(op)):
            return CostKind.FREE  # constants, and edge casts (they run on the host: ANE_NOTES 2.4)
        if traits & MAC:
            return CostKind.MAC
        if traits & POINTWISE_TRAITS and self._next_to_mac(op):
            return CostKind.FUSED
        return CostKind.VECTOR

    def _next_to_mac(self, op: Operation) -> bool:
        """A pointwise op fed by a conv/matmul (or a fused op), or feeding only them, is fused."""
        for v in op.input_values():
            producer = v.producer
            if producer is not None and self.kinds.get(id(producer)) in (
                CostKind.MAC,
                CostKind.FUSED,
            ):
                return True
        users = [u for v in op.outputs for u in self.consumers(v)]
        return bool(users) and all(u.opdef.traits & MAC for u in users)

    def _materialized(self, v: Value) -> bool:
        """An intermediate that leaves the op pipeline (so it must fit on chip or spill)."""
        if self.is_boundary(v):
            return False
        users = self.consumers(v)
        return any(self.kinds[id(u)] not in (CostKind.FUSED, CostKind.FREE) for u in users)


def _tensor_inputs(op: Operation) -> list[Value]:
    return [v for v in op.input_values() if v.type.dtype is not DType.string and v.type.shape]


def _static_shape(v: Value, op: Operation | None) -> tuple[int, ...]:
    if not v.type.is_static:
        where = f"op {op.op_type!r}" if op is not None else "program boundary"
        raise MilTypeError(
            f"cannot cost value {v.name!r} of dynamic shape {list(v.type.shape)} ({where}); "
            "the ANE needs static shapes",
            op=op.op_type if op is not None else None,
            line=op.line if op is not None else None,
        )
    return v.type.shape  # type: ignore[return-value]


def _padded(v: Value, op: Operation) -> int:
    return padded_bytes(_static_shape(v, op), v.type.dtype.itemsize)


def _int8_activation(v: Value) -> bool:
    """The value is int8 or was just dequantized from int8 (the W8A8 pattern)."""
    if v.type.dtype in _INT8:
        return True
    producer = v.producer
    if producer is None or QUANTIZE not in producer.opdef.traits:
        return False
    return any(u.type.dtype in _INT8 for u in producer.input_values())


def estimate_work(work: ProgramWork, chip: Chip) -> Estimate:
    """Cost a program's work on one chip (see the module docstring for the mechanism)."""
    p = chip.cost
    rows = [
        OpEstimate("(call)", "per-call floor", None, 0.0, 0.0, p.floor_s, "overhead"),
    ]
    io_s = work.io_bytes / p.io_bw
    rows.append(
        OpEstimate("(io)", "program inputs and outputs", None, 0.0, work.io_bytes, io_s, "memory")
    )
    if work.host_cast_elements:
        cast_s = work.host_cast_elements / p.host_cast_rate
        rows.append(
            OpEstimate(
                "(host cast)", "fp32<->fp16 I/O conversion", None, 0.0, 0.0, cast_s, "overhead"
            )
        )
    rows.extend(_op_row(op, chip) for op in work.ops if op.kind is not CostKind.FREE)
    seconds = sum(r.seconds for r in rows)
    flops = sum(op.flops for op in work.ops if op.kind is not CostKind.FREE)
    moved = work.io_bytes + sum(
        op.bytes for op in work.ops if op.kind in (CostKind.MAC, CostKind.VECTOR)
    )
    return Estimate(chip.name, seconds, flops, moved, tuple(rows), *likely_range(seconds, chip))


def likely_range(seconds: float, chip: Chip) -> tuple[float, float]:
    """The likely range of a predicted time on ``chip`` (its ``cost.band``): (low, high)."""
    under, over = chip.cost.band  # predicted / published, 10th and 90th percentile
    return seconds / over, seconds / under


def _sram_load(op: OpWork, p: CostParams) -> tuple[float, float]:
    """What the SRAM-cliff test compares, and with what, under the chip's ``sram_cliff``.

    The sources disagree (ANE_NOTES 1): "working_set" compares all of an op's operands and
    its result with the on-chip working set (~32 MB inferred on M4); "per_operand" compares
    its largest operand with the per-operand tiling threshold (2 MiB).
    """
    if p.sram_cliff == "working_set":
        return op.bytes, p.working_set_bytes
    return op.largest_operand, p.operand_tile_bytes


def op_estimate(op: OpWork, chip: Chip) -> OpEstimate:
    """The predicted time of one op's work on ``chip`` (a row of :func:`estimate_work`)."""
    return _op_row(op, chip)


def _op_row(op: OpWork, chip: Chip) -> OpEstimate:
    p = chip.cost
    if op.kind is CostKind.FREE:
        return OpEstimate(op.op, op.name, op.line, op.flops, 0.0, 0.0, "compute")
    spill = sum(b for b in op.spill_candidates if b > p.onchip_tensor_bytes)
    spill_s = 2.0 * spill / p.io_bw  # written out, read back
    if op.kind is CostKind.FUSED:
        return OpEstimate(
            op.op, op.name, op.line, op.flops, spill, spill_s, "memory" if spill else "compute"
        )
    if op.kind is CostKind.MAC:
        rate = p.peak_flops * (p.int8_speedup if op.int8 else 1.0)
        spilled = spill_fraction(*_sram_load(op, p))
        compute_s = op.flops / rate + spilled * op.flops / p.spill_flops
        # where a weight streams from is decided by its dense size (compression changes how
        # many bytes move, not whether the weight fits on chip); how long, by its stored size
        weights = op.streamed_weight_bytes(chip)
        weight_bw = p.weight_bw if op.weight_bytes <= p.onchip_tensor_bytes else p.dram_bw
        memory_s = weights / weight_bw + spill_s
        seconds = max(compute_s, weights / weight_bw) + spill_s
    else:
        compute_s = op.flops / p.vector_flops
        memory_s = spill_s
        seconds = compute_s + spill_s
    bound = "compute" if compute_s >= memory_s else "memory"
    return OpEstimate(op.op, op.name, op.line, op.flops, op.bytes, seconds, bound)


def stream_efficiency() -> float:
    """How much of the ANE's measured DRAM bandwidth weights taken as program inputs reach.

    ``ane_dram_bw_gbps`` was measured streaming one 1 GB constant layer; the decoder's
    per-layer programs that take their weights as inputs stream below it. The factor is
    fitted to the published decode figures, every source weighted alike, and validated
    leaving each source out (``benchmarks/cost_model.py --write-stream``); it is stored in
    ``anekit/hw/data/chips.json`` (``shared_cost``), the same for every chip.
    """
    global _EFFICIENCY
    if _EFFICIENCY is None:
        raw = json.loads(
            resources.files("anekit.hw").joinpath("data/chips.json").read_text("utf-8")
        )
        _EFFICIENCY = float(raw["shared_cost"]["input_weight_stream_efficiency"]["value"])
    return _EFFICIENCY


_EFFICIENCY: float | None = None  # read once; benchmarks/cost_model.py sets it while fitting


def input_weight_bytes(nbytes: float) -> float:
    """The weight bytes an op streams for ``nbytes`` of weights taken as a program input,
    scaled so that the chip's weight bandwidth, times :func:`stream_efficiency`, is their rate."""
    return nbytes / stream_efficiency() if nbytes else 0.0
