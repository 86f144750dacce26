"""GGUF checkpoints (llama.cpp's format) as a config, fp16 tensors and a tokenizer.

The header is read by our own bounded reader (:mod:`anekit.llm.gguf_header`); the
``gguf`` package only dequantizes blocks of bytes we have already bounds-checked.
Supported: the llama-family architectures as llama.cpp names them (``llama``, which
llama.cpp also uses for Mistral, ``mistral``, ``qwen2``, ``qwen3``) and the tensor types
F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K. Quantized tensors are dequantized to float32
one block of rows at a time and stored as fp16 (checked not to overflow); the ANE has no
blockwise int8 (catalogue row N17), so ``load(..., compress=...)`` re-compresses them
per channel instead. :attr:`GgufCheckpoint.report` says what each tensor became.

llama.cpp's converter permutes the rows of ``attn_q``/``attn_k`` of llama models within
each head (its rotary kernel pairs channels ``(2i, 2i+1)``; Hugging Face pairs ``(i, i +
hd/2)``); reading them back undoes that permutation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ModelError
from anekit.llm.config import LlmConfig, RopeConfig
from anekit.llm.gguf_header import TensorInfo, open_gguf
from anekit.llm.weights import convert_into, release_pages

# llama.cpp architecture -> (Hugging Face class, our family)
ARCHITECTURES = {
    "llama": ("LlamaForCausalLM", "llama"),
    "mistral": ("MistralForCausalLM", "mistral"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
}
PERMUTED = frozenset({"llama", "mistral"})  # q/k rows permuted by llama.cpp's converter
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q6_K")
ROWS_PER_BLOCK_BYTES = 1 << 22  # dequantize about this many float32 bytes at a time

_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a llama.cpp tensor name, or None for one we do not use."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _LAYER:
        return f"model.layers.{int(parts[1])}.{_LAYER[parts[2]]}"
    return None


@dataclass(frozen=True)
class TensorReport:
    """What one GGUF tensor became."""

    gguf_name: str
    name: str  # the Hugging Face name it serves as
    stored: str  # its ggml type in the file
    shape: tuple[int, ...]
    became: str

    def line(self) -> str:
        return f"{self.gguf_name:<28} {self.stored:<5} {str(list(self.shape)):<14} -> {self.became}"


class GgufCheckpoint:
    """A GGUF file: its config, and its tensors by Hugging Face name as fp16 (a TensorSource)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._map, self.header = open_gguf(self.path)
        try:
            self.metadata = self.header.metadata
            self.arch = self._arch()
            self._by_hf = self._tensor_map()
            self.config = self._config()
            self.report: dict[str, TensorReport] = {}
        except BaseException:
            self._map.close()
            raise

    def _error(self, message: str, tensor: str | None = None) -> ModelError:
        return ModelError(message, path=str(self.path), tensor=tensor)

    def _arch(self) -> str:
        arch = self.metadata.get("general.architecture")
        if arch not in ARCHITECTURES:
            raise self._error(
                f"general.architecture {arch!r} is not supported; supported: "
                f"{', '.join(ARCHITECTURES)}"
            )
        return arch

    def _tensor_map(self) -> dict[str, TensorInfo]:
        mapping = {}
        for info in self.header.tensors.values():
            name = hf_name(info.name)
            if name is None:
                if info.name == "rope_freqs.weight":
                    raise self._error("llama3-style rope scaling (rope_freqs) is not supported")
                continue
            if info.type_name not in TYPES:
                raise self._error(
                    f"ggml type {info.type_name} is not supported; supported: {', '.join(TYPES)}",
                    info.name,
                )
            mapping[name] = info
        return mapping

    def _key(self, key: str, default: Any = None, kind: type = int) -> Any:
        value = self.metadata.get(f"{self.arch}.{key}", default)
        if value is None:
            raise self._error(f"metadata {self.arch}.{key} is missing")
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise self._error(f"metadata {self.arch}.{key} must be an integer, found {value!r}")
        if kind is float and not isinstance(value, (int, float)):
            raise self._error(f"metadata {self.arch}.{key} must be a number, found {value!r}")
        return kind(value)

    def _config(self) -> LlmConfig:
        architecture, family = ARCHITECTURES[self.arch]
        dim, heads = self._key("embedding_length"), self._key("attention.head_count")
        embed = self._by_hf.get("model.embed_tokens.weight")
        if embed is None:
            raise self._error("no token_embd.weight tensor")
        tokens = self.metadata.get("tokenizer.ggml.tokens")
        vocab = len(tokens) if isinstance(tokens, list) else embed.shape[0]
        scaling = self.metadata.get(f"{self.arch}.rope.scaling.type", "none")
        if scaling not in ("none", "linear"):
            raise self._error(f"rope scaling {scaling!r} is not supported (none or linear)")
        rope = RopeConfig(
            theta=self._key("rope.freq_base", 10000.0, float),
            kind="linear" if scaling == "linear" else "default",
            factor=self._key("rope.scaling.factor", 1.0, float) if scaling == "linear" else 1.0,
        )
        window = self.metadata.get(f"{self.arch}.attention.sliding_window")
        eos = self.metadata.get("tokenizer.ggml.eos_token_id")
        return LlmConfig(
            architecture=architecture,
            family=family,
            dim=dim,
            n_layers=self._key("block_count"),
            n_heads=heads,
            n_kv_heads=self._key("attention.head_count_kv", heads),
            head_dim=self._key("attention.key_length", dim // heads),
            hidden_dim=self._key("feed_forward_length"),
            vocab_size=vocab,
            norm_eps=self._key("attention.layer_norm_rms_epsilon", 1e-6, float),
            rope=rope,
            max_position=self._key("context_length", 2048),
            tie_embeddings="lm_head.weight" not in self._by_hf,
            qkv_bias="model.layers.0.self_attn.q_proj.bias" in self._by_hf,
            o_bias="model.layers.0.self_attn.o_proj.bias" in self._by_hf,
            qk_norm=family == "qwen3",
            sliding_window=int(window) if family == "mistral" and window else None,
            dtype="float16",
            bos_token_id=self.metadata.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=() if eos is None else (int(eos),),
            style="gguf",
        )

    # -- the TensorSource interface --------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        return name in self._by_hf

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The stored (row-major) shape of the tensor serving as ``name``, from its record."""
        info = self._by_hf.get(name)
        return None if info is None else info.shape

    def read_into(self, name: str, shape: tuple[int, ...], out: np.ndarray) -> None:
        """Dequantize the tensor serving as Hugging Face ``name`` into the flat fp16 ``out``."""
        info = self._by_hf.get(name)
        if info is None:
            raise self._error("missing from the GGUF file", name)
        if info.shape != tuple(shape):
            raise self._error(
                f"expected shape {list(shape)} (from the metadata), found {list(info.shape)}",
                info.name,
            )
        rows = info.shape[0] if len(info.shape) > 1 else 1
        order = self._row_order(name, rows)
        width = out.size // rows
        step = max(1, ROWS_PER_BLOCK_BYTES // (4 * width))
        raw = np.frombuffer(self._map, np.uint8, info.nbytes, info.offset).reshape(rows, -1)
        target = out.reshape(rows, width)
        for lo in range(0, rows, step):
            picked = raw[lo : lo + step] if order is None else raw[order[lo : lo + step]]
            values = dequantize(picked, info)
            convert_into(values.reshape(-1), target[lo : lo + step].reshape(-1),
                         bf16=info.type_name == "BF16", path=str(self.path), tensor=info.name)  # fmt: skip
        release_pages(self._map, info.offset, info.offset + info.nbytes)
        became = "fp16 (dequantized)" if info.type_name.startswith("Q") else "fp16"
        if order is not None:
            became += ", rows un-permuted"
        self.report[info.name] = TensorReport(info.name, name, info.type_name, info.shape, became)

    def _row_order(self, name: str, rows: int) -> np.ndarray | None:
        """The stored row of each Hugging Face row of q/k in llama models, else None."""
        c = self.config
        if self.arch not in PERMUTED or not name.endswith(("q_proj.weight", "k_proj.weight")):
            return None
        heads = c.n_heads if name.endswith("q_proj.weight") else c.n_kv_heads
        half = rows // heads // 2
        # llama.cpp stored HF row (h, i, j) of shape (heads, 2, half) at (h, j, i)
        return np.arange(rows).reshape(heads, half, 2).transpose(0, 2, 1).reshape(-1)

    def close(self) -> None:
        self._map.close()

    def report_lines(self) -> list[str]:
        """What each tensor read so far became, one line each."""
        return [r.line() for r in self.report.values()]


def dequantize(raw: np.ndarray, info: TensorInfo) -> np.ndarray:
    """Rows of stored bytes as values: fp16/fp32 views, bf16 bits, quantized blocks as float32."""
    kind = info.type_name
    if kind == "F32":
        return raw.view(np.float32)
    if kind == "F16":
        return raw.view(np.float16)
    if kind == "BF16":
        return raw.view(np.uint16)
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as gguf_dequantize

    return gguf_dequantize(np.ascontiguousarray(raw), GGMLQuantizationType[kind])


def read(path: str | os.PathLike[str]) -> tuple[LlmConfig, GgufCheckpoint, Any]:
    """``(config, tensor source, tokenizer or None)`` of a GGUF file."""
    from anekit.llm.gguf_tokenizer import gguf_tokenizer

    source = GgufCheckpoint(path)
    return source.config, source, gguf_tokenizer(source.metadata, str(path))
