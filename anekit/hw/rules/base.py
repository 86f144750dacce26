"""What a checker rule is: a Finding, the Context rules read, the Rule row and chip selectors."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from anekit.hw.chips import Chip
from anekit.hw.kinds import Severity
from anekit.hw.numerics import NumericsProfile, numerics_profile
from anekit.hw.ranges import Ranges
from anekit.mil.graph import FunctionGraph
from anekit.mil.ops.registry import OPSETS
from anekit.mil.program import Operation, Program, Value
from anekit.mil.text import DIALECTS
from anekit.mil.types import DType


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule's raw finding, before the driver (``anekit.hw.compat``) makes it a Diagnostic."""

    message: str
    op: Operation | None = None
    name: str | None = None
    severity: Severity | None = None  # None: the rule's own (range rules raise observed ones)


class Context(FunctionGraph):
    """What rules read: the main function, the chip, and facts derived from the program."""

    def __init__(self, program: Program, chip: Chip, ranges: Ranges | None = None) -> None:
        super().__init__(program.main)
        self.program = program
        self.chip = chip
        self.ranges = ranges  # range analysis (anekit.hw.ranges); None: range rules stay silent

    @functools.cached_property
    def numerics(self) -> NumericsProfile:
        """The chip family's numerics profile (saturation, slice clamp, flush)."""
        return numerics_profile(self.chip)

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
    severity: Severity
    summary: str
    evidence: str
    applies: Callable[[Chip], bool]
    check: Callable[[Context], Iterable[Finding]]


def every_chip(chip: Chip) -> bool:
    return True


def dialect_opset(chip: Chip) -> str | None:
    """The latest opset the chip's MIL dialect takes (``Chip.dialect``: legacy pins ios16);
    None when the dialect takes any."""
    return DIALECTS[chip.dialect][1]


def legacy_chip(chip: Chip) -> bool:
    """The chip's dialect pins an older opset (M1, M2: program(1.0) with ios16 ops)."""
    return dialect_opset(chip) is not None


def in_dialect(opset: str, dialect: str) -> bool:
    """Whether a function on ``opset`` can be printed in ``dialect`` as it is."""
    pinned = DIALECTS[dialect][1]
    return pinned is None or OPSETS.index(opset) <= OPSETS.index(pinned)


def within_dialect(opset: str, chip: Chip) -> bool:
    """Whether a function on ``opset`` is already in the chip's dialect."""
    return in_dialect(opset, chip.dialect)
