"""The CPU half of a training step that is not part of a kernel's contract (fp32 NumPy).

Cross-entropy and the embedding scatter; RMSNorm is :mod:`anekit.nn.cpu`.
"""

from __future__ import annotations

import numpy as np


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of ``logits [N, V]`` against ``targets [N]``, and ``softmax(logits)``.

    The gradient of the mean loss for the logits is ``(probs - onehot(targets)) / N``.
    """
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    total = exp.sum(axis=1, keepdims=True)
    rows = np.arange(len(targets))
    loss = float(np.mean(np.log(total[:, 0]) - shifted[rows, targets]))
    exp /= total
    return loss, exp


def scatter_rows(ids: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
    """``out[ids[i]] += rows[i]`` for every i, repeated ids summed (the embedding backward)."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    out[sorted_ids[starts]] += np.add.reduceat(rows[order], starts, axis=0)
