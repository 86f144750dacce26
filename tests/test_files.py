"""write_atomic: a crash leaves the old or the new file, with the mode and errors of a plain open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from anekit.files import write_atomic


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


def test_write_atomic_onto_a_directory_names_the_target(tmp_path) -> None:
    from anekit.files import write_atomic

    target = tmp_path / "out.npz"
    target.mkdir()
    with pytest.raises(OSError) as info:
        write_atomic(target, b"data")
    assert info.value.filename == str(target)
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]  # no temporary file left
