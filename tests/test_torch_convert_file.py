"""``convert_file``: what ``anekit convert`` does, on a file saved with ``torch.export.save``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import anekit  # noqa: E402
from anekit import mil  # noqa: E402
from anekit.errors import ConversionError  # noqa: E402
from anekit.frontends.torch import convert_file  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def saved(tmp_path) -> tuple[str, Block, torch.Tensor]:
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(1, 8, 16)
    path = tmp_path / "block.pt2"
    torch.export.save(torch.export.export(model, (x,), strict=False), str(path))
    return str(path), model, x


def test_convert_file_writes_the_model_and_reports(tmp_path) -> None:
    path, model, x = saved(tmp_path)
    calls: list[tuple[int, int]] = []
    result = convert_file(
        path, tmp_path / "out", chip="m4", progress=lambda d, t: calls.append((d, t))
    )
    assert (tmp_path / "out" / "model.mil").is_file()
    assert sorted(p.name for p in (tmp_path / "out" / "weights").iterdir())  # weight files
    assert calls[-1][0] == calls[-1][1] == result.nodes and len(calls) == result.nodes
    loaded = mil.load(tmp_path / "out")
    with anekit.compile(loaded, backend="reference") as k:
        got = k(x=x.numpy())["output"].astype(np.float32)
    with torch.no_grad():
        want = model(x).numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-2
    (row,) = result.fidelity.outputs
    assert row.name == "output" and 0 < row.rel_error < 2e-2
    assert row.rel_error == pytest.approx(
        np.linalg.norm(got - want) / np.linalg.norm(want), rel=1e-3
    )
    assert [d for d in result.diagnostics if d.severity == "error"] == []
    assert result.estimate.seconds > 0 and result.estimate.flops > 2 * 8 * 16 * 32 * 2


def test_convert_file_rejects_what_is_not_an_exported_program(tmp_path) -> None:
    with pytest.raises(ConversionError, match="no such file"):
        convert_file(tmp_path / "missing.pt2", tmp_path / "out")
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not a zip archive")
    with pytest.raises(ConversionError, match="not an ExportedProgram"):
        convert_file(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_dynamic_dimensions_are_a_conversion_error() -> None:
    model = torch.nn.Linear(4, 4)
    batch = torch.export.Dim("batch")
    with pytest.raises(ConversionError, match="dynamic dimensions") as err:
        anekit.from_torch(model, (torch.randn(3, 4),), dynamic={"input": {0: batch}})
    assert err.value.problems[0][0] == "input"


def test_the_convert_walk_resolves_the_chip_once(tmp_path, monkeypatch) -> None:
    import importlib

    chips = importlib.import_module("anekit.hw.chips")  # anekit.hw.chips is also a function

    path, _, _ = saved(tmp_path)
    looked_up: list[str] = []
    real = chips.normalize_name  # every lookup by name goes through it, however imported

    def counting(name):
        looked_up.append(name)
        return real(name)

    monkeypatch.setattr(chips, "normalize_name", counting)
    result = convert_file(path, tmp_path / "out", chip="m1", compress="int8")
    # the name is looked up at the entry point; passes, check, estimate and compression get
    # the Chip itself (a second lookup would show here, as would a default chip)
    assert looked_up == ["m1"]
    assert result.estimate.chip == "m1" and result.compression is not None
