"""``anekit doctor`` and ``anekit classes``: they run everywhere and say what is missing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from anekit import cli
from anekit.backends import ane, reference
from anekit.doctor import report as doctor
from tests.test_ane_contract import FakeFramework


def test_doctor_exits_0_and_explains_why_there_is_no_ane(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok, reason = ane.available()
    if ok:
        pytest.skip("this machine has an ANE")
    out_file = tmp_path / "sub" / "report.json"
    out_file.parent.mkdir()
    assert cli.main(["doctor", "--json", str(out_file)]) == 0
    text = capsys.readouterr().out
    assert f"No ANE here: {reason}" in text
    assert "not available: the ANE backend" in text
    r = json.loads(out_file.read_text())
    assert r["ane"] == {"available": False, "reason": reason, "generation": None}
    assert r["smoke_test"] is None
    assert r["backends"]["reference"] and r["backends"]["ane"] == reason
    for key in ("os", "machine", "chip", "framework", "pyobjc", "python", "numpy"):
        assert key in r
    assert r["framework"]["present"] == Path(r["framework"]["path"]).is_dir()


def test_classes_says_clearly_it_needs_macos(capsys: pytest.CaptureFixture[str]) -> None:
    ok, reason = ane.available()
    if ok:
        pytest.skip("this machine has the framework")
    assert cli.main(["classes"]) == 1
    err = capsys.readouterr().err
    assert "needs macOS" in err and reason in err


def test_smoke_test_compares_with_the_reference_backend(tmp_path: Path) -> None:
    fake = FakeFramework(tmp_path)
    result = doctor.smoke_test(fake)
    assert result["matches_reference"] is True
    assert result["max_abs_diff_vs_reference"] == 0.0  # the stand-in runs the reference itself
    assert result["compile_and_load_s"] > 0 and result["mean_evaluation_s"] > 0
    line = doctor._smoke_line(result, True)
    assert "matches the reference backend" in line


def test_smoke_test_reports_a_failed_compile_instead_of_raising(tmp_path: Path) -> None:
    fake = FakeFramework(tmp_path)
    fake.compile_result = (False, None)
    result = doctor.smoke_test(fake)
    assert result["error"].startswith("CompileError")
    assert doctor._smoke_line(result, True).startswith("FAILED")


def test_smoke_program_is_conv_plus_residual() -> None:
    program = doctor.smoke_program()
    x = np.random.default_rng(3).standard_normal((1, 64, 1, 64)).astype(np.float16)
    w = next(op for op in program.ops if op.op_type == "const" and op.outputs[0].name == "w")
    weight = np.asarray(w.outputs[0].const, np.float32)[:, :, 0, 0]
    want = np.einsum("oc,ncs->nos", weight, x[:, :, 0, :].astype(np.float32))[:, :, None, :] + x
    got = reference.compile(program)(x=x)["y"]
    np.testing.assert_allclose(got.astype(np.float32), want, atol=2e-2)


def test_ane_generation_comes_from_device_info(tmp_path: Path) -> None:
    assert doctor.ane_generation(FakeFramework(tmp_path)) == "H16"


def test_class_listing_filters_by_glob_or_substring(tmp_path: Path) -> None:
    fake = FakeFramework(tmp_path)
    every = [name for name, _ in doctor.class_listing(fake)]
    assert every == sorted(every) and "_ANERequest" in every and "_ANEClient" in every
    assert [n for n, _ in doctor.class_listing(fake, "request")] == ["_ANERequest"]
    assert [n for n, _ in doctor.class_listing(fake, "_ANEIn*")] == [
        "_ANEInMemoryModel",
        "_ANEInMemoryModelDescriptor",
    ]
    text = doctor.format_classes(doctor.class_listing(fake, "Request"))
    assert text.splitlines()[0] == "_ANERequest"
    assert "+ requestWithInputs:inputIndices:" in text and text.endswith("1 classes")
