"""``anekit serve``: an OpenAI-compatible HTTP server for a language model (docs/serve.md).

``/v1/models``, ``/v1/chat/completions``, ``/v1/completions`` (plain and streamed) and
``/health`` on 127.0.0.1 by default. Needs the ``serve`` extra (Starlette, uvicorn, Jinja).
"""

from __future__ import annotations

import argparse
import os
import sys

from anekit.cli._common import (
    COMPRESS_HELP,
    add_backend,
    add_chip,
    add_residual_options,
    add_threads,
    llm_compression,
    non_negative,
    positive_int,
)
from anekit.errors import UsageError

API_KEY_ENV = "ANEKIT_API_KEY"


def add_model_source(parser: argparse.ArgumentParser) -> None:
    """``--model`` or ``--ckpt`` (and ``--tokenizer`` for a checkpoint), as generate takes them."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--model",
        help="Hugging Face model directory (config.json, safetensors, tokenizer.json), "
        "a llama.cpp .gguf file, or a llama2.c .bin (tokenizer.bin beside it)",
    )
    source.add_argument(
        "--ckpt", help="training checkpoint directory, or a training --out directory"
    )
    parser.add_argument(
        "--tokenizer",
        help="with --ckpt: a llama2.c tokenizer.bin to use instead of the checkpoint's own",
    )


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_source(parser)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback)"
    )
    parser.add_argument(
        "--port", type=int, default=8080, help="port (default: 8080; 0: any free port)"
    )
    add_backend(parser)
    add_chip(parser, "for the head's dimension limit and compression")
    parser.add_argument("--compress", type=llm_compression, help=COMPRESS_HELP)
    parser.add_argument(
        "--max-seq", type=positive_int, help="context: prompt plus reply tokens (default: the "
        "model's, at most 1024)"
    )  # fmt: skip
    parser.add_argument(
        "--chat-template", help="a Jinja chat template file to use instead of the model's"
    )
    parser.add_argument(
        "--api-key", help=f"require 'Authorization: Bearer KEY' on /v1 (default: ${API_KEY_ENV})"
    )
    parser.add_argument(
        "--served-model-name", help="the model's name in the API (default: its directory name)"
    )
    parser.add_argument(
        "--max-sessions", type=positive_int, default=4,
        help="generations running at once, each with its own KV cache (default: 4)",
    )  # fmt: skip
    parser.add_argument(
        "--max-queue", type=non_negative(int), default=32,
        help="requests waiting for a session; beyond it 429 with Retry-After (default: 32)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=non_negative(float), default=60.0,
        help="seconds a request may wait for a session before a 503 (default: 60)",
    )  # fmt: skip
    parser.add_argument(
        "--drain-seconds", type=non_negative(float), default=10.0,
        help="on SIGTERM, seconds running requests get to finish (default: 10)",
    )  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no access log line per request")
    add_residual_options(parser)
    add_threads(parser)


def run(args: argparse.Namespace) -> int:
    from anekit import fp16
    from anekit.bench.threads import describe, pinned
    from anekit.llm.chat import ChatTemplateError, end_of_turn_ids, load_chat_template
    from anekit.llm.run import open_model
    from anekit.llm.serve.app import ServeSettings
    from anekit.llm.serve.engine import Engine
    from anekit.llm.serve.server import health_facts, listen, model_name, run_server

    if args.timeout == 0:
        raise UsageError("--timeout must be > 0 seconds, found 0")
    fp16.use_torch()  # imported before pinning, so that its threads are pinned too
    sock = listen(args.host, args.port)  # before loading: a taken port fails at once
    try:
        with pinned(args.threads) as threads:
            chip = args.chip.name if args.chip is not None else None
            model = open_model(args.model, args.ckpt, args.tokenizer, backend=args.backend,
                               chip=chip, compress=args.compress, max_seq=args.max_seq,
                               residual=args.residual, strict=args.strict)  # fmt: skip
            with model:
                if model.tokenizer is None:
                    raise UsageError("this model has no tokenizer to serve text with")
                path = args.model or args.ckpt
                template = None
                if os.path.isdir(path):
                    try:
                        template = load_chat_template(path, args.chat_template)
                    except ChatTemplateError as e:
                        print(f"anekit serve: {e}; /v1/chat/completions is refused",
                              file=sys.stderr)  # fmt: skip
                eot = end_of_turn_ids(path, model.tokenizer, model.config.eos_token_ids) if \
                    os.path.isdir(path) else tuple(model.config.eos_token_ids)  # fmt: skip
                engine = Engine(model, model.tokenizer, eot, max_sessions=args.max_sessions,
                                max_queue=args.max_queue, queue_timeout=args.timeout)  # fmt: skip
                settings = ServeSettings(
                    model_name=model_name(path, args.served_model_name),
                    max_seq=model.max_seq,
                    template=template,
                    api_key=args.api_key or os.environ.get("ANEKIT_API_KEY") or None,
                    health={**health_facts(model, path), "threads": describe(threads)},
                    log=None if args.quiet else sys.stderr,
                )
                run_server(engine, settings, sock, drain_seconds=args.drain_seconds)
    finally:
        sock.close()
    return 0
