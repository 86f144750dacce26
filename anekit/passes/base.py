"""What a pass is: a named MIL -> MIL rewrite for one chip, and the op-type rule table helper."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from anekit.hw import Chip
from anekit.mil.program import Operation, Program
from anekit.mil.rewrite import Rebuild

ChipRule = Callable[[Rebuild, Operation, Chip], bool]


@dataclass(frozen=True)
class Pass:
    """One rewrite: a name users can pass or leave out, and ``run(program, chip)``."""

    name: str
    run: Callable[[Program, Chip], Program]
    doc: str

    def __call__(self, program: Program, chip: Chip) -> Program:
        return self.run(program, chip)


def by_op_type(rules: dict[str, ChipRule], chip: Chip) -> Callable[[Rebuild, Operation], bool]:
    """A rebuild rule dispatching on the MIL op type through a table of (op type -> rewrite)."""

    def rule(rb: Rebuild, op: Operation) -> bool:
        rewrite = rules.get(op.op_type)
        return rewrite is not None and rewrite(rb, op, chip)

    return rule


def has_op_types(program: Program, rules: dict[str, ChipRule]) -> bool:
    """Whether any function of ``program`` has an op a rule table rewrites (a pass with nothing
    to rewrite returns the program as it is, without a rebuild)."""
    return any(op.op_type in rules for fn in program.functions.values() for op in fn.ops)
