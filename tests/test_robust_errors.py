"""Bad input raises anekit errors, which are also the built-in type callers used to catch."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.backends.base import TensorSpec, convert_input
from anekit.errors import AnekitError, MilTypeError, UsageError, WeightFileError
from anekit.mil import blob
from anekit.mil.types import DType
from tests.clitools import weighted_program


@pytest.mark.parametrize(
    ("call", "builtin"),
    [
        (lambda b: b.weight("w", np.array([object()])), TypeError),
        (lambda b: b.weight("w", np.ones(3)), TypeError),  # float64: no MIL type
        (lambda b: b.weight("w", np.ones(0, np.float16)), ValueError),
        (lambda b: b.input("x", (1, -2), "fp16"), ValueError),
    ],
)
def test_builder_misuse_is_a_mil_type_error(call, builtin) -> None:
    with pytest.raises(MilTypeError) as info:
        call(mil.Builder())
    assert isinstance(info.value, builtin) and isinstance(info.value, AnekitError)


@pytest.mark.parametrize(
    ("arrays", "error"),
    [
        ([np.array([object()])], MilTypeError),
        ([np.ones(2)], MilTypeError),
        ([[1, 2]], MilTypeError),
        ([np.ones(0, np.float16)], WeightFileError),
    ],
)
def test_write_blob_file_rejects_with_anekit_errors(arrays, error) -> None:
    with pytest.raises(error):
        blob.write_blob_file(arrays)


def test_a_symlink_loop_in_weights_is_a_weight_file_error(tmp_path: Path) -> None:
    weighted_program().save(tmp_path / "m")
    (weight,) = (tmp_path / "m" / "weights").iterdir()
    weight.unlink()
    weight.symlink_to(weight.name)  # points at itself (RuntimeError from pathlib before)
    with pytest.raises(WeightFileError, match="too many levels of symbolic links"):
        mil.load(tmp_path / "m")


def test_a_weight_link_placed_in_the_directory_is_followed_to_a_regular_file(
    tmp_path: Path,
) -> None:
    program = weighted_program()
    program.save(tmp_path / "m")
    (weight,) = (tmp_path / "m" / "weights").iterdir()
    os.rename(weight, tmp_path / "outside.bin")
    weight.symlink_to(tmp_path / "outside.bin")  # a shared blob store, as the hub cache does
    assert mil.load(tmp_path / "m") == program
    weight.unlink()
    weight.symlink_to("/dev/zero")
    with pytest.raises(WeightFileError, match="is a character device; expected a weight file"):
        mil.load(tmp_path / "m")


def test_a_weight_fifo_does_not_block(tmp_path: Path) -> None:
    weighted_program().save(tmp_path / "m")
    (weight,) = (tmp_path / "m" / "weights").iterdir()
    weight.unlink()
    os.mkfifo(weight)
    with pytest.raises(WeightFileError, match=r"is a FIFO \(named pipe\); expected a weight file"):
        mil.load(tmp_path / "m")


def test_saving_over_a_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("not a directory")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        weighted_program().save(tmp_path / "f")


FP16 = TensorSpec("x", (3,), DType.fp16)


def test_a_float_overflowing_fp16_is_rejected_like_an_integer() -> None:
    with pytest.raises(
        UsageError,
        match=r"'x': value 70000.0 at index \[1\] does not fit fp16: valid values are \[-65504, 65504\]",
    ):
        convert_input(FP16, np.array([1.0, 70000.0, -1e6]))
    with pytest.raises(ValueError, match=r"value 2049 at index \[0\]"):  # as before, for ints
        convert_input(FP16, np.array([2049, 1, 2]))
    fp32 = TensorSpec("y", (2,), DType.fp32)
    with pytest.raises(UsageError, match=r"'y': value 1e\+39"):
        convert_input(fp32, np.array([1e39, 0.0]))


def test_saturation_is_explicit_and_inf_and_nan_pass_through() -> None:
    got = convert_input(FP16, np.array([70000.0, -1e6, 0.5]), saturate=True)
    assert got.dtype == np.float16 and list(got) == [65504.0, -65504.0, 0.5]
    special = convert_input(FP16, np.array([np.inf, -np.inf, np.nan]))
    assert np.isposinf(special[0]) and np.isneginf(special[1]) and np.isnan(special[2])
    assert convert_input(FP16, np.array([65504.0, 1.0, 2.0]))[0] == 65504.0
