"""``numerics=`` on the backends that run the device's own arithmetic (ane, coreml).

The ANE side runs against the recording stand-in (``tests/ane_fake.py``); it proves our side
only: that a profile other than the device's chip is refused before anything is compiled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.backends import budget, coreml
from anekit.backends.ane import compile as ane_compile
from anekit.errors import UsageError
from anekit.hw.chips import resolve
from tests.ane_fake import FakeFramework


def _program() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 8), "fp16")
    b.output(b.mul(x=x, y=2.0), "y")
    return b.build()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeFramework:
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    return FakeFramework(tmp_path / "T")


@pytest.mark.parametrize("numerics", ["m1", "ideal", "A16", "m4-pro"])
def test_ane_refuses_a_profile_other_than_its_chip(fake: FakeFramework, numerics: str) -> None:
    with pytest.raises(UsageError, match=r"'ane' computes with the m4 Neural Engine.*found"):
        ane_compile(_program(), framework=fake, chip="m4", numerics=numerics)
    assert fake.calls == []  # refused before any framework call


@pytest.mark.parametrize("numerics", ["m4", "Apple M4", None])
def test_ane_accepts_its_own_chip(fake: FakeFramework, numerics: str | None) -> None:
    x = np.arange(32, dtype=np.float16).reshape(1, 4, 1, 8)
    with ane_compile(_program(), framework=fake, chip="m4", numerics=numerics) as k:
        assert k.numerics is None  # the device's arithmetic, no modelled profile
        np.testing.assert_array_equal(k(x=x)["y"], x * 2)


def test_coreml_refuses_another_chip_before_availability() -> None:
    other = "m1" if resolve(None).name != "m1" else "m4"
    with pytest.raises(UsageError, match=r"'coreml' computes with .* may only name"):
        coreml.compile(_program(), numerics=other)


def _saturating_matmul() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4), "fp16")
    b.output(b.matmul(x=x, y=np.full((4, 2), 10_000.0, np.float16), name="mm"), "y")
    return b.build()


def test_an_isolated_reference_kernel_sends_its_events_and_profile_back() -> None:
    import anekit

    program, x = _saturating_matmul(), np.ones((1, 4), np.float16)
    with anekit.compile(program, backend="reference", numerics="m4") as local:
        local(x=x)
        want = local.events
    with anekit.compile(program, backend="reference", numerics="m4", isolate=True) as k:
        assert k.backend == "reference" and k.numerics == "m4"
        assert np.all(np.isposinf(k(x=x)["y"]))  # 40,000 > 32752 (N1)
        # the same counts; the worker's MIL line is of the program text it was sent
        assert [r.__dict__ | {"line": None} for r in k.events.rows] == [
            r.__dict__ | {"line": None} for r in want.rows
        ]
        assert k.events.saturated == 2
        assert k.events.first.op_type == "matmul"
        k(x=x / 8)  # 5,000: no cliff; the events are the last run's
        assert k.events.total == 0 and k.events.numerics == "m4"
