"""``Model``: a loaded decoder-only language model, generation and its public API.

A :class:`Model` validates what the caller asks (cache size, chunk, host form, scheme),
turns a prompt into prefill calls and KV-cached decode steps, samples, and times them.
What runs the blocks and the head is its runner (:mod:`anekit.llm.runners`): resident
dynamic-weight blocks by default, segment programs with their weights compiled in with
``compress=``.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from anekit import backends
from anekit.backends.placement import Placement
from anekit.config import physical_memory
from anekit.errors import ModelClosed, UsageError
from anekit.llm import kernels as K
from anekit.llm.compressed import check_scheme
from anekit.llm.config import LlmConfig
from anekit.llm.guard import (
    FP16_SATURATION,
    GarbageWarning,
    check_cliffs,
    check_step,
    saturation_of,
)
from anekit.llm.runners import CacheState, ResidentRunner, Runner, SegmentedRunner, decode_cache
from anekit.llm.session import GenerationStats, Session
from anekit.llm.source import TensorSource, check_shapes

__all__ = ["GenerationStats", "Model", "Session", "TensorSource"]

DEFAULT_MAX_SEQ = 1024  # cache slots when neither the caller nor a smaller model limit says
DEFAULT_CHUNK = 64  # prompt tokens per prefill call
HOLD = {"fp16": np.float16, "fp32": np.float32}  # host form of weights and cache


class Model:
    """A decoder-only language model on a backend; see :func:`anekit.llm.load`.

    Attributes:
        config: the model's :class:`~anekit.llm.config.LlmConfig`.
        tokenizer: its tokenizer (``encode``/``decode``), or None when the directory has none.
        backend: "ane" or "reference".
        chip: the chip profile whose dimension limit splits the head (and that ``cost`` uses).
        max_seq: cache slots: prompt plus generated tokens must fit.
        chunk: prompt tokens per prefill call.
        hold: host form of the weights and cache: "fp16" (the file's bytes) or "fp32"
            (fp16 values held as float32, the reference backend's compute form; the
            default there, as it converts nothing per call). Default: "fp16" elsewhere.
        stats: timings of the last generation (:class:`GenerationStats`).
        compress: the weight compression (``anekit.llm.compressed``: a scheme, or "fp16"
            for weights compiled in uncompressed), or None for the dynamic-weight kernels.
        compression: the report of each compressed program (segment or head), by name,
            as each is first compiled.
        runner: what runs the blocks and head (:class:`~anekit.llm.runners.Runner`).
        load_report: for a converted checkpoint (GGUF), what each stored tensor became, one
            line each; empty otherwise.
        strict: cliff events (values the engine would saturate or replace) raise
            GarbageValues; else they warn once (:func:`anekit.llm.guard.check_cliffs`).
        residual_mode: "fp16" or "host" (the fp32 host residual; ``anekit.llm.runners``),
            and ``runner.host_reason`` why.
    """

    load_report: list[str] = []  # noqa: RUF012 (set per instance by the loader)

    def __init__(
        self,
        config: LlmConfig,
        source: TensorSource,
        *,
        tokenizer: Any = None,
        backend: str | None = None,
        chip: str | None = None,
        max_seq: int | None = None,
        chunk: int = DEFAULT_CHUNK,
        hold: str | None = None,
        compress: str | None = None,
        calibration: Sequence[int] | None = None,
        compression_states: dict[str, Any] | None = None,
        numerics: str | None = None,
        compile_options: dict[str, Any] | None = None,
        residual: str = "auto",
        strict: bool = False,
    ) -> None:
        from anekit.hw.chips import resolve

        check_shapes(config, source)  # before any buffer is made
        self.config = config
        self.tokenizer = tokenizer
        self.backend, self._skipped, self._chosen_by = backends.choose_backend(backend)
        self.chip = resolve(chip).name
        if chunk < 1:
            raise UsageError(f"chunk must be at least 1, found {chunk}")
        self._chunk = chunk
        if hold is None:
            hold = "fp16" if backends.capabilities(self.backend).host_fp16 else "fp32"
        if hold not in HOLD:
            raise UsageError(f"hold must be one of {sorted(HOLD)}, found {hold!r}")
        self.compress = None if compress is None else check_scheme(compress, config)
        self._lock = threading.RLock()  # one step of one session at a time (they share the head)
        self._closed = False
        if max_seq is None:  # 0 is not "the default": it is refused below
            max_seq = min(config.max_position, DEFAULT_MAX_SEQ)
        max_seq = self._checked_max_seq(max_seq)
        extra = {**({} if numerics is None else {"numerics": numerics}), **(compile_options or {})}
        # the garbage guard's saturation: the profile's matmul cliff (fp16's own without one)
        self._saturation = saturation_of(numerics if numerics is not None else self.chip)
        self.residual_calibration: Any = None  # what llm.load measured to choose alpha
        self.strict, self._warned = bool(strict), False
        options = {"backend": self.backend, "chip": self.chip, "dtype": HOLD[hold]}
        options.update(residual=residual, saturation=self._saturation)
        options["compile_options"] = extra  # numerics= (a reference profile), storage=...
        options.update(max_seq=max_seq, chunk=min(chunk, max_seq))
        self.runner: Runner
        if self.compress is None:
            self.runner = ResidentRunner(config, source, **options)
        else:
            tokens = None if calibration is None else self._tokens(calibration)
            self.runner = SegmentedRunner(
                config,
                source,
                scheme=self.compress,
                calibration=tokens,
                states=compression_states,
                **options,
            )
        self._own = Session(self, self.runner.cache)  # of Model.stream, generate and logits

    @property
    def max_seq(self) -> int:
        """Cache positions: prompt plus generated tokens must fit (:meth:`reserve`)."""
        return self.runner.max_seq

    @property
    def chunk(self) -> int:
        """Prompt tokens per prefill call."""
        return self.runner.chunk

    def reserve(self, max_seq: int) -> None:
        """Size the KV cache for ``max_seq`` positions (prompt plus new tokens); clears it."""
        max_seq = self._checked_max_seq(max_seq)
        self.runner.reserve(max_seq, min(self._chunk, max_seq))

    def _checked_max_seq(self, max_seq: int) -> int:
        """``max_seq`` if the model can hold it: beyond the trained context
        (``config.max_position``) only a model with a sliding window may go, as its attention
        never reaches further back than the window."""
        c = self.config
        if max_seq < 2:
            raise UsageError(f"max_seq must be at least 2, found {max_seq}")
        if max_seq > c.max_position and c.sliding_window is None:
            raise UsageError(
                f"max_seq {max_seq} exceeds the model's context of {c.max_position} positions"
            )
        # the keys and values of every layer, at 2 bytes a value at least: refused before any
        # buffer is made (a sliding window lets max_seq pass the context, not the memory)
        cache = 2 * c.n_layers * max_seq * c.kv_dim * 2
        if cache > physical_memory():
            raise UsageError(
                f"max_seq {max_seq} needs a KV cache of at least {cache} bytes (keys and values "
                f"of {c.n_layers} layers x {c.kv_dim} channels), more than this machine's "
                f"{physical_memory()} bytes of memory"
            )
        return max_seq

    @property
    def compiles(self) -> int:
        """Programs compiled so far for this model (each once, shared by every layer)."""
        return self.runner.compiles

    @property
    def compression(self) -> dict[str, Any]:
        """The report of each compressed program, by name (empty without ``compress``)."""
        return self.runner.compression

    def programs(self) -> list[Any]:
        """The programs compiled so far, in order (with ``compress``: their weights as stored)."""
        return self.runner.programs()

    # -- forward ------------------------------------------------------------------------------
    def _prefill(self, ids: Sequence[int], state: CacheState, *, all_logits: bool) -> np.ndarray:
        """Fill the cache with ``ids`` from position 0; logits of every token, or of the last.

        Each chunk's values pass the garbage guard (:mod:`anekit.llm.guard`) first.
        """
        key = K.BlockKey(self.chunk, self.max_seq)
        rows = []
        for start in range(0, len(ids), self.chunk):
            part = ids[start : start + self.chunk]
            h = self.runner.blocks(part, start, key, state)
            last = len(part) - 1
            logits = np.empty((0, self.config.vocab_size), np.float32)
            if all_logits:
                logits, last = self.runner.head(h)[: len(part)], 0
            elif start + self.chunk >= len(ids):
                logits = self.runner.head(h[..., last : last + 1])
            self._guard(key, state, logits, start, len(part), start + last)
            rows.append(logits)
        return np.concatenate(rows, axis=0)

    def _decode(self, token: int, pos: int, state: CacheState) -> np.ndarray:
        """One token at position ``pos`` (the cache holds ``pos`` tokens); its logits ``[V]``."""
        key = K.BlockKey(1, decode_cache(self.max_seq, pos))
        h = self.runner.blocks([token], pos, key, state)
        logits = self.runner.head(h)
        self._guard(key, state, logits, pos, 1, pos)
        return logits[0]

    def _guard(
        self,
        key: K.BlockKey,
        state: CacheState,
        logits: np.ndarray,
        start: int,
        tokens: int,
        logit_start: int,
    ) -> None:
        """The garbage guard on a step just run (``anekit.llm.guard``): its stream and logits,
        then the cliff events of its programs (and of the head, if it ran)."""
        # the host residual's programs store what they add (sums, fp16's own range); the
        # stream itself is float32 on the host
        saturation = FP16_SATURATION if self.runner.host else self._saturation
        check_step(self.runner.residuals(key, state), logits, start=start, tokens=tokens,
                   logit_start=logit_start, saturation=saturation)  # fmt: skip
        head = self.runner.head_cliffs if len(logits) else None
        message = check_cliffs(state.cliffs, head, start=start, tokens=tokens, strict=self.strict)
        if message is not None and not self._warned:
            self._warned = True
            warnings.warn(message + " (warned once per model; llm.load(strict=True) raises)",
                          GarbageWarning, stacklevel=4)  # fmt: skip

    @property
    def residual_mode(self) -> str:
        """Where the residual stream lives between programs: "fp16" or "host" (float32)."""
        return "host" if self.runner.host else "fp16"

    # -- public API ---------------------------------------------------------------------------
    def session(self) -> Session:
        """A new generation context with its own KV cache, sharing this model's weights and
        programs (:class:`~anekit.llm.session.Session`): one per concurrent generation."""
        if self._closed:
            raise ModelClosed("the model is closed; load it again")
        return Session(self)

    @property
    def stats(self) -> GenerationStats:
        """Timings of the last generation of the model's own session (``stream``, ``generate``)."""
        return self._own.stats

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits ``float32 [T, vocab]`` of every position of ``ids`` (a full prefill, for evaluation)."""
        return self._own.logits(ids)

    def generate(self, ids: Sequence[int], max_new_tokens: int, **sampling: Any) -> list[int]:
        """The new tokens (not the prompt) continuing ``ids``; keywords as :meth:`stream`."""
        return self._own.generate(ids, max_new_tokens, **sampling)

    def stream(self, ids: Sequence[int], max_new_tokens: int, **sampling: Any) -> Iterator[int]:
        """Yield new tokens as they are decoded (:meth:`Session.stream` on the model's own session).

        A later ``stream``, ``generate`` or ``logits`` call takes over the cache: a generator of
        an earlier one then raises SessionReused. Use :meth:`session` for generations that run
        alongside each other.
        """
        return self._own.stream(ids, max_new_tokens, **sampling)

    def _tokens(self, ids: Sequence[int], what: str = "calibration") -> list[int]:
        """``ids`` as ints: at least one, each in the vocabulary (else UsageError naming ``what``)."""
        ids = [int(t) for t in ids]
        if not ids:
            raise UsageError(f"{what} has no tokens; give at least one (e.g. the BOS token)")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise UsageError(
                f"{what}: token ids {bad[:5]} are outside the vocabulary "
                f"[0, {self.config.vocab_size})"
            )
        return ids

    def _check_ids(self, ids: Sequence[int], new_tokens: int) -> list[int]:
        ids = self._tokens(ids, "the prompt")
        if len(ids) + new_tokens > self.max_seq:
            raise UsageError(
                f"{len(ids)} prompt tokens + {new_tokens} new ones exceed the cache of "
                f"{self.max_seq} positions (load with a larger max_seq, or reserve())"
            )
        return ids

    # -- lifetime -----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether ``close()`` has been called (every later call raises ModelClosed)."""
        return self._closed

    def close(self) -> None:
        """Release every compiled kernel (and so the buffers of the weights and every cache)."""
        with self._lock:
            self._closed = True
            self._own.close()
            self.runner.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def placement(self) -> Placement | None:
        """Where the model's programs run and why (``Kernel.placement`` of the first compiled,
        with how the backend was chosen); None before anything is compiled."""
        kernels = self.runner.kernels()
        if not kernels:
            return None
        return kernels[0].placement.chosen(self._skipped, self._chosen_by)

    def __repr__(self) -> str:
        c = self.config
        params = c.n_params() / 1e6
        packed = f", compress={self.compress!r}" if self.compress else ""
        return (
            f"<Model {c.architecture} {params:.1f}M params, {c.n_layers} layers, "
            f"backend={self.backend!r}, max_seq={self.max_seq}{packed}, compiles={self.compiles}>"
        )
