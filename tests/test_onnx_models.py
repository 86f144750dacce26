"""``anekit.from_onnx`` on MLP, CNN, ResNet, BERT, GPT-2 and ViT exports, against onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
pytest.importorskip("transformers")

import anekit  # noqa: E402
from anekit import mil  # noqa: E402
from anekit.errors import ConversionError  # noqa: E402
from anekit.frontends import onnx as aonnx  # noqa: E402
from tests.clitools import run  # noqa: E402
from tests.onnx_models import build, export  # noqa: E402

KINDS = ("mlp", "cnn", "resnet", "bert", "gpt2", "vit")


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "legacy"])
@pytest.mark.parametrize("kind", KINDS)
def test_model_kinds_match_onnxruntime_and_torch(tmp_path, kind: str, dynamo: bool) -> None:
    model, args = build(kind)
    path = export(model, args, tmp_path / f"{kind}.onnx", dynamo)
    if dynamo:  # torch 2.13's exporter keeps the weights in an external-data file
        assert (tmp_path / f"{kind}.onnx.data").is_file()
    faithful = anekit.from_onnx(path, passes=(), verify=False)
    assert aonnx.compare(path, faithful).worst.rel_error < 1e-5  # fp32, as converted
    prog = anekit.from_onnx(path, chip="m4")  # the default passes, verified against onnxruntime
    fidelity = aonnx.compare(path, prog)
    assert fidelity.worst.rel_error < 5e-3 and fidelity.reference == "onnxruntime fp32"
    # independent of onnxruntime: the original PyTorch module on the same input
    name = prog.main.inputs[0].name
    feed = args[0].numpy().astype(prog.main.inputs[0].dtype.numpy)
    with anekit.compile(prog, backend="reference") as kernel:
        got = np.asarray(kernel(**{name: feed})[prog.main.outputs[0].name], np.float32)
    with torch.no_grad():
        want = model.eval()(*args)
        want = want[0] if isinstance(want, tuple) else getattr(want, "last_hidden_state", want)
    want = want.numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-3
    errors = [d for d in anekit.check(prog, chip="m4") if d.severity == "error"]
    assert errors == []


def test_legacy_names_are_renamed_deterministically(tmp_path) -> None:
    model, args = build("cnn")
    path = export(model, args, tmp_path / "cnn.onnx", dynamo=False)
    names = aonnx.io_names(path)
    (onnx_in,) = [n for n in names if n.startswith("input")]
    assert onnx_in == "input.1" and names[onnx_in] == "input_1"
    (onnx_out,) = [n for n in names if n != onnx_in]
    assert onnx_out.isdigit() and names[onnx_out] == f"v_{onnx_out}"
    prog = anekit.from_onnx(path, verify=False)
    assert [v.name for v in prog.main.inputs] == ["input_1"]
    assert [v.name for v in prog.main.outputs] == [f"v_{onnx_out}"]
    assert aonnx.io_names(path) == names  # the same map every time


def test_dynamic_dimension_refused_then_fixed(tmp_path) -> None:
    model, args = build("mlp")
    path = export(
        model, args, tmp_path / "mlp.onnx", dynamo=False, input_names=["x"],
        dynamic_axes={"x": {0: "batch"}},
    )  # fmt: skip
    with pytest.raises(ConversionError, match=r"input 'x' has dynamic .*'batch'.*input_shapes"):
        anekit.from_onnx(path)
    prog = anekit.from_onnx(path, input_shapes={"x": [3, 8]})
    assert prog.main.inputs[0].shape == (3, 8)
    with pytest.raises(ConversionError, match="dimension 1 is fixed at 8"):
        anekit.from_onnx(path, input_shapes={"x": [3, 9]})
    with pytest.raises(ConversionError, match="not inputs of the model"):
        anekit.from_onnx(path, input_shapes={"y": [3, 8]})


def test_cli_convert_onnx(tmp_path, capsys) -> None:
    model, args = build("cnn")
    path = export(model, args, tmp_path / "cnn.onnx", dynamo=False)
    out = tmp_path / "out"
    code, stdout, stderr = run(capsys, "convert", str(path), "--out", str(out), "--json")
    assert code == 0, stderr
    record = json.loads(stdout)
    assert record["renamed"]["input.1"] == "input_1"
    assert record["fidelity"]["outputs"][0]["rel_error"] < 5e-3
    prog = mil.load(out)
    with anekit.compile(prog, backend="reference") as kernel:
        got = next(iter(kernel(input_1=args[0].numpy()).values()))
    with torch.no_grad():
        want = model.eval()(*args).numpy()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-3
    code, _, stderr = run(capsys, "convert", str(path), "--out", str(out), "--input-shape", "x")
    assert code == 2 and "--input-shape" in stderr
