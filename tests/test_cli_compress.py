"""``anekit compress IN OUT --scheme S --chip C``: writes the model, prints the report."""

from __future__ import annotations

import json

import numpy as np

import anekit
from anekit import mil
from anekit.passes import for_chip
from tests.clitools import run


def model(tmp_path, channels: int = 128) -> str:
    """A three-conv model directory; returns its path."""
    rng = np.random.default_rng(1)
    b = mil.Builder()
    h = b.input("x", (1, channels, 1, 8), "fp16")
    for i in range(3):
        w = rng.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels)
        h = b.relu(x=b.conv(x=h, weight=b.weight(f"w{i}", w.astype(np.float16))))
    b.output(h, "y")
    path = tmp_path / "in"
    b.build().save(path)
    return str(path)


def test_compress_writes_the_model_and_reports(capsys, tmp_path) -> None:
    out = tmp_path / "out"
    code, text, _ = run(
        capsys, "compress", model(tmp_path), str(out), "--scheme", "lut4", "--chip", "m4"
    )
    assert code == 0
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["layer", "scheme"]
    assert [line.split()[1] for line in lines[1:4]] == ["lut4"] * 3
    assert "(0.25" in lines[4] and "predicted on m4" in lines[4] and "on random inputs" in lines[4]
    small = mil.load(out)
    assert {op.op_type for op in small.main.ops} >= {"constexpr_lut_to_dense"}
    assert sum(len(b) for b in small.weight_files().values()) < 0.3 * 3 * 128 * 128 * 2


def test_compress_json_matches_the_api(capsys, tmp_path) -> None:
    source = model(tmp_path)
    out = tmp_path / "out"
    args = ("--scheme", "int8", "--chip", "m2", "--json")
    code, text, _ = run(capsys, "compress", source, str(out), *args)
    data = json.loads(text)
    expected = anekit.compress_with_report(mil.load(source), "int8", chip="m2").report
    assert code == 0 and data["out"] == str(out)
    assert data["weight_bytes_after"] == expected.weight_bytes_after
    assert data["error"] == expected.error and data["chip"] == "m2"
    api = anekit.compress(mil.load(source), "int8", chip="m2")
    assert mil.load(out) == for_chip(api, "m2")  # the CLI also makes it an M2 program


def test_compress_gate_and_calibration(capsys, tmp_path) -> None:
    source = model(tmp_path)
    sample = tmp_path / "cal.npz"
    np.savez(sample, x=np.random.default_rng(2).standard_normal((1, 128, 1, 8)).astype(np.float16))
    args = ("--scheme", "lut4", "--max-error", "0.05", "--calibration", str(sample), "--json")
    code, text, _ = run(capsys, "compress", source, str(tmp_path / "out"), *args)
    data = json.loads(text)
    assert code == 0 and data["samples"] == "calibration" and data["within"]
    assert data["error"] <= 0.05 and data["fallbacks"]


def test_compress_usage_errors(capsys, tmp_path) -> None:
    source = model(tmp_path)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("")
    code, _, err = run(capsys, "compress", source, str(taken), "--scheme", "int8")
    assert code == 2 and err.strip().endswith("taken: the output must be a new or empty directory")
    code, _, err = run(capsys, "compress", source, str(tmp_path / "o"), "--scheme", "int3")
    assert (
        code == 2 and "unknown scheme 'int3'; expected one of: int8, w8a8, lut6, lut4, auto" in err
    )
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not numpy")
    args = ("--scheme", "w8a8", "--calibration", str(bad))
    code, _, err = run(capsys, "compress", source, str(tmp_path / "o"), *args)
    assert code == 2 and "bad.npz: --calibration: not a readable .npz file" in err
    args = ("--scheme", "lut4", "--granularity", "per_channel")
    code, _, err = run(capsys, "compress", source, str(tmp_path / "o"), *args)
    assert code == 2 and "lut4 has no granularity 'per_channel'" in err
    assert not (tmp_path / "o").exists()
