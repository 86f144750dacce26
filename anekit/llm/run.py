"""What ``anekit generate --model`` and ``anekit estimate --model`` do, as library functions.

``stream_text`` writes the prompt and then each piece of text as its token is decoded;
``stats_report`` and ``estimate_report`` give the measured and predicted speeds as
records (for ``--json``) and as lines of text.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from anekit.backends.placement import Placement
from anekit.errors import UsageError
from anekit.llm.chat import encode_rendered
from anekit.llm.config import LlmConfig
from anekit.llm.cost import LlmEstimate, estimate_llm
from anekit.llm.model import GenerationStats, Model
from anekit.llm.stops import ReplyText

if TYPE_CHECKING:
    from anekit.llm.chat import ChatTemplate


def prompt_ids(model: Model, prompt: str) -> list[int]:
    """The prompt's token ids; an empty prompt becomes the BOS token where the model has one."""
    if model.tokenizer is None:
        raise UsageError(
            "this model has no tokenizer (tokenizer.json or tokenizer.bin) to encode text"
        )
    ids = model.tokenizer.encode(prompt)
    if not ids and model.config.bos_token_id is not None:
        ids = [int(model.config.bos_token_id)]
    if not ids:
        raise UsageError("the prompt is empty and the model has no BOS token to start from")
    return ids


def stream_text(
    model: Model,
    prompt: str,
    sink: IO[str],
    max_new_tokens: int,
    *,
    stop_strings: Sequence[str] = (),
    **sampling: Any,
) -> GenerationStats:
    """Write ``prompt``, then the generated text as it is decoded, to ``sink``; returns the timings.

    Keywords are those of :meth:`Model.stream` (temperature, top_k, top_p,
    repetition_penalty, seed, stop: token ids); ``stop_strings`` end the text before them.
    """
    ids = prompt_ids(model, prompt)
    sink.write(prompt)
    sink.flush()
    reply = ReplyText(model.tokenizer, ids, stop_strings)
    write_reply(model.stream(ids, max_new_tokens, **sampling), reply, sink)
    sink.write("\n")
    sink.flush()
    return model.stats


@dataclass
class ChatPrompt:
    """A model's chat template, end-of-turn tokens and sampling: messages in, prompt ids out."""

    model: Model
    template: ChatTemplate
    end_of_turn: tuple[int, ...]
    sampling: dict[str, Any] = field(default_factory=dict)

    def prompt(self, messages: list[dict[str, str]], max_tokens: int) -> tuple[list[int], int]:
        """The rendered conversation's tokens and the reply's token budget within the context."""
        text = self.template.render(messages, add_generation_prompt=True)
        ids = encode_rendered(self.model.tokenizer, text)
        room = self.model.max_seq - len(ids)
        if room < 1:
            raise UsageError(
                f"the conversation has {len(ids)} tokens; the context is {self.model.max_seq} "
                "(use /reset, or a larger --max-seq)"
            )
        return ids, min(max_tokens, room)


def chat_prompt(
    model: Model, path: str | Path, template: str | Path | None = None, **sampling: Any
) -> ChatPrompt:
    """The :class:`ChatPrompt` of the model loaded from ``path`` (a directory, or a file beside
    its tokenizer); ``template``: a Jinja file instead of the model's own template."""
    from anekit.llm.chat import end_of_turn_ids, load_chat_template

    directory = Path(path) if Path(path).is_dir() else Path(path).parent
    return ChatPrompt(
        model,
        load_chat_template(directory, template),
        end_of_turn_ids(directory, model.tokenizer, model.config.eos_token_ids),
        sampling,
    )


def stats_report(model: Model, stats: GenerationStats, chip: str | None = None) -> dict[str, Any]:
    """Measured speeds of the last generation beside the cost model's prediction for ``chip``."""
    predicted = estimate_llm(
        model.config,
        chip or model.chip,
        prompt_tokens=max(stats.prompt_tokens, 1),
        max_seq=model.max_seq,
        compress=model.compress,
    )
    placement = model.placement
    return {
        "backend": model.backend,
        "placement": placement.as_dict() if placement is not None else None,
        "prompt_tokens": stats.prompt_tokens,
        "new_tokens": stats.new_tokens,
        "first_token_ms": round(stats.first_token_s * 1e3, 2),
        "prefill_tokens_per_s": round(stats.prefill_tokens_per_s, 2),
        "decode_tokens_per_s": round(stats.decode_tokens_per_s, 2),
        "compiles": model.compiles,
        "predicted": predicted.record(),
        "speculative": _speculative(stats.speculative),
    }


def _speculative(spec: Any) -> dict[str, Any] | None:
    """What speculation did (None without a draft)."""
    if spec is None:
        return None
    return {
        "draft_tokens": spec.draft_tokens,
        "rounds": spec.rounds,
        "acceptance_rate": round(spec.acceptance_rate, 4),
        "tokens_per_round": round(spec.tokens_per_round, 3),
    }


def stats_lines(report: dict[str, Any]) -> list[str]:
    """:func:`stats_report` as lines for a terminal."""
    p = report["predicted"]
    lines = [
        f"prompt tokens: {report['prompt_tokens']}, new tokens: {report['new_tokens']}",
        f"time to first token: {report['first_token_ms']:.1f} ms",
        f"measured on {report['backend']}: prefill {report['prefill_tokens_per_s']:.1f} tok/s, "
        f"decode {report['decode_tokens_per_s']:.1f} tok/s ({report['compiles']} compiled programs)",
        f"predicted on {p['chip']}: prefill {p['prefill_tokens_per_s']:.0f} tok/s, "
        f"decode {p['decode_tokens_per_s']:.1f} tok/s (cost model)",
    ]
    start = report.get("startup")
    if start:  # one-time costs, never counted in the time to first token
        lines.insert(2, f"one-time: imports {start['imports_ms']:.0f} ms, loading "
                        f"{start['load_ms']:.0f} ms (compiles {start['compiles_at_load_ms']:.0f} ms), "
                        f"{start['threads']}")  # fmt: skip
    spec = report.get("speculative")
    if spec:
        lines.append(f"speculative: {spec['draft_tokens']} draft tokens per check, acceptance "
                     f"{spec['acceptance_rate']:.1%}, {spec['tokens_per_round']:.2f} tokens per "
                     f"target call ({spec['rounds']} calls)")  # fmt: skip
    placed = report.get("placement")
    return [*(placed["lines"] if placed else []), *lines]


def estimate_report(
    config: LlmConfig, chip: str, prompt_tokens: int = 128, compress: str | None = None
) -> tuple[LlmEstimate, list[str]]:
    """The cost model's prediction for a model on a chip, and its explanation as lines."""
    est = estimate_llm(config, chip, prompt_tokens=prompt_tokens, compress=compress)
    mb = est.streamed_bytes / 1e6
    stored = "fp16 weights" if compress in (None, "fp16") else f"weights stored as {compress}"
    if est.streamed_bytes != est.weight_bytes:
        stored += f" ({est.weight_bytes / 1e6:.1f} MB) that {est.chip} folds to fp16"
    lines = [
        f"{config.architecture}: {config.n_params() / 1e6:.1f}M parameters, {config.n_layers} layers, "
        f"{est.compiles} programs to compile",
        f"chip {est.chip}, prompt of {prompt_tokens} tokens:",
        f"  prefill  {est.prefill_tokens_per_s:10.1f} tok/s  ({est.prefill_s * 1e3:.2f} ms for the prompt)",
        f"  decode   {est.decode_tokens_per_s:10.1f} tok/s  ({est.decode_step_s * 1e3:.3f} ms per token; "
        f"likely {1 / est.likely_decode_s[1]:.1f}-{1 / est.likely_decode_s[0]:.1f} tok/s)",
        f"  a decode step streams {mb:.1f} MB of {stored}: {est.weights_s * 1e3:.3f} ms at the "
        "DRAM bandwidth the ANE reaches for them (the floor of decode)",
    ]
    return est, lines


def open_model(
    model: str | None = None,
    ckpt: str | None = None,
    tokenizer: str | None = None,
    **options: Any,
) -> Model:
    """The model a command names: ``--model`` (a directory or llama2.c ``.bin``) or ``--ckpt``
    (a training checkpoint, with an optional llama2.c ``tokenizer.bin`` instead of its own).

    ``options`` are :func:`anekit.llm.load`'s (backend, chip, compress, max_seq, ...).
    """
    from anekit import fp16, llm

    fp16.use_torch()  # the one-time import of the fast fp16 cast, here rather than in a first token
    if tokenizer and not ckpt:
        raise UsageError("--tokenizer applies to --ckpt (a model directory brings its own)")
    if ckpt:
        from anekit.llm.training import read_training_checkpoint
        from anekit.train.data import Llama2cTokenizer

        override = Llama2cTokenizer(tokenizer) if tokenizer else None
        config, source, tok = read_training_checkpoint(ckpt, override)
        return Model(config, source, tokenizer=tok, **options)
    return llm.load(model, **options)


def peak_memory_bytes() -> int:
    """This process's peak resident memory so far (``getrusage``; 0 where it is not available)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


def summary_line(stats: GenerationStats, placement: Placement | None = None) -> str:
    """The line mlx-lm and llama.cpp print after a reply: prompt and generation speed, memory;
    then where it ran (and, on lines of their own, why earlier backends were skipped)."""
    compiled = (
        f" | compiles: {stats.compile_s * 1e3:.0f} ms (not counted)" if stats.compile_s else ""
    )
    line = (
        f"prompt: {stats.prompt_tokens} tokens, {stats.prefill_tokens_per_s:.1f} tok/s | "
        f"generation: {stats.new_tokens} tokens, {stats.decode_tokens_per_s:.1f} tok/s | "
        f"first token: {stats.first_token_s * 1e3:.1f} ms | "
        f"peak memory: {peak_memory_bytes() / 2**20:.0f} MB{compiled}"
    )
    if placement is None:
        return line
    return "\n".join([f"{line} | {placement.summary()}", *placement.lines()[1:]])


def write_reply(tokens: Iterator[int], reply: ReplyText, sink: IO[str]) -> str:
    """Write a reply's text to ``sink`` as it is decoded (stop strings cut it; see ReplyText);
    returns the text written, also when interrupted (Ctrl-C stops the reply, then propagates)."""
    pieces: list[str] = []
    try:
        for token in tokens:
            pieces.append(reply.push(token))
            sink.write(pieces[-1])
            sink.flush()
            if reply.stop is not None:
                break
        pieces.append(reply.finish())
        sink.write(pieces[-1])
    finally:
        tokens.close()  # type: ignore[attr-defined]
        sink.flush()
        reply.text = "".join(pieces)
    return reply.text
