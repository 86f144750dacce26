"""``anekit train``: train a named config on a text or llama2.c file, checkpoint, resume, sample."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anekit.cli._common import (
    add_backend,
    add_chip,
    add_threads,
    non_negative,
    one_of,
    output_file,
    progress_bar,
    resolve_chip,
    utf8_text,
)
from anekit.errors import UsageError

if TYPE_CHECKING:
    from anekit.hw.chips import Chip
    from anekit.train.config import ModelConfig, TrainConfig


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


def run(args: argparse.Namespace) -> int:
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
    try:
        train_cfg = _train_config(args, named.train, out)
    except ValueError as e:
        raise UsageError(str(e)) from e
    from anekit.bench.threads import pinned

    with pinned(args.threads):  # steady step times on a shared machine, as bench measures
        return _train(args, model_cfg, train_cfg, tokens, tokenizer, out)


def _train_config(args: argparse.Namespace, default: TrainConfig, out: Path) -> TrainConfig:
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
    return dataclasses.replace(base, **changes)


def _train(
    args, model_cfg: ModelConfig, train_cfg: TrainConfig, tokens, tokenizer, out: Path
) -> int:
    import numpy as np

    from anekit.train.checkpoint import latest_checkpoint, sweep_temporaries
    from anekit.train.loop import Trainer

    sweep_temporaries(out)  # what a killed run left
    existing = latest_checkpoint(out)
    if existing is not None and not args.resume:
        raise UsageError(
            f"{out} already holds a run (latest: {existing.name}); "
            "pass --resume to continue it or choose another --out"
        )
    chip = resolve_chip(args.chip)
    trainer = Trainer(model_cfg, train_cfg, tokens, args.backend, tokenizer, chip.name)
    try:
        if args.resume:
            state = trainer.restore(out)
            print(f"resumed from {state['directory']} at step {trainer.step}")
            if trainer.step >= train_cfg.steps:
                print(
                    f"nothing to train: the run already has {trainer.step} of {train_cfg.steps} steps"
                )
        _print_header(trainer, chip)
        history = _loop(trainer, out, args)
        if trainer.step >= train_cfg.steps and args.sample_tokens > 0:
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


def _print_header(trainer, chip: Chip) -> None:
    m, c = trainer.model_cfg, trainer.cfg
    print(
        f"config {m.name}: {m.n_params() / 1e6:.2f}M parameters, {m.n_layers} layers, dim {m.dim}, "
        f"heads {m.n_heads}/{m.n_kv_heads}, hidden {m.hidden_dim}, vocab {m.vocab_size}, seq {m.seq_len}"
    )
    print(
        f"training: {c.steps} steps of {trainer.tokens_per_step} tokens "
        f"({c.batch_size} x {c.grad_accum} x {m.seq_len}), lr {c.lr:g}, seed {c.seed}"
    )
    model = trainer.model
    print(
        f"backend {model.backend}: {len(model.kernels)} kernels compiled once in "
        f"{model.compile_seconds * 1e3:.0f} ms, shared by {m.n_layers} layers"
    )
    if model.backend != "ane":
        seconds = model.predicted_ane_seconds(chip)
        if seconds is not None:
            print(
                f"cost model: {seconds * c.grad_accum * 1e3:.1f} ms of ANE kernel time per step "
                f"on {chip.name} (CPU work not included)"
            )


def _loop(trainer, out: Path, args: argparse.Namespace) -> list[float]:
    """Run to the configured step count; checkpoint periodically, at the end and on Ctrl-C.

    Ctrl-C stops after the step it arrives in (``StopRequest``), whose whole state is then
    saved: exactly what a periodic checkpoint at that step holds, so --resume continues
    the uninterrupted run's losses bit for bit.
    """
    import numpy as np

    from anekit.train.interrupt import StopRequest

    total = trainer.cfg.steps
    history: list[float] = []
    log = _open_log(Path(args.log)) if args.log else None
    bar = progress_bar(total, unit="step", initial=trainer.step)
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
                if args.save_every and result.step % args.save_every == 0:
                    trainer.save(out)
                    saved_at = trainer.step
                if result.stop:
                    _save_interrupted(trainer, out, saved_at)
                    raise KeyboardInterrupt
    finally:
        if bar is not None:
            bar.close()
        if log:
            log.close()
    if trainer.step > saved_at:
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
