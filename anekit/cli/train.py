"""``anekit train``: train a named config on a text or llama2.c file, checkpoint, resume, sample."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anekit.cli._common import (
    add_backend,
    add_chip,
    add_threads,
    non_negative,
    one_of,
    output_file,
    positive_int,
    progress_bar,
    resolve_chip,
    utf8_text,
)
from anekit.errors import UsageError

# the defaults of the --distributed flags (the package itself loads only when used)
DEFAULT_TIMEOUT = 300.0
DEFAULT_BUCKET_MB = 25.0

if TYPE_CHECKING:
    from anekit.hw.chips import Chip
    from anekit.train.config import ModelConfig, TrainConfig
    from anekit.train.distributed import Communicator


def _configs() -> Iterable[str]:
    from anekit.train.config import CONFIGS

    return sorted(CONFIGS)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default="tiny",
        type=one_of("config", _configs),
        help="model config (default: tiny)",
    )
    parser.add_argument(
        "--data",
        help="training file: .bin (llama2.c uint16 tokens) or text; default: CPython's pydoc topics",
    )
    parser.add_argument(
        "--tokenizer", help="llama2.c tokenizer.bin for a .bin file (default: next to it)"
    )
    parser.add_argument("--steps", type=int, help="optimizer steps (default: the config's)")
    parser.add_argument("--seed", type=non_negative(int), help="initialisation and data-order seed")
    add_backend(parser)
    add_threads(parser)
    parser.add_argument("--out", help="checkpoint directory (default: out/train-CONFIG)")
    parser.add_argument(
        "--resume", action="store_true", help="continue from the latest checkpoint in --out"
    )
    parser.add_argument(
        "--log", type=output_file, help="write one JSON object per step to this .jsonl file"
    )
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--batch-size", type=int, help="sequences per micro-batch")
    parser.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step")
    parser.add_argument("--warmup", type=int, help="warmup steps")
    parser.add_argument(
        "--save-every",
        type=non_negative(int),
        default=100,
        help="checkpoint every N steps (0: only at the end)",
    )
    add_chip(
        parser,
        "the kernels are made for it and checked before compiling; the cost model predicts ANE time for it",
    )
    parser.add_argument(
        "--sample-tokens",
        type=non_negative(int),
        default=200,
        help="tokens to sample at the end (0: none)",
    )
    # checked as the arguments are parsed: a prompt that cannot be encoded must not cost a run
    parser.add_argument("--prompt", default="", type=utf8_text, help="prompt for the final sample")
    dist = parser.add_argument_group("data-parallel training (docs/training.md)")
    dist.add_argument(
        "--distributed",
        choices=("mlx", "torch"),
        help="train on several ranks with MLX distributed or torch.distributed (Gloo); "
        "rank and world size come from mlx.launch, torchrun or --nproc",
    )
    dist.add_argument(
        "--nproc", type=positive_int, help="start and supervise N ranks on this machine"
    )
    dist.add_argument(
        "--dist-timeout",
        type=non_negative(float),
        default=DEFAULT_TIMEOUT,
        help=f"seconds a collective may wait for the other ranks (default {DEFAULT_TIMEOUT:g})",
    )
    dist.add_argument(
        "--bucket-mb",
        type=non_negative(float),
        default=DEFAULT_BUCKET_MB,
        help=f"all-reduce bucket size in MiB (default {DEFAULT_BUCKET_MB:g})",
    )
    dist.add_argument(
        "--check-every",
        type=non_negative(int),
        default=100,
        help="compare the ranks' parameters every N steps (0: at the start and end only)",
    )


def run(args: argparse.Namespace) -> int:
    if args.nproc is not None or args.distributed is not None:
        _check_distributed_flags(args)
    if args.nproc is not None:
        from anekit.train.distributed.launch import supervise

        command = [sys.executable, "-m", "anekit", *_without_nproc(args.argv)]
        return supervise(command, args.distributed, args.nproc, args.dist_timeout)
    comm = _connect(args)
    try:
        if comm.rank == 0:
            return _run(args, comm)
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # rank 0 reports
            return _run(args, comm)
    finally:
        comm.close()


def _run(args: argparse.Namespace, comm: Communicator) -> int:
    from anekit.train.config import get_config
    from anekit.train.data import load_data

    named = get_config(args.config)
    tokens, tokenizer = load_data(args.data, args.tokenizer)
    model_cfg = named.model
    if tokenizer.vocab_size != model_cfg.vocab_size:
        print(
            f"vocabulary: {model_cfg.vocab_size} -> {tokenizer.vocab_size} (the data's tokenizer)"
        )
        model_cfg = dataclasses.replace(model_cfg, vocab_size=tokenizer.vocab_size)
    if len(tokens) <= model_cfg.seq_len:
        raise UsageError(
            f"{args.data or 'the default corpus'} has {len(tokens)} tokens; "
            f"config {args.config} needs at least {model_cfg.seq_len + 1} (seq_len + 1)"
        )
    out = Path(args.out or f"out/train-{args.config}")
    train_cfg = _agreed_settings(comm, lambda: _prepare(args, named.train, out, comm.world_size))
    from anekit.bench.threads import pinned

    with pinned(args.threads):  # steady step times on a shared machine, as bench measures
        return _train(args, model_cfg, train_cfg, tokens, tokenizer, out, comm)


def _check_distributed_flags(args: argparse.Namespace) -> None:
    if args.distributed is None:
        raise UsageError("--nproc starts ranks of an engine: pass --distributed mlx or torch")
    if args.dist_timeout <= 0 or args.bucket_mb <= 0:
        raise UsageError(
            f"--dist-timeout and --bucket-mb must be > 0, found {args.dist_timeout:g} "
            f"and {args.bucket_mb:g}"
        )


def _without_nproc(argv: list[str]) -> list[str]:
    """The command line a rank runs: the supervisor's, without ``--nproc N``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def _connect(args: argparse.Namespace) -> Communicator:
    """This process's communicator: the engine's group, or a world of one."""
    from anekit.train.distributed import Communicator

    if args.distributed is None:
        return Communicator()
    from anekit.train.distributed.engines import connect

    return connect(args.distributed, args.dist_timeout, int(args.bucket_mb * 2**20))


def _agreed_settings(comm: Communicator, prepare: Callable[[], TrainConfig]) -> TrainConfig:
    """Rank 0's run settings (or its error), on every rank: only rank 0 reads --out."""
    from anekit.train.config import TrainConfig

    return TrainConfig.from_dict(_on_rank_0(comm, lambda: prepare().to_dict()))


def _on_rank_0(comm: Communicator, action: Callable[[], Any]) -> Any:
    """``action()``'s JSON result on every rank, run by rank 0; its error stops every rank at once."""
    from anekit.errors import AnekitError, DistributedError

    if comm.rank == 0:
        try:
            result = action()
        except AnekitError as e:
            comm.broadcast_json({"error": str(e)})
            raise
        comm.broadcast_json({"result": result})
        return result
    reply = comm.broadcast_json(None)
    if "error" in reply:
        raise DistributedError(f"rank 0 refused the run: {reply['error']}", rank=0)
    return reply["result"]


def _prepare(args: argparse.Namespace, default: TrainConfig, out: Path, world: int) -> TrainConfig:
    """On rank 0: the run's settings, after the checks on --out a new run or a resume needs."""
    from anekit.train.checkpoint import latest_checkpoint, sweep_temporaries

    sweep_temporaries(out)  # what a killed run left
    existing = latest_checkpoint(out)
    if existing is not None and not args.resume:
        raise UsageError(
            f"{out} already holds a run (latest: {existing.name}); "
            "pass --resume to continue it or choose another --out"
        )
    try:
        return _train_config(args, default, out, world)
    except ValueError as e:
        raise UsageError(str(e)) from e


def _train_config(
    args: argparse.Namespace, default: TrainConfig, out: Path, world: int = 1
) -> TrainConfig:
    """The run's settings: the config's (or, resuming, the checkpoint's), then the flags given."""
    from anekit.train.config import TrainConfig

    base = default
    if args.resume:
        from anekit.errors import CheckpointError
        from anekit.train.checkpoint import read_state

        state = read_state(out)
        try:
            base = TrainConfig.from_dict(state["train"])
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(
                f"state.json has no valid train config: {e!r}", path=state["directory"]
            ) from e
        saved_world = state.get("world_size", 1)
    flags = {
        "steps": args.steps,
        "seed": args.seed,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "grad_accum": args.grad_accum,
        "warmup": args.warmup,
    }
    changes = {k: v for k, v in flags.items() if v is not None}
    if "lr" in changes and base.min_lr > changes["lr"]:
        changes["min_lr"] = changes["lr"] / 10
    if "steps" in changes and base.warmup >= changes["steps"] and "warmup" not in changes:
        changes["warmup"] = max(changes["steps"] // 10, 1)
    cfg = dataclasses.replace(base, **changes)
    if args.resume:
        _check_global_batch(saved_world, base, world, cfg, state["directory"])
    return cfg


def _check_global_batch(
    saved_world: Any, saved: TrainConfig, world: int, cfg: TrainConfig, where: str
) -> None:
    """CheckpointError unless world x batch x grad-accum is the checkpoint's (the data order's unit)."""
    from anekit.errors import CheckpointError

    if isinstance(saved_world, bool) or not isinstance(saved_world, int) or saved_world < 1:
        raise CheckpointError(f"state.json: world_size {saved_world!r} is not a count", path=where)
    before = saved_world * saved.batch_size * saved.grad_accum
    now = world * cfg.batch_size * cfg.grad_accum
    if before == now:
        return
    hint = ""
    if before % (world * cfg.batch_size) == 0:
        hint = f"; with {world} rank(s) of batch {cfg.batch_size}, pass --grad-accum {before // (world * cfg.batch_size)}"
    raise CheckpointError(
        f"the checkpoint's global batch is {saved_world} x {saved.batch_size} x "
        f"{saved.grad_accum} = {before} sequences (world size x batch size x grad-accum); "
        f"this run's is {world} x {cfg.batch_size} x {cfg.grad_accum} = {now}: resuming needs "
        f"the same, or the data order and schedule would not continue{hint}",
        path=where,
    )


def _train(
    args,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    tokens,
    tokenizer,
    out: Path,
    comm: Communicator,
) -> int:
    import numpy as np

    from anekit.train.loop import Trainer, data_fingerprint

    chip = resolve_chip(args.chip)
    trainer = Trainer(model_cfg, train_cfg, tokens, args.backend, tokenizer, chip.name, comm)
    try:
        run = json.dumps([model_cfg.to_dict(), data_fingerprint(tokens)]).encode()
        comm.check_equal(run, "the model config and training data")
        if args.resume:
            _on_rank_0(comm, lambda: _restore(trainer, out))
        trainer.share_state()
        _print_header(trainer, chip)
        history = _loop(trainer, out, args)
        trainer.check_parameters()
        if trainer.step >= train_cfg.steps and args.sample_tokens > 0 and comm.rank == 0:
            _print_sample(trainer, tokenizer, args)
        if history:
            tail = history[-min(20, len(history)) :]
            print(
                f"loss {history[0]:.3f} at the first step -> {np.mean(tail):.3f} "
                f"(mean of the last {len(tail)}) over {len(history)} steps"
            )
    finally:
        trainer.close()
    return 0


def _restore(trainer, out: Path) -> None:
    """Load the latest checkpoint in ``out`` into ``trainer`` and say so."""
    state = trainer.restore(out)
    print(f"resumed from {state['directory']} at step {trainer.step}")
    if trainer.step >= trainer.cfg.steps:
        print(f"nothing to train: the run already has {trainer.step} of {trainer.cfg.steps} steps")


def _print_header(trainer, chip: Chip) -> None:
    m, c = trainer.model_cfg, trainer.cfg
    print(
        f"config {m.name}: {m.n_params() / 1e6:.2f}M parameters, {m.n_layers} layers, dim {m.dim}, "
        f"heads {m.n_heads}/{m.n_kv_heads}, hidden {m.hidden_dim}, vocab {m.vocab_size}, seq {m.seq_len}"
    )
    print(
        f"training: {c.steps} steps of {trainer.tokens_per_step} tokens "
        f"({trainer.comm.world_size * c.batch_size} x {c.grad_accum} x {m.seq_len}), lr {c.lr:g}, seed {c.seed}"
    )
    comm = trainer.comm
    if comm.world_size > 1:
        print(
            f"data-parallel: {comm.world_size} ranks on {comm.engine}, global batch "
            f"{comm.world_size} x {c.batch_size} x {c.grad_accum} sequences"
        )
    model = trainer.model
    print(
        f"backend {model.backend}: {len(model.kernels)} kernels compiled once in "
        f"{model.compile_seconds * 1e3:.0f} ms, shared by {m.n_layers} layers"
    )
    if model.backend != "ane":
        step = _predicted_step(m, chip, model.shape.batch)
        seconds = step.ane_s if step is not None else model.predicted_ane_seconds(chip)
        if seconds is not None:
            print(
                f"cost model: {seconds * c.grad_accum * 1e3:.1f} ms of ANE kernel time per step "
                f"on {chip.name} (CPU work not included)"
            )
        if step is not None:
            print(
                f"cost model, whole step on {chip.name}: {step.seconds * c.grad_accum * 1e3:.1f} ms "
                "with the weight gradients beside the kernels (the published schedule), "
                f"{dataclasses.replace(step, overlap=False).seconds * c.grad_accum * 1e3:.1f} ms "
                "one after the other (as this trainer runs them)"
            )


def _predicted_step(m, chip: Chip, batch: int):
    """The cost model's whole training step on ``chip``, or None where it has no CPU rate."""
    from anekit.errors import UsageError
    from anekit.train.cost import estimate_step

    try:
        return estimate_step(m, chip, batch=batch)
    except UsageError:
        return None


def _loop(trainer, out: Path, args: argparse.Namespace) -> list[float]:
    """Run to the configured step count; checkpoint periodically, at the end and on Ctrl-C.

    Ctrl-C stops after the step it arrives in (``StopRequest``; with several ranks, the
    step in which any rank saw it), whose whole state is then saved: exactly what a
    periodic checkpoint at that step holds, so --resume continues the uninterrupted run's
    losses bit for bit. Rank 0 alone logs and saves.
    """
    import numpy as np

    from anekit.train.interrupt import StopRequest

    main = trainer.comm.rank == 0
    total = trainer.cfg.steps
    history: list[float] = []
    log = _open_log(Path(args.log)) if args.log and main else None
    bar = progress_bar(total, unit="step", initial=trainer.step) if main else None
    every = max(total // 20, 1)
    saved_at = trainer.step
    try:
        with StopRequest() as stop:
            while trainer.step < total:
                result = trainer.train_step(stop)
                history.append(result.loss)
                record = result.record()
                if log:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(
                        loss=f"{result.loss:.3f}", tok_s=f"{record['tokens_per_s']:.0f}"
                    )
                elif result.step % every == 0 or result.step == total:
                    _print_step(record, total, float(np.mean(history[-every:])))
                if args.check_every and result.step % args.check_every == 0:
                    trainer.check_parameters()
                if main and args.save_every and result.step % args.save_every == 0:
                    trainer.save(out)
                    saved_at = trainer.step
                if result.stop:
                    if main:
                        _save_interrupted(trainer, out, saved_at)
                    raise KeyboardInterrupt
    finally:
        if bar is not None:
            bar.close()
        if log:
            log.close()
    if main and trainer.step > saved_at:
        path = trainer.save(out)
        print(f"saved {path}")
    return history


def _save_interrupted(trainer, out: Path, saved_at: int) -> None:
    """After Ctrl-C, checkpoint the last whole step (unless a periodic save just did)."""
    from anekit.train.checkpoint import latest_checkpoint

    path = trainer.save(out) if trainer.step > saved_at else latest_checkpoint(out)
    print(
        f"\ninterrupted: saved step {trainer.step} to {path}; continue with --resume",
        file=sys.stderr,
    )


def _open_log(path: Path) -> Any:
    """The --log file, opened to append; its directory is created (out/x.jsonl in a fresh one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_NONBLOCK on open only: a FIFO nobody reads is an error (ENXIO), not a hang
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o666)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a")


def _print_step(record: dict[str, Any], total: int, mean_loss: float) -> None:
    print(  # the loss is the mean since the previous line: single steps are noisy
        f"step {record['step']:>5}/{total}  loss {mean_loss:.4f}  lr {record['lr']:.2e}  "
        f"{record['ms']:.0f} ms  {record['tokens_per_s']:.0f} tok/s"
        + ("  (skipped: fp16 overflow)" if record["skipped"] else ""),
        flush=True,
    )


def _print_sample(trainer, tokenizer, args: argparse.Namespace) -> None:
    from anekit.train.model import Model
    from anekit.train.sample import generate

    start = time.perf_counter()
    with Model(
        trainer.model_cfg, 1, args.backend, training=False, chip=trainer.model.chip
    ) as model:
        model.load(trainer.params)
        text = generate(
            model, trainer.params, tokenizer, args.prompt, args.sample_tokens, trainer.rng
        )
    print(f"--- sample ({args.sample_tokens} tokens, {time.perf_counter() - start:.1f} s) ---")
    print(text)
    print("---")
