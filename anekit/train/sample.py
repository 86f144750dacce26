"""Sampling text from a trained model with the forward kernels (batch 1)."""

from __future__ import annotations

import numpy as np

from anekit.train.data import BOS, Tokenizer
from anekit.train.model import Model
from anekit.train.params import Params


def next_token(logits: np.ndarray, temperature: float, top_k: int, rng: np.random.Generator) -> int:
    """Pick a token from ``logits [V]``: greedy at temperature 0, else softmax sampling over the top k."""
    if temperature <= 0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / temperature
    if 0 < top_k < len(scaled):
        cutoff = np.partition(scaled, -top_k)[-top_k]
        scaled = np.where(scaled >= cutoff, scaled, -np.inf)
    probs = np.exp(scaled - scaled.max())
    return int(rng.choice(len(probs), p=probs / probs.sum()))


def generate(
    model: Model,
    params: Params,
    tokenizer: Tokenizer,
    prompt: str,
    tokens: int,
    rng: np.random.Generator,
    temperature: float = 0.8,
    top_k: int = 40,
) -> str:
    """Continue ``prompt`` by ``tokens`` tokens; returns prompt and continuation as text.

    Each new token runs the forward kernels over the last ``seq`` tokens (no KV cache:
    the kernels have one compiled width). Positions after the window's end hold
    padding, which the causal mask keeps out of the prediction.
    """
    seq = model.shape.seq
    if model.shape.batch != 1:
        raise ValueError(f"generation needs a batch-1 model, found batch {model.shape.batch}")
    ids = tokenizer.encode(prompt) or [BOS if tokenizer.vocab_size > 256 else ord("\n")]
    window = np.zeros((1, seq), dtype=np.int64)
    for _ in range(tokens):
        recent = ids[-seq:]
        window[0, : len(recent)] = recent
        trace = model.forward(params, window)
        logits = trace.hn[:, len(recent) - 1] @ params["embed"].T
        ids.append(next_token(logits, temperature, top_k, rng))
    return tokenizer.decode(ids)
