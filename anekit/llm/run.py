"""What ``anekit generate --model`` and ``anekit estimate --model`` do, as library functions.

``stream_text`` writes the prompt and then each piece of text as its token is decoded;
``stats_report`` and ``estimate_report`` give the measured and predicted speeds as
records (for ``--json``) and as lines of text.
"""

from __future__ import annotations

from typing import IO, Any

from anekit.errors import UsageError
from anekit.llm.config import LlmConfig
from anekit.llm.cost import LlmEstimate, estimate_llm
from anekit.llm.model import GenerationStats, Model
from anekit.llm.tokenizer import TextStream


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
    model: Model, prompt: str, sink: IO[str], max_new_tokens: int, **sampling: Any
) -> GenerationStats:
    """Write ``prompt``, then the generated text as it is decoded, to ``sink``; returns the timings.

    Keywords are those of :meth:`Model.stream` (temperature, top_k, top_p,
    repetition_penalty, seed, stop).
    """
    ids = prompt_ids(model, prompt)
    sink.write(prompt)
    sink.flush()
    text = TextStream(model.tokenizer, ids)
    for token in model.stream(ids, max_new_tokens, **sampling):
        piece = text.push(token)
        if piece:
            sink.write(piece)
            sink.flush()
    sink.write(text.flush() + "\n")
    sink.flush()
    return model.stats


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
    }


def stats_lines(report: dict[str, Any]) -> list[str]:
    """:func:`stats_report` as lines for a terminal."""
    p, placed = report["predicted"], report.get("placement")
    return [
        *(placed["lines"] if placed else []),
        f"prompt tokens: {report['prompt_tokens']}, new tokens: {report['new_tokens']}",
        f"time to first token: {report['first_token_ms']:.1f} ms",
        f"measured on {report['backend']}: prefill {report['prefill_tokens_per_s']:.1f} tok/s, "
        f"decode {report['decode_tokens_per_s']:.1f} tok/s ({report['compiles']} compiled programs)",
        f"predicted on {p['chip']}: prefill {p['prefill_tokens_per_s']:.0f} tok/s, "
        f"decode {p['decode_tokens_per_s']:.1f} tok/s (cost model)",
    ]


def estimate_report(
    config: LlmConfig, chip: str, prompt_tokens: int = 128, compress: str | None = None
) -> tuple[LlmEstimate, list[str]]:
    """The cost model's prediction for a model on a chip, and its explanation as lines."""
    est = estimate_llm(config, chip, prompt_tokens=prompt_tokens, compress=compress)
    mb = est.weight_bytes / 1e6
    stored = "fp16 weights" if compress in (None, "fp16") else f"weights stored as {compress}"
    lines = [
        f"{config.architecture}: {config.n_params() / 1e6:.1f}M parameters, {config.n_layers} layers, "
        f"{est.compiles} programs to compile",
        f"chip {est.chip}, prompt of {prompt_tokens} tokens:",
        f"  prefill  {est.prefill_tokens_per_s:10.1f} tok/s  ({est.prefill_s * 1e3:.2f} ms for the prompt)",
        f"  decode   {est.decode_tokens_per_s:10.1f} tok/s  ({est.decode_step_s * 1e3:.3f} ms per token)",
        f"  a decode step streams {mb:.1f} MB of {stored}: {est.weights_s * 1e3:.3f} ms at the "
        "ANE's measured DRAM bandwidth (the floor of decode)",
    ]
    return est, lines
