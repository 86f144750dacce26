"""Test helpers shared by op tests."""

from __future__ import annotations

import numpy as np

import anekit
from anekit.mil.program import Program


def run_reference(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a program once on the reference backend."""
    with anekit.compile(program, backend="reference") as k:
        return k(**inputs)
