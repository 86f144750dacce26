"""Model parameters: names, shapes, initialisation, all in one flat fp32 buffer with named views.

One buffer makes the optimizer, clipping and the finite check a handful of
vectorised NumPy calls instead of a loop over dozens of small arrays. Parameters
with weight decay come first, so the decayed part is a prefix of the buffer.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from anekit.train.config import ModelConfig

INIT_STD = 0.02  # GPT-2 / llama2.c initialisation of every matrix


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: name, shape, whether AdamW decays it, and its initial standard deviation."""

    name: str
    shape: tuple[int, ...]
    decay: bool
    std: float  # 0 means "initialise to ones" (RMSNorm gains)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def param_specs(cfg: ModelConfig) -> list[ParamSpec]:
    """Every parameter of the model, decayed matrices first.

    Matrices keep the model dimension first (see :mod:`anekit.nn.kernels`): ``wq [D, H*hd]``,
    ``wk, wv [D, KV*hd]``, ``wo [D, H*hd]``, ``w1, w3, w2 [D, F]``. The embedding
    ``[V, D]`` is also the classifier. ``wo`` and ``w2`` write into the residual stream and
    start smaller by ``1/sqrt(2 * n_layers)`` (GPT-2, Radford et al. 2019, section 2.3).
    """
    d, q, kv, f = cfg.dim, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.hidden_dim
    residual_std = INIT_STD / math.sqrt(2 * cfg.n_layers)
    specs = [ParamSpec("embed", (cfg.vocab_size, d), True, INIT_STD)]
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        specs += [
            ParamSpec(p + "wq", (d, q), True, INIT_STD),
            ParamSpec(p + "wk", (d, kv), True, INIT_STD),
            ParamSpec(p + "wv", (d, kv), True, INIT_STD),
            ParamSpec(p + "wo", (d, q), True, residual_std),
            ParamSpec(p + "w1", (d, f), True, INIT_STD),
            ParamSpec(p + "w3", (d, f), True, INIT_STD),
            ParamSpec(p + "w2", (d, f), True, residual_std),
        ]
    specs += [
        ParamSpec(f"layers.{i}.{n}", (d,), False, 0.0)
        for i in range(cfg.n_layers)
        for n in ("attn_norm", "ffn_norm")
    ]
    specs.append(ParamSpec("final_norm", (d,), False, 0.0))
    return specs


class Params:
    """Named fp32 arrays that are views of one flat buffer (``flat``)."""

    def __init__(self, specs: list[ParamSpec]) -> None:
        self.specs = specs
        self.flat = np.zeros(sum(s.size for s in specs), np.float32)
        self.views: dict[str, np.ndarray] = {}
        offset = 0
        for s in specs:
            self.views[s.name] = self.flat[offset : offset + s.size].reshape(s.shape)
            offset += s.size
        flags = [s.decay for s in specs]
        if flags != sorted(flags, reverse=True):
            raise ValueError("parameters with weight decay must come before those without")
        self.n_decay = sum(s.size for s in specs if s.decay)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.views[name]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        view = self.views[name]
        if value is not view:  # ``params[k] += x`` has already updated the view in place
            view[...] = value

    def __iter__(self) -> Iterator[str]:
        return iter(self.views)

    def zeros_like(self) -> Params:
        """A zeroed buffer with the same layout (gradients, optimizer moments)."""
        return Params(self.specs)

    def layer(self, i: int) -> dict[str, np.ndarray]:
        """Layer ``i``'s parameters by short name (``wq``, ``attn_norm``, ...)."""
        prefix = f"layers.{i}."
        return {k[len(prefix) :]: v for k, v in self.views.items() if k.startswith(prefix)}


def init_params(cfg: ModelConfig, rng: np.random.Generator) -> Params:
    """Fresh parameters: normal matrices (see :func:`param_specs`), unit RMSNorm gains."""
    params = Params(param_specs(cfg))
    for s in params.specs:
        view = params[s.name]
        if s.std == 0.0:
            view[...] = 1.0
        else:
            view[...] = rng.standard_normal(s.shape, dtype=np.float32) * np.float32(s.std)
    return params
