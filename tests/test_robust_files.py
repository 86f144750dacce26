"""anekit.files: only regular files are opened, sizes are checked before reading, swaps are atomic."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from anekit.errors import CheckpointError, UsageError
from anekit.files import exchange, model_file, open_regular, read_regular


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # open() for reading would wait for a writer forever
    start = time.monotonic()
    with pytest.raises(UsageError, match=r"pipe: is a FIFO \(named pipe\); expected a text"):
        read_regular(fifo, limit=100, what="a text")
    assert time.monotonic() - start < 5


def test_a_link_to_a_fifo_or_device_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "to-pipe").symlink_to(tmp_path / "pipe")
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(UsageError, match="is a FIFO"):
        read_regular(tmp_path / "to-pipe", limit=100, what="x")
    with pytest.raises(UsageError, match="is a character device; expected x"):
        read_regular(tmp_path / "zero", limit=100, what="x")
    with pytest.raises(UsageError, match="is a directory"):
        read_regular(tmp_path, limit=100, what="x")


def test_a_huge_sparse_file_is_refused_by_its_size_without_reading(tmp_path: Path) -> None:
    big = tmp_path / "sparse"
    with open(big, "wb") as f:
        f.truncate(8 * 2**30)  # 8 GiB that take no disk space
    with pytest.raises(
        CheckpointError, match=f"{8 * 2**30} bytes; expected a file of at most 1024"
    ):
        read_regular(big, limit=1024, what="a file", error=CheckpointError)


def test_limits_are_inclusive_and_reads_are_exact(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert read_regular(path, limit=3, what="x") == b"abc"
    with pytest.raises(UsageError, match="3 bytes; expected x of at most 2 bytes"):
        read_regular(path, limit=2, what="x")
    with open_regular(path, limit=3, what="x") as f:
        assert f.read() == b"abc"


def test_a_missing_file_and_a_link_loop_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read x: no such file or directory"):
        read_regular(tmp_path / "none", limit=1, what="x")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(UsageError, match="cannot read x: too many levels of symbolic links"):
        read_regular(tmp_path / "a", limit=1, what="x")


def test_model_file_names_are_judged_as_written_and_links_in_the_directory_followed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    for name in ("../x", "/etc/passwd", "a/../../x", "..", ".", "", "a\\b", "a\0b", 7, None):
        with pytest.raises(UsageError, match="not a relative file name inside the directory"):
            model_file(root, name, what="the file")
    assert model_file(root, "sub/f", what="x") == root / "sub" / "f"
    (tmp_path / "blob").write_bytes(b"data")
    (root / "shard").symlink_to("../blob")  # how the Hugging Face hub cache lays files out
    assert read_regular(model_file(root, "shard", what="x"), limit=4, what="x") == b"data"


def test_exchange_swaps_two_directories(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "from-a").touch()
    (b / "from-b").touch()
    if not exchange(a, b):
        pytest.skip("this file system cannot swap directories atomically")
    assert [p.name for p in a.iterdir()] == ["from-b"]
    assert [p.name for p in b.iterdir()] == ["from-a"]
