"""Programs made for the chip asked for: every model of the test zoo converted for m1..m4 has
no checker error on that chip and still matches PyTorch; M1 gets its contraction padding,
M1/M2 the legacy dialect; ``anekit convert`` and ``anekit compress`` with ``--chip m1``."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import anekit  # noqa: E402
from anekit import mil  # noqa: E402
from anekit.frontends.fidelity import compare_arrays  # noqa: E402
from anekit.frontends.torch import capture, convert_exported  # noqa: E402
from anekit.frontends.torch.compare import (  # noqa: E402
    in_program_order,
    program_inputs,
    torch_outputs,
)
from anekit.passes import convert, save_dialect  # noqa: E402
from tests.clitools import run  # noqa: E402
from tests.torch_zoo import ZOO, bert  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
CHIPS = ("m1", "m2", "m3", "m4")


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_is_checker_clean_and_faithful_on_every_chip(name: str) -> None:
    torch.manual_seed(0)
    model, args, kwargs = ZOO[name]()
    model.eval()
    fp32 = convert_exported(capture(model, args, kwargs))
    want = torch_outputs(model, args, kwargs)
    for chip in CHIPS:
        prog = convert(fp32, None, chip)
        errors = [d for d in anekit.check(prog, chip=chip) if d.severity == "error"]
        assert errors == [], (chip, errors[:3])
        rules = {d.rule for d in anekit.check(prog, chip=chip)}
        assert "legacy-dialect" not in rules, chip
        inputs = program_inputs(prog, args, kwargs)
        fidelity = compare_arrays(prog, inputs, in_program_order(prog, want), "reference")
        assert fidelity.worst.rel_error < 2e-2, (chip, str(fidelity))
        opset = prog.main.opset
        assert (opset == "ios16") == (chip in ("m1", "m2")), (chip, opset)


def test_m1_pads_attention_contractions_to_32_and_keeps_the_result() -> None:
    torch.manual_seed(0)
    model, args, kwargs = bert()
    prog = anekit.from_torch(model, args, kwargs, chip="m1")  # verified against PyTorch
    matmuls = [op for op in prog.main.ops if op.op_type == "matmul"]
    assert matmuls and all(op.opdef.inner_dim(op.args()) % 32 == 0 for op in matmuls)
    m4 = anekit.from_torch(model, args, kwargs, chip="m4")
    assert any(op.opdef.inner_dim(op.args()) % 32 for op in m4.main.ops if op.op_type == "matmul")


def test_m1_program_saves_in_the_legacy_dialect_and_reloads_clean(tmp_path) -> None:
    torch.manual_seed(0)
    model, args, kwargs = ZOO["encoder_layer"]()
    prog = anekit.from_torch(model, args, kwargs, chip="m1")
    assert save_dialect(prog) == "legacy"
    prog.save(tmp_path / "m", dialect=save_dialect(prog))
    assert "program(1.0)" in (tmp_path / "m" / "model.mil").read_text()
    loaded = mil.load(tmp_path / "m")
    found = anekit.check(loaded, chip="m1")
    assert [d for d in found if d.severity == "error"] == []
    assert "legacy-dialect" not in {d.rule for d in found}


def test_convert_and_compress_with_chip_m1(tmp_path, capsys) -> None:
    torch.manual_seed(0)
    model, args, kwargs = bert()
    path = tmp_path / "bert.pt2"
    torch.export.save(torch.export.export(model.eval(), args, kwargs, strict=False), str(path))
    code, out, err = run(capsys, "convert", str(path), "--out", str(tmp_path / "m1"),
                         "--chip", "m1", "--check", "--json")  # fmt: skip
    report = json.loads(out)
    assert code == 0, err
    assert [d for d in report["diagnostics"] if d["severity"] == "error"] == []
    assert {d["rule"] for d in report["converter_notes"]} <= {"last-axis-padding"}
    assert all(d["rule"] != "last-axis-padding" for d in report["diagnostics"]
               if d["name"] not in ("input_ids", "attention_mask"))  # fmt: skip
    code, _, err = run(capsys, "convert", str(path), "--out", str(tmp_path / "m4"), "--chip", "m4")
    assert code == 0, err
    ids, mask = args[0].numpy().astype(np.int32), kwargs["attention_mask"].numpy().astype(np.int32)
    np.savez(tmp_path / "calib.npz", input_ids=ids, attention_mask=mask)
    code, _, err = run(capsys, "compress", str(tmp_path / "m4"), str(tmp_path / "m1c"),
                       "--scheme", "int8", "--chip", "m1",
                       "--calibration", str(tmp_path / "calib.npz"))  # fmt: skip
    assert code == 0, err
    compressed = mil.load(tmp_path / "m1c")
    errors = [d for d in anekit.check(compressed, chip="m1") if d.severity == "error"]
    assert errors == []
    with anekit.compile(compressed, backend="reference") as k:
        got = np.asarray(k(input_ids=ids, attention_mask=mask)["last_hidden_state"], np.float32)
    with torch.no_grad():
        want = model(*args, **kwargs).last_hidden_state.numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-2
