"""``from_torch(numerics=)`` and ``anekit convert --numerics``: the profile the fidelity gate runs on.

A linear layer whose output is 40,000 is fine in IEEE fp16 (below 65504) but past the
engine's matmul saturation (32752, N1) on every chip family: the gate fails on the chip's
profile and passes under "ideal".
"""

from __future__ import annotations

import json

import pytest

from tests.clitools import run

torch = pytest.importorskip("torch")

import anekit  # noqa: E402
from anekit.errors import ConversionError, NumericsOverflow  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),  # inf output
]


def _saturating() -> tuple[torch.nn.Module, torch.Tensor]:
    layer = torch.nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        layer.weight.fill_(10_000.0)  # ones @ W = 40,000: fp16-exact, past 32752
    return layer.eval(), torch.ones(1, 3, 4)


def test_the_gate_runs_on_the_chips_profile_by_default(monkeypatch) -> None:
    monkeypatch.setenv("ANEKIT_NUMERICS", "ideal")  # the chip asked for wins over the default
    module, x = _saturating()
    with pytest.raises(NumericsOverflow, match="would overflow on the engine") as caught:
        anekit.from_torch(module, (x,), chip="m4")  # no norm: no residual scaling applies
    error = caught.value
    assert isinstance(error, ConversionError)
    assert error.op_type == "conv" and error.line is not None and "observed [40000" in error.bound


@pytest.mark.parametrize("numerics", ["ideal", None])
def test_the_gate_runs_on_the_profile_given(monkeypatch, numerics) -> None:
    module, x = _saturating()
    if numerics is None:  # no chip, no numerics: the reference backend's default ($ANEKIT_NUMERICS)
        monkeypatch.setenv("ANEKIT_NUMERICS", "ideal")
    program = anekit.from_torch(module, (x,), numerics=numerics)
    with anekit.compile(program, backend="reference", numerics="ideal") as k:
        (y,) = k(**{program.main.inputs[0].name: x.numpy()}).values()
    assert (y == 40_000).all()
    with pytest.raises(ConversionError, match="would overflow on the engine .numerics 'm1'"):
        anekit.from_torch(module, (x,), numerics="m1")


def test_convert_numerics_flag(tmp_path, capsys) -> None:
    module, x = _saturating()
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(module, (x,), strict=False), str(path))
    args = ["convert", str(path), "--chip", "m4", "--json"]
    code, out, _ = run(capsys, *args, "--out", str(tmp_path / "a"))
    assert code == 1  # the chip's profile saturates the output
    assert not json.loads(out)["fidelity"]["outputs"][0]["rel_error"] <= 0.02  # inf or NaN
    code, out, _ = run(capsys, *args, "--out", str(tmp_path / "b"), "--numerics", "ideal")
    assert code == 0, out
    assert json.loads(out)["fidelity"]["outputs"][0]["rel_error"] < 1e-3
    code, _, err = run(capsys, *args, "--out", str(tmp_path / "c"), "--numerics", "nope")
    assert code == 2 and "numerics" in err
