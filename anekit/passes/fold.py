"""Constant folding: each op whose inputs are all constants becomes the constant it computes.

The first pass of both pipelines (``anekit.passes.pipelines``); the value it computes is
the op's registry reference, as the reference backend runs it (coremltools' value
inference). A program the convert pipeline folded is not folded again by the device
pipeline (``Program.applied_passes``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.hw import Chip
from anekit.mil.ops import registry
from anekit.mil.ops.registry import received
from anekit.mil.ops.traits import COMPILE_TIME
from anekit.mil.program import Function, Operation, Program
from anekit.mil.rewrite import rebuilt
from anekit.mil.types import DType
from anekit.mil.values import WEIGHTS_PREFIX, BlobRef, Value
from anekit.mil.verify import check_function
from anekit.mil.weights import Placeholder

FOLD_MAX_BYTES = 1 << 16  # a folded result made from small literals stays under this size
FOLD_INLINE_ELEMENTS = 64  # a larger folded result goes to a weight file, not into the text


def fold_constants(
    program: Program, chip: Chip | None = None, *, max_bytes: int = FOLD_MAX_BYTES
) -> Program:
    """Replace each op whose inputs are all constants by the constants its reference computes.

    ``chip`` is there for the signature every pass shares: folding does not depend on it.

    The values are those the reference backend would compute at run time (inputs as
    stored, fp16 held in fp32, each result rounded to its declared dtype), so the folded
    program gives the same outputs. Skipped: constexpr ops (the device decompresses them
    and their weights stay compressed), ops without a reference, results larger than both
    ``max_bytes`` and the constants they are made from (a rearranged weight may be folded,
    a ``tile`` of a scalar into megabytes may not), and results that the dtype cannot hold
    (an fp16 overflow stays an op). A result made from a weight, or of more than
    ``FOLD_INLINE_ELEMENTS`` elements, goes to a weight file of its own; a smaller one is
    written inline. Consts that only folded ops read are dropped.
    """
    functions = {name: _fold_function(fn, max_bytes) for name, fn in program.functions.items()}
    if all(functions[name] is fn for name, fn in program.functions.items()):
        return program
    for fn in functions.values():
        check_function(fn)
    return Program(functions, version=program.version, build_info=program.build_info)


def _fold_function(fn: Function, max_bytes: int) -> Function:
    replace: dict[int, Value] = {}
    ops: list[Operation] = []
    folded: list[Operation] = []
    files = {v.blob.path for op in fn.ops for v in op.input_values() if v.blob is not None}
    returned = {id(v) for v in fn.outputs}
    for original in fn.ops:
        op = rebuilt(original, replace)
        # an op writing a program output stays: each output surface needs an op to fill it
        writes_output = any(id(v) in returned for v in original.outputs)
        consts = None if writes_output else _fold(op, max_bytes)
        if consts is None:
            ops.append(op)
            news = op.outputs
        else:
            folded.append(op)
            news = tuple(_const_value(v, array, fn.opset, files, op) for v, array in consts)
            ops.extend(v.producer for v in news if v.producer is not None)
        replace.update((id(old), new) for old, new in zip(original.outputs, news) if old is not new)
    if not folded:
        return fn
    outputs = tuple(replace.get(id(v), v) for v in fn.outputs)
    return Function(fn.name, fn.inputs, _live(ops, folded, outputs), outputs, fn.opset)


def _fold(op: Operation, max_bytes: int) -> list[tuple[Value, np.ndarray]] | None:
    """Each output of ``op`` with its computed value, or None if the op is not folded."""
    inputs = list(op.input_values())
    if op.opdef.traits & COMPILE_TIME or op.opdef.reference is None:
        return None  # constexpr ops stay compressed; const ops are folded already
    if any(v.const is None for v in inputs) or any(not v.type.is_static for v in op.outputs):
        return None
    if any(isinstance(v.const, Placeholder) for v in inputs):
        return None  # zeros standing in for unread weights: folding them would hide that
    size = sum(v.type.nbytes or 0 for v in op.outputs)
    if size > max(max_bytes, sum(v.type.nbytes or 0 for v in inputs)):
        return None
    try:
        with np.errstate(all="ignore"):  # inf and NaN are results, as in the reference backend
            result = op.opdef.reference(**_reference_args(op))
    except Exception:  # the same failure at run time is the backend's to report, with its op
        return None
    results = result if len(op.outputs) > 1 else (result,)
    stored = [_stored(op, v, r) for v, r in zip(op.outputs, results)]
    if any(a is None for a in stored):
        return None
    return list(zip(op.outputs, stored))  # type: ignore[arg-type]


def _reference_args(op: Operation) -> dict[str, Any]:
    """The keyword arguments of ``op``'s reference, as the reference backend passes them."""
    return {
        name: tuple(received(x.const) for x in v) if isinstance(v, tuple) else received(v.const)
        for name, v in op.arguments()
    }


def _stored(op: Operation, out: Value, result: Any) -> np.ndarray | None:
    """``result`` stored in ``out``'s dtype, or None when the dtype cannot hold it exactly."""
    if out.type.dtype is DType.string:
        return None
    computed = np.asarray(result)
    if computed.shape != out.type.shape:
        raise MilTypeError(
            f"reference gives shape {list(computed.shape)}, type inference {list(out.type.shape)}",
            op=op.op_type,
            line=op.line,
        )
    with np.errstate(all="ignore"):
        array = computed.astype(out.type.dtype.numpy)
    if out.type.dtype.is_float:
        overflow = np.isfinite(computed) & ~np.isfinite(array)
        return None if overflow.any() else array
    return array if np.array_equal(array, computed) else None


def _const_value(
    out: Value, array: np.ndarray, opset: str, files: set[str], source: Operation
) -> Value:
    """A const op's output holding ``array`` as ``out``; in a weight file if large or from one."""
    blob = None
    if array.size > FOLD_INLINE_ELEMENTS or any(_stored_in_file(v) for v in source.input_values()):
        blob = BlobRef(_fresh_weight_file(out.name, files), 64)
    literal = Value("", out.type, None, array, blob)
    value = Value(out.name, out.type, None, array)
    const = registry.get("const", opset)
    value.producer = Operation(const, {"val": literal}, (value,), {"name": out.name}, source.line)
    return value


def _stored_in_file(v: Value) -> bool:
    """The value is a weight: a BLOBFILE literal, or the output of a const op holding one."""
    producer = v.producer
    return v.blob is not None or (
        producer is not None and any(x.blob is not None for x in producer.input_values())
    )


def _fresh_weight_file(stem: str, files: set[str]) -> str:
    path, i = f"{WEIGHTS_PREFIX}{stem}.bin", 1
    while path in files:
        path, i = f"{WEIGHTS_PREFIX}{stem}_{i}.bin", i + 1
    files.add(path)
    return path


def _live(
    ops: list[Operation], folded: list[Operation], outputs: tuple[Value, ...]
) -> tuple[Operation, ...]:
    """``ops`` without the const ops that only folded ops read (nothing reads them now)."""
    freed = {id(v) for op in folded for v in op.input_values()}
    used = {id(v) for op in ops for v in op.input_values()} | {id(v) for v in outputs}
    return tuple(
        op
        for op in ops
        if not (
            op.opdef.traits & COMPILE_TIME
            and all(id(v) in freed and id(v) not in used for v in op.outputs)
        )
    )
