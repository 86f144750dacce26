"""ANE rewrite passes: MIL -> MIL, each output-equivalent on the reference backend.

They take any program (converted from PyTorch or written with the Builder) and make it
what the ANE wants. :data:`DEFAULT_PASSES` is the list ``from_torch`` runs, in order;
``passes=`` replaces it (``passes=()`` keeps the program exactly as converted)::

    fold_constants   ops whose inputs are all constant become constants (mil.passes')
    finite_masks     -inf (and below-fp16) additive masks on the way to a softmax become
                     -65504, the most negative finite fp16
    fp16             fp32 inputs, constants and casts become fp16; a constant that would
                     overflow, or lose its significant values to zero, is a ConversionError
    gather_to_matmul row lookups in a constant table (embeddings) become one-hot matmuls:
                     the one-op sweep found gather does not compile on the ANE
    ane_layout       linear / matmul with constant weights become 1x1 convs in the
                     [1, C, 1, S] layout; elementwise ops, norms and softmax over the
                     channel axis follow in that layout (anekit/frontends/layout.py)
    split_wide       convs with more channels than the chip allows are split and re-joined

Each rule says which pattern it rewrites (a table keyed by MIL op type, or a trait).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from anekit.errors import ConversionError, MilTypeError
from anekit.frontends import layout
from anekit.frontends.rewrite import Rebuild, rebuild
from anekit.hw import Chip, get_chip
from anekit.mil import DType, Operation, Program, Value
from anekit.mil import passes as mil_passes
from anekit.mil.ops.traits import CAST, CONST

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
FP16_OVERFLOW = 65520.0  # the smallest magnitude that rounds to inf
FP16_FLUSH = 2.0**-25  # the largest magnitude that rounds to zero
# a value that flushes to zero matters when it is above fp16's rounding step of the
# tensor's largest value (2^-11 relative): below that, fp16 could not have held it anyway
SIGNIFICANT = 2.0**-11


@dataclass(frozen=True)
class Pass:
    """One rewrite: a name users can pass or leave out, and ``run(program, chip)``."""

    name: str
    run: Callable[[Program, Chip], Program]
    doc: str

    def __call__(self, program: Program, chip: Chip) -> Program:
        return self.run(program, chip)


# -- fold_constants ------------------------------------------------------------------------------
def fold_constants(program: Program, chip: Chip) -> Program:
    """Replace every op whose inputs are all constant by its value (``mil.passes``' pass)."""
    return mil_passes.fold_constants(program)


# -- finite_masks ----------------------------------------------------------------------------------
# Ops an additive mask may pass through on its way to a softmax (by parameter), the ops
# that only move it, and the op it must reach. Anything else reading the constant means
# it is no mask.
_MASK_CARRIERS: dict[str, tuple[str, ...]] = {"add": ("x", "y"), "select": ("a", "b")}
_MASK_MOVERS = frozenset(
    {"reshape", "transpose", "expand_dims", "squeeze", "tile", "slice_by_size", "slice_by_index"}
)
_MASK_END = "softmax"


def _feeds_softmax_only(rb: Rebuild, v: Value) -> bool:
    """Whether every path from ``v`` is mask arithmetic ending in a softmax."""
    stack, reached = [v], False
    while stack:
        value = stack.pop()
        for op in rb.consumers(value):
            if op.op_type == _MASK_END:
                reached = True
                continue
            carrier = _MASK_CARRIERS.get(op.op_type)
            params = [k for k, x in op.inputs.items() if x is value]
            if carrier is not None and all(k in carrier for k in params):
                stack.extend(op.outputs)
            elif (op.op_type in _MASK_MOVERS or CAST in op.opdef.traits) and params == ["x"]:
                stack.extend(op.outputs)
            else:
                return False
    return reached


def _mask_rule(rb: Rebuild, op: Operation) -> bool:
    if CONST not in op.opdef.traits or not op.outputs[0].dtype.is_float:
        return False
    arr = np.asarray(op.outputs[0].const)
    low = arr <= -FP16_MAX
    if not low.any() or not _feeds_softmax_only(rb, op.outputs[0]):
        return False
    finite = np.where(low, np.asarray(-FP16_MAX, arr.dtype), arr)  # -inf -> -65504
    rb.set(op.outputs[0], rb.const(finite, op.name))
    return True


def finite_masks(program: Program, chip: Chip) -> Program:
    """Additive masks that reach a softmax: -inf (or below fp16) becomes -65504.

    exp(-65504 - max) is 0 in fp32 and fp16 alike, so the softmax is unchanged; -inf
    itself would give NaN for a row with no allowed position and is not an fp16 a
    mask tensor should hold.
    """
    return rebuild(program, _mask_rule)


# -- fp16 --------------------------------------------------------------------------------------------
def fp16_problem(arr: np.ndarray) -> str | None:
    """Why ``arr`` cannot become fp16 without loss, or None (see SIGNIFICANT).

    Checked on magnitudes, without converting: ``|x| >= 65520`` rounds to inf, and
    ``0 < |x| <= 2^-25`` rounds to zero (ties to even).
    """
    if arr.size == 0:
        return None
    a = np.abs(arr)
    top = float(a.max())
    if not np.isfinite(top):  # inf or NaN present: they stay as they are; judge the rest
        a = a[np.isfinite(a)]
        top = float(a.max()) if a.size else 0.0
    if top >= FP16_OVERFLOW:
        return f"|value| {top:g} overflows fp16 (largest finite {FP16_MAX:g})"
    if np.count_nonzero((a > 0) & (a <= FP16_FLUSH)):
        lost = float(a[a <= FP16_FLUSH].max())
        if lost > top * SIGNIFICANT:
            return f"value {lost:g} flushes to zero in fp16 (smallest 5.96e-08)"
    return None


class _Fp16:
    """The fp16 pass's rule, remembering the constants that must stay fp32."""

    def __init__(self) -> None:
        self.problems: dict[int, tuple[str, str]] = {}  # new value id -> (const name, problem)
        self.originals: dict[int, np.ndarray] = {}  # new value id -> fp32 array

    def __call__(self, rb: Rebuild, op: Operation) -> bool:
        if CONST in op.opdef.traits:
            return self._const(rb, op)
        params = {k: rb.get(v) for k, v in op.inputs.items()}
        if CAST in op.opdef.traits and params["x"].dtype is DType.fp16:
            target = params["dtype"].const
            if target == "fp16":  # a cast that became fp16 -> fp16
                rb.set(op.outputs[0], params["x"])
                return True
        try:
            rb.set_outputs(op, rb.b.add_op(op.op_type, params, op.name))
        except MilTypeError as e:
            rb.set_outputs(op, self._keep_fp32(rb, op, params, e))
        return True

    def _const(self, rb: Rebuild, op: Operation) -> bool:
        old = op.outputs[0]
        if isinstance(old.const, str):
            if old.const == "fp32":  # a dtype argument (cast): every fp32 type becomes fp16
                rb.set(old, rb.b.const("fp16", name=op.name))
                return True
            return False
        if old.dtype is not DType.fp32:
            return False
        arr = np.asarray(old.const)
        problem = fp16_problem(arr)
        new = _same_storage(rb, op, arr if problem else arr.astype(np.float16))
        rb.set(old, new)
        self.originals[id(new)] = arr
        if problem:
            self.problems[id(new)] = (op.name, problem)
        return True

    def _keep_fp32(self, rb: Rebuild, op: Operation, params: dict, error: MilTypeError):
        """Retry with the op's constants in fp32 (iOS17 norms let gamma/beta/epsilon be fp32)."""
        widened = {k: self._fp32(rb, v) for k, v in params.items()}
        try:
            return rb.b.add_op(op.op_type, widened, op.name)
        except MilTypeError:
            pass
        for v in _flat(params.values()):
            if id(v) in self.problems:
                name, problem = self.problems[id(v)]
                raise ConversionError(
                    f"constant {name!r} (read by {op.op_type} {op.name!r}) cannot be fp16: "
                    f"{problem}; and {op.op_type} needs it in x's dtype. Rescale it, or "
                    "convert with passes=() to keep fp32"
                ) from error
        raise error

    def _fp32(self, rb: Rebuild, v: object) -> object:
        if isinstance(v, tuple):
            return tuple(self._fp32(rb, x) for x in v)
        original = self.originals.get(id(v)) if isinstance(v, Value) else None
        if original is None or v.dtype is DType.fp32:
            return v
        wide = rb.b.const(original, name=f"{v.name}_fp32")
        self.originals[id(wide)] = original
        return wide


def _same_storage(rb: Rebuild, op: Operation, arr: np.ndarray) -> Value:
    """A const for ``arr`` stored as ``op``'s was (weight file or inline)."""
    if op.inputs["val"].blob is not None:
        return rb.b.weight(op.name, arr)
    return rb.b.const(arr, name=op.name)


def _flat(values: Iterable[object]) -> Iterable[object]:
    for v in values:
        yield from v if isinstance(v, tuple) else (v,)


def fp16(program: Program, chip: Chip) -> Program:
    """Make every fp32 input, constant and cast fp16 (the ANE computes in fp16)."""

    def input_type(v: Value) -> tuple[tuple, DType]:
        return v.shape, (DType.fp16 if v.dtype is DType.fp32 else v.dtype)

    return rebuild(program, _Fp16(), input_type=input_type)


# -- gather_to_matmul -------------------------------------------------------------------------------
def _gather_rows(rb: Rebuild, op: Operation, chip: Chip) -> bool:
    """gather(table, ids, axis=0) -> sum over vocabulary chunks of one_hot(ids) @ table."""
    table, ids = op.inputs["x"], op.inputs["indices"]
    if table.const is None or ids.const is not None or table.rank != 2:
        return False
    if int(np.asarray(op.inputs["axis"].const)) != 0:
        return False
    b, arr = rb.b, np.asarray(table.const)
    rows = table.shape[0]
    column = b.reshape(x=rb.get(ids), shape=[*ids.shape, 1], name=f"{op.name}_ids")
    step = min(chip.max_input_channels, chip.max_dim_spatial)
    total = None
    for start in range(0, rows, step):
        stop = min(start + step, rows)
        tag = f"{op.name}_{start}"
        ids_here = np.arange(start, stop, dtype=np.int32)
        hit = b.equal(x=column, y=rb.const(ids_here, f"{tag}_range"), name=f"{tag}_hit")
        one, zero = np.ones((), arr.dtype), np.zeros((), arr.dtype)
        onehot = b.select(cond=hit, a=one, b=zero, name=f"{tag}_onehot")
        part = b.matmul(x=onehot, y=rb.const(arr[start:stop], f"{tag}_rows"), name=f"{tag}_mm")
        total = part if total is None else b.add(x=total, y=part, name=f"{tag}_sum")
    rb.set(op.outputs[0], total)
    return True


def _by_op_type(rules: dict[str, ChipRule], chip: Chip) -> Callable[[Rebuild, Operation], bool]:
    """A rebuild rule dispatching on the MIL op type through a table of (op type -> rewrite)."""

    def rule(rb: Rebuild, op: Operation) -> bool:
        rewrite = rules.get(op.op_type)
        return rewrite is not None and rewrite(rb, op, chip)

    return rule


ChipRule = Callable[[Rebuild, Operation, Chip], bool]
_GATHER_RULES: dict[str, ChipRule] = {"gather": _gather_rows}  # gather(table, ids) -> one-hot @


def gather_to_matmul(program: Program, chip: Chip) -> Program:
    """Row lookups in a constant table become one-hot matmuls, in vocabulary chunks the chip
    accepts as conv input channels (a one-hot row has one 1, so the product is exact)."""
    return rebuild(program, _by_op_type(_GATHER_RULES, chip))


# -- split_wide ----------------------------------------------------------------------------------------
def _split_conv(rb: Rebuild, op: Operation, chip: Chip) -> bool:
    weight = op.inputs["weight"]
    groups = op.inputs.get("groups")
    if weight.const is None or (groups is not None and int(np.asarray(groups.const)) != 1):
        return False
    w = np.asarray(weight.const)
    out_ch, in_ch = w.shape[:2]
    if out_ch <= chip.max_dim_channel and in_ch <= chip.max_input_channels:
        return False
    params = {k: rb.get(v) for k, v in op.inputs.items() if k not in ("weight", "bias", "x")}
    x, bias = rb.get(op.inputs["x"]), op.inputs.get("bias")
    b = rb.b
    columns = []
    for o0 in range(0, out_ch, chip.max_dim_channel):
        o1 = min(o0 + chip.max_dim_channel, out_ch)
        total = None
        for i0 in range(0, in_ch, chip.max_input_channels):
            i1 = min(i0 + chip.max_input_channels, in_ch)
            tag = f"{op.name}_o{o0}_i{i0}"
            part_x = x
            if (i0, i1) != (0, in_ch):
                begin = [0] * x.rank
                begin[1] = i0
                size = list(x.shape)
                size[1] = i1 - i0
                part_x = b.slice_by_size(x=x, begin=begin, size=size, name=f"{tag}_x")
            part_b = None
            if bias is not None and i0 == 0:
                part_b = rb.const(np.asarray(bias.const)[o0:o1], f"{tag}_b")
            part = b.conv(
                x=part_x, weight=rb.const(w[o0:o1, i0:i1], f"{tag}_w"), bias=part_b,
                name=tag, **params,
            )  # fmt: skip
            total = part if total is None else b.add(x=total, y=part, name=f"{tag}_sum")
        columns.append(total)
    joined = columns[0] if len(columns) == 1 else None
    if joined is None:
        joined = b.concat(values=columns, axis=1, interleave=False, name=f"{op.name}_join")
    rb.set(op.outputs[0], joined)
    return True


_SPLIT_RULES: dict[str, ChipRule] = {"conv": _split_conv}  # conv over limits -> parts, re-joined


def split_wide(program: Program, chip: Chip) -> Program:
    """Convs over the chip's channel limits: output channels split and concatenated, input
    channels split and the partial results added."""
    return rebuild(program, _by_op_type(_SPLIT_RULES, chip))


def ane_layout(program: Program, chip: Chip) -> Program:
    """Linear layers as 1x1 convs in the [1, C, 1, S] layout (see :mod:`anekit.frontends.layout`)."""
    return layout.to_ane_layout(program)


DEFAULT_PASSES: tuple[Pass, ...] = (
    Pass("fold_constants", fold_constants, "ops whose inputs are all constant become constants"),
    Pass("finite_masks", finite_masks, "-inf masks become -65504 (the most negative fp16)"),
    Pass("fp16", fp16, "fp32 inputs, constants and casts become fp16, without silent loss"),
    Pass("gather_to_matmul", gather_to_matmul, "embedding lookups become one-hot matmuls"),
    Pass("ane_layout", ane_layout, "linear/matmul with constant weights become 1x1 convs"),
    Pass("split_wide", split_wide, "convs over the chip's channel limit are split"),
)
PASSES: dict[str, Pass] = {p.name: p for p in DEFAULT_PASSES}


def resolve(passes: Sequence[Pass | str] | None) -> tuple[Pass, ...]:
    """Pass objects for ``passes`` (names or Pass; None: DEFAULT_PASSES)."""
    if passes is None:
        return DEFAULT_PASSES
    result = []
    for p in passes:
        if isinstance(p, Pass):
            result.append(p)
        elif p in PASSES:
            result.append(PASSES[p])
        else:
            raise ConversionError(f"unknown pass {p!r}; known passes: {', '.join(PASSES)}")
    return tuple(result)


def chip_profile(chip: str | Chip) -> Chip:
    """The profile of ``chip``; an unknown name is a ConversionError listing the known ones."""
    try:
        return get_chip(chip)
    except ValueError as e:
        raise ConversionError(str(e)) from None


def run_passes(
    program: Program, passes: Sequence[Pass | str] | None = None, chip: str | Chip = "m4"
) -> Program:
    """Apply ``passes`` (default: DEFAULT_PASSES) in order for ``chip``."""
    profile = chip_profile(chip)
    for p in resolve(passes):
        program = p(program, profile)
    return program
