"""The training loop: micro-batches, gradient accumulation, loss scaling, clipping, AdamW, checkpoints."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.config import physical_memory
from anekit.errors import CheckpointError, TrainingDiverged, UsageError
from anekit.train.checkpoint import (
    Expected,
    check_size,
    is_count,
    load_files,
    read_state,
    save_checkpoint,
)
from anekit.train.config import ModelConfig, TrainConfig
from anekit.train.data import Batches, ByteTokenizer, Tokenizer, tokenizer_from
from anekit.train.distributed import Communicator
from anekit.train.interrupt import StopRequest
from anekit.train.model import Model, training_bytes
from anekit.train.optim import AdamW, LossScaler, clip_grad_norm, learning_rate
from anekit.train.params import Params, ParamSpec, init_params, param_specs

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
    stop: bool = False  # Ctrl-C asked the run to stop after this step
    comm_seconds: float = 0.0  # inside the gradient all-reduce (waiting for peers included)

    def record(self) -> dict[str, Any]:
        """One JSON log line."""
        return {
            "step": self.step,
            "loss": self.loss,  # exact: resumed runs are compared bit for bit
            "lr": self.lr,
            "grad_norm": round(self.grad_norm, 6),
            "loss_scale": self.loss_scale,
            "skipped": self.skipped,
            "ms": round(self.seconds * 1e3, 3),
            "tokens_per_s": round(self.tokens / self.seconds, 1) if self.seconds > 0 else None,
            "comm_ms": round(self.comm_seconds * 1e3, 3),
        }


class Trainer:
    """Trains a :class:`Model` on a token array; checkpoints resume bit-exactly on the reference backend."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        tokens: np.ndarray,
        backend: str | None = None,
        tokenizer: Tokenizer | None = None,
        chip: str | None = None,
        comm: Communicator | None = None,
        numerics: str | None = None,
    ) -> None:
        check_memory(model_cfg, train_cfg.batch_size)  # before the first allocation
        self.comm = comm or Communicator()
        self.model_cfg = model_cfg
        self.cfg = train_cfg
        self.tokenizer = tokenizer or ByteTokenizer()
        self.rng = np.random.default_rng(train_cfg.seed)
        self.params = init_params(model_cfg, self.rng)
        self.grads = self.params.zeros_like()
        self._micro: Params | None = None  # with grad_accum > 1: one micro-batch's gradient
        self.opt = AdamW(self.params, train_cfg)
        self.scaler = LossScaler(train_cfg.loss_scale, train_cfg.scale_growth_interval)
        self.data = Batches(tokens, model_cfg.seq_len, train_cfg.seed)
        self.step = 0
        self.model = Model(model_cfg, train_cfg.batch_size, backend, chip=chip, numerics=numerics)
        self.model.load(self.params)

    @property
    def micro_batches(self) -> int:
        """Micro-batches per optimizer step, over every rank."""
        return self.comm.world_size * self.cfg.grad_accum

    @property
    def tokens_per_step(self) -> int:
        return self.cfg.batch_size * self.micro_batches * self.model_cfg.seq_len

    def train_step(self, stop: StopRequest | None = None) -> StepResult:
        """One optimizer step over ``grad_accum`` micro-batches on each of the world's ranks.

        Rank r of W takes micro-batches r, r + W, r + 2W, ... of the order one process
        would take, so W ranks with ``grad_accum`` A repeat one process with W * A. The
        summed gradients, the loss and the stop flag travel in one bucketed all-reduce;
        the finite check, clipping and AdamW then see the same numbers on every rank.
        ``stop`` is read once this rank's gradients are complete: ``StepResult.stop`` says
        whether Ctrl-C, on any rank, asked the run to stop after this step.
        """
        start = time.perf_counter()
        cfg, comm = self.cfg, self.comm
        lr = learning_rate(self.step, cfg)
        scale = self.scaler.scale
        self.grads.flat[:] = 0.0
        self.model.overflows = 0
        loss = 0.0
        for i in range(self.micro_batches):
            if i % comm.world_size != comm.rank:
                self.data.skip(cfg.batch_size)
                continue
            first = i < comm.world_size
            # each micro-batch's gradient is made whole, then added, as a rank's is: so the
            # sums are the same ones whether micro-batches share a process or not
            target = self.grads if first else self._micro_grads()
            batch = self.data.next(cfg.batch_size)
            loss += self.model.loss_and_grads(
                self.params, target, batch, scale / self.micro_batches
            )
            if not first:
                self.grads.flat += target.flat
        # under an engine profile an overflow comes out finite (N8): the cliff events tell it
        stopping = stop is not None and stop.requested
        stats = np.array([loss, stopping, self.model.overflows > 0], np.float32)
        before = comm.seconds
        comm.all_reduce([self.grads.flat, stats], f"gradient all-reduce of step {self.step + 1}")
        comm_seconds = comm.seconds - before
        stopping = bool(stats[1])
        self.grads.flat *= np.float32(1.0 / scale)
        finite = bool(np.isfinite(self.grads.flat).all()) and not stats[2]
        applied = self.scaler.update(finite)
        norm = clip_grad_norm(self.grads, cfg.grad_clip) if finite else float("inf")
        if applied:
            with np.errstate(over="ignore", invalid="ignore"):  # _check_finite reports it
                self.opt.update(self.params, self.grads, lr)
            self._check_finite(lr)
            self.model.load(self.params)
        self.step += 1
        return StepResult(
            step=self.step,
            loss=float(stats[0]) / self.micro_batches,
            lr=lr,
            grad_norm=norm,
            loss_scale=scale,
            skipped=not applied,
            seconds=time.perf_counter() - start,
            tokens=self.tokens_per_step,
            stop=stopping,
            comm_seconds=comm_seconds,
        )

    def _micro_grads(self) -> Params:
        """A zeroed buffer for one micro-batch's gradient (made on first use)."""
        if self._micro is None:
            self._micro = self.params.zeros_like()
        else:
            self._micro.flat[:] = 0.0
        return self._micro

    def _check_finite(self, lr: float) -> None:
        """TrainingDiverged when the update left a parameter inf or NaN; nothing is saved."""
        bad = ~np.isfinite(self.params.flat)
        if not bad.any():
            return
        index = int(np.argmax(bad))
        ends = np.cumsum([s.size for s in self.params.specs])
        i = int(np.searchsorted(ends, index, side="right"))
        spec = self.params.specs[i]
        at = np.unravel_index(index - int(ends[i]) + spec.size, spec.shape)
        raise TrainingDiverged(
            f"step {self.step + 1}: {int(bad.sum())} parameters became non-finite (first: "
            f"{spec.name}[{', '.join(map(str, at))}] = {self.params.flat[index]}) with learning "
            f"rate {lr:g}; the run "
            "stops without saving them (lower --lr, or resume from the last checkpoint)",
            step=self.step + 1,
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
            "tokenizer": self.tokenizer.describe(),
            "world_size": self.comm.world_size,  # the global batch is world x batch x accum
        }
        return save_checkpoint(
            out_dir, self.step, tensors, meta, files=self.tokenizer.stored_files()
        )

    def restore(self, path: str | Path) -> dict[str, Any]:
        """Load a checkpoint of the same model into this trainer; CheckpointError if it does not fit.

        Everything is checked before anything is changed: the model config and data first,
        then every file's size and tensors, then the saved counters and RNG state.
        """
        state = read_state(path)
        where = state["directory"]
        saved = state.get("model")
        mine = self.model_cfg.to_dict()
        if not isinstance(saved, dict):
            raise CheckpointError(f"state.json has no model config, found {saved!r}", path=where)
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
        counters = _counters(state, where)
        try:
            batches = Batches(self.data.tokens, self.model_cfg.seq_len, **counters["data"])
        except ValueError as e:  # a cursor past this data's windows
            raise CheckpointError(f"state.json: {e}", path=where) from e
        files = load_files(state, self._expected())
        _copy_into(self.params, files[MODEL_FILE], "")
        _copy_into(self.opt.m, files[OPTIMIZER_FILE], "m.")
        _copy_into(self.opt.v, files[OPTIMIZER_FILE], "v.")
        self.step = state["step"]
        self.rng.bit_generator.state = counters["rng"]
        self.data = batches
        self.opt.t = counters["t"]
        self.scaler.scale, self.scaler.good_steps = counters["scale"], counters["good_steps"]
        self.model.load(self.params)
        return state

    def share_state(self) -> None:
        """Give every rank rank 0's weights, moments and counters, then check they agree.

        Rank 0 alone reads a checkpoint (on several Macs only its disk may hold one).
        """
        comm = self.comm
        if comm.world_size == 1:
            return
        data = self.data
        counters = np.array(
            [self.step, data.seed, data.epoch, data.cursor, self.opt.t, self.scaler.good_steps],
            np.int64,
        )
        scale = np.array([self.scaler.scale], np.float64)
        arrays = [self.params.flat, self.opt.m.flat, self.opt.v.flat, counters, scale]
        comm.broadcast(arrays, 0, "broadcast of rank 0's weights and optimizer state")
        step, seed, epoch, cursor, t, good = (int(c) for c in counters)
        self.step, self.opt.t = step, t
        self.data = Batches(data.tokens, self.model_cfg.seq_len, seed, epoch, cursor)
        self.scaler.scale, self.scaler.good_steps = float(scale[0]), good
        self.model.load(self.params)
        self.check_parameters()

    def check_parameters(self) -> None:
        """DistributedError unless every rank holds the same parameters (a CRC-32 compared)."""
        self.comm.check_equal(self.params.flat, f"the parameters after step {self.step}")

    def _expected(self) -> dict[str, Expected]:
        """The tensors each checkpoint file must hold for this model."""
        shapes = {s.name: s.shape for s in self.params.specs}
        moments = {f"{m}.{k}": v for m in ("m", "v") for k, v in shapes.items()}
        return {MODEL_FILE: shapes, OPTIMIZER_FILE: moments}

    def close(self) -> None:
        self.model.close()


def data_fingerprint(tokens: np.ndarray) -> str:
    """A short identity of a token array: its length and a hash of its first and last 64 KiB."""
    head, tail = np.asarray(tokens[:65536]), np.asarray(tokens[-65536:])
    digest = hashlib.sha256(
        head.tobytes() + tail.tobytes() + str(tokens.dtype).encode()
    ).hexdigest()
    return f"{len(tokens)} tokens, sha256 {digest[:16]}"


def load_model(
    path: str | Path, tokenizer: Tokenizer | None = None
) -> tuple[ModelConfig, Params, dict[str, Any], Tokenizer]:
    """The config, parameters, state and tokenizer of a checkpoint (for sampling; no optimizer).

    The tokenizer is the one stored in the checkpoint unless ``tokenizer`` replaces it (its
    vocabulary must have the model's size). The config is validated, and the parameter
    file's size checked against it and against this machine's memory, before reading it.
    """
    state = read_state(path)
    where = state["directory"]
    try:
        cfg = ModelConfig.from_dict(state["model"])
        cfg.block(1)  # the kernels' own constraints (heads a multiple of KV heads, ...)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"state.json has no valid model config: {e}", path=where) from e
    specs = param_specs_checked(cfg, state)
    files = load_files(state, {MODEL_FILE: {s.name: s.shape for s in specs}})
    if tokenizer is None:
        try:
            tokenizer = tokenizer_from(state.get("tokenizer", {"kind": "bytes"}), files)
        except UsageError as e:
            raise CheckpointError(f"cannot rebuild the tokenizer: {e}", path=where) from e
    if tokenizer.vocab_size != cfg.vocab_size:
        raise UsageError(
            f"the tokenizer has {tokenizer.vocab_size} tokens; the model at {where} was "
            f"trained with {cfg.vocab_size}"
        )
    params = Params(specs)
    _copy_into(params, files[MODEL_FILE], "")
    return cfg, params, state, tokenizer


def param_specs_checked(cfg: ModelConfig, state: dict[str, Any]) -> list[ParamSpec]:
    """The parameters of a checkpoint's config, once the model is known to fit in memory and file.

    Loading holds the file's bytes and the parameters decoded from them: twice the
    parameters' size. That, and the parameter file's size, are checked before
    ``param_specs`` builds a list as long as the model.
    """
    where = state["directory"]
    need = 2 * 4 * cfg.n_params()
    if need > physical_memory():
        raise CheckpointError(
            f"the model config has {cfg.n_params()} parameters; loading them needs {need} "
            f"bytes, more than this machine's {physical_memory()}",
            path=where,
        )
    # 9 tensors a layer (7 matrices, 2 gains), the embedding and the final gain
    check_size(state, MODEL_FILE, 4 * cfg.n_params(), 9 * cfg.n_layers + 2)
    return param_specs(cfg)


def check_memory(cfg: ModelConfig, batch: int) -> None:
    """UsageError when a training step of ``batch`` sequences cannot fit in physical memory."""
    parts = training_bytes(cfg, batch)
    total, have = sum(parts.values()), physical_memory()
    if total > have:
        detail = ", ".join(f"{k} {v / 2**30:.1f} GiB" for k, v in parts.items())
        raise UsageError(
            f"batch size {batch}: a training step of config {cfg.name} needs at least "
            f"{total / 2**30:.1f} GiB ({detail}); this machine has {have / 2**30:.1f} GiB"
        )


def _counters(state: dict[str, Any], where: str) -> dict[str, Any]:
    """The saved counters and RNG state, each checked for type and range before use."""
    try:
        data, opt, scaler = state["data"], state["optimizer"], state["loss_scaler"]
        counters = {
            "data": {k: data[k] for k in ("seed", "epoch", "cursor")},
            "t": opt["t"],
            "good_steps": scaler["good_steps"],
            "scale": scaler["scale"],
            "rng": state["rng"],
        }
        bad = [k for k, v in counters["data"].items() if not is_count(v)]
        bad += [k for k in ("t", "good_steps") if not is_count(counters[k])]
        scale = counters["scale"]
        if not (isinstance(scale, (int, float)) and 0 < scale <= 2.0**24):
            bad.append("loss_scaler.scale")
        if bad:
            raise ValueError(f"{', '.join(bad)} out of range or of the wrong type")
        counters["scale"] = float(scale)
        rng = np.random.default_rng()
        rng.bit_generator.state = counters["rng"]  # the setter validates the saved state
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise CheckpointError(f"state.json is incomplete or invalid: {e!r}", path=where) from e
    return counters


def _copy_into(target: Params, arrays: dict[str, np.ndarray], prefix: str) -> None:
    """Copy ``arrays`` (checked by ``load_files`` to match) into ``target``'s views."""
    for name in target:
        target[name][...] = arrays[prefix + name]
