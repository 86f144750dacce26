"""Compressed-weight rules: which stored encodings the chip streams and which it folds."""

from __future__ import annotations

from collections.abc import Iterator

from anekit.hw.compression import support
from anekit.hw.rules.base import Context, Finding
from anekit.mil.graph import stored_form
from anekit.mil.ops.traits import CONSTEXPR


def compression_findings(ctx: Context, verdict: str | None) -> Iterator[Finding]:
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
