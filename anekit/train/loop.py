"""The training loop: micro-batches, gradient accumulation, loss scaling, clipping, AdamW, checkpoints."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import CheckpointError
from anekit.train.checkpoint import load_checkpoint, save_checkpoint
from anekit.train.config import ModelConfig, TrainConfig
from anekit.train.data import Batches
from anekit.train.model import Model
from anekit.train.optim import AdamW, LossScaler, clip_grad_norm, learning_rate
from anekit.train.params import Params, init_params, param_specs

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"


@dataclass(frozen=True)
class StepResult:
    """What one optimizer step did."""

    step: int  # 1-based number of this step
    loss: float  # mean over its micro-batches
    lr: float
    grad_norm: float  # before clipping, unscaled
    loss_scale: float  # the scale this step used
    skipped: bool  # gradients overflowed fp16; no update
    seconds: float
    tokens: int

    def record(self) -> dict[str, Any]:
        """One JSON log line."""
        return {
            "step": self.step,
            "loss": round(self.loss, 6),
            "lr": self.lr,
            "grad_norm": round(self.grad_norm, 6),
            "loss_scale": self.loss_scale,
            "skipped": self.skipped,
            "ms": round(self.seconds * 1e3, 3),
            "tokens_per_s": round(self.tokens / self.seconds, 1) if self.seconds > 0 else None,
        }


class Trainer:
    """Trains a :class:`Model` on a token array; checkpoints resume bit-exactly on the reference backend."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        tokens: np.ndarray,
        backend: str | None = None,
        tokenizer: dict[str, Any] | None = None,
        chip: str | None = None,
    ) -> None:
        self.model_cfg = model_cfg
        self.cfg = train_cfg
        self.tokenizer = tokenizer or {"kind": "bytes"}
        self.rng = np.random.default_rng(train_cfg.seed)
        self.params = init_params(model_cfg, self.rng)
        self.grads = self.params.zeros_like()
        self.opt = AdamW(self.params, train_cfg)
        self.scaler = LossScaler(train_cfg.loss_scale, train_cfg.scale_growth_interval)
        self.data = Batches(tokens, model_cfg.seq_len, train_cfg.seed)
        self.step = 0
        self.model = Model(model_cfg, train_cfg.batch_size, backend, chip=chip)
        self.model.load(self.params)

    @property
    def tokens_per_step(self) -> int:
        return self.cfg.batch_size * self.cfg.grad_accum * self.model_cfg.seq_len

    def train_step(self) -> StepResult:
        """One optimizer step over ``grad_accum`` micro-batches."""
        start = time.perf_counter()
        cfg = self.cfg
        lr = learning_rate(self.step, cfg)
        scale = self.scaler.scale
        self.grads.flat[:] = 0.0
        losses = [
            self.model.loss_and_grads(
                self.params, self.grads, self.data.next(cfg.batch_size), scale / cfg.grad_accum
            )
            for _ in range(cfg.grad_accum)
        ]
        self.grads.flat *= np.float32(1.0 / scale)
        finite = bool(np.isfinite(self.grads.flat).all())
        applied = self.scaler.update(finite)
        norm = clip_grad_norm(self.grads, cfg.grad_clip) if finite else float("inf")
        if applied:
            self.opt.update(self.params, self.grads, lr)
            self.model.load(self.params)
        self.step += 1
        return StepResult(
            step=self.step,
            loss=float(np.mean(losses)),
            lr=lr,
            grad_norm=norm,
            loss_scale=scale,
            skipped=not applied,
            seconds=time.perf_counter() - start,
            tokens=self.tokens_per_step,
        )

    # -- checkpoints --------------------------------------------------------------------------
    def save(self, out_dir: str | Path) -> Path:
        """Write a checkpoint of the current state into ``out_dir``."""
        tensors = {
            MODEL_FILE: dict(self.params.views),
            OPTIMIZER_FILE: {
                **{f"m.{k}": v for k, v in self.opt.m.views.items()},
                **{f"v.{k}": v for k, v in self.opt.v.views.items()},
            },
        }
        meta = {
            "model": self.model_cfg.to_dict(),
            "train": self.cfg.to_dict(),
            "rng": self.rng.bit_generator.state,
            "data": self.data.state(),
            "data_id": data_fingerprint(self.data.tokens),
            "optimizer": {"t": self.opt.t},
            "loss_scaler": {"scale": self.scaler.scale, "good_steps": self.scaler.good_steps},
            "tokenizer": self.tokenizer,
        }
        return save_checkpoint(out_dir, self.step, tensors, meta)

    def restore(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint of the same model into this trainer; CheckpointError if it does not fit."""
        state, tensors = load_checkpoint(path)
        where = state["directory"]
        saved = state.get("model", {})
        mine = self.model_cfg.to_dict()
        diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
        if diff:
            detail = ", ".join(
                f"{k}: checkpoint {saved.get(k)!r}, run {mine.get(k)!r}" for k in diff
            )
            raise CheckpointError(f"checkpoint is for another model ({detail})", path=where)
        if state.get("data_id") != data_fingerprint(self.data.tokens):
            raise CheckpointError(
                f"checkpoint was trained on other data ({state.get('data_id')}); this run has "
                f"{data_fingerprint(self.data.tokens)}: resuming needs the same data",
                path=where,
            )
        for name in (MODEL_FILE, OPTIMIZER_FILE):
            if name not in tensors:
                raise CheckpointError(f"missing {name}", path=where)
        _copy_into(self.params, tensors[MODEL_FILE], "", where)
        _copy_into(self.opt.m, tensors[OPTIMIZER_FILE], "m.", where)
        _copy_into(self.opt.v, tensors[OPTIMIZER_FILE], "v.", where)
        try:
            self.step = int(state["step"])
            self.rng.bit_generator.state = state["rng"]
            self.data = Batches(self.data.tokens, self.model_cfg.seq_len, **state["data"])
            self.opt.t = int(state["optimizer"]["t"])
            self.scaler.scale = float(state["loss_scaler"]["scale"])
            self.scaler.good_steps = int(state["loss_scaler"]["good_steps"])
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"state.json is incomplete or invalid: {e}", path=where) from e
        self.model.load(self.params)
        return state

    def close(self) -> None:
        self.model.close()


def data_fingerprint(tokens: np.ndarray) -> str:
    """A short identity of a token array: its length and a hash of its first and last 64 KiB."""
    head, tail = np.asarray(tokens[:65536]), np.asarray(tokens[-65536:])
    digest = hashlib.sha256(
        head.tobytes() + tail.tobytes() + str(tokens.dtype).encode()
    ).hexdigest()
    return f"{len(tokens)} tokens, sha256 {digest[:16]}"


def load_model(path: str | Path) -> tuple[ModelConfig, Params, dict[str, Any]]:
    """The config, parameters and state of a checkpoint (for sampling; no optimizer)."""
    state, tensors = load_checkpoint(path)
    where = state["directory"]
    try:
        cfg = ModelConfig.from_dict(state["model"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"state.json has no valid model config: {e}", path=where) from e
    if MODEL_FILE not in tensors:
        raise CheckpointError(f"missing {MODEL_FILE}", path=where)
    params = Params(param_specs(cfg))
    _copy_into(params, tensors[MODEL_FILE], "", where)
    return cfg, params, state


def _copy_into(target: Params, arrays: dict[str, np.ndarray], prefix: str, where: str) -> None:
    expected = {prefix + name for name in target}
    found = {k for k in arrays if k.startswith(prefix)} if prefix else set(arrays)
    if expected != found:
        missing, extra = sorted(expected - found)[:5], sorted(found - expected)[:5]
        raise CheckpointError(
            f"tensors do not match the model: missing {missing}, unexpected {extra}", path=where
        )
    for name in target:
        src = arrays[prefix + name]
        dst = target[name]
        if src.shape != dst.shape or src.dtype != dst.dtype:
            raise CheckpointError(
                f"tensor {prefix + name}: expected {dst.dtype}{list(dst.shape)}, found {src.dtype}{list(src.shape)}",
                path=where,
            )
        dst[...] = src
