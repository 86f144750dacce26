"""Predicted prefill and decode speed of an LLM on each chip, from the kernels it would run.

The model runs ``n_layers`` calls of the block program per chunk (or per token) and one
call of the head program; each is costed by :func:`anekit.hw.cost.estimate_work`, the
same model ``anekit estimate`` uses, with one correction: the kernels take their weights
as inputs, and those inputs are weights, streamed from DRAM at the bandwidth the ANE
reaches (``ane_dram_bw_gbps`` in ``anekit/hw/data/chips.json``, measured with a
matrix-vector product over a 1 GB layer), overlapped with the MACs that read them, not
activations through the slower I/O path. Decode reads every weight once per token, so
its prediction is bandwidth-bound by construction.

With ``compress=`` the model runs segment programs with its weights compiled in
(``anekit.llm.compressed``); those programs are costed as built, their weights priced by
the bytes the chosen scheme stores where the chip streams that encoding compressed
(``anekit.hw.compression``), by their dense bytes where it folds it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from anekit.errors import UsageError
from anekit.hw.chips import Chip, get_chip
from anekit.hw.cost import (
    ProgramWork,
    analyze,
    estimate_work,
    input_weight_bytes,
    likely_range,
    padded_bytes,
)
from anekit.llm import kernels as K
from anekit.llm.config import LlmConfig, config_from_hf
from anekit.llm.model import DEFAULT_CHUNK, DEFAULT_MAX_SEQ
from anekit.llm.runners import decode_cache, decode_slots
from anekit.llm.speculative import MAX_DRAFT_TOKENS
from anekit.mil.program import Program


@dataclass(frozen=True)
class LlmEstimate:
    """Predicted speed of one model on one chip.

    Attributes:
        chip: chip profile name.
        prompt_tokens: the prompt length the prediction is for.
        prefill_s: time to run the prompt through every block (in chunks) and the head once.
        decode_step_s: time of one decode step right after the prompt (blocks and head).
        block_decode_s, head_decode_s: the two kernels of one decode step, each once (with
            ``compress``: every segment together).
        block_prefill_s: one prefill chunk through one block (with ``compress``: through
            every segment).
        weight_bytes: bytes stored of every block weight and the head (fp16, or as
            ``compress`` stores them).
        streamed_bytes: bytes one decode step streams: the stored bytes where the chip
            streams their encoding compressed, the dense fp16 bytes where it folds it.
        weights_s: the streamed bytes at the chip's measured ANE DRAM bandwidth (times the
            streaming efficiency of weights taken as inputs, without ``compress``): the
            decode floor.
        compiles: programs the model compiles for this prompt and one decode bucket.
        compress: the weight compression costed, or None for the dynamic-weight kernels.
    """

    chip: str
    prompt_tokens: int
    prefill_s: float
    decode_step_s: float
    block_decode_s: float
    head_decode_s: float
    block_prefill_s: float
    weight_bytes: int
    weights_s: float
    streamed_bytes: int
    compiles: int
    compress: str | None = None

    @property
    def likely_decode_s(self) -> tuple[float, float]:
        """The likely range of :attr:`decode_step_s` (the chip's ``cost.band``)."""
        return likely_range(self.decode_step_s, get_chip(self.chip))

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_s

    @property
    def decode_tokens_per_s(self) -> float:
        return 1.0 / self.decode_step_s

    def record(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "chip": self.chip,
            "prompt_tokens": self.prompt_tokens,
            "prefill_tokens_per_s": round(self.prefill_tokens_per_s, 1),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 2),
            "decode_step_ms": round(self.decode_step_s * 1e3, 3),
            "decode_step_ms_likely": [round(t * 1e3, 3) for t in self.likely_decode_s],
            "weights_ms": round(self.weights_s * 1e3, 3),
            "weight_bytes": self.weight_bytes,
            "streamed_bytes": self.streamed_bytes,
            "compiles": self.compiles,
            "compress": self.compress,
        }


def estimate_llm(
    config: LlmConfig,
    chip: str | Chip,
    *,
    prompt_tokens: int = 128,
    max_seq: int | None = None,
    chunk: int = DEFAULT_CHUNK,
    compress: str | None = None,
) -> LlmEstimate:
    """Predict prefill and decode speed of ``config`` on ``chip`` (see the module docstring)."""
    profile = get_chip(chip)
    seq = max_seq or max(min(config.max_position, DEFAULT_MAX_SEQ), prompt_tokens + 1)
    if not 1 <= prompt_tokens < seq:
        raise UsageError(f"prompt_tokens must be in [1, {seq}), found {prompt_tokens}")
    chunk = min(chunk, seq)
    pieces = K.head_pieces(config.vocab_size, profile.max_dim_channel)
    slots = decode_cache(seq, prompt_tokens)  # the first decode step's
    if compress is not None:
        return _estimate_segments(config, profile, compress, prompt_tokens, seq, chunk, slots)
    weights, k = set(K.block_weight_shapes(config)), profile.matmul_k_multiple
    head_weights = {f"w{j}" for j in range(len(pieces))} | {"norm"}
    block_decode = _seconds(K.block_program(config, K.BlockKey(1, slots), k), weights, profile)
    block_prefill = _seconds(K.block_program(config, K.BlockKey(chunk, seq), k), weights, profile)
    head = _seconds(K.head_program(config, K.HeadKey(1, pieces)), head_weights, profile)
    streamed = 2 * streamed_params(config)
    chunks = math.ceil(prompt_tokens / chunk)
    return LlmEstimate(
        chip=profile.name,
        prompt_tokens=prompt_tokens,
        prefill_s=chunks * config.n_layers * block_prefill + head,
        decode_step_s=config.n_layers * block_decode + head,
        block_decode_s=block_decode,
        head_decode_s=head,
        block_prefill_s=block_prefill,
        weight_bytes=streamed,
        streamed_bytes=streamed,
        weights_s=input_weight_bytes(streamed) / profile.cost.dram_bw,
        compiles=1 + 2 * K.block_kinds(config),  # prefill and decode block programs, the head
    )


def _estimate_segments(
    config: LlmConfig, chip: Chip, scheme: str, prompt_tokens: int, seq: int, chunk: int, slots: int
) -> LlmEstimate:
    """:func:`estimate_llm` of the segment programs ``load(..., compress=scheme)`` runs."""
    from anekit.llm.compressed import (
        check_scheme,
        head_bytes,
        layer_bytes,
        plan_segments,
        streamed_scheme,
    )

    segments = plan_segments(config, check_scheme(scheme, config), 1 + len(decode_slots(seq)))
    pieces = K.head_pieces(config.vocab_size, chip.max_dim_channel)
    k = chip.matmul_k_multiple

    def segments_s(key: K.BlockKey) -> float:
        return sum(
            compressed_seconds(
                K.segment_program(config, key, _zeros(config, len(seg)), 0, k), scheme, chip
            )
            for seg in segments
        )

    zeros = [np.broadcast_to(np.zeros((), np.float16), (1, 1, rows, config.dim)) for rows in pieces]
    norm = np.broadcast_to(np.zeros((), np.float16), (1, 1, config.dim, 1))
    head_program = K.head_constants_program(config, K.HeadKey(1, pieces), norm, zeros)
    head = compressed_seconds(head_program, scheme, chip)
    decode, prefill = segments_s(K.BlockKey(1, slots)), segments_s(K.BlockKey(chunk, seq))

    def total(form: str) -> int:
        return config.n_layers * layer_bytes(config, form) + head_bytes(config, pieces, form)

    streamed = total(streamed_scheme(scheme, chip))
    return LlmEstimate(
        chip=chip.name,
        prompt_tokens=prompt_tokens,
        prefill_s=math.ceil(prompt_tokens / chunk) * prefill + head,
        decode_step_s=decode + head,
        block_decode_s=decode,
        head_decode_s=head,
        block_prefill_s=prefill,
        weight_bytes=total(scheme),
        weights_s=streamed / chip.cost.dram_bw,
        streamed_bytes=streamed,
        compiles=2 * len(segments) + 1,
        compress=scheme,
    )


def _zeros(config: LlmConfig, layers: int) -> list[dict[str, np.ndarray]]:
    """Zero-stride stand-ins for the weights of ``layers`` layers: shapes, without the memory."""
    zero = np.zeros((), np.float16)
    shapes = K.block_weight_shapes(config)
    return [{n: np.broadcast_to(zero, s) for n, s in shapes.items()} for _ in range(layers)]


def compressed_seconds(program: Program, scheme: str, chip: Chip) -> float:
    """Predicted seconds of one call of ``program`` with its weights stored as ``scheme`` stores them.

    ``scheme`` "fp16" costs the program as it is. The weights need not hold real values:
    what they cost depends on their shapes and the scheme's stored form only.
    """
    from anekit.compression import SCHEMES, find_layers
    from anekit.compression.auto import compressed_work
    from anekit.compression.schemes import Options
    from anekit.llm.compressed import MIN_ELEMENTS

    work = analyze(program)
    if scheme not in SCHEMES:
        return estimate_work(work, chip).seconds
    s, options = SCHEMES[scheme], Options()
    granularity = s.granularity(options, program.main.opset)
    index = {id(op): n for n, op in enumerate(program.main.ops)}
    ops = list(work.ops)
    for layer in find_layers(program, min_elements=MIN_ELEMENTS):
        for op in layer.ops:
            n = index[id(op)]
            ops[n] = compressed_work(ops[n], layer, s, granularity, options)
    return estimate_work(
        ProgramWork(tuple(ops), work.io_bytes, work.host_cast_elements), chip
    ).seconds


def streamed_params(config: LlmConfig) -> int:
    """Parameters a decode step reads: all but the embedding table, of which it reads one row."""
    untied_embedding = 0 if config.tie_embeddings else config.vocab_size * config.dim
    return config.n_params() - untied_embedding


def _seconds(program: Program, weight_inputs: set[str], chip: Chip) -> float:
    """Predicted seconds of one call, with the named inputs costed as weights."""
    return estimate_work(weights_as_constants(program, weight_inputs), chip).seconds


def weights_as_constants(program: Program, names: set[str]) -> ProgramWork:
    """The program's work with the named inputs moved from program I/O to op weights.

    An op reading such an input streams it like a constant weight (from on-chip memory
    if small, else from DRAM, overlapped with its MACs), at the fitted efficiency of
    weights taken as inputs (:func:`input_weight_bytes`); it no longer counts as input I/O.
    """
    fn = program.main
    weights = {id(v): v for v in fn.inputs if v.name in names}
    work = analyze(program)
    ops = []
    for op, op_work in zip(fn.ops, work.ops):
        extra = input_weight_bytes(
            sum(
                math.prod(v.type.shape) * v.type.dtype.itemsize
                for v in op.input_values()
                if id(v) in weights
            )
        )
        ops.append(
            dataclasses.replace(op_work, weight_bytes=op_work.weight_bytes + extra)
            if extra
            else op_work
        )
    io = sum(padded_bytes(tuple(v.type.shape), v.type.dtype.itemsize) for v in weights.values())
    return ProgramWork(tuple(ops), work.io_bytes - io, work.host_cast_elements)


def published() -> dict[str, Any]:
    """The published LLM figures and model shapes (``anekit/llm/data/published.json``)."""
    text = resources.files("anekit.llm").joinpath("data/published.json").read_text("utf-8")
    return json.loads(text)


def compare_published(prompt_tokens: int = 128) -> list[dict[str, Any]]:
    """Each published decode (and prefill) figure beside the prediction for the same model
    shape and chip.

    Decode is predicted after a prompt of ``prompt_tokens`` with the default context. A
    published prefill figure carries the setup it was measured with
    (``prefill_prompt_tokens``: the whole prompt in one call, a context just that long),
    and is predicted in that shape: one chunk of that many tokens, ``max_seq`` one more.
    """
    data = published()
    rows = []
    for fig in data["figures"]:
        model = data["models"][fig["model"]]
        cfg = config_from_hf(model["config"], source=model["source"])
        est = estimate_llm(cfg, fig["chip"], prompt_tokens=prompt_tokens)
        predicted = est.decode_tokens_per_s
        row = {
            "model": fig["model"],
            "chip": fig["chip"],
            "published_decode": fig["decode_tokens_per_s"],
            "predicted_decode": round(predicted, 1),
            "ratio": round(predicted / fig["decode_tokens_per_s"], 3),
            "published_prefill": fig.get("prefill_tokens_per_s"),
            "predicted_prefill": None,
            "source": fig["source"],
        }
        if row["published_prefill"]:
            n = fig["prefill_prompt_tokens"]
            pre = estimate_llm(cfg, fig["chip"], prompt_tokens=n, max_seq=n + 1, chunk=n)
            row["predicted_prefill"] = round(pre.prefill_tokens_per_s, 0)
            row["prefill_prompt_tokens"] = n
        rows.append(row)
    return rows


@dataclass(frozen=True)
class SpeculativeEstimate:
    """Predicted decode speed-up of a target with a draft on one chip (cost model).

    Per round the draft decodes ``k`` tokens and the target checks them in one call of
    ``k + 1`` positions; with each proposal accepted with probability ``acceptance``
    (independently) a round yields ``(1 - a^(k+1)) / (1 - a)`` tokens (Leviathan et al.
    2023, eq. 1), against one token per target step without a draft
    (:mod:`anekit.llm.speculative`).
    """

    chip: str
    draft_tokens: int
    acceptance: float
    target_step_s: float
    draft_step_s: float
    verify_s: float

    @property
    def tokens_per_round(self) -> float:
        a, k = self.acceptance, self.draft_tokens
        return k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)

    @property
    def round_s(self) -> float:
        return self.draft_tokens * self.draft_step_s + self.verify_s

    @property
    def speedup(self) -> float:
        return self.tokens_per_round * self.target_step_s / self.round_s

    def record(self) -> dict[str, float | int | str]:
        return {
            "chip": self.chip,
            "draft_tokens": self.draft_tokens,
            "acceptance": self.acceptance,
            "tokens_per_round": round(self.tokens_per_round, 3),
            "target_step_ms": round(self.target_step_s * 1e3, 3),
            "draft_step_ms": round(self.draft_step_s * 1e3, 3),
            "verify_ms": round(self.verify_s * 1e3, 3),
            "decode_tokens_per_s": round(self.tokens_per_round / self.round_s, 2),
            "speedup": round(self.speedup, 3),
        }


def estimate_speculative(target: LlmConfig, draft: LlmConfig, chip: str, *, draft_tokens: int,
                         acceptance: float, prompt_tokens: int = 128,
                         max_seq: int | None = None) -> SpeculativeEstimate:  # fmt: skip
    """Predict the speed-up of speculative decoding from both models' predicted step times.

    The target's check is costed as the prefill of ``k + 1`` tokens in one chunk (the same
    block program; its head runs on the last position there, on all ``k + 1`` here, a
    difference the weight streaming of the head dominates).
    """
    if not 0 <= acceptance <= 1:
        raise UsageError(f"acceptance must be in [0, 1], found {acceptance}")
    if not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise UsageError(f"draft_tokens must be in [1, {MAX_DRAFT_TOKENS}], found {draft_tokens}")
    seq = max_seq or max(min(target.max_position, 1024), prompt_tokens + draft_tokens + 2)
    plain = estimate_llm(target, chip, prompt_tokens=prompt_tokens, max_seq=seq)
    small = estimate_llm(draft, chip, prompt_tokens=prompt_tokens, max_seq=seq)
    check = estimate_llm(target, chip, prompt_tokens=draft_tokens + 1, max_seq=seq,
                         chunk=draft_tokens + 1)  # fmt: skip
    return SpeculativeEstimate(plain.chip, draft_tokens, acceptance, plain.decode_step_s,
                               small.decode_step_s, check.prefill_s)  # fmt: skip
