"""Op support rules: what the one-op sweep and ANE_NOTES say of each op the program spells."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from importlib import resources
from typing import Any

from anekit.hw.rules.base import Context, Finding
from anekit.mil.ops.traits import CAST, CONST, CONSTEXPR
from anekit.mil.program import Operation

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


def _program_ops(ctx: Context) -> Iterator[Operation]:
    """Every op the program spells out (constexpr ops too: the compiler must accept them)."""
    return (op for op in ctx.fn.ops if CONST not in op.opdef.traits)


def op_unsupported(ctx: Context) -> Iterator[Finding]:
    for op in _program_ops(ctx):
        if sweep_verdict(op.op_type) == "fails" and op.op_type not in NOTES_WORKING_M4:
            err = sweep()[op.op_type]["klass"]
            yield Finding(
                f"{op.op_type!r} did not compile on the ANE in the one-op sweep ({err})", op
            )


def op_conflicting(ctx: Context) -> Iterator[Finding]:
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


def op_incorrect(ctx: Context) -> Iterator[Finding]:
    for op in _program_ops(ctx):
        if sweep_verdict(op.op_type) == "incorrect":
            relerr = sweep()[op.op_type]["relerr"]
            yield Finding(
                f"{op.op_type!r} compiled but gave wrong results in the one-op sweep (relative error {relerr})",
                op,
            )


def op_unverified(ctx: Context) -> Iterator[Finding]:
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


def preferred_spelling(ctx: Context) -> Iterator[Finding]:
    for op in _program_ops(ctx):
        if op.op_type in PREFERRED_SPELLING:
            yield Finding(f"write {PREFERRED_SPELLING[op.op_type]} rather than {op.op_type!r}", op)
