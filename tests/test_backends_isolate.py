"""``anekit.compile(isolate="auto")``: kernels go to a worker exactly when the backend declares a compile budget.

The worker itself is tested in ``test_worker.py``; here ``worker.compile`` is replaced by a
recorder that compiles on the reference backend in this process, so no process is spawned.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

import anekit
from anekit import backends, mil
from anekit.backends import reference, worker
from anekit.backends.budget import DEFAULT_LIMIT
from anekit.errors import BackendUnavailable

FAKE = "fake_budgeted"


def scale_program() -> mil.Program:
    b = mil.Builder()
    b.output(b.mul(x=b.input("x", (1, 4, 1, 8), "fp16"), y=3.0), "y")
    return b.build()


def register_fake_backend(monkeypatch: pytest.MonkeyPatch, budget: int | None) -> list[tuple]:
    """Register backend ``fake_budgeted`` (the reference in disguise, declaring ``budget``).

    Returns the list of ``(backend, options)`` that reach ``worker.compile`` from now on.
    """
    module = types.ModuleType(f"tests.{FAKE}")
    module.available = lambda: (True, "a stand-in that declares a compile budget")
    module.compile = reference.compile
    if budget is not None:
        module.COMPILE_BUDGET = budget
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(backends.BACKENDS, FAKE, module.__name__)
    isolated: list[tuple] = []

    def recording(program: mil.Program, backend: str, **options: Any):
        isolated.append((backend, options))
        return reference.compile(program)

    monkeypatch.setattr(worker, "compile", recording)
    return isolated


def test_auto_isolates_on_a_backend_with_a_compile_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    isolated = register_fake_backend(monkeypatch, budget=7)
    assert backends.compile_budget(FAKE) == 7
    x = np.arange(32, dtype=np.float16).reshape(1, 4, 1, 8)
    with anekit.compile(scale_program(), backend=FAKE, isolate="auto", recycle_after=3) as k:
        np.testing.assert_array_equal(k(x=x)["y"], x * 3)
    assert isolated == [(FAKE, {"recycle_after": 3})]


@pytest.mark.parametrize("backend, budget", [("reference", None), (FAKE, None)])
def test_auto_compiles_in_process_without_a_budget(
    monkeypatch: pytest.MonkeyPatch, backend: str, budget: int | None
) -> None:
    isolated = register_fake_backend(monkeypatch, budget=budget)
    assert backends.compile_budget(backend) is None
    with anekit.compile(scale_program(), backend=backend, isolate="auto") as k:
        assert isinstance(k, reference.ReferenceKernel)
    assert isolated == []


def test_explicit_isolate_overrides_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    isolated = register_fake_backend(monkeypatch, budget=7)
    anekit.compile(scale_program(), backend=FAKE, isolate=False).close()
    anekit.compile(scale_program(), backend="reference", isolate=True).close()
    assert isolated == [("reference", {})]


def test_the_ane_declares_the_per_process_budget() -> None:
    # read without loading the framework: the attribute is plain data on every platform
    assert backends.compile_budget("ane") == DEFAULT_LIMIT


def test_isolate_takes_only_true_false_or_auto() -> None:
    with pytest.raises(ValueError, match="expected True, False or 'auto', found 'always'"):
        anekit.compile(scale_program(), backend="reference", isolate="always")


def test_compile_budget_of_an_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(BackendUnavailable, match="known backends: ane, coreml, reference"):
        backends.compile_budget("tpu")
