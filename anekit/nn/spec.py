"""The decoder's shape, said once: :class:`DecoderShape` (validation and derived sizes), and
:class:`BlockShape`, the shape of one block with the token batch a kernel is compiled for.

Training's ``ModelConfig`` and the LLM loader's ``LlmConfig`` are DecoderShapes with the
fields of their own trade added, so the sizes are validated and derived in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from anekit.errors import ModelError

# Sizes and counts fit in int64 (NumPy's index type); larger ones cannot name real tensors.
INT_LIMIT = 2**63


def check_int(owner: str, name: str, value: Any, minimum: int, error: type = ValueError) -> None:
    """``error`` unless ``value`` is an int (not a bool, not 16.5) in ``[minimum, 2**63)``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{owner}: {name} must be an integer, found {value!r}")
    if value < minimum:
        raise error(f"{owner}: {name} must be at least {minimum}, found {value}")
    if value >= INT_LIMIT:
        raise error(f"{owner}: {name} must be below 2**63, found {value}")


def is_real(value: Any) -> bool:
    """A real number: an int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_real(
    owner: str, name: str, value: Any, *, positive: bool, error: type = ValueError
) -> None:
    """``error`` unless ``value`` is a finite number, >= 0 (or > 0 if ``positive``)."""
    if not (is_real(value) and math.isfinite(value) and (value > 0 if positive else value >= 0)):
        bound = "> 0" if positive else ">= 0"
        raise error(f"{owner}: {name} must be a finite number {bound}, found {value!r}")


@dataclass(frozen=True, kw_only=True)
class DecoderShape:
    """Shape of a Llama-style decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU.

    Attributes:
        dim: residual stream width D.
        n_layers: decoder blocks.
        n_heads: query heads H.
        n_kv_heads: key/value heads; query head ``h`` attends with KV head ``h // group``.
        head_dim: width of one head (even, for RoPE).
        hidden_dim: SwiGLU hidden width F.
        vocab_size: tokens.
        norm_eps: RMSNorm epsilon.
    """

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_dim: int
    vocab_size: int
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        owner = self.owner
        for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden_dim"):
            check_int(owner, name, getattr(self, name), 1, ModelError)
        check_int(owner, "vocab_size", self.vocab_size, 2, ModelError)
        check_real(owner, "norm_eps", self.norm_eps, positive=True, error=ModelError)
        if self.n_heads % self.n_kv_heads:
            raise ModelError(
                f"{owner}: n_heads ({self.n_heads}) must be a multiple of "
                f"n_kv_heads ({self.n_kv_heads})"
            )
        if self.head_dim % 2:
            raise ModelError(f"{owner}: head_dim must be even for RoPE, found {self.head_dim}")

    @property
    def owner(self) -> str:
        """How errors name this shape."""
        return "decoder shape"

    @property
    def q_dim(self) -> int:
        """Channels of all query heads: ``n_heads * head_dim``."""
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Channels of all key (or value) heads: ``n_kv_heads * head_dim``."""
        return self.n_kv_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads sharing one KV head."""
        return self.n_heads // self.n_kv_heads

    def n_params(self) -> int:
        """Parameters of the plain decoder, the classifier tied to the embedding (counted once)."""
        d, f = self.dim, self.hidden_dim
        per_layer = d * (2 * self.q_dim + 2 * self.kv_dim) + 3 * d * f + 2 * d
        return self.vocab_size * d + self.n_layers * per_layer + d

    def sizes(self) -> dict[str, Any]:
        """The fields of the decoder shape alone (for another config of the same decoder)."""
        return {f.name: getattr(self, f.name) for f in fields(DecoderShape)}

    def kernel_shape(self, seq: int, batch: int = 1, rope_theta: float = 10000.0) -> BlockShape:
        """The shape of one block compiled for ``batch`` sequences of ``seq`` tokens."""
        return BlockShape(**self.sizes(), seq=seq, batch=batch, rope_theta=rope_theta)


@dataclass(frozen=True, kw_only=True)
class BlockShape(DecoderShape):
    """One decoder block and the token batch a kernel is compiled for.

    A kernel processes ``batch`` sequences of ``seq`` tokens at once: the token axis of
    every activation is ``tokens = batch * seq`` wide, sequence-major (token ``n`` is
    position ``n % seq`` of sequence ``n // seq``).

    Attributes:
        seq: tokens per sequence.
        batch: sequences per kernel call.
        rope_theta: RoPE base frequency.
    """

    seq: int
    batch: int = 1
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("seq", "batch"):
            check_int(self.owner, name, getattr(self, name), 1, ModelError)
        check_real(self.owner, "rope_theta", self.rope_theta, positive=True, error=ModelError)

    @property
    def owner(self) -> str:
        return "block shape"

    @property
    def tokens(self) -> int:
        """Width of the token axis: ``batch * seq``."""
        return self.batch * self.seq
