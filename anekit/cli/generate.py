"""``anekit generate``: stream text from a model directory, a llama2.c checkpoint or a training checkpoint.

Both sources decode with the KV-cached kernels of :mod:`anekit.llm` (a chunked prefill,
then one cached step per token); the text streams to stdout as it is decoded, the
prompt first. ``--stats`` adds measured and predicted speeds on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from anekit.cli._common import (
    COMPRESS_HELP,
    add_backend,
    add_chip,
    llm_compression,
    non_negative,
    utf8_text,
)
from anekit.errors import UsageError


def configure(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--model",
        help="Hugging Face model directory (config.json, safetensors, tokenizer.json), "
        "a llama.cpp .gguf file, or a llama2.c .bin (tokenizer.bin beside it)",
    )
    source.add_argument(
        "--ckpt", help="training checkpoint directory, or a training --out directory"
    )
    parser.add_argument("--prompt", default="", type=utf8_text, help="text to continue")
    parser.add_argument(
        "--tokenizer",
        help="with --ckpt: a llama2.c tokenizer.bin to use instead of the checkpoint's own",
    )
    parser.add_argument(
        "--tokens", type=non_negative(int), default=200, help="tokens to generate (default: 200)"
    )
    parser.add_argument(
        "--temperature", type=non_negative(float), default=0.8, help="0 picks the most likely token"
    )
    parser.add_argument(
        "--top-k",
        type=non_negative(int),
        default=40,
        help="sample among the k most likely (0: all)",
    )
    parser.add_argument(
        "--top-p",
        type=non_negative(float),
        default=1.0,
        help="sample from the most likely tokens holding this much probability (1: all)",
    )
    parser.add_argument(
        "--repetition-penalty",
        type=non_negative(float),
        default=1.0,
        help="penalise tokens already in the text (1: off)",
    )
    parser.add_argument("--seed", type=non_negative(int), default=0, help="sampling seed")
    add_backend(parser)
    parser.add_argument("--compress", type=llm_compression, help=COMPRESS_HELP)
    add_chip(parser, "for the head's dimension limit, compression and --stats predictions")
    parser.add_argument(
        "--stats",
        action="store_true",
        help="print prompt tokens, time to first token, measured and predicted tokens/s to stderr",
    )
    parser.add_argument("--json", action="store_true", help="with --stats: the stats as JSON")


def run(args: argparse.Namespace) -> int:
    from anekit import llm
    from anekit.llm.run import prompt_ids, stats_lines, stats_report, stream_text

    chip = args.chip.name if args.chip is not None else None
    if args.tokenizer and not args.ckpt:
        raise UsageError("--tokenizer applies to --ckpt (a model directory brings its own)")
    if args.ckpt:
        from anekit.llm.training import read_training_checkpoint
        from anekit.train.data import Llama2cTokenizer

        override = Llama2cTokenizer(args.tokenizer) if args.tokenizer else None
        config, source, tokenizer = read_training_checkpoint(args.ckpt, override)
        model = llm.Model(
            config,
            source,
            tokenizer=tokenizer,
            backend=args.backend,
            chip=chip,
            compress=args.compress,
        )
    else:
        model = llm.load(args.model, backend=args.backend, chip=chip, compress=args.compress)
    with model:
        needed = len(prompt_ids(model, args.prompt)) + args.tokens
        if needed > model.max_seq:
            model.reserve(needed)
        stats = stream_text(
            model,
            args.prompt,
            sys.stdout,
            args.tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            repetition_penalty=args.repetition_penalty,
            seed=args.seed,
        )
        if args.stats:
            report = stats_report(model, stats, chip)
            text = json.dumps(report, indent=1) if args.json else "\n".join(stats_lines(report))
            print(text, file=sys.stderr)
    return 0
