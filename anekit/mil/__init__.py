"""The MIL toolchain: types, the op registry, programs, the Builder, text and weight files."""

from anekit.mil import ops  # noqa: F401  (registers every op)
from anekit.mil.builder import Builder
from anekit.mil.loading import load, load_path
from anekit.mil.parser import parse
from anekit.mil.program import Function, Operation, Program, Value
from anekit.mil.types import DType, TensorType

__all__ = [
    "Builder",
    "DType",
    "Function",
    "Operation",
    "Program",
    "TensorType",
    "Value",
    "load",
    "load_path",
    "parse",
]
