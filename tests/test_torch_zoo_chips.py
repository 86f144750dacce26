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
from anekit.passes.provenance import split  # noqa: E402
from tests.clitools import run  # noqa: E402
from tests.torch_zoo import ZOO, bert  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
CHIPS = ("m1", "m2", "m3", "m4")


# rules whose findings are about what the converter chose when it made them on tensors or
# ops inside the program: never advice on a converted model
CONVERTER_CHOICES = {"op-unverified", "last-axis-padding"}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_is_checker_clean_and_faithful_on_every_chip(name: str, tmp_path) -> None:
    torch.manual_seed(0)
    model, args, kwargs = ZOO[name]()
    model.eval()
    fp32 = convert_exported(capture(model, args, kwargs))
    want = torch_outputs(model, args, kwargs)
    for chip in CHIPS:
        prog = convert(fp32, None, chip)
        errors = [d for d in anekit.check(prog, chip=chip) if d.severity == "error"]
        assert errors == [], (chip, errors[:3])
        prog.save(tmp_path / chip, dialect=save_dialect(prog))
        saved = mil.load(tmp_path / chip)  # the record travels with the saved model
        advice, facts = split(saved, anekit.check(saved, chip=chip))
        assert "legacy-dialect" not in {d.rule for d in advice}, chip
        boundary = {v.name for v in (*saved.main.inputs, *saved.main.outputs)}
        about_choices = [
            d for d in advice if d.rule in CONVERTER_CHOICES and d.name not in boundary
        ]
        assert about_choices == [], (chip, about_choices[:3])
        assert all(f.diagnostic.severity != "error" for f in facts)
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
    notes = report["converter_notes"]
    assert {d["rule"] for d in notes} == {"last-axis-padding", "op-unverified"}
    assert all(d["reason"].startswith("the converter") for d in notes)
    assert all(d["rule"] not in CONVERTER_CHOICES for d in report["diagnostics"]
               if d["name"] not in ("input_ids", "attention_mask"))  # fmt: skip
    # `anekit check` of the saved model: the same facts, apart from the advice
    code, out, _ = run(capsys, "check", str(tmp_path / "m1"), "--chip", "m1")
    assert code == 0 and "converter fact(s)" in out and "[op-unverified]" not in out, out
    code, out, _ = run(capsys, "check", str(tmp_path / "m1"), "--chip", "m1", "--facts")
    assert "converter: 'equal' compiled and ran" in out and "gather and one_hot" in out, out
    code, out, _ = run(capsys, "check", str(tmp_path / "m1"), "--chip", "m1", "--json")
    rows = json.loads(out)
    assert {r["rule"] for r in rows if r["converter"]} == {"last-axis-padding", "op-unverified"}
    assert all(r["rule"] not in CONVERTER_CHOICES for r in rows
               if not r["converter"] and r["name"] not in ("input_ids", "attention_mask"))  # fmt: skip
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
