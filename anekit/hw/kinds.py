"""The closed vocabularies of the hardware model: diagnostic severities and cost kinds.

Each is a ``str`` Enum, so a member equals its text (``Severity.ERROR == "error"``), prints as
it (``f"{Severity.ERROR}"`` is ``error``) and goes into JSON as it; code compares members.
"""

from __future__ import annotations

from enum import Enum


class _Text(str, Enum):
    """A str Enum that prints as its value on every supported Python (StrEnum is 3.11+)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Severity(_Text):
    """How much a checker finding matters."""

    ERROR = "error"  # will not compile, or gives wrong results
    WARNING = "warning"  # risky, slow, or the evidence conflicts
    INFO = "info"  # worth knowing


class CostKind(_Text):
    """Where the cost model places an op's work."""

    MAC = "mac"  # conv/matmul/attention on the multiply-accumulate array
    VECTOR = "vector"  # other compute
    FUSED = "fused"  # a pointwise op folded into a neighbouring conv/matmul
    FREE = "free"  # consts and edge casts (the host runs those: ANE_NOTES 2.4)
