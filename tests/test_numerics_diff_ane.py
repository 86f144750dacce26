"""``anekit diff --b ane``: the golden model against the Neural Engine, op by op.

The engine cannot be tapped while it runs, so each group of intermediate values is made the
outputs of a program compiled again (``anekit.backends.ane.tapped``). Our side runs here on
the recording stand-in of the framework (``tests/ane_fake.py``), which computes with the
reference backend under a profile the test chooses (proving the wiring, not Apple's
engine); the real run is the ``ane``-marked test at the end, skipped off a Mac.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends import ane, budget, reference
from anekit.backends.ane import tapped
from anekit.cli import main
from anekit.errors import BackendUnavailable, UsageError
from tests import ane_fake
from tests.ane_fake import FakeFramework
from tests.test_numerics_diff import saturating_program

ZEROS = {"x": np.zeros((1, 40), np.float16)}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeFramework:
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    return FakeFramework(tmp_path / "T")


def engine_computes(monkeypatch: pytest.MonkeyPatch, numerics: str) -> None:
    """The stand-in engine computes with the reference backend under ``numerics``."""
    shim = types.SimpleNamespace(compile=lambda p, **kw: reference.compile(p, numerics=numerics))
    monkeypatch.setattr(ane_fake, "reference", shim)


def compiles(fake: FakeFramework) -> int:
    return sum(1 for c in fake.calls if c.selector.startswith("compileWithQoS"))


def test_an_engine_that_computes_as_the_golden_model_differs_nowhere(fake, monkeypatch):
    engine_computes(monkeypatch, "m4")
    report = anekit.diff(saturating_program(), ZEROS, b="ane", chip="m4", framework=fake)
    assert (report.a, report.b, report.ops) == ("m4", "ane (m4)", 3)  # golden: the chip's profile
    assert report.first is None and "agree" in report.summary()
    assert report.compiles == 1 == compiles(fake)  # 3 taps, 16 per program


def test_the_first_value_where_the_engine_departs_is_named(fake, monkeypatch):
    engine_computes(monkeypatch, "m4")  # the engine saturates at 32752 (N1) ...
    report = anekit.diff(saturating_program(), ZEROS, a="ideal", b="ane", chip="m4", framework=fake)
    first = report.first  # ... where IEEE storage does not
    assert (first.name, first.op_type, first.nonfinite) == ("mm", "matmul", True)
    assert [r.name for r in report.rows] == ["mm", "y"]
    assert report.as_dict()["compiles"] == 1


def test_one_program_per_group_of_taps_each_a_prefix(fake, monkeypatch):
    engine_computes(monkeypatch, "m4")
    program = saturating_program()
    report = anekit.diff(program, ZEROS, b="ane", chip="m4", framework=fake, per_program=1)
    assert report.compiles == 3 == compiles(fake) and report.first is None
    values = tapped.tapped_values(program)
    assert [v.name for v in values] == ["h", "mm", "y"]
    first = tapped.with_outputs(program, values[:1])  # the add alone: no matmul, no mul
    assert [op.op_type for op in first.main.ops if op.op_type != "const"] == ["add"]
    assert [v.name for v in first.outputs] == ["h"]


def test_an_engine_bug_the_golden_model_does_not_model_is_found(fake, monkeypatch):
    """A stand-in engine computing m1's width-offset slice clamp (N7) against a golden model
    told the device is an m5 (no clamp): the slice is named, the add before it is not."""
    engine_computes(monkeypatch, "m1")
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 64), "fp16")
    h = b.add(x=x, y=np.float16(1000.0), name="h")
    s = b.slice_by_size(x=h, begin=[0, 0, 0, 8], size=[1, 4, 1, 32], name="s")
    b.output(b.mul(x=s, y=np.float16(0.5), name="half"), "y")
    inputs = {"x": np.full((1, 4, 1, 64), 4000.0, np.float16)}  # 5000 > the clamp 4094
    report = anekit.diff(b.build(), inputs, a="m5", b="ane", chip="m4", framework=fake)
    assert report.first.name == "s" and report.first.nonfinite
    assert "h" not in {r.name for r in report.rows}


def test_without_the_ane_backend_it_is_a_typed_error_saying_so(monkeypatch):
    if ane.available()[0]:
        pytest.skip("the ANE backend is available here")
    with pytest.raises(BackendUnavailable, match="ANE backend is unavailable here") as caught:
        anekit.diff(saturating_program(), ZEROS, b="ane")
    assert caught.value.backend == "ane"


def test_the_command_says_the_ane_backend_is_unavailable(tmp_path, capsys):
    if ane.available()[0]:
        pytest.skip("the ANE backend is available here")
    model = saturating_program().save(tmp_path / "model")
    assert main(["diff", str(model), "--random", "--b", "ane"]) == 2
    assert "ANE backend is unavailable here" in capsys.readouterr().err


def test_engine_options_are_refused_for_a_profile_diff():
    with pytest.raises(UsageError, match="b='ane' only"):
        anekit.diff(saturating_program(), ZEROS, b="m4", per_program=2)


@pytest.mark.ane
def test_the_engine_matches_the_golden_model_of_its_chip():
    """On a Mac: a program without cliffs agrees with the golden model of the host's chip
    within the default tolerance, op by op (the saturating matmul is catalogue row N1)."""
    calm = {"x": np.full((1, 40), -0.875, np.float16)}  # the matmul sums to 5000
    report = anekit.diff(saturating_program(), calm, b="ane")
    assert report.compiles >= 1 and report.first is None, report.summary()
