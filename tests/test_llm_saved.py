"""``anekit convert DIR --llm``: a model saved with its compression, loaded without compressing
again, checked (checksums, the chip's layout) and written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anekit import llm
from anekit.cli import main
from anekit.errors import ModelError, UsageError

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

IDS = [3, 17, 42, 8, 5]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from tests.llm_models import Case, save_model, save_tokenizer

    directory = tmp_path_factory.mktemp("source")
    save_model(directory, Case("llama", "float16", True, 2, "new"))
    save_tokenizer(directory)
    return directory


@pytest.fixture(scope="module")
def saved(model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("saved") / "tiny-lut4"
    argv = ["convert", str(model_dir), "--llm", "--compress", "lut4", "--chip", "m4",
            "--out", str(out), "--json"]  # fmt: skip
    assert main(argv) == 0
    return out


def test_a_saved_model_decodes_the_same_without_encoding_again(model_dir, saved, monkeypatch):
    with llm.load(model_dir, backend="reference", chip="m4", compress="lut4") as fresh:
        expected = fresh.generate(IDS, 8, stop=())
    import anekit.compression.encode as encode

    def no_kmeans(*args, **kwargs):
        raise AssertionError("k-means ran again")

    monkeypatch.setattr(encode, "kmeans_1d", no_kmeans)
    with pytest.raises(AssertionError, match="k-means ran again"):  # the patch does bite
        llm.load(model_dir, backend="reference", chip="m4", compress="lut4")
    with llm.load(saved, backend="reference", chip="m4") as m:
        assert m.compress == "lut4"
        assert m.generate(IDS, 8, stop=()) == expected
        m.reserve(200)  # a new cache length: segments compiled again, from the stored encodings
        assert m.generate(IDS, 8, stop=()) == expected
    manifest = json.loads((saved / "anekit_llm.json").read_text())
    assert manifest["scheme"] == "lut4" and manifest["chip"] == "m4"
    assert {"config.json", "tokenizer.json", "model.safetensors", "compression.safetensors"} <= set(
        manifest["checksums"]
    )


def test_a_changed_file_or_another_layout_is_refused(saved, tmp_path):
    import shutil

    with pytest.raises(ModelError, match="written for m4's layout .* --chip m1"):
        llm.load(saved, backend="reference", chip="m1")  # M1 pads contractions to 32
    copy = tmp_path / "copy"
    shutil.copytree(saved, copy)
    data = bytearray((copy / "compression.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "compression.safetensors").write_bytes(bytes(data))
    with pytest.raises(ModelError, match="compression.safetensors: its SHA-256 differs"):
        llm.load(copy, backend="reference", chip="m4")
    with pytest.raises(UsageError, match="saved compressed with lut4"):
        llm.load(saved, backend="reference", chip="m4", compress="int8")


def test_saving_never_overwrites_and_leaves_no_temporary(model_dir, saved, capsys):
    before = sorted(p.name for p in saved.parent.iterdir())
    argv = ["convert", str(model_dir), "--llm", "--compress", "lut4", "--out", str(saved)]
    assert main(argv) == 2
    assert "never overwritten" in capsys.readouterr().err
    assert main(["convert", str(model_dir), "--llm", "--out", str(saved.parent / "x")]) == 2
    assert "--llm needs --compress" in capsys.readouterr().err
    assert sorted(p.name for p in saved.parent.iterdir()) == before
