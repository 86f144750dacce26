"""``mil.load_path``: model directories and .mil files, the weights rule, BOM/CRLF, bad paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anekit import mil
from anekit.errors import AnekitError, MilSyntaxError, MilTypeError, UsageError, WeightFileError
from anekit.mil import loading
from anekit.mil.loading import decode_mil, load_path
from tests.clitools import CLEAN, refuse_reads, weighted_program


def test_a_model_directory_loads_with_its_weights(tmp_path: Path) -> None:
    program = weighted_program()
    directory = program.save(tmp_path / "model")
    assert load_path(directory) == program
    assert mil.load(directory) == program  # the old name reads the same
    assert mil.load_path is load_path


def test_a_mil_file_takes_weights_beside_it_or_given(tmp_path: Path) -> None:
    program = weighted_program(3.0)
    directory = program.save(tmp_path / "model")
    mil_file = directory / "model.mil"
    assert load_path(mil_file) == program  # weights/ beside the file
    lone = tmp_path / "elsewhere" / "prog.mil"
    lone.parent.mkdir()
    lone.write_bytes(mil_file.read_bytes())
    assert load_path(lone, weights=directory / "weights") == program
    assert load_path(str(directory), weights=str(directory / "weights")) == program
    with pytest.raises(WeightFileError, match="w.bin"):
        load_path(lone)  # no weights/ beside it: its own directory, which lacks w.bin
    (lone.parent / "w.bin").write_bytes((directory / "weights" / "w.bin").read_bytes())
    assert load_path(lone) == program  # the file's own directory holds the weights


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "absent.mil", "no such file or directory"),
        (lambda d: d, "directory without model.mil"),
    ],
)
def test_bad_paths_are_usage_errors_naming_the_path(make, message, tmp_path: Path) -> None:
    path = make(tmp_path)
    with pytest.raises(UsageError) as info:
        load_path(path)
    assert info.value.path == str(path) and str(info.value).startswith(f"{path}: {message}")
    assert isinstance(info.value, AnekitError)


def test_weights_that_are_not_a_directory(tmp_path: Path) -> None:
    directory = weighted_program().save(tmp_path / "model")
    for weights, found in ((tmp_path / "none", "nothing"), (directory / "model.mil", "a file")):
        with pytest.raises(UsageError, match=f"expected a weights directory, found {found}"):
            load_path(directory, weights=weights)


def test_mil_load_wants_a_directory(tmp_path: Path) -> None:
    file = weighted_program().save(tmp_path / "model") / "model.mil"
    with pytest.raises(UsageError, match="expected a model directory .* found a file"):
        mil.load(file)
    with pytest.raises(UsageError, match="found nothing"):
        mil.load(tmp_path / "absent")


def test_a_fifo_is_refused_without_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.mil"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(UsageError, match=r"is a FIFO \(named pipe\); expected a MIL text file"):
        load_path(fifo)


def test_size_is_checked_before_reading(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "big.mil"
    path.write_bytes(b"x" * 100)
    monkeypatch.setattr(loading, "MAX_MIL_BYTES", 99)
    with pytest.raises(UsageError, match="100 bytes; expected a MIL text file of at most 99 bytes"):
        load_path(path)


def test_a_refused_read_is_a_usage_error_without_errno(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "m.mil"
    path.write_text(weighted_program().to_text())
    refuse_reads(monkeypatch, path)
    with pytest.raises(UsageError) as info:
        load_path(path)
    assert str(info.value) == f"{path}: cannot read a MIL text file: permission denied"


@pytest.mark.parametrize(
    ("data", "line", "column", "offset"),
    [
        (b"program(1.3)\n\xa0", 2, 1, 13),
        (b"\xef\xbb\xbfprogram(1.3)\n\xa0", 2, 1, 16),  # the BOM counts in the offset only
        (b"\xef\xbb\xbfab\xa0", 1, 3, 5),
        (b"a\r\nb\xa0", 2, 2, 4),  # CRLF is one line break
        (b"a\rb\r\xa0", 3, 1, 4),  # so is a lone CR, as the parser counts it
        (b"\xc3\xa9\xc3\xa9\xff", 1, 3, 4),  # columns count characters, offsets bytes
    ],
)
def test_a_bad_byte_is_located_exactly(data: bytes, line: int, column: int, offset: int) -> None:
    with pytest.raises(MilSyntaxError) as info:
        decode_mil(data, "m.mil")
    assert (info.value.line, info.value.column) == (line, column)
    assert f"found byte 0x{data[offset]:02x} at file offset {offset}" in str(info.value)


def test_bom_and_crlf_do_not_move_parser_positions(tmp_path: Path) -> None:
    text = CLEAN.replace("sigmoid(x = y)", "sigmoid(x = q)")  # an unknown name
    with pytest.raises(MilTypeError) as plain:
        mil.parse(text, file="m.mil")
    path = tmp_path / "m.mil"
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    with pytest.raises(MilTypeError) as windows:
        load_path(path)
    assert (windows.value.line, windows.value.column) == (plain.value.line, plain.value.column)
    assert windows.value.file == str(path) and plain.value.line == 6


def test_decoding_drops_the_bom_and_normalises_newlines() -> None:
    assert decode_mil(b"\xef\xbb\xbfa\r\nb\rc\n", "m.mil") == "a\nb\nc\n"
    assert decode_mil("é\n".encode(), "m.mil") == "é\n"
