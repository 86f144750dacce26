"""The ANE compatibility checker: will this program compile and run correctly on a chip?

``check(program, chip)`` is the driver: it runs every rule of ``anekit.hw.rules`` that
applies to the chip and turns their findings into :class:`Diagnostic` records, like a
compiler's: severity, rule id, op, MIL line, message, and the evidence the rule rests on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from anekit.hw.chips import Chip, resolve
from anekit.hw.kinds import Severity
from anekit.hw.ranges import Ranges, propagate
from anekit.hw.rules import RULES, Context
from anekit.mil.program import Program

SEVERITIES = tuple(Severity)  # most serious first: the order diagnostics sort in


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding of the checker.

    Attributes:
        severity: :class:`~anekit.hw.kinds.Severity`: error (will not compile or gives wrong
            results), warning (risky, slow, or the evidence conflicts), info (worth knowing).
        rule: the rule id (``anekit.hw.rules``).
        op: the MIL op type involved, or None for program-level findings.
        line: 1-based MIL line, or None (built programs have no lines).
        message: what is wrong, where, and what to do.
        source: the evidence the rule rests on.
        name: the op or value the finding is about.
    """

    severity: Severity
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


def check(
    program: Program,
    chip: str | Chip | None = None,
    input_ranges: Mapping[str, Iterable[float]] | None = None,
    *,
    observed: Ranges | None = None,
) -> list[Diagnostic]:
    """Check ``program`` against ``chip``'s known constraints (None: this Mac's, else m4);
    returns diagnostics sorted by line.

    ``input_ranges`` ({input name: (lo, hi)}) turns on the range rules with static bounds
    (warnings); ``observed`` (``anekit.hw.ranges.observed``, from calibration) with the ranges
    the golden model saw (errors). Bounds depend on the weights: load them.
    """
    profile = resolve(chip)
    ranges = observed
    if ranges is None and input_ranges is not None:
        ranges = propagate(program.main, input_ranges)
    ctx = Context(program, profile, ranges)
    found: list[Diagnostic] = []
    for rule in RULES:
        if not rule.applies(profile):
            continue
        for f in rule.check(ctx):
            op = f.op
            found.append(
                Diagnostic(
                    severity=f.severity or rule.severity,
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
