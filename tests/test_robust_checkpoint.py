"""Checkpoints are untrusted input: names, types, ranges and sizes are checked before anything is read."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")

from anekit.errors import CheckpointError, TrainingDiverged  # noqa: E402
from anekit.train import checkpoint as ck  # noqa: E402
from anekit.train.config import TrainConfig  # noqa: E402
from anekit.train.data import Llama2cTokenizer  # noqa: E402
from anekit.train.loop import MODEL_FILE, Trainer, load_model  # noqa: E402
from tests.test_train_checkpoint import SMALL, TOKENS, make_trainer  # noqa: E402
from tests.test_train_data import small_vocab, write_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A real checkpoint of the small model after one step (copied per test)."""
    out = tmp_path_factory.mktemp("ckpt")
    trainer = make_trainer()
    trainer.train_step()
    trainer.save(out)
    trainer.close()
    return out


@pytest.fixture
def ckpt(saved: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(saved, out, symlinks=True)
    return out / "ckpt-000001"


def edit_state(ckpt: Path, change) -> None:
    state = json.loads((ckpt / ck.STATE).read_text())
    change(state)
    (ckpt / ck.STATE).write_text(json.dumps(state))


def rename_file(state: dict, old: str, new: str) -> None:
    state["files"][new] = state["files"].pop(old)


@pytest.mark.parametrize("name", ["/dev/zero", "../model.safetensors", "/etc/passwd", ".hidden"])
def test_file_names_must_be_plain_names(ckpt: Path, name: str) -> None:
    edit_state(ckpt, lambda s: rename_file(s, MODEL_FILE, name))
    with pytest.raises(CheckpointError, match="expected a plain file name in the checkpoint"):
        load_model(ckpt)


def test_a_fifo_is_refused_and_a_link_placed_in_the_checkpoint_followed(
    ckpt: Path, tmp_path: Path
) -> None:
    data = (ckpt / MODEL_FILE).read_bytes()
    (ckpt / MODEL_FILE).unlink()
    os.mkfifo(ckpt / MODEL_FILE)  # reading it would block forever
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=r"is a FIFO \(named pipe\)"):
        load_model(ckpt)
    assert time.monotonic() - start < 10
    (ckpt / MODEL_FILE).unlink()
    (tmp_path / "elsewhere").write_bytes(data)
    (ckpt / MODEL_FILE).symlink_to(tmp_path / "elsewhere")
    load_model(ckpt)  # the same bytes (their digest is checked) through a link
    (tmp_path / "elsewhere").write_bytes(data[:-1] + b"!")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_model(ckpt)


@pytest.mark.parametrize(
    ("layers", "message"),
    [(10**6, "loading them needs .* bytes, more than this machine"),
     (10**4, "model.safetensors is .* bytes; the model config implies")],
)  # fmt: skip
def test_many_layers_fail_fast_before_allocating(ckpt: Path, layers: int, message: str) -> None:
    edit_state(ckpt, lambda s: s["model"].update(n_layers=layers))
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=message):
        load_model(ckpt)
    assert time.monotonic() - start < 30  # 10**6 layers took 55 s and 4.6 GB before


def test_a_vocabulary_beyond_memory_is_a_checkpoint_error(ckpt: Path) -> None:
    edit_state(ckpt, lambda s: s["model"].update(vocab_size=10**15))
    with pytest.raises(
        CheckpointError, match="loading them needs .* bytes, more than this machine"
    ):
        load_model(ckpt)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dim", 16.5, "dim must be an integer, found 16.5"),
        ("n_heads", True, "n_heads must be an integer, found True"),
        ("n_kv_heads", 3, r"n_heads \(2\) must be a multiple of n_kv_heads \(3\)"),
        ("norm_eps", "small", "norm_eps must be a finite number > 0"),
        ("head_dim", -4, "head_dim must be at least 1"),
    ],
)
def test_model_config_types_and_ranges(ckpt: Path, field: str, value, message: str) -> None:
    edit_state(ckpt, lambda s: s["model"].update({field: value}))
    with pytest.raises(CheckpointError, match=message):
        load_model(ckpt)


def test_file_size_is_checked_against_the_config_before_reading(ckpt: Path) -> None:
    with open(ckpt / MODEL_FILE, "r+b") as f:
        f.truncate(8 * 2**30)  # a sparse 8 GiB model.safetensors
    with pytest.raises(CheckpointError, match=f"is {8 * 2**30} bytes; the model config implies"):
        load_model(ckpt)


def test_a_header_that_lies_about_its_length(ckpt: Path) -> None:
    data = bytearray((ckpt / MODEL_FILE).read_bytes())
    data[:8] = (2**40).to_bytes(8, "little")
    (ckpt / MODEL_FILE).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="a header of 1099511627776 bytes"):
        load_model(ckpt)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("loss_scaler", "scale"), 1e400),  # json turns it into inf
        (("optimizer", "t"), 10**400),
        (("data", "cursor"), -1),
        (("data", "seed"), "zero"),
        (("rng", "state"), {"state": 2**200, "inc": 1}),
    ],
)
def test_restore_rejects_bad_counters_without_changing_the_trainer(ckpt: Path, path, value) -> None:
    edit_state(ckpt, lambda s: s[path[0]].__setitem__(path[1], value))
    trainer = make_trainer()
    before = trainer.params.flat.copy()
    with pytest.raises(CheckpointError, match="state.json"):
        trainer.restore(ckpt)
    assert np.array_equal(trainer.params.flat, before) and trainer.step == 0
    trainer.close()


def test_deeply_nested_state_json_is_a_checkpoint_error(ckpt: Path) -> None:
    (ckpt / ck.STATE).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="cannot read state.json"):
        load_model(ckpt)


def test_the_tokenizer_travels_inside_the_checkpoint(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    write_tokenizer(data_dir / "tokenizer.bin", small_vocab())
    tokenizer = Llama2cTokenizer(data_dir / "tokenizer.bin")
    tokens = np.array(tokenizer.encode("ab ab a b " * 40), dtype=np.int64)
    cfg = SMALL.__class__(**{**SMALL.to_dict(), "vocab_size": tokenizer.vocab_size})
    trainer = Trainer(
        cfg, TrainConfig(steps=1, batch_size=1, warmup=1), tokens, "reference", tokenizer
    )
    trainer.save(tmp_path / "run")
    trainer.close()
    shutil.rmtree(data_dir)  # the original file is gone: generate must not need it
    _, _, state, loaded = load_model(tmp_path / "run")
    assert loaded.pieces == tokenizer.pieces and state["tokenizer"]["file"] == "tokenizer.bin"
    assert loaded.decode(loaded.encode("ab b")) == "ab b"
    # --tokenizer replaces it; one of another vocabulary size does not fit the model
    write_tokenizer(tmp_path / "other.bin", small_vocab()[:-1])
    from anekit.errors import UsageError

    with pytest.raises(UsageError, match=f"trained with {tokenizer.vocab_size}"):
        load_model(tmp_path / "run", Llama2cTokenizer(tmp_path / "other.bin"))


def test_an_exploding_learning_rate_stops_training_without_saving(tmp_path: Path) -> None:
    cfg = TrainConfig(steps=3, batch_size=1, warmup=1, lr=1e300, min_lr=0.0, grad_clip=0.0)
    trainer = Trainer(SMALL, cfg, TOKENS, backend="reference")
    trainer.save(tmp_path)  # step 0: finite
    with pytest.raises(TrainingDiverged, match=r"step 1: \d+ parameters became non-finite"):
        for _ in range(cfg.steps):
            trainer.train_step()
    trainer.close()
    assert ck.latest_checkpoint(tmp_path).name == "ckpt-000000"
    _, params, _, _ = load_model(tmp_path)
    assert np.isfinite(params.flat).all()
