"""One typed config for every supported decoder, read from Hugging Face ``config.json`` (both styles).

Two styles of ``config.json`` are in the wild: the older puts ``rope_theta`` (and
``rope_scaling``) at the top level with ``torch_dtype``; the newer (transformers 5)
nests them in ``rope_parameters`` and writes ``dtype``. Both map to :class:`LlmConfig`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ModelError
from anekit.nn.spec import DecoderShape

# Hugging Face architecture name -> our family name. Every family is a Llama-style decoder
# (RMSNorm, RoPE, grouped-query attention, SwiGLU); the flags below say how each differs.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
ROPE_TYPES = ("default", "linear", "llama3")
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; refuse to parse anything absurd


@dataclass(frozen=True)
class RopeConfig:
    """Rotary position embedding: base frequency and the frequency scaling, if any.

    Attributes:
        theta: base frequency.
        kind: "default", "linear" (positions divided by ``factor``) or "llama3" (Llama 3.1's
            wavelength-dependent scaling).
        factor, low_freq_factor, high_freq_factor, original_max_position: scaling parameters.
    """

    theta: float = 10000.0
    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192

    def inv_freq(self, head_dim: int) -> np.ndarray:
        """Angular frequency of each channel pair ``[head_dim / 2]`` (float64), scaling applied."""
        inv = self.theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        if self.kind == "linear":
            return inv / self.factor
        if self.kind == "llama3":
            # Llama 3.1: long wavelengths slow down by ``factor``, short ones keep their
            # speed, and the band between interpolates smoothly (transformers' rope_utils)
            low_wavelen = self.original_max_position / self.low_freq_factor
            high_wavelen = self.original_max_position / self.high_freq_factor
            wavelen = 2 * math.pi / inv
            scaled = np.where(wavelen > low_wavelen, inv / self.factor, inv)
            smooth = (self.original_max_position / wavelen - self.low_freq_factor) / (
                self.high_freq_factor - self.low_freq_factor
            )
            smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
            medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
            return np.where(medium, smoothed, scaled)
        return inv


@dataclass(frozen=True)
class LlmConfig(DecoderShape):
    """A decoder to load: its sizes (:class:`~anekit.nn.spec.DecoderShape`) and its flavour.

    Attributes:
        architecture: the Hugging Face class name (or "llama2c").
        family: "llama", "mistral", "qwen2", "qwen3" or "llama2c".
        rope: rotary embedding parameters.
        max_position: the longest context the model was trained for.
        tie_embeddings: the output head is the embedding matrix (no ``lm_head.weight``).
        qkv_bias: the q, k and v projections have biases (Qwen2).
        o_bias: the output projection has a bias (Llama's ``attention_bias``).
        qk_norm: per-head RMSNorm of queries and keys before RoPE (Qwen3).
        sliding_window: attend only to the last this many positions (Mistral), or None.
        dtype: the stored weight dtype the config declares ("bfloat16", "float16", "float32").
        bos_token_id, eos_token_ids: special tokens (eos may be several).
        style: "rope_parameters" (newer) or "rope_theta" (older) config style.
    """

    architecture: str
    family: str
    rope: RopeConfig = field(default_factory=RopeConfig)
    max_position: int = 2048
    tie_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    dtype: str = "float32"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    style: str = "rope_parameters"

    @property
    def owner(self) -> str:
        return f"config of {self.architecture}"

    def n_params(self) -> int:
        """Parameters, counting a tied head once: the plain decoder's, plus biases, q/k norms
        and an untied head."""
        d, q, kv = self.dim, self.q_dim, self.kv_dim
        extra = (q + 2 * kv) * self.qkv_bias + d * self.o_bias + 2 * self.head_dim * self.qk_norm
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return super().n_params() + self.n_layers * extra + head


def read_config(path: str | Path) -> LlmConfig:
    """Read a model directory's ``config.json`` (or the file itself) into an :class:`LlmConfig`."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ModelError(
                f"{size} bytes; a config.json is at most {MAX_CONFIG_BYTES}", path=str(file)
            )
        raw = json.loads(file.read_text("utf-8"))
    except FileNotFoundError:
        raise ModelError(
            "no config.json: not a Hugging Face model directory", path=str(file)
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelError(f"cannot read the config: {e}", path=str(file)) from e
    if not isinstance(raw, dict):
        raise ModelError(f"expected a JSON object, found {type(raw).__name__}", path=str(file))
    return config_from_hf(raw, source=str(file))


def config_from_hf(raw: dict[str, Any], source: str = "config.json") -> LlmConfig:
    """Map a Hugging Face config dict (either style) to an :class:`LlmConfig`."""
    r = _Reader(raw, source)
    archs = raw.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs else raw.get("model_type", "?")
    family = ARCHITECTURES.get(arch)
    if family is None:
        raise ModelError(
            f"architecture {arch!r} is not supported; supported: {', '.join(ARCHITECTURES)} "
            "(and llama2.c .bin checkpoints)",
            path=source,
        )
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ModelError(f"hidden_act {act!r} is not supported; expected 'silu'", path=source)
    if raw.get("mlp_bias"):
        raise ModelError("mlp_bias = true is not supported", path=source)
    if family in ("qwen2", "qwen3") and raw.get("use_sliding_window"):
        raise ModelError(
            "use_sliding_window = true (per-layer sliding windows) is not supported", path=source
        )
    dim = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    head_dim = raw.get("head_dim") or dim // heads
    attention_bias = bool(raw.get("attention_bias", False))
    window = raw.get("sliding_window") if family == "mistral" else None
    eos = raw.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
    style = "rope_parameters" if "rope_parameters" in raw else "rope_theta"
    return LlmConfig(
        architecture=arch,
        family=family,
        dim=dim,
        n_layers=r.int("num_hidden_layers"),
        n_heads=heads,
        n_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        hidden_dim=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope=_rope(raw, source),
        max_position=int(raw.get("max_position_embeddings", 2048)),
        tie_embeddings=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=family == "qwen2" or attention_bias,
        o_bias=attention_bias,
        qk_norm=family == "qwen3",
        sliding_window=int(window) if window else None,
        dtype=str(raw.get("dtype") or raw.get("torch_dtype") or "float32"),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_ids=eos_ids,
        style=style,
    )


def _rope(raw: dict[str, Any], source: str) -> RopeConfig:
    """Rotary parameters from ``rope_parameters`` (newer) or ``rope_theta`` + ``rope_scaling``."""
    params = raw.get("rope_parameters")
    if params is None:
        params = dict(raw.get("rope_scaling") or {})
        params["rope_theta"] = raw.get("rope_theta", 10000.0)
    if not isinstance(params, dict):
        raise ModelError(f"rope parameters must be an object, found {params!r}", path=source)
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind not in ROPE_TYPES:
        raise ModelError(
            f"rope type {kind!r} is not supported; supported: {', '.join(ROPE_TYPES)}", path=source
        )
    return RopeConfig(
        theta=float(params.get("rope_theta", 10000.0)),
        kind=kind,
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position=int(params.get("original_max_position_embeddings", 8192)),
    )


class _Reader:
    """Required fields of a config dict, with errors naming the field and the file."""

    def __init__(self, raw: dict[str, Any], source: str) -> None:
        self.raw = raw
        self.source = source

    def int(self, key: str) -> int:
        value = self.raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"{key} must be an integer, found {value!r}", path=self.source)
        return value
