"""Speculative decoding: a small draft model proposes tokens, the target checks them in one call.

Each round the draft decodes ``k`` tokens one at a time; the target then runs one chunked
call over the last accepted token and the ``k`` proposals (``k + 1`` positions, the
prefill program's shape), which gives its distribution at every proposal. Greedy
decoding keeps the proposals while each is the target's own argmax and then adds the
target's token at the first disagreement (or one more after ``k`` agreements): the
output is the target's greedy output wherever the chunked and one-token programs agree
on the argmax (their logits differ by fp16 rounding only). Sampling uses the standard
acceptance rule (Leviathan et al. 2023, Chen et al. 2023): proposal ``d`` drawn from the
draft's ``q`` is kept with probability ``min(1, p(d) / q(d))``; the first rejected one is
replaced by a draw from ``max(0, p - q)`` renormalised, so every token is distributed as
the target's own sampling would draw it.

Rejected proposals leave rows in the caches past the accepted length; the next call
starts at the accepted length, overwrites them and masks anything beyond.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from anekit.errors import SessionReused, UsageError
from anekit.llm import kernels as K
from anekit.llm.sampling import Sampler

if TYPE_CHECKING:
    from anekit.llm.session import Session

MAX_DRAFT_TOKENS = 16


@dataclass
class SpeculativeStats:
    """What speculation did in the last generation."""

    draft_tokens: int = 0  # k
    rounds: int = 0  # target calls after the prompt
    proposed: int = 0
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_round(self) -> float:
        """New tokens per target call: accepted proposals plus the target's own token."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0


def verify_sample(token: int, p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> int | None:
    """The standard acceptance rule for a proposal ``token`` drawn from ``q``: None keeps it
    (probability ``min(1, p/q)``), else a replacement drawn from ``max(0, p - q)``
    renormalised. The kept-or-replaced token is then distributed exactly as ``p``."""
    if rng.random() < min(1.0, p[token] / q[token]):
        return None
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    dist = residual / total if total > 0 else p
    return int(rng.choice(len(dist), p=dist))


def check_draft(target_session: Session, draft: object, draft_tokens: int) -> None:
    """UsageError unless ``draft`` can propose tokens for the session's model."""
    target = target_session.model
    if not isinstance(draft, type(target)):
        raise UsageError(f"draft must be an anekit.llm Model, found {type(draft).__name__}")
    if draft is target:
        raise UsageError("the draft must be another Model than the target (load it again)")
    if draft.config.vocab_size != target.config.vocab_size:
        raise UsageError(
            f"the draft's vocabulary ({draft.config.vocab_size} tokens) differs from the "
            f"target's ({target.config.vocab_size}): speculation needs the same tokenizer"
        )
    if not 1 <= draft_tokens <= MAX_DRAFT_TOKENS:
        raise UsageError(f"draft_tokens must be in [1, {MAX_DRAFT_TOKENS}], found {draft_tokens}")


class Speculation:
    """One speculative generation: the target's session, a draft session, their positions."""

    def __init__(self, session: Session, draft: object, k: int, sampler: Sampler) -> None:
        self.session = session
        self.target = session.model
        self.draft = draft.session()  # type: ignore[attr-defined]
        self.k = k
        self.sampler = sampler
        self.draft_sampler = Sampler(sampler.sampling)
        self.stats = SpeculativeStats(draft_tokens=k)
        self.seen: list[int] = []  # the tokens the draft's cache holds
        self.compile_s = 0.0  # programs first compiled during the rounds (both models)
        self.generation = session._generation

    def _draft_logits(self, history: list[int]) -> np.ndarray:
        """Feed the draft the tokens of ``history`` it has not seen (the prompt as a prefill,
        later ones one step each); its logits after the last."""
        model = self.draft.model
        # the cache is valid for the tokens the draft saw that history still has (a rejected
        # proposal is not); the last token is always run again, for its logits
        valid = 0
        while valid < min(len(self.seen), len(history) - 1) and self.seen[valid] == history[valid]:
            valid += 1
        with model._lock:
            self.draft._check_open()
            compiled = model.runner.compile_s
            if valid == 0:
                logits = model._prefill(history, self.draft.cache, all_logits=False)[-1]
            for pos in range(valid, len(history)) if valid else ():
                logits = model._decode(history[pos], pos, self.draft.cache)
            self.seen = list(history)
            self.compile_s += model.runner.compile_s - compiled
        return logits

    def _propose(self, history: list[int]) -> tuple[list[int], list[np.ndarray | None]]:
        """``k`` draft tokens and the distribution each was drawn from (None: greedy)."""
        tokens, dists = [], []
        seq = list(history)
        for _ in range(self.k):
            logits = self._draft_logits(seq)
            dist = self.draft_sampler.probs(logits, seq)
            token = int(np.argmax(self.draft_sampler.scores(logits, seq))) if dist is None else (
                int(self.draft_sampler.rng.choice(len(dist), p=dist)))  # fmt: skip
            tokens.append(token)
            dists.append(dist)
            seq.append(token)
        return tokens, dists

    def _verify(self, tokens: list[int], start: int) -> np.ndarray:
        """The target's logits ``[len(tokens), V]`` after each of ``tokens`` at ``start...``."""
        model = self.target
        key = K.BlockKey(self.k + 1, model.max_seq)
        with model._lock:
            self.session._check_open()
            if self.session._generation != self.generation:
                raise SessionReused(
                    "this generation's KV cache was taken by a later generation of the same "
                    "session; use model.session() for each generation that must run alongside"
                )
            compiled = model.runner.compile_s
            h = model.runner.blocks(tokens, start, key, self.session.cache)
            logits = model.runner.head(h)[: len(tokens)]
            model._guard(key, self.session.cache, logits, start, len(tokens), start)
            self.compile_s += model.runner.compile_s - compiled
        return logits

    def _accept(self, proposals: list[int], dists: list, logits: np.ndarray,
                history: list[int]) -> list[int]:  # fmt: skip
        """The tokens this round adds: accepted proposals, then the target's own token."""
        out: list[int] = []
        seq = list(history)
        for i, (token, q) in enumerate(zip(proposals, dists)):
            p = self.sampler.probs(logits[i], seq)
            if p is None:
                best = int(np.argmax(self.sampler.scores(logits[i], seq)))
                if token != best:
                    return out + [best]
            else:
                replacement = verify_sample(token, p, q, self.sampler.rng)
                if replacement is not None:
                    return out + [replacement]
            out.append(token)
            seq.append(token)
            self.stats.accepted += 1
        return out + [self.sampler(logits[len(proposals)], seq)]

    def rounds(self, history: list[int]) -> Iterator[list[int]]:
        """The tokens of each round; ``history`` (the caller appends what it yields) ends with
        the one token the target's cache does not hold yet."""
        while True:
            start = len(history) - 1  # the last token is the first the target has not run
            proposals, dists = self._propose(history)
            logits = self._verify([history[-1]] + proposals, start)
            self.stats.rounds += 1
            self.stats.proposed += len(proposals)
            yield self._accept(proposals, dists, logits, history)


def speculative_stream(session: Session, ids: list[int], limit: int, sampler: Sampler,
                       stops: set[int], draft: object, k: int) -> Iterator[int]:  # fmt: skip
    """Yield up to ``limit`` tokens continuing ``ids``, proposed by ``draft``, checked by the
    session's model; ``session.stats.speculative`` reports acceptance."""
    model = session.model
    for who, m in (("target", model), ("draft", draft)):
        if len(ids) + limit + k > m.max_seq:  # type: ignore[attr-defined]
            raise UsageError(
                f"{len(ids)} prompt tokens + {limit} new ones + {k} draft tokens exceed the "
                f"{who}'s cache of {m.max_seq} positions (speculation checks k tokens past the "
                "last one)"  # type: ignore[attr-defined]
            )
    with model._lock:
        session._check_open()
        session._generation += 1
        spec = Speculation(session, draft, k, sampler)
        stats = session.stats = type(session.stats)(prompt_tokens=len(ids))  # GenerationStats
        stats.speculative = spec.stats
        if limit == 0:
            return
        begin = time.perf_counter()
        logits = model._prefill(ids, session.cache, all_logits=False)[-1]
        stats.prefill_s = time.perf_counter() - begin
    history = list(ids)
    first = sampler(logits, history)
    pending = [first]
    step = time.perf_counter()
    rounds = None
    try:
        while True:
            for token in pending:
                if token in stops:
                    return
                stats.new_tokens += 1
                if stats.new_tokens == 1:
                    stats.first_token_s = time.perf_counter() - begin
                    step = time.perf_counter()
                yield token
                history.append(token)
                if stats.new_tokens == limit:
                    return
            rounds = rounds or spec.rounds(history)
            pending = next(rounds)
            stats.compile_s = spec.compile_s
            stats.decode_s = time.perf_counter() - step - spec.compile_s
    finally:
        spec.draft.close()
