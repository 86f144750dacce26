"""``anekit chat``: an interactive chat with a language model in the terminal.

Each message is added to the history, rendered with the model's chat template and
answered as a stream; a line after each reply gives the prompt and generation speed and
the peak memory. ``/reset`` clears the history, ``/system TEXT`` sets the system prompt
(and clears the history), ``/quit`` or Ctrl-D ends; Ctrl-C stops a reply, not the chat.
Each turn prefills the whole conversation again (no cache is kept between turns).
"""

from __future__ import annotations

import argparse
import sys

from anekit.cli._common import non_negative, utf8_text
from anekit.cli.generate import add_generation_options, add_model_options, chat_setup

HELP = "/reset clears the history, /system TEXT sets the system prompt, /quit or Ctrl-D ends"


def configure(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--system", type=utf8_text, help="the system prompt")
    add_generation_options(parser, default_tokens=512, default_temperature=0.7)
    parser.add_argument(
        "--repetition-penalty", type=non_negative(float), default=1.0,
        help="penalise tokens already in the text (1: off)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from anekit import fp16
    from anekit.bench.threads import pinned
    from anekit.errors import UsageError
    from anekit.llm.run import summary_line, write_reply
    from anekit.llm.stops import ReplyText

    fp16.use_torch()  # imported before pinning, so that its threads are pinned too
    with pinned(args.threads):
        model, chat = chat_setup(args, chat=True)
        assert chat is not None
        with model, model.session() as session:
            system = [{"role": "system", "content": args.system}] if args.system else []
            history: list[dict[str, str]] = []
            print(f"anekit chat: {HELP}", file=sys.stderr)
            while (line := _read_line()) is not None:
                if line.strip() in ("/quit", "/exit"):
                    break
                if line.startswith("/reset"):
                    history = []
                    continue
                if line.startswith("/system"):
                    text = line[len("/system") :].strip()
                    system = [{"role": "system", "content": text}] if text else []
                    history = []
                    continue
                if not line.strip():
                    continue
                history.append({"role": "user", "content": line})
                try:
                    ids, budget = chat.prompt(system + history, args.max_tokens)
                except UsageError as e:
                    print(f"anekit chat: {e}", file=sys.stderr)
                    history.pop()
                    continue
                reply = ReplyText(model.tokenizer, ids, args.stop)
                tokens = session.stream(ids, budget, stop=chat.end_of_turn, **chat.sampling)
                try:
                    write_reply(tokens, reply, sys.stdout)
                except KeyboardInterrupt:
                    sys.stdout.write(" [stopped]")
                print()
                history.append({"role": "assistant", "content": reply.text})
                print(summary_line(session.stats), file=sys.stderr)
    return 0


def _read_line() -> str | None:
    """The next line typed (None at the end of input, or Ctrl-C at the prompt)."""
    try:
        return input("> " if sys.stdin.isatty() else "")
    except (EOFError, KeyboardInterrupt):
        return None
