"""AdamW, the learning-rate schedule, gradient clipping and dynamic loss scaling, on flat fp32 buffers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from anekit.train.config import TrainConfig
from anekit.train.params import Params


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Learning rate of optimizer step ``step`` (0-based): linear warmup, then cosine to ``min_lr``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    span = max(cfg.steps - cfg.warmup, 1)
    progress = min((step - cfg.warmup) / span, 1.0)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * progress))


def clip_grad_norm(grads: Params, max_norm: float) -> float:
    """Scale ``grads`` so their global L2 norm is at most ``max_norm`` (0: no limit); returns the norm before."""
    norm = float(np.sqrt(np.dot(grads.flat, grads.flat)))
    if max_norm > 0 and norm > max_norm:
        grads.flat *= np.float32(max_norm / (norm + 1e-6))
    return norm


class AdamW:
    """Adam with decoupled weight decay (Loshchilov and Hutter, 2019), bias-corrected moments.

    Only the prefix of the buffer holding decayed parameters (``Params.n_decay``) decays.
    """

    def __init__(self, params: Params, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.m = params.zeros_like()
        self.v = params.zeros_like()
        self.t = 0  # updates applied (steps skipped for overflow do not count)
        self._tmp = np.empty_like(params.flat)

    def update(self, params: Params, grads: Params, lr: float) -> None:
        """Apply one update with learning rate ``lr``."""
        c = self.cfg
        self.t += 1
        g, m, v, tmp = grads.flat, self.m.flat, self.v.flat, self._tmp
        m *= np.float32(c.beta1)
        m += np.float32(1 - c.beta1) * g
        v *= np.float32(c.beta2)
        np.multiply(g, g, out=tmp)
        tmp *= np.float32(1 - c.beta2)
        v += tmp
        bias1 = 1 - c.beta1**self.t
        bias2 = 1 - c.beta2**self.t
        # tmp = (v / bias2)^0.5 + eps, then the step m / bias1 / tmp
        np.multiply(v, np.float32(1 / bias2), out=tmp)
        np.sqrt(tmp, out=tmp)
        tmp += np.float32(c.adam_eps)
        np.divide(m, tmp, out=tmp)
        tmp *= np.float32(lr / bias1)
        params.flat[: params.n_decay] *= np.float32(1 - lr * c.weight_decay)
        params.flat -= tmp


@dataclass
class LossScaler:
    """Dynamic loss scaling: halve on a non-finite gradient (and skip the step), double after a run of finite ones."""

    scale: float
    growth_interval: int
    good_steps: int = 0
    max_scale: float = 2.0**24

    def update(self, finite: bool) -> bool:
        """Record one step's outcome; True if its gradients may be applied."""
        if not finite:
            self.scale = max(self.scale / 2, 1.0)
            self.good_steps = 0
            return False
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale = min(self.scale * 2, self.max_scale)
            self.good_steps = 0
        return True
