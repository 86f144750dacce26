"""Regressions found reviewing the MIL core, the reference backend and the CLI on bad input."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.backends import reference
from anekit.cli import main
from anekit.errors import AnekitError, MilSyntaxError, MilTypeError
from anekit.files import write_atomic
from anekit.mil.passes import pack_inputs


def add_weight_program(value: float) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4), "fp16")
    b.output(b.add(x=x, y=b.weight("w", np.full((1, 4), value, np.float16))), "y")
    return b.build()


def saved_model(tmp_path: Path) -> Path:
    return add_weight_program(2.0).save(tmp_path / "model")


# -- saving and loading ---------------------------------------------------------------------------
def test_a_save_rejected_by_the_dialect_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    directory = saved_model(tmp_path)
    before = {p.name: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    b = mil.Builder()
    q = b.input("q", (1, 2, 4), "fp16")
    attended = b.scaled_dot_product_attention(query=q, key=q, value=q)
    b.add(x=attended, y=b.weight("w", np.full((1, 2, 4), 7.0, np.float16)))
    b.output(attended, "y")
    with pytest.raises(MilTypeError):  # scaled_dot_product_attention is an ios18 op
        b.build().save(directory, dialect="legacy")
    after = {p.name: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    assert after == before


def test_weights_in_a_subdirectory_of_weights_are_saved_there(tmp_path: Path) -> None:
    program = add_weight_program(3.0)
    moved = {k.replace("/w.bin", "/sub/w.bin"): v for k, v in program.weight_files().items()}
    parsed = mil.parse(program.to_text().replace("/w.bin", "/sub/w.bin"), moved)
    directory = parsed.save(tmp_path / "model")
    assert (directory / "weights" / "sub" / "w.bin").is_file()
    loaded = mil.load(directory)
    assert loaded.ops[0].outputs[0].const.tolist() == [[3.0] * 4]


def test_written_files_get_the_mode_of_an_ordinary_open(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "f.bin", b"data")
    finally:
        os.umask(old)
    assert (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o644


def test_writing_into_a_missing_directory_names_the_file_asked_for(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "out.npz"
    with pytest.raises(FileNotFoundError) as info:
        write_atomic(target, b"data")
    assert info.value.filename == str(target)


def test_a_model_mil_that_is_not_utf8_is_a_syntax_error_at_the_byte(tmp_path: Path) -> None:
    directory = saved_model(tmp_path)
    text = (directory / "model.mil").read_bytes()
    (directory / "model.mil").write_bytes(text.replace(b"program(1.3)\n", b"program(1.3)\n\xff", 1))
    with pytest.raises(MilSyntaxError) as info:
        mil.load(directory)
    assert (info.value.line, info.value.column) == (2, 1)
    assert "model.mil" in str(info.value) and "0xff" in str(info.value)


def test_a_model_mil_with_windows_line_endings_still_loads(tmp_path: Path) -> None:
    directory = saved_model(tmp_path)
    text = (directory / "model.mil").read_bytes()
    (directory / "model.mil").write_bytes(text.replace(b"\n", b"\r\n"))
    assert mil.load(directory) == add_weight_program(2.0)


@pytest.mark.parametrize("text", ["carriage\rreturn", "crlf\r\nend", "both\\r\tkinds"])
def test_string_constants_survive_save_and_load(tmp_path: Path, text: str) -> None:
    b = mil.Builder()
    b.output(b.input("x", (2,), "fp16"))
    b.const(text, name="s")
    loaded = mil.load(b.build().save(tmp_path / "model"))
    assert loaded.ops[0].outputs[0].const == text


def test_a_function_returning_a_value_twice_is_rejected() -> None:
    text = add_weight_program(2.0).to_text().replace("-> (y);", "-> (y, y);")
    with pytest.raises(MilTypeError, match="returns 'y' more than once"):
        mil.parse(text, add_weight_program(2.0).weight_files())


# -- the Builder ----------------------------------------------------------------------------------
def relu_builder() -> tuple[mil.Builder, mil.Value]:
    b = mil.Builder()
    return b, b.relu(x=b.input("x", (1, 2), "fp16"))


def test_output_of_something_that_is_not_a_value_is_a_type_error() -> None:
    b, _ = relu_builder()
    with pytest.raises(TypeError, match="expected a Value of this Builder, found ndarray"):
        b.output(np.ones(2), "y")


def test_output_of_another_builders_value_is_rejected_and_leaves_it_alone() -> None:
    other, value = relu_builder()
    b, _ = relu_builder()
    with pytest.raises(ValueError, match="does not belong to this Builder"):
        b.output(value, "y")
    assert value.name == "relu"
    other.output(value, "z")
    assert [v.name for v in other.build().outputs] == ["z"]


def test_the_same_value_cannot_be_output_twice() -> None:
    b, y = relu_builder()
    b.output(y, "a")
    with pytest.raises(ValueError, match="already an output"):
        b.output(y, "b")
    assert [v.name for v in b.build().outputs] == ["a"]


def test_renaming_a_value_after_build_does_not_change_the_built_program() -> None:
    b, y = relu_builder()
    b.output(b.sigmoid(x=y), "z")
    built = b.build()
    text = built.to_text()
    with pytest.raises(ValueError, match="cannot rename 'relu'"):
        b.output(y, "renamed")
    assert built.to_text() == text


@pytest.mark.parametrize("name", ["1bad", "a-b", "with space", ""])
def test_output_and_function_names_must_be_mil_names(name: str) -> None:
    b, y = relu_builder()
    with pytest.raises(ValueError, match="invalid output name"):
        b.output(y, name)
    with pytest.raises(ValueError, match="invalid function name"):
        mil.Builder(function=name)


@pytest.mark.parametrize(
    ("shape", "error"), [((1, 2.5), TypeError), ((1, -2), ValueError), (5, TypeError)]
)
def test_input_shapes_are_not_silently_rounded_or_negative(shape, error) -> None:
    with pytest.raises(error, match="input 'x'"):
        mil.Builder().input("x", shape, "fp16")


def test_input_shapes_accept_numpy_integers() -> None:
    v = mil.Builder().input("x", np.array([1, 3]), "fp16")
    assert v.shape == (1, 3)


def test_a_weight_converted_to_int_with_loss_is_rejected() -> None:
    with pytest.raises(ValueError, match="do not fit in int32"):
        mil.Builder().weight("w", np.array([1.5, 2.0]), dtype="int32")
    exact = mil.Builder().weight("w", np.array([1.0, -2.0]), dtype="int32")
    assert exact.const.tolist() == [1, -2]


def test_a_const_that_overflows_fp16_is_rejected() -> None:
    with pytest.raises(ValueError, match="overflow fp16"):
        mil.Builder().const(np.array([1e6, 1.0]), dtype="fp16")
    inf = mil.Builder().const(np.array([np.inf, 1.0]), dtype="fp16")  # inf is inf, not overflow
    assert np.isinf(inf.const[0])


def test_an_empty_weight_is_rejected_where_it_is_made() -> None:
    with pytest.raises(ValueError, match="weight 'w'"):
        mil.Builder().weight("w", np.zeros((0, 4), np.float16))


# -- backends and passes --------------------------------------------------------------------------
def test_run_on_a_closed_reference_kernel_is_an_error() -> None:
    kernel = reference.compile(add_weight_program(2.0))
    kernel.close()
    with pytest.raises(AnekitError, match="closed"):
        kernel.run()


def test_packing_rank_0_inputs() -> None:
    b = mil.Builder()
    a, c = b.input("a", (), "fp16"), b.input("c", (), "fp16")
    b.output(b.sub(x=a, y=c), "r")
    packed, packing = pack_inputs(b.build())
    assert packing is not None
    out = reference.compile(packed)(**{packing.name: packing.pack({"a": 5.0, "c": 1.5})})
    assert out["r"] == np.float16(5.0) - np.float16(1.5)


# -- the command line -----------------------------------------------------------------------------
def test_fmt_of_a_missing_path_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nothing.mil"
    assert main(["fmt", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("anekit fmt: error:") and str(missing) in err and "Traceback" not in err


def test_run_of_a_directory_without_model_mil_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    assert main(["run", str(tmp_path), "--random", "--backend", "reference"]) == 2
    assert "model.mil" in capsys.readouterr().err


def run_with_input(tmp_path: Path, array: np.ndarray | None, *extra: str, name: str = "x") -> None:
    model = saved_model(tmp_path)
    argv = ["run", str(model), "--backend", "reference", *extra]
    if array is not None:
        np.save(tmp_path / "in.npy", array)
        argv += ["--input", f"{name}={tmp_path / 'in.npy'}"]
    main(argv)


def test_run_with_an_input_of_the_wrong_shape_says_which(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"input 'x': expected shape \[1, 4\].*found \[2, 2\]"):
        run_with_input(tmp_path, np.ones((2, 2), np.float16))


def test_run_with_an_input_name_the_program_lacks_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="'q=.*': the program's inputs are \\['x'\\]"):
        run_with_input(tmp_path, np.ones((1, 4), np.float16), "--random", name="q")


def test_run_with_a_file_that_is_not_npy_names_it(tmp_path: Path) -> None:
    model = saved_model(tmp_path)
    bad = tmp_path / "bad.npy"
    bad.write_text("not an array")
    with pytest.raises(SystemExit, match="cannot read .*bad.npy as .npy"):
        main(["run", str(model), "--backend", "reference", "--input", f"x={bad}"])


def test_run_rejects_a_repeat_below_one(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="--repeat must be >= 1"):
        run_with_input(tmp_path, None, "--random", "--repeat", "0")


def test_run_writes_outputs_at_exactly_the_path_given(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    x = np.arange(4, dtype=np.float16).reshape(1, 4)
    run_with_input(tmp_path, x, "--out", str(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npy", "model", "outputs"]
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["y"], x + np.float16(2.0))


def test_write_atomic_onto_a_directory_names_the_target(tmp_path) -> None:
    from anekit.files import write_atomic

    target = tmp_path / "out.npz"
    target.mkdir()
    with pytest.raises(OSError) as info:
        write_atomic(target, b"data")
    assert info.value.filename == str(target)
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]  # no temporary file left
