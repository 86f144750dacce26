"""The ``numerics`` ladder rung against a stand-in engine that computes with a published profile.

The stand-in is the reference backend under the chip's published profile; the rung must read
every behaviour back from the outputs alone and write a profile file equal to the published
one field by field. This proves the measurement programs and the file, not Apple's engine.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import anekit
from anekit.doctor import ladder, numerics_rung
from anekit.errors import UsageError
from anekit.hw.chips import resolve
from anekit.hw.numerics import load_profile, numerics_profile
from anekit.ladder.runner import Context

BEHAVIOURS = [
    f.name for f in fields(anekit.hw.numerics.NumericsProfile) if f.compare and f.name != "name"
]


def _stand_in(profile: str, seen: list[str] | None = None) -> numerics_rung.Runner:
    def run(program: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if seen is not None:
            seen.extend(op.op_type for op in program.main.ops)
        with anekit.compile(program, backend="reference", numerics=profile) as k:
            return k(**inputs)

    return run


@pytest.mark.parametrize("chip", ["m4", "m1"])
def test_the_measured_profile_equals_the_published_one(chip: str, tmp_path: Path) -> None:
    published = numerics_profile(chip)
    measured = numerics_rung.measure(_stand_in(chip), resolve(chip), "stand-in")
    for name in BEHAVIOURS:
        assert getattr(measured, name) == getattr(published, name), name
    path = anekit.hw.numerics.save_profile(measured, tmp_path / "p.json")
    again = load_profile(path)
    assert again == published and again.provenance == "stand-in"
    assert {r.status for k, r in again.rows.items() if k != "conv_saturation"} == {"observed"}
    with anekit.compile(_one_matmul(), backend="reference", numerics=str(path)) as k:
        assert k.numerics == chip  # numerics=PATH accepts the file


def _one_matmul() -> Any:
    b = anekit.mil.Builder()
    b.output(b.matmul(x=b.input("x", (1, 2), "fp16"), y=np.ones((2, 1), np.float16)), "y")
    return b.build()


def test_ideal_storage_is_measured_as_ideal() -> None:
    """An engine storing as IEEE does reads back as ideal, not as the chip's published rows."""
    measured = numerics_rung.measure(_stand_in("ideal"), resolve("m4"), "stand-in")
    ideal = numerics_profile("ideal")
    assert [getattr(measured, n) for n in BEHAVIOURS[1:]] == [
        getattr(ideal, n) for n in BEHAVIOURS[1:]
    ]  # every behaviour but the family


def test_the_rung_writes_the_profile_through_the_ane_backend(tmp_path, monkeypatch) -> None:
    """The rung compiles through the ANE seam; here the seam is the stand-in engine."""
    from anekit.backends.ane import dialect
    from anekit.doctor import ane_rungs

    seen: list[str] = []
    engine = _stand_in("m4", seen)

    class Kernel:
        def __init__(self, program: Any) -> None:
            self.program = program

        def __enter__(self) -> Any:
            return lambda **inputs: engine(self.program, inputs)

        def __exit__(self, *exc: Any) -> None:
            return None

    monkeypatch.setattr(ane_rungs, "_compile", lambda ctx, program, **o: Kernel(program))
    monkeypatch.setattr(dialect, "host_chip", lambda: resolve("m4"))
    out = tmp_path / "cal.json"
    ctx = Context({"numerics_out": str(out)}, None, tmp_path)
    numerics_rung.numerics(ctx)
    assert ctx.observed["profile"] == str(out) and ctx.observed["differs_from_published"] == []
    assert load_profile(out) == numerics_profile("m4")
    assert "measured by anekit" in load_profile(out).provenance
    assert {"matmul", "round", "slice_by_index", "reduce_log_sum_exp"} <= set(seen)
    assert next(r for r in ladder.RUNGS if r.name == "numerics").needs == ("eval_aligned",)
    monkeypatch.setenv("ANEKIT_CACHE_DIR", str(tmp_path / "cache"))  # the default: the cache
    numerics_rung.numerics(Context({}, None, tmp_path))
    assert load_profile(tmp_path / "cache" / "numerics" / "m4.json") == numerics_profile("m4")


def test_numerics_out_needs_the_ladder(capsys) -> None:
    from anekit import cli

    assert cli.main(["doctor", "--numerics-out", "x.json"]) == 2
    assert "--numerics-out needs --ladder" in capsys.readouterr().err


def test_a_broken_profile_file_is_refused_naming_the_row(tmp_path) -> None:
    measured = numerics_rung.measure(_stand_in("m4"), resolve("m4"), "stand-in")
    path = anekit.hw.numerics.save_profile(measured, tmp_path / "p.json")
    path.write_text(path.read_text().replace('"away"', '"up"', 1))
    with pytest.raises(UsageError, match="numerics row"):
        load_profile(path)
