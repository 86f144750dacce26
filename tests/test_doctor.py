"""The doctor report behind ``anekit doctor`` and ``anekit classes``: smoke test, class listing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from anekit.backends import reference
from anekit.doctor import report as doctor
from anekit.hw.chips import default_chip
from tests.test_ane_contract import FakeFramework


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


def test_the_chip_row_names_the_profile_and_how_it_was_chosen() -> None:
    r = doctor.report(smoke=False)
    chosen, how = default_chip()
    assert r["chip_profile"] == {"chip": chosen, "how": how}
    row = next(ln for ln in doctor.format_report(r).splitlines() if ln.strip().startswith("chip"))
    assert row.split(None, 1)[1] == f"{r['chip'] or 'unknown'}; profile {chosen}: {how}"
