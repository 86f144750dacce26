"""``anekit demo``: train the ``tiny`` transformer with ANE kernels on the bundled corpus, then sample.

It is ``anekit train --config tiny`` with demo settings: a few hundred steps on CPython's
pydoc topics (no download), the loss printed as it falls, a sample at the end, the
final checkpoint in ``--out`` for ``anekit generate``. It runs on the ANE where there is
one and on the reference backend everywhere else (about a minute on two cores).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from anekit.cli import train
from anekit.cli._common import Parser, add_backend
from anekit.errors import UsageError

DEMO_MARKER = ".anekit-demo"  # marks a directory whose checkpoints the demo may replace


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps (default: 300)")
    add_backend(parser)
    parser.add_argument(
        "--out", default="out/demo", help="checkpoint directory, replaced on each run"
    )


def run(args: argparse.Namespace) -> int:
    from anekit.train.checkpoint import clear_checkpoints, latest_checkpoint

    parser = Parser(prog="anekit train")
    train.configure(parser)
    train_args = parser.parse_args(
        ["--config", "tiny", "--steps", str(args.steps), "--out", args.out, "--save-every", "0",
         "--sample-tokens", "240", "--prompt", "The "]
    )  # fmt: skip
    train_args.backend = args.backend
    out = Path(args.out)
    if latest_checkpoint(out) is not None and not (out / DEMO_MARKER).is_file():
        raise UsageError(
            "holds a training run that the demo did not make; "
            "the demo replaces its checkpoints, so pick another --out",
            path=str(out),
        )
    clear_checkpoints(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).write_text("checkpoints here are replaced by each `anekit demo`\n")
    print(
        f"anekit demo: training the tiny config for {args.steps} steps on CPython's pydoc topics "
        "(the help texts bundled with Python, ~450 KB of English prose and code: no download), "
        "one byte per token"
    )
    code = train.run(train_args)
    if code == 0:
        print(NEXT.format(out=out))
    return code


NEXT = """next, with the checkpoint just written to {out}:
  anekit generate --ckpt {out} --prompt "The " --max-tokens 200      # more text, KV-cached
  anekit chat --ckpt {out} --chat-template plain                    # a chat ('role: text' lines)
  anekit serve --ckpt {out} --served-model-name demo                 # the OpenAI API on 127.0.0.1:8080
  anekit convert path/to/hf-model --llm --compress int8 --out model-int8   # save a model compressed once"""
