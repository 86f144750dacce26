"""The ANE compatibility checker: will this program compile and run correctly on a chip?

``check(program, chip)`` runs every rule of ``anekit.hw.rules`` that applies to the
chip and returns :class:`Diagnostic` records, like a compiler's: severity, rule id,
op, MIL line, message, and the evidence the rule rests on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from anekit.hw.chips import Chip, get_chip
from anekit.mil.program import Function, Operation, Program, Value

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding of the checker.

    Attributes:
        severity: "error" (will not compile or gives wrong results), "warning" (risky,
            slow, or the evidence conflicts), "info" (worth knowing).
        rule: the rule id (``anekit.hw.rules``).
        op: the MIL op type involved, or None for program-level findings.
        line: 1-based MIL line, or None (built programs have no lines).
        message: what is wrong, where, and what to do.
        source: the evidence the rule rests on.
        name: the op or value the finding is about.
    """

    severity: str
    rule: str
    op: str | None
    line: int | None
    message: str
    source: str
    name: str | None = None

    def format(self, file: str | None = None) -> str:
        """Render as ``file:line: severity: message [rule]``, the way compilers do."""
        where = file or "<program>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.severity}: {self.message} [{self.rule}]"


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule's raw finding before it becomes a Diagnostic."""

    message: str
    op: Operation | None = None
    name: str | None = None


class Context:
    """What rules read: the main function, the chip, and facts derived from the program."""

    def __init__(self, program: Program, chip: Chip) -> None:
        self.program = program
        self.chip = chip
        self.fn: Function = program.main
        self._inputs = {id(v) for v in self.fn.inputs}
        self.boundary = self._inputs | {id(v) for v in self.fn.outputs}

    def is_const(self, v: Value) -> bool:
        """The value is known at compile time (a const, constexpr or inline literal)."""
        if id(v) in self._inputs:
            return False
        return v.producer is None or bool(v.producer.opdef.traits & {"const", "constexpr"})

    def tensors(self) -> Iterator[tuple[Value, Operation | None]]:
        """Every runtime tensor (inputs and op results, consts excluded) with its producer."""
        for v in self.fn.inputs:
            yield v, None
        for op in self.fn.ops:
            if op.opdef.traits & {"const", "constexpr"}:
                continue
            for v in op.outputs:
                yield v, op

    def ops_with(self, *traits: str) -> Iterator[Operation]:
        """The ops carrying any of the given traits."""
        wanted = set(traits)
        return (op for op in self.fn.ops if op.opdef.traits & wanted)

    def weight_bytes(self) -> int:
        """Bytes of every constant tensor the program's ops consume (its weights)."""
        seen: dict[int, int] = {}
        for op in self.fn.ops:
            if op.opdef.traits & {"const", "constexpr"}:
                continue  # count what compute ops consume, once
            for v in op.input_values():
                if self.is_const(v) and v.type.is_static and v.type.dtype.value != "string":
                    seen[id(v)] = math.prod(v.type.shape) * v.type.dtype.itemsize  # type: ignore[arg-type]
        return sum(seen.values())


def check(program: Program, chip: str | Chip = "m4") -> list[Diagnostic]:
    """Check ``program`` against ``chip``'s known constraints; returns diagnostics sorted by line."""
    from anekit.hw.rules import RULES

    profile = get_chip(chip)
    ctx = Context(program, profile)
    found: list[Diagnostic] = []
    for rule in RULES:
        if not rule.applies(profile):
            continue
        for f in rule.check(ctx):
            op = f.op
            found.append(
                Diagnostic(
                    severity=rule.severity,
                    rule=rule.id,
                    op=op.op_type if op is not None else None,
                    line=op.line if op is not None else None,
                    message=f.message,
                    source=rule.evidence,
                    name=f.name or (op.name if op is not None else None),
                )
            )
    order = {s: i for i, s in enumerate(SEVERITIES)}
    found.sort(key=lambda d: (d.line is None, d.line or 0, order[d.severity], d.rule))
    return found
