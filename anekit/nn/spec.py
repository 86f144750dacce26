"""The shape every kernel generator takes: one decoder block and the tokens it processes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockShape:
    """Shape of one Llama-style decoder block and of the token batch a kernel is compiled for.

    A kernel processes ``batch`` sequences of ``seq`` tokens at once: the token axis of
    every activation is ``tokens = batch * seq`` wide, sequence-major (token ``n`` is
    position ``n % seq`` of sequence ``n // seq``).

    Attributes:
        dim: residual stream width D; every packed kernel input has D channels.
        heads: query heads H.
        kv_heads: key/value heads; query head ``h`` attends with KV head ``h // (H / kv_heads)``.
        head_dim: width of one head (even, for RoPE).
        hidden: SwiGLU hidden width F.
        seq: tokens per sequence.
        batch: sequences per kernel call.
        eps: RMSNorm epsilon.
        rope_theta: RoPE base frequency.
    """

    dim: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    seq: int
    batch: int = 1
    eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("dim", "heads", "kv_heads", "head_dim", "hidden", "seq", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"BlockShape.{name} must be at least 1, found {getattr(self, name)}"
                )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, found {self.head_dim}")

    @property
    def q_dim(self) -> int:
        """Channels of all query heads: ``heads * head_dim``."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Channels of all key (or value) heads: ``kv_heads * head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads sharing one KV head."""
        return self.heads // self.kv_heads

    @property
    def tokens(self) -> int:
        """Width of the token axis: ``batch * seq``."""
        return self.batch * self.seq
