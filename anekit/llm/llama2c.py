"""llama2.c checkpoints (``.bin``) and their ``tokenizer.bin``, as a config and fp16 tensors.

Two float32 layouts of karpathy/llama2.c are read (``export.py``; ``run.c`` reads the first):

* legacy (version 0, the stories15M/42M/110M downloads): seven int32 ``dim, hidden_dim,
  n_layers, n_heads, n_kv_heads, vocab_size, seq_len`` (a negative vocab size means the
  classifier is not shared), then the embedding, all attention norms, wq, wk, wv, wo,
  all FFN norms, w1, w2, w3, the final norm, two RoPE tables (skipped), and the
  classifier if unshared;
* version 1: magic ``ak42``, int32 version 1, the seven int32, a uint8 "shared
  classifier" flag, zero padding to 256 bytes, then the norms (attention, FFN, final),
  the embedding, wq, wk, wv, wo, w1, w2, w3 and the classifier if unshared.

llama2.c rotates channel pairs ``(2i, 2i+1)`` of each head; our kernels rotate halves
``(i, i + hd/2)`` as Hugging Face does. Permuting the rows of wq and wk within each head
(even channels first, then odd) turns one into the other and leaves every q.k product,
and so the model, unchanged.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

from anekit.errors import ModelError
from anekit.files import map_readonly, open_regular
from anekit.llm.config import LlmConfig
from anekit.llm.weights import convert_into, release_pages

MAGIC = 0x616B3432  # "ak42"
V1_HEADER = 256
MAX_CHECKPOINT_BYTES = 1 << 42  # memory-mapped, not read: only a sparse file is refused
_BOS, _EOS = 1, 2  # run.c stops at BOS, which delimits TinyStories stories


def read(
    path: str | Path, tokenizer: str | Path | None = None
) -> tuple[LlmConfig, Llama2cCheckpoint, Any]:
    """``(config, tensor source, tokenizer or None)`` of a llama2.c checkpoint."""
    from anekit.train.data import Llama2cTokenizer

    source = Llama2cCheckpoint(path)
    tok_path = Path(tokenizer) if tokenizer else Path(path).with_name("tokenizer.bin")
    tok = None
    if tok_path.is_file():
        try:
            tok = Llama2cTokenizer(tok_path)
        except ValueError as e:
            raise ModelError(str(e), path=str(tok_path)) from e
        if tok.vocab_size != source.config.vocab_size:
            raise ModelError(
                f"{tok.vocab_size} tokens, but the checkpoint has {source.config.vocab_size}",
                path=str(tok_path),
            )
    elif tokenizer:
        raise ModelError("tokenizer file not found", path=str(tok_path))
    return source.config, source, tok


class Llama2cCheckpoint:
    """A memory-mapped llama2.c checkpoint that serves its tensors under Hugging Face names."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        what = "a llama2.c checkpoint"
        with open_regular(self.path, limit=MAX_CHECKPOINT_BYTES, what=what, error=ModelError) as f:
            head = f.read(V1_HEADER)
            self._map = map_readonly(f, what=what, path=self.path, error=ModelError)
        if len(head) < 28:
            raise ModelError(
                f"{len(head)} bytes is too short for a llama2.c checkpoint", path=str(self.path)
            )
        magic, version = struct.unpack_from("<Ii", head, 0)
        if magic == MAGIC:
            if version != 1:
                raise ModelError(
                    f"llama2.c format version {version} is not supported (only float32 versions 0 and 1)",
                    path=str(self.path),
                )
            params = struct.unpack_from("<7i", head, 8)
            shared = bool(head[36]) if len(head) > 36 else True
            offset = V1_HEADER
        else:
            params = struct.unpack_from("<7i", head, 0)
            shared = params[5] > 0
            offset = 28
        self.version = 1 if magic == MAGIC else 0
        dim, hidden, layers, heads, kv_heads, vocab, seq = params
        vocab = abs(vocab)
        if min(dim, hidden, layers, heads, kv_heads, vocab, seq) < 1 or dim % heads:
            raise ModelError(f"implausible header {list(params)}", path=str(self.path))
        self._check_size(offset, params, shared)
        self.config = LlmConfig(
            architecture="llama2c",
            family="llama2c",
            dim=dim,
            n_layers=layers,
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=dim // heads,
            hidden_dim=hidden,
            vocab_size=vocab,
            norm_eps=1e-5,
            max_position=seq,
            tie_embeddings=shared,
            dtype="float32",
            bos_token_id=_BOS,
            eos_token_ids=(_BOS, _EOS),
            style="llama2c",
        )
        self._tensors = self._layout(offset, seq)

    def _check_size(self, offset: int, params: tuple[int, ...], shared: bool) -> None:
        """ModelError unless the header's float32 weights fill the file exactly.

        Computed from the seven numbers alone, before a tensor table or a config is built:
        a 28-byte file claiming 2**31 - 1 layers is refused here, at once.
        """
        dim, hidden, layers, heads, kv_heads, vocab, seq = params
        vocab = abs(vocab)
        kv = dim // heads * kv_heads
        per_layer = 2 * dim + 2 * dim * dim + 2 * kv * dim + 3 * dim * hidden
        floats = layers * per_layer + vocab * dim * (1 if shared else 2) + dim
        if self.version == 0:
            floats += seq * (dim // heads)  # the two RoPE tables, half a head wide each
        if offset + 4 * floats != len(self._map):
            raise ModelError(
                f"the header {list(params)} describes {offset + 4 * floats} bytes of "
                f"version-{self.version} float32 weights, the file has {len(self._map)}",
                path=str(self.path),
            )

    def _layout(self, offset: int, seq: int) -> dict[str, tuple[int, tuple[int, ...]]]:
        """Hugging Face name -> (byte offset, shape) of every tensor, checked against the file size."""
        c = self.config
        d, f, n, v, kv = c.dim, c.hidden_dim, c.n_layers, c.vocab_size, c.kv_dim
        per_layer = {
            "input_layernorm": (d,), "self_attn.q_proj": (d, d), "self_attn.k_proj": (kv, d),
            "self_attn.v_proj": (kv, d), "self_attn.o_proj": (d, d),
            "post_attention_layernorm": (d,), "mlp.gate_proj": (f, d), "mlp.down_proj": (d, f),
            "mlp.up_proj": (f, d),
        }  # fmt: skip

        def stacked(name: str) -> list[tuple[str, tuple[int, ...]]]:
            return [(f"model.layers.{i}.{name}.weight", per_layer[name]) for i in range(n)]

        embed, norm = [("model.embed_tokens.weight", (v, d))], [("model.norm.weight", (d,))]
        if self.version == 0:
            order = embed + stacked("input_layernorm")
            for name in (
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
            ):
                order += stacked(name)
            order += stacked("post_attention_layernorm")
            order += stacked("mlp.gate_proj") + stacked("mlp.down_proj") + stacked("mlp.up_proj")
            order += norm + [("<rope tables>", (seq, c.head_dim))]  # freq_cis_real, freq_cis_imag
        else:
            order = stacked("input_layernorm") + stacked("post_attention_layernorm") + norm + embed
            for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                         "mlp.gate_proj", "mlp.down_proj", "mlp.up_proj"):  # fmt: skip
                order += stacked(name)
        if not c.tie_embeddings:
            order.append(("lm_head.weight", (v, d)))
        tensors, at = {}, offset
        for name, shape in order:  # the sizes add up to the file's: _check_size said so
            tensors[name] = (at, shape)
            at += 4 * math.prod(shape)
        return tensors

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def shape(self, name: str) -> tuple[int, ...] | None:
        """A tensor's shape, from the header (None: not in a llama2.c checkpoint)."""
        entry = self._tensors.get(name)
        return None if entry is None else entry[1]

    def read_into(self, name: str, shape: tuple[int, ...], out: np.ndarray) -> None:
        """Write a tensor into the flat ``out`` as fp16 values (q and k rows in rotate-half order)."""
        try:
            offset, stored = self._tensors[name]
        except KeyError:
            raise ModelError(
                "not in a llama2.c checkpoint", path=str(self.path), tensor=name
            ) from None
        if tuple(shape) != stored:
            raise ModelError(
                f"expected shape {list(shape)}, found {list(stored)}",
                path=str(self.path),
                tensor=name,
            )
        data = np.frombuffer(self._map, "<f4", int(np.prod(stored)), offset)
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            hd = self.config.head_dim
            order = np.concatenate([np.arange(0, hd, 2), np.arange(1, hd, 2)])
            data = data.reshape(-1, hd, stored[1])[:, order].reshape(-1)
        convert_into(data, out, path=str(self.path), tensor=name)
        release_pages(self._map, offset, offset + 4 * data.size)  # done with these pages
