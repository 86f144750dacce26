"""Checkpoints: round trip, atomic replacement, corruption and mismatch are clear errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")

from anekit.errors import CheckpointError  # noqa: E402
from anekit.train import checkpoint as ck  # noqa: E402
from anekit.train.config import ModelConfig, TrainConfig  # noqa: E402
from anekit.train.loop import Trainer  # noqa: E402

SMALL = ModelConfig(
    name="small", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, hidden_dim=64,
    vocab_size=256, seq_len=16,
)  # fmt: skip
TOKENS = np.frombuffer(b"the quick brown fox jumps over the lazy dog. " * 20, dtype=np.uint8)


def tensors(value: float) -> dict[str, dict[str, np.ndarray]]:
    return {"a.safetensors": {"w": np.full((2, 3), value, np.float32)}}


def test_round_trip_latest_and_pruning(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        ck.save_checkpoint(tmp_path, step, tensors(step), {"note": step}, keep=2)
    assert (tmp_path / "LATEST").read_text().strip() == "ckpt-000003"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "ckpt-000002", "ckpt-000003"]
    state, loaded = ck.load_checkpoint(tmp_path)
    assert state["step"] == 3 and state["note"] == 3
    assert np.array_equal(loaded["a.safetensors"]["w"], np.full((2, 3), 3, np.float32))
    state, _ = ck.load_checkpoint(tmp_path / "ckpt-000002")  # a directory named directly
    assert state["step"] == 2


def test_a_failed_save_keeps_the_last_good_checkpoint(tmp_path: Path, monkeypatch) -> None:
    ck.save_checkpoint(tmp_path, 1, tensors(1.0), {})
    real = ck.write_synced

    def fail_on_state(path: Path, data: bytes) -> None:
        if path.name == ck.STATE:
            raise OSError("disk full")
        real(path, data)

    monkeypatch.setattr(ck, "write_synced", fail_on_state)
    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(tmp_path, 2, tensors(2.0), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "ckpt-000001"]  # no debris
    state, loaded = ck.load_checkpoint(tmp_path)
    assert state["step"] == 1 and loaded["a.safetensors"]["w"][0, 0] == 1.0


def test_corrupt_files_are_named(tmp_path: Path) -> None:
    path = ck.save_checkpoint(tmp_path, 1, tensors(1.0), {})
    data = bytearray((path / "a.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (path / "a.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="a.safetensors is corrupt: SHA-256"):
        ck.load_checkpoint(tmp_path)
    (path / ck.STATE).write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot read state.json"):
        ck.load_checkpoint(tmp_path)
    (path / ck.STATE).write_text(json.dumps({"format": "something-else/9"}))
    with pytest.raises(CheckpointError, match="expected format 'anekit-train-checkpoint/1'"):
        ck.load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="no checkpoint here"):
        ck.load_checkpoint(tmp_path / "nowhere")


def make_trainer(cfg: ModelConfig = SMALL, tokens: np.ndarray = TOKENS) -> Trainer:
    return Trainer(cfg, TrainConfig(steps=4, batch_size=1, warmup=1), tokens, backend="reference")


def test_resume_refuses_another_model_or_other_data(tmp_path: Path) -> None:
    trainer = make_trainer()
    trainer.train_step()
    trainer.save(tmp_path)
    trainer.close()
    other = make_trainer(dataclasses.replace(SMALL, hidden_dim=96))
    with pytest.raises(
        CheckpointError, match=r"another model \(hidden_dim: checkpoint 64, run 96\)"
    ):
        other.restore(tmp_path)
    other.close()
    other = make_trainer(tokens=TOKENS[::-1].copy())
    with pytest.raises(CheckpointError, match="trained on other data"):
        other.restore(tmp_path)
    other.close()


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    trainer = make_trainer()
    path = trainer.save(tmp_path)
    state = json.loads((path / ck.STATE).read_text())
    params = dict(trainer.params.views)
    del params["final_norm"]
    ck.save_checkpoint(tmp_path, 5, {"model.safetensors": params, "optimizer.safetensors": {}},
                       {k: v for k, v in state.items() if k not in ("format", "step", "files")})  # fmt: skip
    with pytest.raises(CheckpointError, match=r"missing \['final_norm'\]"):
        trainer.restore(tmp_path)
    trainer.close()
