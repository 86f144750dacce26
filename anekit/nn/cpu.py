"""The NumPy (fp32) RMSNorm the CPU runs beside the kernels: the final norm, and every norm's backward.

The kernels fuse each block's RMSNorm forward and return the gradient of its output
(``dxn``) and its ``rstd``; the channel reduction of the backward pass runs here.
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
