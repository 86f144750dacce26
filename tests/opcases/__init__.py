"""Per-op example cases, one module per op family; the generic op tests loop over all of them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FAMILIES = (
    "core",
    "elementwise",
    "reduction",
    "norm",
    "linear",
    "pool",
    "shape",
    "quant",
    "attention",
)


@dataclass
class Case:
    """One example of one op.

    build(b) declares the inputs, adds the op (Python values become consts) and
    declares the outputs on a Builder. ``shapes`` holds the hand-computed shape of
    every output. ``expect`` is an independent reference written in the test
    module (NumPy formula or torch, float64): given the inputs (as float64 for
    float inputs, already rounded to their declared dtype) it returns every output.
    ``opset`` is the Builder's opset (older behaviour of an op). ``make_inputs(rng)`` overrides the default random inputs (standard normal for
    floats, small ints for ints), e.g. positive values for ``log``.
    """

    op: str
    label: str
    build: Callable[[Any], None]
    shapes: dict[str, tuple[int, ...]]
    expect: Callable[..., dict[str, np.ndarray]] | None = None
    make_inputs: Callable[[np.random.Generator], dict[str, np.ndarray]] | None = None
    rtol: float = 2e-3
    atol: float = 2e-3
    opset: str = "ios18"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.op}-{self.label}"


def all_cases() -> list[Case]:
    """Every case of every family module that exists."""
    cases: list[Case] = []
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"tests.opcases.{family}")
        except ModuleNotFoundError as e:
            if e.name != f"tests.opcases.{family}":
                raise
            continue
        cases.extend(module.CASES)
    return cases
