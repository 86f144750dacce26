"""Model shapes and training hyper-parameters: the named configs ``anekit train --config`` knows."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from anekit.nn.spec import BlockShape, DecoderShape, check_int, check_real, is_real


@dataclass(frozen=True)
class ModelConfig(DecoderShape):
    """A decoder to train (the sizes of :class:`~anekit.nn.spec.DecoderShape`, with the classifier
    tied to the embedding), its sequence length and RoPE base, and where the shape comes from.

    Attributes:
        name: config name.
        seq_len: tokens per training sequence (the kernels' compiled width).
        rope_theta: RoPE base frequency.
        source: where the shape comes from.
    """

    name: str
    seq_len: int
    rope_theta: float = 10000.0
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("name", "source"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(
                    f"{self.owner}: {name} must be a string, found {getattr(self, name)!r}"
                )
        super().__post_init__()
        check_int(self.owner, "seq_len", self.seq_len, 2)
        check_real(self.owner, "rope_theta", self.rope_theta, positive=True)

    @property
    def owner(self) -> str:
        return f"config {self.name!r}"

    def block(self, batch: int) -> BlockShape:
        """The kernel shape of one decoder block for ``batch`` sequences."""
        return self.kernel_shape(self.seq_len, batch, self.rope_theta)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown model config fields {unknown}; known: {sorted(names)}")
        return cls(**data)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings: AdamW with linear warmup and cosine decay, clipping, loss scaling.

    Attributes:
        steps: optimizer steps of the run.
        batch_size: sequences per micro-batch (one kernel call per block and direction).
        grad_accum: micro-batches accumulated per optimizer step.
        lr: peak learning rate; ``min_lr`` is reached at ``steps`` by cosine decay.
        warmup: steps of linear warmup from ``lr / warmup``.
        weight_decay: decoupled decay of every matrix (embedding included, as llama2.c does).
        beta1, beta2, adam_eps: AdamW moments.
        grad_clip: global gradient-norm limit (0 disables clipping).
        loss_scale: initial loss scale; fp16 gradients below 2**-24 vanish without it
            (ANE_NOTES section 5 scales by 256).
        scale_growth_interval: finite steps before the loss scale doubles again.
        seed: initialisation and data-order seed.
    """

    steps: int = 300
    batch_size: int = 4
    grad_accum: int = 1
    lr: float = 2e-3
    min_lr: float = 2e-4
    warmup: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    loss_scale: float = 256.0
    scale_growth_interval: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "grad_accum"):
            check_int("train config", name, getattr(self, name), 1)
        check_int("train config", "warmup", self.warmup, 0)
        check_int("train config", "scale_growth_interval", self.scale_growth_interval, 1)
        check_int("train config", "seed", self.seed, 0)
        numbers = all(is_real(v) for v in (self.lr, self.min_lr))
        if not (numbers and 0 <= self.min_lr <= self.lr < math.inf):
            raise ValueError(
                f"need 0 <= min_lr <= lr < inf, found min_lr={self.min_lr}, lr={self.lr}"
            )
        for name in ("weight_decay", "beta1", "beta2", "adam_eps", "grad_clip"):
            check_real("train config", name, getattr(self, name), positive=False)
        check_real("train config", "loss_scale", self.loss_scale, positive=True)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        return cls(
            **{k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(cls)}}
        )


@dataclass(frozen=True)
class NamedConfig:
    """A model shape with the training settings that suit it."""

    model: ModelConfig
    train: TrainConfig = field(default_factory=TrainConfig)


_LLAMA2C = (
    "karpathy/llama2.c README (models table) and model.py (hidden = 2/3 * 4 * dim, multiple of 32)"
)
_MADERIX = "maderix/ANE training/README.md (Stories110M: dim 768, hidden 2048, 12 heads, 12 layers, seq 256)"
_QWEN3 = (
    "huggingface.co/Qwen/Qwen3-0.6B config.json (hidden 1024, intermediate 3072, 28 layers, "
    "16 heads, 8 KV heads, head_dim 128, vocab 151936, rope_theta 1e6, eps 1e-6, tied embedding); "
    "shape only: Qwen3's per-head q/k RMSNorm is not modelled; seq 256 is our assumption"
)

CONFIGS: dict[str, NamedConfig] = {
    # Small enough to train a few hundred steps on a 2-core CPU in about a minute; two KV
    # heads for four query heads so that training itself exercises grouped-query attention.
    "tiny": NamedConfig(
        ModelConfig(
            name="tiny",
            dim=128,
            n_layers=4,
            n_heads=4,
            n_kv_heads=2,
            head_dim=32,
            hidden_dim=384,
            vocab_size=256,
            seq_len=128,
            source="anekit (byte-level demo model)",
        ),
        TrainConfig(steps=300, batch_size=2, lr=2e-3, min_lr=2e-4, warmup=20),
    ),
    "stories15m": NamedConfig(
        ModelConfig(
            name="stories15m",
            dim=288,
            n_layers=6,
            n_heads=6,
            n_kv_heads=6,
            head_dim=48,
            hidden_dim=768,
            vocab_size=32000,
            seq_len=256,
            source=_LLAMA2C,
        ),
        TrainConfig(steps=1000, batch_size=4, lr=5e-4, min_lr=5e-5, warmup=100),
    ),
    "stories110m": NamedConfig(
        ModelConfig(
            name="stories110m",
            dim=768,
            n_layers=12,
            n_heads=12,
            n_kv_heads=12,
            head_dim=64,
            hidden_dim=2048,
            vocab_size=32000,
            seq_len=256,
            source=_MADERIX,
        ),
        TrainConfig(steps=1000, batch_size=1, lr=3e-4, min_lr=3e-5, warmup=100),
    ),
    "qwen3-0.6b": NamedConfig(
        ModelConfig(
            name="qwen3-0.6b",
            dim=1024,
            n_layers=28,
            n_heads=16,
            n_kv_heads=8,
            head_dim=128,
            hidden_dim=3072,
            vocab_size=151936,
            seq_len=256,
            norm_eps=1e-6,
            rope_theta=1e6,
            source=_QWEN3,
        ),
        TrainConfig(steps=1000, batch_size=1, lr=3e-4, min_lr=3e-5, warmup=100),
    ),
}


def get_config(name: str) -> NamedConfig:
    """Return a named config; ValueError lists the known names."""
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown config {name!r}; known: {', '.join(CONFIGS)}") from None
