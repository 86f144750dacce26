"""Sessions: generations that own their KV cache over one loaded model's shared weights.

``model.session()`` makes a :class:`Session`: its own buffer sets for the block programs
(so its own cache buffers, tables and residual stream), bound to the weights the model
loaded once. Any number of sessions of one model can generate interleaved or from
several threads: each step (a prefill, one decoded token) runs under the model's lock, and
nothing a step reads belongs to another session, so every generation gets exactly the
tokens it would get alone.

Within one session, a new generation (``stream``, ``generate``, ``logits``) reuses the
cache; a generator of an earlier one then raises :class:`~anekit.errors.SessionReused`
at its next token instead of decoding from a cache that now holds another text.
``Model.stream``/``generate``/``logits`` run on the model's own session, so the same holds
for them. After ``model.close()`` every call raises :class:`~anekit.errors.ModelClosed`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from anekit.errors import ModelClosed, SessionReused, UsageError
from anekit.llm.runners import CacheState
from anekit.llm.sampling import Sampler, Sampling

if TYPE_CHECKING:
    from anekit.llm.model import Model
    from anekit.llm.speculative import SpeculativeStats

__all__ = ["CacheState", "GenerationStats", "Session"]


@dataclass
class GenerationStats:
    """Timings of the last ``generate``/``stream`` call (seconds, wall clock on this backend)."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    first_token_s: float = 0.0  # from the call to the first token: prefill and one head
    prefill_s: float = 0.0  # the prompt's blocks and head
    decode_s: float = 0.0  # every later token: one decode step and one head each
    compile_s: float = 0.0  # programs first compiled during this generation: left out above
    speculative: SpeculativeStats | None = None  # acceptance, with a draft model

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        steps = max(self.new_tokens - 1, 0)
        return steps / self.decode_s if self.decode_s > 0 else 0.0


class Session:
    """A generation context of a :class:`~anekit.llm.model.Model`: its own KV cache, the model's
    weights and programs. Made by ``model.session()``; ``close()`` (or ``with``) frees the cache.

    Attributes:
        stats: timings of this session's last generation.
    """

    def __init__(self, model: Model, cache: CacheState | None = None) -> None:
        self.model = model
        self.cache = cache if cache is not None else CacheState()
        self.stats = GenerationStats()
        self._generation = 0  # bumped by each generation; an older generator then refuses
        self._closed = False

    # -- public API ---------------------------------------------------------------------------
    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits ``float32 [T, vocab]`` of every position of ``ids`` (a full prefill)."""
        with self.model._lock:
            self._check_open()
            ids = self.model._check_ids(ids, 0)
            self._generation += 1
            return self.model._prefill(ids, self.cache, all_logits=True)

    def generate(self, ids: Sequence[int], max_new_tokens: int, **sampling: Any) -> list[int]:
        """The new tokens (not the prompt) continuing ``ids``; keywords as :meth:`stream`."""
        return list(self.stream(ids, max_new_tokens, **sampling))

    def stream(
        self,
        ids: Sequence[int],
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: int = 0,
        stop: int | Iterable[int] | None = None,
        draft: Any = None,
        draft_tokens: int = 4,
    ) -> Iterator[int]:
        """Yield new tokens as they are decoded: prefill once, then one KV-cached step per token.

        Args:
            ids: the prompt's token ids (at least one).
            max_new_tokens: the most tokens to generate.
            temperature, top_k, top_p, repetition_penalty, seed: see
                :class:`~anekit.llm.sampling.Sampling`.
            stop: token ids that end generation (not yielded); None: the model's EOS tokens.
            draft: a smaller :class:`~anekit.llm.model.Model` with the same vocabulary that
                proposes ``draft_tokens`` tokens per target call (speculative decoding,
                :mod:`anekit.llm.speculative`); ``stats.speculative`` reports acceptance.
            draft_tokens: tokens the draft proposes per round (1-16). Default: 4.
        """
        sampler = Sampler(Sampling(temperature, top_k, top_p, repetition_penalty, seed))
        if max_new_tokens < 0:
            raise UsageError(f"max_new_tokens must be at least 0, found {max_new_tokens}")
        self._check_open()
        ids = self.model._check_ids(ids, max_new_tokens)
        eos = self.model.config.eos_token_ids
        stops = set(eos if stop is None else ([stop] if isinstance(stop, int) else stop))
        if draft is not None:
            from anekit.llm.speculative import check_draft, speculative_stream

            check_draft(self, draft, draft_tokens)
            return speculative_stream(self, ids, max_new_tokens, sampler, stops, draft,
                                      draft_tokens)  # fmt: skip
        return self._stream(ids, max_new_tokens, sampler, stops)

    def close(self) -> None:
        """Free this session's cache; a generator still running raises ModelClosed."""
        self._closed = True
        self.cache = CacheState()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the generation -----------------------------------------------------------------------
    def _stream(
        self, ids: list[int], limit: int, sampler: Sampler, stops: set[int]
    ) -> Iterator[int]:
        model = self.model
        with model._lock:  # the generation begins when the generator is first resumed
            self._check_open()
            self._generation += 1
            mine = self._generation
            stats = self.stats = GenerationStats(prompt_tokens=len(ids))
            if limit == 0:
                return
            begin, compiled = time.perf_counter(), model.runner.compile_s
            logits = model._prefill(ids, self.cache, all_logits=False)[-1]
            stats.compile_s = model.runner.compile_s - compiled
            stats.prefill_s = time.perf_counter() - begin - stats.compile_s
        history = list(ids)
        while True:
            token = sampler(logits, history)
            if token in stops:
                return
            if stats.new_tokens == 0:
                stats.first_token_s = time.perf_counter() - begin - stats.compile_s
            stats.new_tokens += 1
            yield token
            history.append(token)
            if stats.new_tokens == limit:
                return
            with model._lock:
                self._check_open()
                if self._generation != mine:
                    raise SessionReused(
                        "this generation's KV cache was taken by a later generation of the same "
                        "session (another stream, generate or logits call); use model.session() "
                        "for each generation that must run alongside another"
                    )
                step, compiled = time.perf_counter(), model.runner.compile_s
                logits = model._decode(token, len(history) - 1, self.cache)
                compiling = model.runner.compile_s - compiled
                stats.compile_s += compiling
                stats.decode_s += time.perf_counter() - step - compiling

    def _check_open(self) -> None:
        if self._closed or self.model.closed:
            raise ModelClosed("the model (or this session) is closed; load the model again")
