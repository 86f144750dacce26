"""SSA values and where a constant's bytes live: the lowest layer of the IR."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anekit.mil.types import DType, TensorType

if TYPE_CHECKING:
    from anekit.mil.program import Operation

WEIGHTS_PREFIX = "@model_path/weights/"


@dataclass(frozen=True, slots=True)
class BlobRef:
    """Where a const's data lives: a weight file path (``@model_path/weights/...``) and offset."""

    path: str
    offset: int = 64


class Value:
    """An SSA value: a name, a type, the op that produces it, and its value if constant.

    ``producer`` is None for function inputs and for inline literals (a
    constant written in place, as in attribute-only ops).
    """

    __slots__ = ("name", "type", "producer", "const", "blob")

    def __init__(
        self,
        name: str,
        type: TensorType,
        producer: Operation | None = None,
        const: Any = None,
        blob: BlobRef | None = None,
    ) -> None:
        self.name = name
        self.type = type
        self.producer = producer
        self.const = const
        self.blob = blob  # where a constant is stored in a weight file, if not inline

    @property
    def shape(self) -> tuple[int | str, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return len(self.type.shape)

    @property
    def is_inline(self) -> bool:
        return self.producer is None and self.const is not None and not self.name

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.type})"
