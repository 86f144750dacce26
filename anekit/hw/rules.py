"""The checker's rules, as a table: (id, severity, which chips, check, evidence).

Each rule states one known ANE constraint and the public evidence for it. Where the
evidence conflicts, the rule is a warning that names both sides; nothing here
silently picks one. Op-level facts come from data: the ANEForge one-op sweep
(``data/mil_op_sweep.json``) and the ops ANE_NOTES section 3 saw working on M4.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

from anekit.errors import MilTypeError
from anekit.hw.chips import Chip
from anekit.hw.compression import support
from anekit.hw.cost import LAST_AXIS_ALIGN, padded_bytes
from anekit.mil.graph import FunctionGraph, stored_form
from anekit.mil.ops import registry
from anekit.mil.ops.traits import ATTENTION, CAST, COMPILE_TIME, CONST, CONSTEXPR, CONV, MATMUL
from anekit.mil.program import Operation, Program, Value
from anekit.mil.types import DType

SWEEP_SOURCE = "data/mil_op_sweep.json: ANEForge 0.4.0 one-op sweep, e5rt path, one chip (MIT)"
NOTES_M4_SOURCE = "ANE_NOTES section 3: ops seen working on M4 through the in-memory path"

# ANE_NOTES section 3: ops seen compiling and running on M4 through the in-memory path.
NOTES_WORKING_M4 = frozenset(
    {
        "cast", "conv", "matmul", "add", "sub", "mul", "pow", "sigmoid", "softmax", "reduce_sum",
        "slice_by_size", "reshape", "transpose", "concat", "scaled_dot_product_attention",
        "quantize", "dequantize", "constexpr_affine_dequantize", "identity",
    }
)  # fmt: skip

# Ops with a known better spelling on the ANE (ANE_NOTES section 2.4).
PREFERRED_SPELLING = {"rsqrt": "pow(x, -0.5)"}

LEGACY_GENERATIONS = frozenset({"H13", "H14"})  # M1, M2


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule's raw finding, before the driver (``anekit.hw.compat``) makes it a Diagnostic."""

    message: str
    op: Operation | None = None
    name: str | None = None


class Context(FunctionGraph):
    """What rules read: the main function, the chip, and facts derived from the program."""

    def __init__(self, program: Program, chip: Chip) -> None:
        super().__init__(program.main)
        self.program = program
        self.chip = chip

    def tensors(self) -> Iterator[tuple[Value, Operation | None]]:
        """Every runtime tensor (inputs and op results, consts excluded) with its producer."""
        for v in self.fn.inputs:
            yield v, None
        for op in self.runtime_ops():
            for v in op.outputs:
                yield v, op

    def ops_with(self, *traits: str) -> Iterator[Operation]:
        """The ops carrying any of the given traits."""
        wanted = set(traits)
        return (op for op in self.fn.ops if op.opdef.traits & wanted)

    def weight_bytes(self) -> int:
        """Bytes of every constant tensor the program's ops consume (its weights)."""
        seen: dict[int, int] = {}
        for op in self.runtime_ops():  # count what compute ops consume, once
            for v in op.input_values():
                if self.is_const(v) and v.type.is_static and v.type.dtype is not DType.string:
                    seen[id(v)] = v.type.nbytes or 0
        return sum(seen.values())


@dataclass(frozen=True)
class Rule:
    """One checker rule: applies(chip) selects chips; check(ctx) yields findings."""

    id: str
    severity: str
    summary: str
    evidence: str
    applies: Callable[[Chip], bool]
    check: Callable[[Context], Iterable[Finding]]


def every_chip(chip: Chip) -> bool:
    return True


def legacy_chip(chip: Chip) -> bool:
    return chip.generation in LEGACY_GENERATIONS


@functools.cache
def sweep() -> dict[str, dict[str, Any]]:
    """The one-op sweep, keyed by op name."""
    text = resources.files("anekit.hw").joinpath("data/mil_op_sweep.json").read_text("utf-8")
    return {entry["op"]: entry for entry in json.loads(text)}


def sweep_verdict(op_type: str) -> str:
    """What the sweep says of an op: "fails", "incorrect", "unverified", "correct" or "absent"."""
    entry = sweep().get(op_type)
    if entry is None:
        return "absent"
    if not entry["compile"] or not entry["run"]:
        return "fails"
    if entry["correct"] is False:
        return "incorrect"
    if entry["correct"] is True:
        return "correct"
    return "unverified"


# -- op support -------------------------------------------------------------------------------
def _program_ops(ctx: Context) -> Iterator[Operation]:
    """Every op the program spells out (constexpr ops too: the compiler must accept them)."""
    return (op for op in ctx.fn.ops if CONST not in op.opdef.traits)


def _op_unsupported(ctx: Context) -> Iterator[Finding]:
    for op in _program_ops(ctx):
        if sweep_verdict(op.op_type) == "fails" and op.op_type not in NOTES_WORKING_M4:
            err = sweep()[op.op_type]["klass"]
            yield Finding(
                f"{op.op_type!r} did not compile on the ANE in the one-op sweep ({err})", op
            )


def _op_conflicting(ctx: Context) -> Iterator[Finding]:
    for op in _program_ops(ctx):
        if sweep_verdict(op.op_type) != "fails" or op.op_type not in NOTES_WORKING_M4:
            continue
        if CAST in op.opdef.traits and ctx.at_boundary(op):
            continue  # edge casts run outside the engine (Cast -> AneInference -> Cast)
        yield Finding(
            f"evidence conflicts for {op.op_type!r}: the one-op sweep found it does not compile "
            f"({SWEEP_SOURCE}); ANE_NOTES section 3 saw it work on M4 through the in-memory path"
            + (
                " only at the program's edges; a cast inside the graph is unverified"
                if CAST in op.opdef.traits
                else ""
            ),
            op,
        )


def _op_incorrect(ctx: Context) -> Iterator[Finding]:
    for op in _program_ops(ctx):
        if sweep_verdict(op.op_type) == "incorrect":
            relerr = sweep()[op.op_type]["relerr"]
            yield Finding(
                f"{op.op_type!r} compiled but gave wrong results in the one-op sweep (relative error {relerr})",
                op,
            )


def _op_unverified(ctx: Context) -> Iterator[Finding]:
    for op in _program_ops(ctx):
        verdict = sweep_verdict(op.op_type)
        if op.op_type in NOTES_WORKING_M4 or CONSTEXPR in op.opdef.traits:
            continue
        if verdict == "unverified":
            yield Finding(
                f"{op.op_type!r} compiled and ran in the one-op sweep, but its results were not checked",
                op,
            )
        elif verdict == "absent":
            yield Finding(f"no published evidence that {op.op_type!r} compiles on the ANE", op)


def _preferred_spelling(ctx: Context) -> Iterator[Finding]:
    for op in _program_ops(ctx):
        if op.op_type in PREFERRED_SPELLING:
            yield Finding(f"write {PREFERRED_SPELLING[op.op_type]} rather than {op.op_type!r}", op)


# -- shapes and sizes --------------------------------------------------------------------------
def _dynamic_shapes(ctx: Context) -> Iterator[Finding]:
    for v, op in ctx.tensors():
        if not v.type.is_static:
            yield Finding(
                f"{v.name!r} has dynamic shape {list(v.type.shape)}; the ANE compiles static shapes only "
                "(all DMA is fixed at compile time): give every dimension a number",
                op,
                v.name,
            )


def _dim_limits(ctx: Context) -> Iterator[Finding]:
    chip = ctx.chip
    for v, op in ctx.tensors():
        for axis, dim in enumerate(v.type.shape):
            if not isinstance(dim, int):
                continue
            channel = v.type.rank >= 4 and axis == 1
            limit = chip.max_dim_channel if channel else chip.max_dim_spatial
            if dim > limit:
                kind = "channel" if channel else "spatial/contraction"
                yield Finding(
                    f"{v.name!r} {list(v.type.shape)}: {kind} axis {axis} is {dim}, over the "
                    f"{chip.name} limit of {limit}; split the tensor (e.g. a 151936-row head into parts)",
                    op,
                    v.name,
                )


GIB = 2**30


def _values(ctx: Context) -> Iterator[tuple[Value, Operation | None]]:
    """Every value the function defines (inputs, then each op's results, consts included)."""
    for v in ctx.fn.inputs:
        yield v, None
    for op in ctx.fn.ops:
        for v in op.outputs:
            yield v, op


def _laid_out(v: Value) -> int | None:
    """Bytes of a tensor as the ANE lays it out (rows padded to 64 bytes); None if unknown."""
    t = v.type
    if not t.is_static or t.dtype is DType.string:
        return None
    return padded_bytes(t.shape, t.dtype.itemsize)  # type: ignore[arg-type]


def _zero_size(ctx: Context) -> Iterator[Finding]:
    for v, op in _values(ctx):
        if 0 in v.type.shape:
            axes = [i for i, d in enumerate(v.type.shape) if d == 0]
            yield Finding(
                f"{v.name!r} {list(v.type.shape)} has no elements (axis {axes[0]} is 0): the ANE "
                "lays a tensor out as rows of its last axis on C x H planes (ANE_NOTES 2.5), and "
                "MILBlob refuses empty data; no published program runs one. Remove the tensor or "
                "give every dimension at least 1",
                op,
                v.name,
            )


def _rank_limit(ctx: Context) -> Iterator[Finding]:
    limit = ctx.chip.max_rank
    for v, op in _values(ctx):
        if v.type.rank > limit:
            yield Finding(
                f"{v.name!r} has rank {v.type.rank} {list(v.type.shape)}; the ANE compiler accepts "
                f"ranks 0 to {limit}: merge adjacent dimensions with reshape",
                op,
                v.name,
            )


def _tensor_bytes(ctx: Context) -> Iterator[Finding]:
    limit = ctx.chip.max_tensor_gib * GIB
    for v, op in ctx.tensors():
        size = _laid_out(v)
        if size is not None and size >= limit:
            yield Finding(
                f"{v.name!r} {list(v.type.shape)} {v.type.dtype} takes {size / GIB:.2f} GiB as laid "
                f"out; the ANE's DMA addresses one tensor in under {ctx.chip.max_tensor_gib:g} GiB "
                "(32-bit offsets, an estimate from the register map): split it",
                op,
                v.name,
            )


def program_memory(ctx: Context) -> tuple[int, int, int]:
    """Bytes a program needs at once: its I/O surfaces, its weights, its intermediates at their peak.

    Intermediates (runtime tensors other than inputs and outputs) live from the op that makes
    them to their last reader, in program order, as laid out (rows padded to 64 bytes).
    """
    fn = ctx.fn
    io = sum(_laid_out(v) or 0 for v in {id(v): v for v in (*fn.inputs, *fn.outputs)}.values())
    last_use: dict[int, int] = {}
    for i, op in enumerate(fn.ops):
        for v in op.input_values():
            last_use[id(v)] = i
    live = peak = 0
    freed: dict[int, int] = {}
    for i, op in enumerate(fn.ops):
        if not op.opdef.traits & COMPILE_TIME:
            for v in op.outputs:
                size = 0 if ctx.is_boundary(v) else _laid_out(v) or 0
                live += size
                end = last_use.get(id(v), i)
                freed[end] = freed.get(end, 0) + size
        peak = max(peak, live)
        live -= freed.pop(i, 0)
    return io, ctx.weight_bytes(), peak


def _program_bytes(ctx: Context) -> Iterator[Finding]:
    limit = ctx.chip.max_program_gib * GIB
    io, weights, intermediates = program_memory(ctx)
    total = io + weights + intermediates
    if total >= limit:
        yield Finding(
            f"the program needs {total / GIB:.2f} GiB at once (inputs and outputs "
            f"{io / GIB:.2f}, weights {weights / GIB:.2f}, intermediates at their peak "
            f"{intermediates / GIB:.2f}); the ANE addresses about {ctx.chip.max_program_gib:g} GiB "
            "per program (an estimate from its 32-bit DMA offsets): split it into several programs"
        )


def _conv_input_channels(ctx: Context) -> Iterator[Finding]:
    limit = ctx.chip.max_input_channels
    for op in ctx.ops_with(CONV):
        channels = op.opdef.input_channels(op.args())
        if channels is not None and channels > limit:
            yield Finding(
                f"conv input has {channels} channels; a 32000-input-channel conv is rejected "
                f"(32000 output channels work) and the cap is taken as {limit}: split the input "
                "channels and add the partial results",
                op,
            )


def _m1_matmul_k(ctx: Context) -> Iterator[Finding]:
    multiple = ctx.chip.matmul_k_multiple
    for op in ctx.ops_with(MATMUL):
        k = op.opdef.inner_dim(op.args())  # None for attention, which declares no single K
        if k is not None and k % multiple:
            padded = -(-k // multiple) * multiple
            yield Finding(
                f"matmul inner dimension {k} is not a multiple of {multiple} on {ctx.chip.name}; "
                f"zero-pad it to {padded}",
                op,
            )


def _last_axis_padding(ctx: Context) -> Iterator[Finding]:
    for v, op in ctx.tensors():
        t = v.type
        if not t.is_static or t.rank < 2 or t.dtype is DType.string or not t.numel:
            continue  # an empty tensor is the zero-size rule's
        row = t.shape[-1] * t.dtype.itemsize  # type: ignore[operator]
        if row * 4 > LAST_AXIS_ALIGN or math.prod(t.shape[:-1]) < 2:  # type: ignore[arg-type]
            continue
        waste = padded_bytes(t.shape, t.dtype.itemsize) / (math.prod(t.shape) * t.dtype.itemsize)  # type: ignore[arg-type]
        yield Finding(
            f"{v.name!r} {list(t.shape)}: its last axis is {row} bytes, padded to {LAST_AXIS_ALIGN} in "
            f"memory ({waste:.0f}x the data); put a long axis last, e.g. [1, C, 1, S]",
            op,
            v.name,
        )


def _weights_ceiling(severity_over: bool) -> Callable[[Context], Iterator[Finding]]:
    def rule(ctx: Context) -> Iterator[Finding]:
        ceiling = ctx.chip.weights_ceiling_gb * 1e9
        total = ctx.weight_bytes()
        over = total > ceiling
        near = 0.8 * ceiling < total <= ceiling
        if over if severity_over else near:
            yield Finding(
                f"the program holds {total / 1e9:.2f} GB of weights; one program is limited to about "
                f"{ctx.chip.weights_ceiling_gb:g} GB: split it into several programs"
            )

    return rule


# -- I/O -----------------------------------------------------------------------------------------
def _surface_bytes(v: Value) -> int | None:
    if not v.type.is_static:
        return None
    return padded_bytes(v.type.shape, v.type.dtype.itemsize)  # type: ignore[arg-type]


def _io_order_ok(ctx: Context) -> bool:
    ins = [_surface_bytes(v) for v in ctx.fn.inputs]
    outs = [_surface_bytes(v) for v in ctx.fn.outputs]
    if None in ins or None in outs:
        return True  # dynamic shapes are reported by their own rule
    ascending = all(a < b for a, b in zip(ins, ins[1:]))
    descending = all(a > b for a, b in zip(outs, outs[1:]))
    return ascending and descending


def _multi_input_order(ctx: Context) -> Iterator[Finding]:
    if len(ctx.fn.inputs) < 2 or _io_order_ok(ctx):
        return
    sizes = ", ".join(f"{v.name}={_surface_bytes(v)} B" for v in (*ctx.fn.inputs, *ctx.fn.outputs))
    yield Finding(
        f"{len(ctx.fn.inputs)} inputs whose surface sizes ({sizes}) are not strictly ascending "
        "(outputs strictly descending): one report finds outputs then come back silently zero; "
        "others run multi-input programs fine. Reorder by size, or pack the inputs into one tensor"
    )


def _multi_input(ctx: Context) -> Iterator[Finding]:
    if len(ctx.fn.inputs) < 2 or not _io_order_ok(ctx):
        return
    yield Finding(
        f"{len(ctx.fn.inputs)} inputs, ordered by ascending size as one report requires; another "
        "report has multi-input requests fail with 0x1d. Packing all inputs into one tensor always works"
    )


# -- attention --------------------------------------------------------------------------------
def _sdpa_mask(ctx: Context) -> Iterator[Finding]:
    for op in ctx.ops_with(ATTENTION):
        if op.inputs.get("attn_mask") is not None:
            yield Finding(
                "the ANE ignores attn_mask of scaled_dot_product_attention, so the result is wrong: "
                "build attention from matmul, add(mask), softmax, matmul",
                op,
            )


# -- M1 / M2 ----------------------------------------------------------------------------------
def _legacy_dialect(ctx: Context) -> Iterator[Finding]:
    if ctx.fn.opset in ("ios15", "ios16"):
        return
    missing = sorted({op.op_type for op in ctx.fn.ops if not _has_ios16(op.op_type)})
    extra = f"; {', '.join(missing)} have no ios16 form" if missing else ""
    yield Finding(
        f"the program targets {ctx.fn.opset}; {ctx.chip.name} reportedly needs program(1.0) with ios16 "
        f"ops and tensor<int32, []> scalars: save with dialect='legacy'{extra}"
    )


@functools.cache
def _has_ios16(op_type: str) -> bool:
    try:
        registry.get(op_type, "ios16")
    except MilTypeError:  # the op needs a later opset
        return False
    return True


def _legacy_fp32_cast(ctx: Context) -> Iterator[Finding]:
    for op in ctx.ops_with(CAST):
        types = {v.type.dtype for v in (*op.input_values(), *op.outputs)}
        if DType.fp32 in types:
            yield Finding(
                f"fp32<->fp16 cast may be unsupported on {ctx.chip.name}: use fp16 inputs and outputs",
                op,
            )


def _legacy_multi_blob(ctx: Context) -> Iterator[Finding]:
    offsets: dict[str, set[int]] = {}
    for op in ctx.ops_with(CONST, CONSTEXPR):
        for v in op.input_values():
            if v.blob is not None:
                offsets.setdefault(v.blob.path, set()).add(v.blob.offset)
    for path, offs in sorted(offsets.items()):
        if len(offs) > 1:
            yield Finding(
                f"weight file {path} holds {len(offs)} tensors; {ctx.chip.name} rejects multi-blob "
                "weight files: store one tensor per file (the Builder does)"
            )


# -- compressed weights -----------------------------------------------------------------------
def _compression_findings(ctx: Context, verdict: str | None) -> Iterator[Finding]:
    """constexpr ops whose encoding the chip's data says ``verdict`` of (None: says nothing)."""
    for op in ctx.ops_with(CONSTEXPR):
        form = stored_form(op.outputs[0])
        if form is None:
            continue
        encoding, stored = form
        fact = support(encoding, ctx.chip)
        found = None if fact is None else fact.value
        if found != verdict:
            continue
        what = f"{op.op_type} ({encoding.kind}, {encoding.bits}-bit)"
        if verdict is None:
            yield Finding(
                f"{what}: no source says whether {ctx.chip.name} ({ctx.chip.generation}) streams "
                "this encoding compressed or folds it to dense fp16; the cost model assumes it folds",
                op,
            )
        else:
            dense = op.outputs[0].type.nbytes or 0
            yield Finding(
                f"{what}: {ctx.chip.name} ({ctx.chip.generation}) folds this encoding to dense fp16 "
                f"when it compiles ({fact.note or 'no bandwidth saving'}): the weight streams "  # type: ignore[union-attr]
                f"{dense} bytes, not its {stored} stored bytes; use a scheme this chip streams",
                op,
            )


# -- M3 ---------------------------------------------------------------------------------------------
def _m3_conv_channels(ctx: Context) -> Iterator[Finding]:
    for op in ctx.ops_with(CONV):
        out = op.outputs[0].type
        chans = {op.opdef.input_channels(op.args()), out.shape[1] if out.rank >= 2 else None}
        chans.discard(None)
        if chans - {512}:
            yield Finding(
                f"conv with {sorted(chans)} channels: two reports (M3 Pro: 52 channel counts tried, "
                "M3 Ultra) found only 512-channel convs compile on M3; unconfirmed elsewhere",
                op,
            )


RULES: tuple[Rule, ...] = (
    Rule("dynamic-shape", "error", "every shape must be static", "ANE_NOTES section 1 (DMA fixed at compile time)",
         every_chip, _dynamic_shapes),
    Rule("op-unsupported", "error", "op did not compile in the one-op sweep", SWEEP_SOURCE,
         every_chip, _op_unsupported),
    Rule("op-conflicting-evidence", "warning", "sweep and ANE_NOTES disagree on the op",
         f"{SWEEP_SOURCE}; {NOTES_M4_SOURCE}", every_chip, _op_conflicting),
    Rule("op-incorrect", "warning", "op compiled but was wrong in the one-op sweep", SWEEP_SOURCE,
         every_chip, _op_incorrect),
    Rule("op-unverified", "info", "no evidence the op's results are right on the ANE", SWEEP_SOURCE,
         every_chip, _op_unverified),
    Rule("zero-size", "error", "a tensor has a zero-size dimension",
         "ANE_NOTES 2.5 (surface layout); coremltools' MILBlob reader refuses empty data; estimate: "
         "no published run of an empty tensor", every_chip, _zero_size),
    Rule("rank-limit", "error", "a tensor's rank exceeds the compiler's limit",
         "ANEForge graph.py: ANECCompile rejects rank 6 and more", every_chip, _rank_limit),
    Rule("tensor-bytes", "error", "a tensor is too large for the ANE's DMA addressing",
         "estimate: tinygrad's H13 register map (32-bit DMA offsets and strides)", every_chip,
         _tensor_bytes),
    Rule("program-memory", "error", "the program needs more memory at once than the ANE addresses",
         "estimate: tinygrad's H13 register map (32-bit DMA offsets); ANE_NOTES 2.4 (~2 GB weights)",
         every_chip, _program_bytes),
    Rule("dim-limit", "error", "a dimension exceeds the chip's limit",
         "ANE_NOTES 2.4 (65536, M4); ANEForge capabilities (16384 spatial through A15)", every_chip, _dim_limits),
    Rule("conv-input-channels", "error", "too many conv input channels",
         "ANE_NOTES 2.4: 32000-input-channel conv rejected, 32000 output channels work", every_chip,
         _conv_input_channels),
    Rule("sdpa-mask", "error", "scaled_dot_product_attention ignores attn_mask",
         "ANE_NOTES 2.4; maderix/ANE README (Limitations)", every_chip, _sdpa_mask),
    Rule("weights-ceiling", "error", "weights over the per-program ceiling",
         "ANE_NOTES 2.4: ~2 GB of weights per program (e5rt path)", every_chip, _weights_ceiling(True)),
    Rule("weights-near-ceiling", "warning", "weights within 20% of the per-program ceiling",
         "ANE_NOTES 2.4: ~2 GB of weights per program (e5rt path)", every_chip, _weights_ceiling(False)),
    Rule("multi-input-order", "warning", "multiple inputs not ordered by size",
         "ANE_NOTES 2.4 (three reports disagree)", every_chip, _multi_input_order),
    Rule("multi-input", "info", "multiple inputs", "ANE_NOTES 2.4 (three reports disagree)",
         every_chip, _multi_input),
    Rule("last-axis-padding", "warning", "tiny last axis wastes memory",
         "ANE_NOTES section 1; Apple ml-ane-transformers (last axis padded to 64 bytes)", every_chip,
         _last_axis_padding),
    Rule("preferred-spelling", "info", "an op has a better-supported spelling", "ANE_NOTES 2.4",
         every_chip, _preferred_spelling),
    Rule("m1-matmul-k", "error", "M1 matmul inner dimension must be a multiple of 32", "ANE_NOTES 2.4",
         lambda chip: chip.matmul_k_multiple > 1, _m1_matmul_k),
    Rule("legacy-dialect", "warning", "M1/M2 want program(1.0) / ios16",
         "ANE_NOTES 2.4; maderix/ANE cross-generation report (M1: program(1.3) partial)", legacy_chip,
         _legacy_dialect),
    Rule("legacy-fp32-cast", "warning", "fp32 casts may be unsupported on M1/M2", "ANE_NOTES 2.4",
         legacy_chip, _legacy_fp32_cast),
    Rule("legacy-multi-blob", "warning", "M1/M2 reject multi-blob weight files",
         "ANE_NOTES 2.4 and section 4; maderix/ANE report", legacy_chip, _legacy_multi_blob),
    Rule("compression-folds", "warning", "the chip folds this weight encoding to dense fp16",
         "data/compression.json (ANEForge per-family compressed-weight streaming)", every_chip,
         lambda ctx: _compression_findings(ctx, "folds")),
    Rule("compression-unverified", "info", "no evidence how the chip treats this weight encoding",
         "data/compression.json", every_chip, lambda ctx: _compression_findings(ctx, None)),
    Rule("m3-conv-channels", "warning", "only 512-channel convs reported to compile on M3",
         "maderix/ANE cross-generation report (M3 Pro); maderix/ANE issue #42 (M3 Ultra)",
         lambda chip: chip.generation == "H15", _m3_conv_channels),
)  # fmt: skip
