"""``anekit generate``: stream text from a model directory, a llama2.c checkpoint or a training checkpoint.

Both sources decode with the KV-cached kernels of :mod:`anekit.llm` (a chunked prefill,
then one cached step per token); the text streams to stdout as it is decoded, the
prompt first. With ``--chat`` (or ``--system``) the prompt is a user message rendered by
the model's chat template and only the reply is written. A summary line (prompt and
generation speed, peak memory) always goes to stderr; ``--stats`` adds the one-time
costs (imports, loading, compiles: never counted in the time to first token) and the
cost model's predictions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from anekit.cli._common import (
    COMPRESS_HELP,
    add_backend,
    add_chip,
    add_residual_options,
    add_threads,
    llm_compression,
    non_negative,
    positive_int,
    utf8_text,
)
from anekit.cli.serve import add_model_source
from anekit.errors import UsageError


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Where the model comes from and how it runs (generate, chat)."""
    add_model_source(parser)
    add_backend(parser)
    parser.add_argument("--compress", type=llm_compression, help=COMPRESS_HELP)
    add_chip(parser, "for the head's dimension limit, compression and --stats predictions")
    parser.add_argument(
        "--max-seq", type=positive_int, help="context: prompt plus new tokens (default: the "
        "model's, at most 1024; generate grows it to fit)"
    )  # fmt: skip
    parser.add_argument("--chat-template", help="a Jinja chat template file instead of the model's")
    add_residual_options(parser)
    add_threads(parser)


def add_generation_options(
    parser: argparse.ArgumentParser, default_tokens: int, default_temperature: float
) -> None:
    """How many tokens and how they are picked (generate, chat)."""
    parser.add_argument(
        "--max-tokens", "--tokens", dest="max_tokens", type=non_negative(int),
        default=default_tokens, help=f"most tokens to generate (default: {default_tokens})",
    )  # fmt: skip
    parser.add_argument(
        "--temperature", type=non_negative(float), default=default_temperature,
        help=f"0 picks the most likely token (default: {default_temperature})",
    )  # fmt: skip
    parser.add_argument(
        "--top-k",
        type=non_negative(int),
        default=40,
        help="sample among the k most likely (0: all)",
    )
    parser.add_argument(
        "--top-p", type=non_negative(float), default=1.0,
        help="sample from the most likely tokens holding this much probability (1: all)",
    )  # fmt: skip
    parser.add_argument("--seed", type=non_negative(int), default=0, help="sampling seed")
    parser.add_argument(
        "--stop", action="append", default=[], type=utf8_text,
        help="end the text before this string (repeat for several)",
    )  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--prompt", default="", type=utf8_text, help="text to continue")
    parser.add_argument("--system", type=utf8_text, help="a system prompt (implies --chat)")
    parser.add_argument(
        "--chat", action="store_true",
        help="the prompt is a user message in the model's chat template; only the reply is written",
    )  # fmt: skip
    add_generation_options(parser, default_tokens=200, default_temperature=0.8)
    parser.add_argument(
        "--repetition-penalty", type=non_negative(float), default=1.0,
        help="penalise tokens already in the text (1: off)",
    )  # fmt: skip
    parser.add_argument(
        "--stats",
        action="store_true",
        help="also print one-time costs, time to first token, measured and predicted tokens/s",
    )
    parser.add_argument(
        "--draft",
        help="a smaller model with the same tokenizer (directory, .gguf or .bin) proposing "
        "tokens the model checks in one call (speculative decoding)",
    )
    parser.add_argument(
        "--draft-tokens", type=positive_int, default=4,
        help="with --draft: tokens proposed per check (default: 4)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="with --stats: the stats as JSON")


def chat_setup(args: argparse.Namespace, chat: bool) -> tuple[Any, Any]:
    """The model the arguments name and, for a chat, its :class:`~anekit.llm.run.ChatPrompt`."""
    from anekit.llm.run import chat_prompt, open_model

    chip = args.chip.name if args.chip is not None else None
    model = open_model(args.model, args.ckpt, args.tokenizer, backend=args.backend, chip=chip,
                       compress=args.compress, max_seq=args.max_seq, residual=args.residual,
                       strict=args.strict)  # fmt: skip
    sampling = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                "repetition_penalty": args.repetition_penalty, "seed": args.seed}  # fmt: skip
    if not chat:
        return model, None
    try:
        return model, chat_prompt(model, args.model or args.ckpt, args.chat_template, **sampling)
    except BaseException:
        model.close()
        raise


def run(args: argparse.Namespace) -> int:
    begin = time.perf_counter()
    from anekit import fp16
    from anekit.bench.threads import describe, pinned
    from anekit.llm.chat import end_of_turn_ids
    from anekit.llm.run import prompt_ids, stats_lines, stats_report, stream_text, summary_line

    fp16.use_torch()  # its one-time import (torch, where installed) counted here, not in a token
    imported = time.perf_counter()
    chat = args.chat or args.system is not None
    if args.draft and chat:
        raise UsageError("--draft applies to plain generation (--prompt), not --chat/--system")
    with pinned(args.threads) as threads:
        model, prompt = chat_setup(args, chat)
        loaded = time.perf_counter()
        with model:
            if prompt is not None:
                stats = _chat_reply(args, model, prompt)
            else:
                needed = len(prompt_ids(model, args.prompt)) + args.max_tokens
                needed += args.draft_tokens if args.draft else 0  # speculation checks k past
                if needed > model.max_seq:
                    model.reserve(needed)
                speculation = _draft(args, model, needed)
                path = args.model or args.ckpt
                eot = (
                    end_of_turn_ids(path, model.tokenizer, model.config.eos_token_ids)
                    if os.path.isdir(path)
                    else None
                )
                try:
                    stats = stream_text(model, args.prompt, sys.stdout, args.max_tokens,
                                        stop_strings=args.stop, stop=eot, temperature=args.temperature,
                                        top_k=args.top_k, top_p=args.top_p,
                                        repetition_penalty=args.repetition_penalty, seed=args.seed,
                                        **speculation)  # fmt: skip
                finally:
                    if speculation:
                        speculation["draft"].close()
            if not (args.stats and args.json):  # --json: the record alone, for scripts
                print(summary_line(stats, model.placement), file=sys.stderr)
            if args.stats:
                report = stats_report(
                    model, stats, model.chip if args.chip is None else args.chip.name
                )
                report["startup"] = {
                    "imports_ms": round((imported - begin) * 1e3, 1),
                    "load_ms": round((loaded - imported) * 1e3, 1),
                    "compiles_at_load_ms": round(
                        (model.runner.compile_s - stats.compile_s) * 1e3, 1
                    ),
                    "threads": describe(threads),
                }
                text = json.dumps(report, indent=1) if args.json else "\n".join(stats_lines(report))
                print(text, file=sys.stderr)
    return 0


def _draft(args: argparse.Namespace, model: Any, needed: int) -> dict[str, Any]:
    """``--draft``: the draft model as ``stream`` keywords (the caller closes it)."""
    if args.draft is None:
        return {}
    from anekit.llm.run import open_model

    draft = open_model(args.draft, None, None, backend=model.backend, chip=model.chip,
                       max_seq=needed)  # fmt: skip
    return {"draft": draft, "draft_tokens": args.draft_tokens}


def _chat_reply(args: argparse.Namespace, model: Any, prompt: Any) -> Any:
    """Write the reply to ``--prompt`` as a user message (after ``--system``); its timings."""
    from anekit.llm.run import write_reply
    from anekit.llm.stops import ReplyText

    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": args.prompt})
    ids, budget = prompt.prompt(messages, args.max_tokens)
    reply = ReplyText(model.tokenizer, ids, args.stop)
    write_reply(model.stream(ids, budget, stop=prompt.end_of_turn, **prompt.sampling), reply,
                sys.stdout)  # fmt: skip
    print()
    return model.stats
