"""Test helpers shared by op tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.errors import MilTypeError
from anekit.mil.program import Program


def run_reference(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a program once on the reference backend."""
    with anekit.compile(program, backend="reference") as k:
        return k(**inputs)


@contextmanager
def raises(op: str, param: str, *fragments: str) -> Iterator[None]:
    """Expect a MilTypeError naming ``op`` and ``param`` whose message holds every fragment."""
    with pytest.raises(MilTypeError) as info:
        yield
    err = info.value
    assert (err.op, err.param) == (op, param), str(err)
    for fragment in fragments:
        assert fragment in str(err), f"{fragment!r} not in {err}"


def type_error(op: str, shape, dtype: str = "fp16", opset: str = "ios18", **params) -> MilTypeError:
    """The MilTypeError of ``op`` applied to one input ``x`` of ``shape``; it must name ``op``."""
    b = mil.Builder(opset)
    with pytest.raises(MilTypeError) as info:
        getattr(b, op)(x=b.input("x", shape, dtype), **params)
    assert info.value.op == op
    return info.value
