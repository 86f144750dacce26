"""What the convert pipeline chose, recorded in the program it makes, so that ``anekit check``
tells the user's choices (advice) from the converter's (facts it cannot act on).

The convert pipeline writes one ``buildInfo`` entry, ``anekit-converter``, into the program:
it is saved with ``model.mil`` and read back by ``mil.load``, so a saved model carries it.
Its value is ``v1`` followed by ``;``-separated parts (no quotes, names are MIL identifiers):

    layouts                       every tensor inside the program has the layout the
                                  converter gave it (``ane_layout`` ran); the model's inputs
                                  and outputs keep the user's layout
    lookup=name,name              comparisons the passes made for a one-hot table lookup
    mask=name,name                comparisons the passes made for bool mask logic
    compare=name,name             other comparisons the passes made
    conv=name,name                convs the passes made (linear, embedding, matmul)
    gelu=name,name                MIL ``gelu`` ops a front end spelled for a model's GELU

:func:`split` sorts a checker's diagnostics of such a program into advice and
:class:`Fact` (a diagnostic about something the converter chose, with the reason it was
chosen). An op belongs to the converter when the passes made it (``convert`` compares its
output with its input by op name and type), or when a front end chose its MIL spelling
(:func:`note_spellings`: ``gelu``). Each op kind the converter emits without sweep evidence
has a reason in :data:`REASONS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from anekit.hw.compat import Diagnostic
from anekit.mil.program import Operation, Program

KEY = "anekit-converter"
VERSION = "v1"
LAYOUT_RULES = frozenset({"last-axis-padding"})  # rules about a tensor's layout
OP_RULES = frozenset({"op-unverified", "m3-conv-channels"})  # rules about an op the passes made
COMPARISONS = frozenset(
    {"equal", "not_equal", "greater", "greater_equal", "less", "less_equal"}
)  # fmt: skip

REASONS = {
    "layouts": (
        "the converter chose the layout of this tensor inside the program (the ANE's "
        "[1, C, 1, S] for contractions, the model's own elsewhere); the model's inputs and "
        "outputs keep their layout"
    ),
    "lookup": (
        "the converter lowers a lookup in a constant table as a one-hot comparison and a "
        "matmul: gather and one_hot do not compile on the ANE (one-op sweep); comparisons "
        "compiled and ran there but their bool results were not checked, and the verified "
        "arithmetic form (sub, abs, relu in fp16) would pick wrong rows for ids above 2048"
    ),
    "mask": (
        "the converter combines bool masks as 0/1 sums and a comparison: logical_and/or/xor "
        "and a cast to bool do not compile on the ANE (one-op sweep); comparisons compiled "
        "and ran there but their bool results were not checked, and select, which applies "
        "the mask, needs a bool"
    ),
    "compare": (
        "the converter made this comparison (bool results need one: logical ops and a cast "
        "to bool do not compile on the ANE); comparisons compiled and ran in the one-op "
        "sweep but their bool results were not checked"
    ),
    "gelu": (
        "the converter spells the model's GELU as MIL gelu, as coremltools does; the one-op "
        "sweep has no entry for gelu (no evidence either way), and the spelling in ops it "
        "verified (mul, erf, add) is five ops where this is one, measured 15x slower on "
        "the reference backend for a BERT-base GELU"
    ),
    "conv": (
        "the converter lowers linear layers, embeddings and matmuls with constant weights to "
        "1x1 convs in the [1, C, 1, S] layout, the ANE's measured fast form; the M3 channel "
        "reports are unconfirmed elsewhere and no other form is measured on M3"
    ),
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Fact:
    """A diagnostic about something the converter chose, and why it chose it."""

    diagnostic: Diagnostic
    reason: str

    def format(self, file: str | None = None) -> str:
        """``file:line: converter: <finding>: <reason> [rule]`` (the finding without advice)."""
        d = self.diagnostic
        where = (file or "<program>") + (f":{d.line}" if d.line is not None else "")
        finding = d.message.split("; ")[0]
        return f"{where}: converter: {finding}: {self.reason} [{d.rule}]"


def record(program: Program, *, layouts: bool, before: Program | None = None) -> Program:
    """Write the ``anekit-converter`` entry of ``program`` (in place; returned): the ops the
    passes made (those of ``program`` that ``before``, the pipeline's input, did not have by
    that name and type) that a rule may flag, and ``layouts`` when the converter placed the
    tensors. An entry already there is kept and extended."""
    old = recorded(program)
    names = dict(old[0]) if old is not None else {}
    known = (
        {(op.name, op.op_type) for fn in before.functions.values() for op in fn.ops}
        if before is not None
        else set()
    )
    earlier = recorded(before) if before is not None else None
    spelled = set(earlier[0].values()) if earlier is not None else set()
    for fn in program.functions.values():
        for op in fn.ops:
            if (op.name, op.op_type) in known or not _NAME.match(op.name):
                continue
            kind = _kind(op)
            if kind is None and SPELLINGS.get(op.op_type) in spelled:
                kind = SPELLINGS[op.op_type]  # a front end's spelling, renamed by a pass
            if kind is not None:
                names.setdefault(op.name, kind)
    return _write(program, names, layouts or (old is not None and "layouts" in old[1]))


def _write(program: Program, names: dict[str, str], layouts: bool) -> Program:
    parts = [VERSION] + (["layouts"] if layouts else [])
    for kind in REASONS:
        listed = [n for n, k in names.items() if k == kind]
        if listed:
            parts.append(f"{kind}={','.join(listed)}")
    program.build_info = {**program.build_info, KEY: ";".join(parts)}
    return program


SPELLINGS = {"gelu": "gelu"}  # MIL op type a front end chooses -> reason kind


def note_spellings(program: Program) -> Program:
    """Record the ops whose MIL spelling a front end chose (``SPELLINGS``), in place; the
    convert pipeline's :func:`record` keeps them."""
    old = recorded(program)
    names = dict(old[0]) if old is not None else {}
    for fn in program.functions.values():
        for op in fn.ops:
            if op.op_type in SPELLINGS and _NAME.match(op.name):
                names.setdefault(op.name, SPELLINGS[op.op_type])
    return _write(program, names, old is not None and "layouts" in old[1])


def recorded(program: Program) -> tuple[dict[str, str], frozenset[str]] | None:
    """(op name -> reason kind, flags) of the program's record; None when it has none."""
    value = program.build_info.get(KEY)
    if not isinstance(value, str) or not value.startswith(VERSION):
        return None
    names: dict[str, str] = {}
    flags: set[str] = set()
    for part in value.split(";")[1:]:
        kind, sep, listed = part.partition("=")
        if not sep:
            flags.add(kind)
        elif kind in REASONS:
            names.update((n, kind) for n in listed.split(",") if n)
    return names, frozenset(flags)


def split(
    program: Program, diagnostics: Iterable[Diagnostic]
) -> tuple[list[Diagnostic], list[Fact]]:
    """(advice for the user, facts about what the converter chose) of ``diagnostics``.

    Without a record (a program the convert pipeline did not make) everything is advice.
    """
    found = recorded(program)
    if found is None:
        return list(diagnostics), []
    names, flags = found
    boundary = {v.name for fn in program.functions.values() for v in (*fn.inputs, *fn.outputs)}
    advice: list[Diagnostic] = []
    facts: list[Fact] = []
    for d in diagnostics:
        reason = None
        if d.rule in LAYOUT_RULES and "layouts" in flags and d.name and d.name not in boundary:
            reason = REASONS["layouts"]
        elif d.rule in OP_RULES and d.name in names:
            reason = REASONS[names[d.name]]
        if reason is None:
            advice.append(d)
        else:
            facts.append(Fact(d, reason))
    return advice, facts


def _kind(op: Operation) -> str | None:
    """The reason kind of an op the passes made, if a rule may flag it."""
    if op.op_type == "conv":
        return "conv"
    if op.op_type not in COMPARISONS:
        return None
    x, y = op.inputs.get("x"), op.inputs.get("y")
    if x is not None and y is not None and x.const is None and _is_range(y.const):
        return "lookup"
    if x is not None and y is not None and _is_zero_one_sum(x) and y.const is not None:
        return "mask"
    return "compare"


def _is_range(const: object) -> bool:
    """A 1-D int constant of consecutive values (a lookup's ids)."""
    if const is None:
        return False
    arr = np.asarray(const)
    return arr.ndim == 1 and arr.dtype.kind in "iu" and bool(np.all(np.diff(arr) == 1))


def _is_zero_one_sum(value: object) -> bool:
    """``add`` of two ``select(cond, 1, 0)`` (``bool_logic``'s count of true operands)."""
    op = getattr(value, "producer", None)
    if op is None or op.op_type != "add":
        return False
    return all(_is_zero_one(op.inputs.get(k)) for k in ("x", "y"))


def _is_zero_one(value: object) -> bool:
    """``select(cond, 1, 0)``, or a constant of zeros and ones (the select folded)."""
    const = getattr(value, "const", None)
    if const is not None:
        return bool(np.all((np.asarray(const) == 0) | (np.asarray(const) == 1)))
    op = getattr(value, "producer", None)
    if op is None or op.op_type != "select":
        return False
    a, b = op.inputs.get("a"), op.inputs.get("b")
    return (
        a is not None
        and b is not None
        and a.const is not None
        and b.const is not None
        and np.all(np.asarray(a.const) == 1)
        and np.all(np.asarray(b.const) == 0)
    )
