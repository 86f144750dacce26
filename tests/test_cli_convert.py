"""``anekit convert``: a file saved with ``torch.export.save`` to a model directory, reported."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.clitools import run

torch = pytest.importorskip("torch")

import anekit  # noqa: E402
from anekit import mil  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Mlp(torch.nn.Module):
    def __init__(self, out: int = 8) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def save(tmp_path, model: torch.nn.Module, x: torch.Tensor, name: str = "m.pt2") -> str:
    torch.manual_seed(0)
    path = tmp_path / name
    torch.export.save(torch.export.export(model.eval(), (x,), strict=False), str(path))
    return str(path)


def test_convert_check_estimate(tmp_path, capsys) -> None:
    torch.manual_seed(0)
    model, x = Mlp(), torch.randn(1, 4, 16)
    path = save(tmp_path, model, x)
    out = tmp_path / "out"
    code, stdout, stderr = run(
        capsys, "convert", path, "--out", str(out), "--chip", "m4", "--check", "--estimate"
    )
    assert code == 0, stderr
    assert f"wrote {out / 'model.mil'}" in stdout
    assert "fidelity vs PyTorch fp32 (reference backend)" in stdout
    assert "m4: 0 error(s)" in stdout and "total on m4:" in stdout
    prog = mil.load(out)
    with anekit.compile(prog, backend="reference") as k:
        got = k(x=x.numpy())["output"].astype(np.float32)
    with torch.no_grad():
        want = model(x).numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-2


def test_convert_json(tmp_path, capsys) -> None:
    path = save(tmp_path, Mlp(), torch.randn(1, 4, 16))
    code, stdout, _ = run(
        capsys,
        "convert",
        path,
        "--out",
        str(tmp_path / "o"),
        "--chip",
        "m4",
        "--check",
        "--estimate",
        "--json",
    )
    assert code == 0
    data = json.loads(stdout)
    assert data["chip"] == "m4" and data["statements"] > 0 and data["nodes"] > 0
    (row,) = data["fidelity"]["outputs"]
    assert row["name"] == "output" and 0 < row["rel_error"] < 2e-2 and row["cosine"] > 0.999
    assert not [d for d in data["diagnostics"] if d["severity"] == "error"]
    assert data["estimate"]["seconds"] > 0


def test_convert_passes_none_keeps_fp32(tmp_path, capsys) -> None:
    path = save(tmp_path, Mlp(), torch.randn(1, 4, 16))
    code, _, _ = run(
        capsys, "convert", path, "--out", str(tmp_path / "o"), "--chip", "m4", "--passes", "none"
    )
    assert code == 0
    prog = mil.load(tmp_path / "o")
    assert prog.main.inputs[0].dtype is mil.DType.fp32
    assert "linear" in {op.op_type for op in prog.main.ops}


def test_convert_reports_progress_for_long_graphs(tmp_path, capsys, monkeypatch) -> None:
    """Past PROGRESS_FROM nodes, progress lines on stderr (it is not a terminal here)."""
    import anekit.cli.convert as command

    path = save(tmp_path, Mlp(), torch.randn(1, 4, 16))
    monkeypatch.setattr(command, "PROGRESS_FROM", 3)  # the small graph counts as long
    code, _, stderr = run(capsys, "convert", path, "--out", str(tmp_path / "o"), "--chip", "m4")
    assert code == 0
    lines = [line for line in stderr.splitlines() if line.endswith("nodes lowered")]
    done = [tuple(int(n) for n in line[1:].split("]")[0].split("/")) for line in lines]
    assert len(done) >= 2 and done[-1][0] == done[-1][1] > 3
    assert [d for d, _ in done] == sorted(d for d, _ in done)
    monkeypatch.setattr(command, "PROGRESS_FROM", 10_000)
    _, _, quiet = run(capsys, "convert", path, "--out", str(tmp_path / "o2"), "--chip", "m4")
    assert "nodes lowered" not in quiet


def test_convert_findings_exit_1(tmp_path, capsys) -> None:
    """A 70000-wide projection is split, but the re-joined output still exceeds the limit."""
    path = save(tmp_path, Mlp(out=70000), torch.randn(1, 2, 16))
    code, stdout, _ = run(
        capsys, "convert", path, "--out", str(tmp_path / "o"), "--chip", "m4", "--check"
    )
    assert code == 1
    assert "[dim-limit]" in stdout and "m4: " in stdout


@pytest.mark.parametrize("problem", ["missing", "out_is_file", "bad_pass", "bad_chip", "not_pt2"])
def test_convert_usage_errors_are_one_line_exit_2(tmp_path, capsys, problem: str) -> None:
    path = save(tmp_path, Mlp(), torch.randn(1, 4, 16))
    out = tmp_path / "out"
    argv = ["convert", path, "--out", str(out), "--chip", "m4"]
    if problem == "missing":
        argv[1] = str(tmp_path / "nope.pt2")
    elif problem == "out_is_file":
        out.write_text("x")
    elif problem == "bad_pass":
        argv += ["--passes", "fp16,nope"]
    elif problem == "bad_chip":
        argv[-1] = "m99"
    else:
        (tmp_path / "junk.pt2").write_bytes(b"junk")
        argv[1] = str(tmp_path / "junk.pt2")
    code, stdout, stderr = run(capsys, *argv)
    assert code == 2 and stdout == ""
    assert stderr.startswith("anekit convert: error: ") and len(stderr.strip().splitlines()) == 1


class Wide(torch.nn.Module):
    """Linear layers big enough to compress (128 x 64 weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def test_convert_compress(tmp_path, capsys) -> None:
    torch.manual_seed(0)
    model, x = Wide(), torch.randn(1, 16, 64)
    path = save(tmp_path, model, x)
    out = tmp_path / "out"
    argv = ("convert", path, "--out", str(out), "--chip", "m4", "--compress", "int8", "--json")
    code, stdout, stderr = run(capsys, *argv)
    assert code == 0, stderr
    data = json.loads(stdout)
    report = data["compression"]
    assert [r["scheme"] for r in report["layers"]] == ["int8", "int8"]
    assert report["ratio"] < 0.6 and report["samples"] == "calibration"
    assert data["fidelity"]["outputs"][0]["rel_error"] < 2e-2  # the conversion's, uncompressed
    prog = mil.load(out)
    assert sum(op.op_type == "constexpr_affine_dequantize" for op in prog.main.ops) == 2
    with anekit.compile(prog, backend="reference") as k:
        got = k(x=x.numpy())["output"].astype(np.float32)
    with torch.no_grad():
        want = model(x).numpy()
    assert 1e-4 < np.linalg.norm(got - want) / np.linalg.norm(want) < 3e-2
    code, _, stderr = run(capsys, "convert", path, "--out", str(out), "--max-error", "0.1")
    assert code == 2 and "--max-error applies to --compress" in stderr
