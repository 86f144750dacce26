"""Programs parsed without their weights (``shapes_only=True``): printable, checkable, estimable; never run or saved."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import mil, passes
from anekit.backends import reference
from anekit.backends.ane import compile as ane_compile
from anekit.errors import UsageError
from anekit.mil.loading import load_path
from tests.ane_fake import FakeFramework

RNG = np.random.default_rng(2)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    b = mil.Builder()
    x = b.input("x", (1, 16, 1, 32), "fp16")
    w = b.weight("w", RNG.standard_normal((1, 16, 1, 32)).astype(np.float16))
    scaled = b.mul(x=w, y=2.0, name="w2")  # a constant expression of the weight
    b.output(b.add(x=b.mul(x=x, y=scaled), y=1.0), "y")
    return b.build().save(tmp_path / "model")


def test_a_shapes_only_program_prints_checks_and_estimates(saved: Path) -> None:
    full, shapes = mil.load(saved), load_path(saved, shapes_only=True)
    assert full.weightless == () and shapes.weightless == ("w",)
    assert shapes.to_text() == full.to_text()
    assert [d.rule for d in anekit.check(shapes, chip="m4")] == [
        d.rule for d in anekit.check(full, chip="m4")
    ]
    assert anekit.estimate(shapes, chip="m4").seconds == anekit.estimate(full, chip="m4").seconds


def test_compile_refuses_it_on_every_path_before_any_work(saved: Path, tmp_path: Path) -> None:
    shapes = load_path(saved, shapes_only=True)
    message = r"cannot compile a program loaded without its weights: 1 constants \('w'\)"
    for compile_it in (
        lambda: anekit.compile(shapes, backend="reference"),
        lambda: anekit.compile(shapes, backend="reference", isolate=True),
        lambda: reference.compile(shapes),
    ):
        with pytest.raises(UsageError, match=message):
            compile_it()
    fake = FakeFramework(tmp_path / "T")
    with pytest.raises(UsageError, match=message):
        ane_compile(shapes, framework=fake)
    assert fake.calls == [], "the ANE path called the framework for a weightless program"

    # a program derived by passes keeps the mark: w * 2 is not folded into plain zeros
    def producer(program: mil.Program) -> str:
        return {op.outputs[0].name: op.op_type for op in program.main.ops}["w2"]

    folded = passes.fold_constants(shapes)
    assert producer(folded) == "mul" and folded.weightless == ("w",)
    assert producer(passes.fold_constants(mil.load(saved))) == "const"  # with weights it folds
    with pytest.raises(UsageError, match="cannot compile"):
        anekit.compile(folded, backend="reference")
    with anekit.compile(mil.load(saved), backend="reference") as k:  # with its weights: runs
        assert k(x=np.ones((1, 16, 1, 32), np.float16))["y"].any()


def test_save_and_weight_files_refuse_it(saved: Path, tmp_path: Path) -> None:
    shapes = load_path(saved, shapes_only=True)
    with pytest.raises(UsageError, match="cannot save a program loaded without its weights"):
        shapes.save(tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
    with pytest.raises(UsageError, match="cannot serialise the weights of a program"):
        shapes.weight_files()
    written = {p: p.read_bytes() for p in saved.rglob("*") if p.is_file()}
    with pytest.raises(UsageError, match="cannot save"):
        shapes.save(saved)  # over the model it was read from: left as it was
    assert {p: p.read_bytes() for p in saved.rglob("*") if p.is_file()} == written
