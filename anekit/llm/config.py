"""One typed config for every supported decoder, read from Hugging Face ``config.json`` (both styles).

Two styles of ``config.json`` are in the wild: the older puts ``rope_theta`` (and
``rope_scaling``) at the top level with ``torch_dtype``; the newer (transformers 5)
nests them in ``rope_parameters`` and writes ``dtype``. Both map to :class:`LlmConfig`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ModelError
from anekit.files import read_json
from anekit.nn.spec import DecoderShape

# Hugging Face architecture name -> our family name. Every family is a Llama-style decoder
# (RMSNorm, RoPE, grouped-query attention, SwiGLU); the flags below say how each differs.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
# mixtures of experts: the family whose attention each has
MOE_FAMILIES = {"qwen2_moe": "qwen2", "qwen3_moe": "qwen3"}
# families whose checkpoints store q/k/v as one ``qkv_proj`` and gate/up as one
# ``gate_up_proj`` (already stacked as the block programs take them)
FUSED_FAMILIES = frozenset({"phi3"})
# families whose ``sliding_window`` applies to every layer (masked on the host)
WINDOWED_FAMILIES = frozenset({"mistral", "phi3"})
# Gemma: GeGLU, (1 + w) norm gains, embeddings scaled by sqrt(hidden_size), norms after
# attention and the FFN as well as before, sliding-window layers interleaved with global
# ones; per family, the layer pattern when the config has no ``layer_types``
GEMMA_FAMILIES = {"gemma2": 2, "gemma3": 6}
SLIDING, FULL = "sliding_attention", "full_attention"
ROPE_TYPES = ("default", "linear", "llama3")
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; refuse to parse anything absurd
# Bounds far above any published decoder's (the largest have ~16k wide, ~130 layers, 256k
# tokens, 10M positions): a value past one is a corrupt or hostile file.
MAX_WIDTH = 1 << 20
MAX_LAYERS = 4096
MAX_VOCAB = 1 << 24
MAX_POSITIONS = 1 << 28


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

    def __post_init__(self) -> None:
        # NaN fails every comparison, so each check also refuses it
        checks = (
            ("rope_theta", self.theta, self.theta > 1, "above 1"),
            ("factor", self.factor, self.factor > 0, "above 0"),
            ("low_freq_factor", self.low_freq_factor, self.low_freq_factor > 0, "above 0"),
            ("high_freq_factor", self.high_freq_factor,
             self.high_freq_factor > self.low_freq_factor, "above low_freq_factor"),
            ("original_max_position_embeddings", self.original_max_position,
             self.original_max_position >= 1, "at least 1"),
        )  # fmt: skip
        for name, value, holds, expected in checks:
            if not holds:
                raise ModelError(f"config {name} must be {expected}, found {value}")

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
        family: "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen2_moe",
            "qwen3_moe" or "llama2c".
        rope: rotary embedding parameters.
        max_position: the longest context the model was trained for.
        tie_embeddings: the output head is the embedding matrix (no ``lm_head.weight``).
        qkv_bias: the q, k and v projections have biases (Qwen2).
        o_bias: the output projection has a bias (Llama's ``attention_bias``).
        qk_norm: per-head RMSNorm of queries and keys before RoPE (Qwen3).
        sliding_window: attend only to the last this many positions (Mistral, Phi-3: every
            layer; Gemma: the ``local_layers``), or None.
        local_layers: the sliding-window layers when not every layer is one (Gemma); they
            read their own mask and RoPE tables (``local_rope``).
        local_rope: the RoPE of the local layers (Gemma-3's ``rope_local_base_freq``); None:
            ``rope``.
        fused: q/k/v and gate/up are stored fused, ``qkv_proj`` and ``gate_up_proj`` (Phi-3).
        gemma: the Gemma block (module constant ``GEMMA_FAMILIES``): GeGLU (tanh GELU),
            norm gains ``1 + w``, embeddings times sqrt(dim), post-attention and
            post-FFN norms.
        query_pre_attn_scalar: queries are scaled by its inverse square root (Gemma), not
            ``head_dim``'s; None: ``head_dim``.
        attn_softcap, final_softcap: ``cap * tanh(x / cap)`` of the attention scores and of
            the logits (Gemma-2), or None.
        experts: the FFN is a mixture of this many experts (0: one dense FFN); each token
            takes the ``experts_per_token`` most probable by its router's softmax
            (renormalised over them if ``norm_topk``), each expert a SwiGLU of width
            ``expert_dim``.
        shared_expert_dim: width of the shared expert every token also takes, weighted by
            a sigmoid gate (Qwen2-MoE), or 0.
        dtype: the stored weight dtype the config declares ("bfloat16", "float16", "float32").
        bos_token_id, eos_token_ids: special tokens (eos may be several).
        style: "rope_parameters" (newer) or "rope_theta" (older) config style.
        residual_scale: alpha, the factor the residual stream is held at (a power of two
            <= 1; ``anekit.llm.residual``): the embeddings and every projection writing into
            the stream are scaled by it, and the norms reading it take ``norm_eps * alpha**2``,
            so the logits are unchanged while the stream stays inside fp16 (N1).
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
    fused: bool = False
    local_layers: tuple[int, ...] = ()
    local_rope: RopeConfig | None = None
    gemma: bool = False
    query_pre_attn_scalar: float | None = None
    attn_softcap: float | None = None
    final_softcap: float | None = None
    experts: int = 0
    experts_per_token: int = 0
    expert_dim: int = 0
    norm_topk: bool = False
    shared_expert_dim: int = 0
    dtype: str = "float32"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    style: str = "rope_parameters"
    residual_scale: float = 1.0

    def __post_init__(self) -> None:
        if not (0 < self.norm_eps < 1):  # also refuses NaN; in the config file's own name
            raise ModelError(f"config rms_norm_eps must be in (0, 1), found {self.norm_eps}")
        super().__post_init__()
        if self.sliding_window is not None and self.sliding_window < 1:
            raise ModelError(
                f"config sliding_window must be at least 1, found {self.sliding_window}"
            )
        for name, value in (("query_pre_attn_scalar", self.query_pre_attn_scalar),
                            ("attn_logit_softcapping", self.attn_softcap),
                            ("final_logit_softcapping", self.final_softcap)):  # fmt: skip
            if value is not None and not value > 0:
                raise ModelError(f"config {name} must be above 0, found {value}")
        if self.experts and not 1 <= self.experts_per_token <= self.experts:
            raise ModelError(
                f"config num_experts_per_tok must be in [1, {self.experts}], found "
                f"{self.experts_per_token}"
            )
        if self.local_layers and self.sliding_window is None:
            raise ModelError("config has sliding_attention layers but no sliding_window")
        alpha = self.residual_scale
        if not 0 < alpha <= 1 or math.frexp(alpha)[0] != 0.5:
            raise ModelError(f"residual_scale must be a power of two in (0, 1], found {alpha}")

    @property
    def residual_eps(self) -> float:
        """The epsilon of the norms that read the (scaled) residual stream."""
        return self.norm_eps * self.residual_scale**2

    @property
    def norm_offset(self) -> float:
        """What every RMSNorm adds to its stored gain (Gemma stores ``w`` for ``1 + w``)."""
        return 1.0 if self.gemma else 0.0

    @property
    def embed_scale(self) -> float:
        """The factor the embedding rows are multiplied by (Gemma: sqrt(dim))."""
        return math.sqrt(self.dim) if self.gemma else 1.0

    @property
    def query_scale(self) -> float:
        """The factor the queries are multiplied by before the scores."""
        return 1.0 / math.sqrt(self.query_pre_attn_scalar or self.head_dim)

    def window(self, local: bool) -> int | None:
        """The sliding window of the global (``local=False``) or local layers, or None."""
        if self.local_layers:
            return self.sliding_window if local else None
        return self.sliding_window

    @property
    def owner(self) -> str:
        return f"config of {self.architecture}"

    def n_params(self) -> int:
        """Parameters, counting a tied head once: the plain decoder's, plus biases, q/k norms
        and an untied head."""
        d, q, kv = self.dim, self.q_dim, self.kv_dim
        extra = (q + 2 * kv) * self.qkv_bias + d * self.o_bias + 2 * self.head_dim * self.qk_norm
        extra += 2 * d * self.gemma  # the post-attention and post-FFN norms
        if self.experts:  # experts, router, shared expert and its gate replace the dense FFN
            e, s = self.experts, self.shared_expert_dim
            extra += 3 * d * (e * self.expert_dim + s - self.hidden_dim) + e * d + d * (s > 0)
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return super().n_params() + self.n_layers * extra + head


def read_config(path: str | Path) -> LlmConfig:
    """Read a model directory's ``config.json`` (or the file itself) into an :class:`LlmConfig`."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    if not file.exists() and not file.is_symlink():
        raise ModelError("no config.json: not a Hugging Face model directory", path=str(file))
    raw = read_json(file, limit=MAX_CONFIG_BYTES, what="a config.json", error=ModelError)
    if not isinstance(raw, dict):
        raise ModelError(f"expected a JSON object, found {type(raw).__name__}", path=str(file))
    return config_from_hf(raw, source=str(file))


def config_from_hf(raw: dict[str, Any], source: str = "config.json") -> LlmConfig:
    """Map a Hugging Face config dict (either style) to an :class:`LlmConfig`.

    Every field goes through :class:`ConfigReader`: a value of the wrong type or out of range
    is a ModelError naming the field, never converted with a loss.
    """
    try:
        return _config(ConfigReader(raw, source))
    except ModelError as e:
        if e.path is not None:
            raise
        # the config classes check their own ranges and know no file: name it here
        raise ModelError(str(e).removeprefix("<model>: "), path=source) from None


def _config(r: ConfigReader) -> LlmConfig:
    raw, source = r.raw, r.source
    archs = r.value("architectures", None)
    arch = archs[0] if isinstance(archs, list) and archs else raw.get("model_type", "?")
    family = ARCHITECTURES.get(arch) if isinstance(arch, str) else None
    if family is None:
        raise ModelError(
            f"architecture {arch!r} is not supported; supported: {', '.join(ARCHITECTURES)} "
            "(and llama2.c .bin checkpoints)",
            path=source,
        )
    gemma = family in GEMMA_FAMILIES
    expected_act = "gelu_pytorch_tanh" if gemma else "silu"
    act = r.value("hidden_activation", None) or r.value("hidden_act", expected_act)
    if act != expected_act:
        raise ModelError(
            f"hidden activation {act!r} is not supported for {arch}; expected {expected_act!r}",
            path=source,
        )
    if r.bool("mlp_bias", False):
        raise ModelError("mlp_bias = true is not supported", path=source)
    attention = MOE_FAMILIES.get(family, family)  # a mixture of experts' attention family
    if attention in ("qwen2", "qwen3") and r.bool("use_sliding_window", False):
        raise ModelError(
            "use_sliding_window = true (per-layer sliding windows) is not supported", path=source
        )
    dim = r.int("hidden_size", hi=MAX_WIDTH)
    heads = r.int("num_attention_heads", hi=MAX_WIDTH)
    vocab = r.int("vocab_size", lo=2, hi=MAX_VOCAB)
    attention_bias = r.bool("attention_bias", False)
    if r.float("partial_rotary_factor", 1.0) != 1.0:
        raise ModelError("partial_rotary_factor other than 1 is not supported", path=source)
    windowed = family in WINDOWED_FAMILIES or gemma
    window = r.int("sliding_window", None, hi=MAX_POSITIONS) if windowed else None
    n_layers = r.int("num_hidden_layers", hi=MAX_LAYERS)
    rope, local_rope = _ropes(r) if gemma else (_rope(r), None)
    return LlmConfig(
        architecture=arch,
        family=family,
        dim=dim,
        n_layers=n_layers,
        n_heads=heads,
        n_kv_heads=r.int("num_key_value_heads", heads, hi=MAX_WIDTH),
        head_dim=r.int("head_dim", None, hi=MAX_WIDTH) or _head_dim(dim, heads, source),
        hidden_dim=r.int("intermediate_size", hi=MAX_WIDTH),
        vocab_size=vocab,
        norm_eps=r.float("rms_norm_eps", 1e-6),
        rope=rope,
        max_position=r.int("max_position_embeddings", 2048, lo=2, hi=MAX_POSITIONS),
        tie_embeddings=r.bool("tie_word_embeddings", False),
        qkv_bias=attention == "qwen2" or attention_bias,
        o_bias=attention_bias,
        qk_norm=attention in ("qwen3", "gemma3"),
        sliding_window=window,
        fused=family in FUSED_FAMILIES,
        **(_gemma(r, family, n_layers) if gemma else {}),
        **(_moe(r, family == "qwen2_moe") if family in MOE_FAMILIES else {}),
        local_rope=local_rope,
        dtype=r.str("dtype", None) or r.str("torch_dtype", None) or "float32",
        bos_token_id=r.int("bos_token_id", None, lo=0, hi=vocab - 1),
        eos_token_ids=r.ints("eos_token_id", lo=0, hi=vocab - 1),
        style="rope_parameters" if "rope_parameters" in raw else "rope_theta",
    )


def _head_dim(dim: int, heads: int, source: str) -> int:
    """``hidden_size / num_attention_heads`` when the config gives no ``head_dim``."""
    if dim % heads:
        raise ModelError(
            f"hidden_size {dim} is not a multiple of num_attention_heads {heads}, and no "
            "head_dim is given",
            path=source,
        )
    return dim // heads


def _gemma(r: ConfigReader, family: str, n_layers: int) -> dict[str, Any]:
    """The Gemma fields: which layers slide, the query scale, the soft-caps."""
    if r.bool("use_bidirectional_attention", False):
        raise ModelError("use_bidirectional_attention = true is not supported", path=r.source)
    types = r.value("layer_types", None)
    if types is None:
        pattern = r.int("sliding_window_pattern", GEMMA_FAMILIES[family], hi=MAX_LAYERS)
        types = [SLIDING if (i + 1) % pattern else FULL for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or set(types) - {SLIDING, FULL}:
        raise ModelError(
            f"layer_types must list {n_layers} of {SLIDING!r}, {FULL!r}, found {types!r:.80}",
            path=r.source,
        )
    return dict(
        gemma=True,
        local_layers=tuple(i for i, kind in enumerate(types) if kind == SLIDING),
        query_pre_attn_scalar=r.float("query_pre_attn_scalar", 256.0),
        attn_softcap=r.float("attn_logit_softcapping", None),
        final_softcap=r.float("final_logit_softcapping", None),
    )


def _moe(r: ConfigReader, shared: bool) -> dict[str, Any]:
    """The mixture-of-experts fields; every layer must be sparse (no dense ``mlp_only_layers``)."""
    experts = r.int("num_experts", None, hi=MAX_WIDTH) or r.int("num_local_experts", hi=MAX_WIDTH)
    dense = r.value("mlp_only_layers", [])
    step = r.int("decoder_sparse_step", 1, hi=MAX_LAYERS)
    if dense or step != 1:
        raise ModelError(
            f"dense layers among the experts' (mlp_only_layers {dense!r:.40}, "
            f"decoder_sparse_step {step}) are not supported; every layer must be sparse",
            path=r.source,
        )
    return dict(
        experts=experts,
        experts_per_token=r.int("num_experts_per_tok", hi=MAX_WIDTH),
        expert_dim=r.int("moe_intermediate_size", hi=MAX_WIDTH),
        norm_topk=r.bool("norm_topk_prob", False),
        shared_expert_dim=r.int("shared_expert_intermediate_size", hi=MAX_WIDTH) if shared else 0,
    )


def _ropes(r: ConfigReader) -> tuple[RopeConfig, RopeConfig]:
    """Gemma's (global, local) RoPE: Gemma-3 gives each layer type its own parameters."""
    nested = r.value("rope_parameters", None)
    if isinstance(nested, dict) and FULL in nested:  # newer Gemma-3: one entry per layer type
        tables = []
        for kind in (FULL, SLIDING):
            entry = ConfigReader(nested, r.source, "rope_parameters.").value(kind, {})
            if not isinstance(entry, dict):
                raise ModelError(f"rope_parameters.{kind} must be an object, found {entry!r}",
                                 path=r.source)  # fmt: skip
            tables.append(_rope_from(ConfigReader(entry, r.source, f"rope_parameters.{kind}.")))
        return tables[0], tables[1]
    rope = _rope(r)
    local = r.float("rope_local_base_freq", None)
    return rope, rope if local is None else _checked_rope(r, theta=local)


def _checked_rope(r: ConfigReader, **fields: Any) -> RopeConfig:
    try:
        return RopeConfig(**fields)
    except ModelError as e:
        raise ModelError(str(e), path=r.source) from None


def _rope(r: ConfigReader) -> RopeConfig:
    """Rotary parameters from ``rope_parameters`` (newer) or ``rope_theta`` + ``rope_scaling``."""
    nested = r.value("rope_parameters", None)
    if nested is None:
        scaling = r.value("rope_scaling", None)
        if scaling is not None and not isinstance(scaling, dict):
            raise ModelError(f"rope_scaling must be an object, found {scaling!r}", path=r.source)
        p = ConfigReader({**(scaling or {}), "rope_theta": r.value("rope_theta", 10000.0)},
                         r.source, "rope_scaling.")  # fmt: skip
    elif isinstance(nested, dict):
        p = ConfigReader(nested, r.source, "rope_parameters.")
    else:
        raise ModelError(f"rope_parameters must be an object, found {nested!r}", path=r.source)
    return _rope_from(p)


def _rope_from(p: ConfigReader) -> RopeConfig:
    """One set of rotary parameters (``rope_type``, ``rope_theta`` and the scaling's)."""
    kind = p.value("rope_type", None) or p.value("type", None) or "default"
    if kind not in ROPE_TYPES:
        raise ModelError(
            f"rope type {kind!r} is not supported; supported: {', '.join(ROPE_TYPES)}",
            path=p.source,
        )
    return _checked_rope(
        p,
        theta=p.float("rope_theta", 10000.0),
        kind=kind,
        factor=p.float("factor", 1.0),
        low_freq_factor=p.float("low_freq_factor", 1.0),
        high_freq_factor=p.float("high_freq_factor", 4.0),
        original_max_position=p.int("original_max_position_embeddings", 8192, hi=MAX_POSITIONS),
    )


_MISSING = object()


class ConfigReader:
    """Typed fields of a ``config.json`` object: each a ModelError naming the field and the file.

    A field that is absent or ``null`` takes its default; a required field has none. Nothing
    is converted with a loss: ``2.5`` is not an integer, ``"false"`` is not a boolean, and a
    float must be finite.
    """

    def __init__(self, raw: dict[str, Any], source: str, prefix: str = "") -> None:
        self.raw = raw
        self.source = source
        self.prefix = prefix

    def value(self, key: str, default: Any = _MISSING) -> Any:
        """The raw value of ``key`` (its default when absent or null)."""
        value = self.raw.get(key)
        if value is None:
            if default is _MISSING:
                raise self._error(key, "is required", None)
            return default
        return value

    def _error(self, key: str, expected: str, found: Any) -> ModelError:
        shown = repr(found)
        shown = shown if len(shown) <= 40 else shown[:40] + "..."
        return ModelError(f"{self.prefix}{key} {expected}, found {shown}", path=self.source)

    def int(self, key: str, default: Any = _MISSING, *, lo: int = 1, hi: int | None = None) -> Any:
        """A whole number in ``[lo, hi]`` (the default, which may be None, when absent)."""
        value = self.value(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._error(key, "must be a whole number", value)
        if value < lo or (hi is not None and value > hi):
            raise self._error(key, f"must be in [{lo}, {hi if hi is not None else 'inf'}]", value)
        return value

    def ints(self, key: str, *, lo: int, hi: int) -> tuple[int, ...]:
        """One whole number or a list of them (absent: none), each in ``[lo, hi]``."""
        value = self.value(key, [])
        items = value if isinstance(value, list) else [value]
        return tuple(ConfigReader({key: v}, self.source, self.prefix).int(key, lo=lo, hi=hi)
                     for v in items)  # fmt: skip

    def float(self, key: str, default: Any = _MISSING) -> Any:
        """A finite number (ranges are the config classes' to check); the default when absent."""
        value = self.value(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._error(key, "must be a number", value)
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise self._error(key, "must be a finite number", value)
        return number

    def bool(self, key: str, default: bool) -> bool:
        """``true`` or ``false`` (the JSON values, not strings or numbers)."""
        value = self.value(key, default)
        if not isinstance(value, bool):
            raise self._error(key, "must be true or false", value)
        return value

    def str(self, key: str, default: Any = _MISSING) -> Any:
        """A string."""
        value = self.value(key, default)
        if value is not default and not isinstance(value, str):
            raise self._error(key, "must be a string", value)
        return value
