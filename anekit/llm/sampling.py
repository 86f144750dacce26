"""Choosing the next token from logits: greedy, temperature, top-k, top-p, repetition penalty."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from anekit.errors import UsageError


@dataclass(frozen=True)
class Sampling:
    """How to pick tokens.

    Attributes:
        temperature: 0 picks the most likely token (greedy); above 0 samples from
            ``softmax(logits / temperature)``.
        top_k: sample among the k most likely tokens only (0: all).
        top_p: sample from the smallest set of most likely tokens whose probability
            reaches ``top_p`` (1.0: all).
        repetition_penalty: divide the positive logits (multiply the negative ones) of
            tokens already in the sequence by this (CTRL, Keskar et al. 2019; 1.0: off).
        seed: seed of the sampling generator.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        finite = math.isfinite
        checks = (  # NaN fails every comparison: each check refuses it too
            ("temperature", finite(self.temperature) and self.temperature >= 0,
             "a finite number of at least 0"),
            ("top_k", self.top_k >= 0, "at least 0"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("repetition_penalty", finite(self.repetition_penalty) and self.repetition_penalty > 0,
             "a finite number above 0"),
        )  # fmt: skip
        for name, ok, expected in checks:
            if not ok:
                raise UsageError(f"{name} must be {expected}, found {getattr(self, name)}")


class Sampler:
    """Picks tokens one at a time with its own seeded generator."""

    def __init__(self, sampling: Sampling) -> None:
        self.sampling = sampling
        self.rng = np.random.default_rng(sampling.seed)

    def __call__(self, logits: np.ndarray, history: Iterable[int] = ()) -> int:
        """The next token for ``logits [V]`` given the tokens so far."""
        probs = self.probs(logits, history)
        if probs is None:
            return int(np.argmax(self.scores(logits, history)))
        return int(self.rng.choice(len(probs), p=probs))

    def scores(self, logits: np.ndarray, history: Iterable[int] = ()) -> np.ndarray:
        """``logits`` as float64 with the repetition penalty applied."""
        s = self.sampling
        scores = np.asarray(logits, dtype=np.float64)
        if s.repetition_penalty != 1.0:
            scores = scores.copy()
            seen = np.unique(np.fromiter(history, dtype=np.int64))
            picked = scores[seen]
            scores[seen] = np.where(
                picked > 0, picked / s.repetition_penalty, picked * s.repetition_penalty
            )
        return scores

    def probs(self, logits: np.ndarray, history: Iterable[int] = ()) -> np.ndarray | None:
        """The distribution the next token is drawn from (temperature, top-k, top-p applied),
        or None when greedy (temperature 0)."""
        s = self.sampling
        if s.temperature == 0:
            return None
        scores = self.scores(logits, history)
        if 0 < s.top_k < len(scores):
            cutoff = np.partition(scores, -s.top_k)[-s.top_k]
            scores = np.where(scores >= cutoff, scores, -np.inf)
        # shift before dividing: (x - max) / T is 0 for the best token and <= 0 for the rest,
        # so any finite temperature (1e-320 too, where x / T overflows) gives finite weights
        with np.errstate(over="ignore", divide="ignore"):
            probs = np.exp((scores - scores.max()) / s.temperature)
        probs /= probs.sum()
        if s.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            before = np.cumsum(probs[order]) - probs[order]  # mass of the more likely tokens
            keep = order[before < s.top_p]  # the most likely token always stays
            kept = np.zeros_like(probs)
            kept[keep] = probs[keep]
            probs = kept / kept.sum()
        return probs
