"""What every front end's lowering context shares: appending Builder ops named after the
source node, with the Builder's type errors turned into ConversionErrors naming it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from anekit import mil
from anekit.errors import ConversionError, MilTypeError
from anekit.mil import DType, Value


class Emitter(ABC):
    """Appends MIL ops for the node being lowered; subclasses say how to name and blame it."""

    b: mil.Builder

    @abstractmethod
    def name(self, suffix: str = "") -> str:
        """An op name derived from the current node (the Builder makes it unique)."""

    @abstractmethod
    def fail(self, message: str) -> ConversionError:
        """A ConversionError naming the current node."""

    def op(self, op_type: str, suffix: str = "", **params: Any) -> Any:
        """Append MIL op ``op_type`` named after the node; MilTypeError becomes ConversionError."""
        try:
            return self.b.add_op(op_type, params, self.name(suffix))
        except (MilTypeError, ValueError, TypeError) as e:
            raise self.fail(f"MIL {op_type}: {e}") from e

    def cast(self, x: Value, dtype: DType) -> Value:
        """Cast a MIL value (``x`` stays as it is if it already has ``dtype``)."""
        if x.dtype is dtype:
            return x
        return self.op("cast", f"to_{dtype.value}", x=x, dtype=dtype.value)
