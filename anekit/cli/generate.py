"""``anekit generate``: sample text from a training checkpoint."""

from __future__ import annotations

import argparse

from anekit.cli._common import add_backend, non_negative


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ckpt", required=True, help="checkpoint directory, or a training --out directory"
    )
    parser.add_argument("--prompt", default="", help="text to continue")
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
    parser.add_argument("--seed", type=non_negative(int), default=0, help="sampling seed")
    add_backend(parser)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from anekit.errors import CheckpointError
    from anekit.train.data import tokenizer_from
    from anekit.train.loop import load_model
    from anekit.train.model import Model
    from anekit.train.sample import generate

    cfg, params, state = load_model(args.ckpt)
    try:
        tokenizer = tokenizer_from(state.get("tokenizer", {"kind": "bytes"}))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot rebuild the tokenizer: {e}", path=state["directory"]) from e
    with Model(cfg, 1, args.backend, training=False) as model:
        model.load(params)
        text = generate(
            model,
            params,
            tokenizer,
            args.prompt,
            args.tokens,
            np.random.default_rng(args.seed),
            temperature=args.temperature,
            top_k=args.top_k,
        )
    print(text)
    return 0
