"""``torch.export.save`` then ``anekit convert`` in a subprocess, for raw Hugging Face models
(ModelOutput outputs, keyword inputs): every output of the saved model directory within 2%
of the PyTorch module's, measured here on the reference backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import anekit  # noqa: E402
from anekit import mil  # noqa: E402
from tests import torch_zoo  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 2e-2


MODELS = {"vit": torch_zoo.vit, "llama": torch_zoo.llama, "bert_masked": torch_zoo.bert}


def convert_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "anekit", "convert", *args],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("family", sorted(MODELS))
def test_saved_hf_model_converts_in_a_subprocess_within_two_percent(family, tmp_path) -> None:
    torch.manual_seed(0)
    model, args, kwargs = MODELS[family]()
    model.eval()
    path = tmp_path / f"{family}.pt2"
    torch.export.save(torch.export.export(model, args, kwargs, strict=False), str(path))
    done = convert_cli(str(path), "--out", str(tmp_path / "out"), "--chip", "m4", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "W1202" not in done.stderr and "torch" not in done.stderr.lower()  # no torch log
    report = json.loads(done.stdout)
    loaded = mil.load(tmp_path / "out")
    feeds = {"pixel_values": args[0]} if family == "vit" else {"input_ids": args[0], **kwargs}
    inputs = {v.name: feeds[v.name].numpy().astype(v.dtype.numpy) for v in loaded.main.inputs}
    with anekit.compile(loaded, backend="reference") as k:
        got = k(**inputs)
    with torch.no_grad():
        want = model(*args, **kwargs)
    names = [v.name for v in loaded.main.outputs]
    assert names == [k for k, v in want.items() if isinstance(v, torch.Tensor)]
    for name in names:
        w = want[name].numpy()
        g = np.asarray(got[name], np.float32)
        rel = np.linalg.norm(g - w) / np.linalg.norm(w)
        assert 0 < rel < TOLERANCE, (name, rel)
        reported = {o["name"]: o["rel_error"] for o in report["fidelity"]["outputs"]}
        assert reported[name] == pytest.approx(rel, rel=0.05, abs=1e-5)
