"""The in-package interpreter (``anekit.backends.reference.interpreter``) as a backend.

The interpreter is the readable definition the planned executor is tested against
(``tests/test_reference_executor.py``); tests register this module under the name
"oracle" where they need it as a backend (training steps).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anekit.backends.base import Kernel
from anekit.backends.reference.interpreter import STORAGE_MODES, interpret
from anekit.mil.program import Program

NAME = "oracle"


def available() -> tuple[bool, str]:
    return True, "the reference backend's interpreter"


def compile(program: Program, *, storage: str = "fp16", **options: Any) -> OracleKernel:
    if options:
        raise TypeError(f"oracle backend options are: storage; found {sorted(options)}")
    if storage not in STORAGE_MODES:
        raise ValueError(f"storage must be one of {STORAGE_MODES}, found {storage!r}")
    return OracleKernel(program, storage)


class OracleKernel(Kernel):
    """A kernel that evaluates by :func:`interpret` (host buffers, as any evaluate-only Kernel)."""

    backend = NAME

    def __init__(self, program: Program, storage: str = "fp16") -> None:
        super().__init__(program)
        self.storage = storage

    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return interpret(self.program, inputs, self.storage)
