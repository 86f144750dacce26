"""The CPU half of a training step (fp32 NumPy): RMSNorm, cross-entropy, embedding scatter.

Activations are ``[channels, tokens]``, the layout the kernels use.
"""

from __future__ import annotations

import numpy as np


def rmsnorm(x: np.ndarray, gain: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """RMSNorm over channels of ``x [D, N]``: returns ``x * rstd * gain`` and ``rstd [1, N]``."""
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=0, keepdims=True) + np.float32(eps))
    return x * rstd * gain[:, None], rstd.astype(np.float32)


def rmsnorm_backward(
    dy: np.ndarray, x: np.ndarray, rstd: np.ndarray, gain: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of ``y = x * rstd * gain`` for ``x`` and ``gain``, given ``rstd = (mean x^2 + eps)^-1/2``.

    With ``xh = x * rstd`` and ``g = dy * gain``: ``dx = rstd * (g - xh * mean_channels(g * xh))``
    and ``dgain = sum_tokens(dy * xh)``.
    """
    xh = x * rstd
    g = dy * gain[:, None]
    dx = rstd * (g - xh * np.mean(g * xh, axis=0, keepdims=True))
    return dx, np.sum(dy * xh, axis=1)


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
