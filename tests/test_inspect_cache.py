"""The compile cache explorer: ``anekit inspect --cache [DIR]`` and anekit.inspect.cache."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from anekit.cli import main
from anekit.errors import InspectError
from anekit.inspect.cache import default_cache_dirs, list_bundles, no_cache_message


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _make_cache(root: Path, now: float) -> None:
    """Two bundles laid out like the macOS cache: <build>/<hash>/.../<gen>.bundle/."""
    a = root / "23A344" / "0123456789abcdef0123" / "main" / "H16G.bundle"
    (a / "main" / "main_ane").mkdir(parents=True)
    (a / "H16G.e5").write_bytes(bytes(100))
    (a / "main" / "main_ane" / "model.hwx").write_bytes(bytes(300))
    os.utime(a / "H16G.e5", (now - 7200, now - 7200))
    os.utime(a / "main" / "main_ane" / "model.hwx", (now - 3600, now - 3600))
    b = root / "23A344" / "fedcba9876543210fedc" / "H14G.bundle"
    b.mkdir(parents=True)
    (b / "H14G.e5").write_bytes(bytes(50))
    os.utime(b / "H14G.e5", (now - 60, now - 60))


def test_list_bundles(tmp_path):
    now = 1_700_000_000.0
    _make_cache(tmp_path, now)
    rows = [
        (b.hash, b.build, b.generation, b.size, b.files, b.age)
        for b in list_bundles(tmp_path, now=now)
    ]
    assert rows == [
        ("0123456789abcdef0123", "23A344", "H16", 400, 2, 3600.0),
        ("fedcba9876543210fedc", "23A344", "H14", 50, 1, 60.0),
    ]


def test_missing_cache_directory_is_an_inspect_error(tmp_path):
    with pytest.raises(InspectError, match="does not exist"):
        list_bundles(tmp_path / "nope")


def test_cache_cli_with_a_directory(capsys, tmp_path):
    _make_cache(tmp_path, 1_700_000_000.0)
    code, out, _ = _run(capsys, "--cache", str(tmp_path))
    assert code == 0 and out.startswith("2 bundles in ")
    info = json.loads(_run(capsys, "--cache", str(tmp_path), "--json")[1])
    assert [(b["generation"], b["size"], b["files"]) for b in info["bundles"]] == [
        ("H16", 400, 2),
        ("H14", 50, 1),
    ]


def test_default_cache_elsewhere_than_macos_says_so(capsys, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    assert default_cache_dirs() == []
    code, out, err = _run(capsys, "--cache")
    assert code == 1 and out == ""
    assert "only on macOS" in err and "com.apple.e5rt.e5bundlecache" in err
    assert no_cache_message() in err


def test_default_cache_on_macos_is_found_under_library_caches(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setenv("HOME", str(tmp_path))
    cache = tmp_path / "Library" / "Caches" / "com.example.app" / "com.apple.e5rt.e5bundlecache"
    cache.mkdir(parents=True)
    assert default_cache_dirs() == [cache]
    _make_cache(cache, 1_700_000_000.0)
    code, out, _ = _run(capsys, "--cache")
    assert code == 0 and out.startswith(f"2 bundles in {cache}")
