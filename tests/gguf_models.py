"""GGUF files written by the tests with the ``gguf`` package's writer, in llama.cpp's layout.

A small random Hugging Face model is converted as llama.cpp's ``convert_hf_to_gguf.py``
does: llama.cpp's tensor names, ``attn_q``/``attn_k`` rows permuted for llama (its rotary
pairing), norms kept F32, matrices quantized (``gguf.quants.quantize``), the metadata keys
llama.cpp writes, and a tokenizer in ``tokenizer.ggml.*``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# a tiny SentencePiece-style vocabulary: specials, byte fallback, then scored pieces
SPM_PIECES = ["\u2581", "\u2581t", "he", "\u2581the", "\u2581a", "\u2581o", "on", "ce", "\u2581on",
              "\u2581once", "up", "\u2581up", "\u2581upon", "ti", "me", "\u2581time", "re", "\u2581the"
              "re", "\u2581w", "as", "\u2581was"] + list("abcdefghijklmnopqrstuvwxyz.,")  # fmt: skip
BPE_MERGES = ["\u0120 t", "h e", "\u0120t he", "\u0120 a", "o n", "c e", "\u0120 o", "\u0120o n",
              "\u0120on ce", "u p", "\u0120 up", "\u0120up on"]  # fmt: skip


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute``: HF rows (h, i, j) stored at (h, j, i)."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def k_quant_blocks(shape: tuple[int, ...], qtype: str, seed: int = 0) -> np.ndarray:
    """Valid Q4_K or Q6_K bytes for a ``shape`` matrix (gguf has no Python quantizer for
    them): random quants, small block scales, so the values stay within about +-1."""
    rng = np.random.default_rng(seed)
    rows, cols = shape
    blocks = rows * cols // 256
    if qtype == "Q6_K":  # ql[128], qh[64], scales int8[16], d fp16
        raw = rng.integers(0, 256, (blocks, 210), dtype=np.uint8)
        raw[:, 192:208] = rng.integers(-8, 9, (blocks, 16)).astype(np.int8).view(np.uint8)
        raw[:, 208:210] = np.full((blocks, 1), 0.002, np.float16).view(np.uint8)
    else:  # Q4_K: d fp16, dmin fp16, scales[12] (6-bit packed), qs[128]
        raw = rng.integers(0, 256, (blocks, 144), dtype=np.uint8)
        # scale bytes 0x88 unpack to equal scale and min (8 or 40) for every sub-block, and
        # dmin = 7.5 d centres the 4-bit quants: values sc * d * (q - 7.5)
        raw[:, 0:4] = np.array([[0.002, 0.015]], np.float16).repeat(blocks, 0).view(np.uint8)
        raw[:, 4:16] = 0x88
    return raw.reshape(rows, -1)


def spm_vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + SPM_PIECES
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(SPM_PIECES))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(SPM_PIECES)
    return tokens, scores, types


def bpe_vocab() -> tuple[list[str], list[int]]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = [bytes_to_unicode()[b] for b in range(256)]
    tokens = alphabet + [m.replace(" ", "") for m in BPE_MERGES] + ["<|endoftext|>"]
    return tokens, [1] * (len(tokens) - 1) + [3]


def write_gguf(path: Path, model: Any, arch: str, qtype: str, tokenizer: str = "llama") -> Path:
    """Write ``model`` (a transformers causal LM) as llama.cpp would, matrices in ``qtype``."""
    import gguf
    from gguf.quants import quantize

    c = model.config
    heads, kv = c.num_attention_heads, c.num_key_value_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(head_dim)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(getattr(c, "rope_theta", None) or c.rope_parameters["rope_theta"])
    w.add_vocab_size(c.vocab_size)
    if tokenizer == "llama":
        tokens, scores, types = spm_vocab()
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
    else:
        tokens, types = bpe_vocab()
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(BPE_MERGES)
        w.add_eos_token_id(len(tokens) - 1)
        w.add_bos_token_id(len(tokens) - 1)
        w.add_add_bos_token(False)
    assert len(tokens) == c.vocab_size, (len(tokens), c.vocab_size)
    names = {
        "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }  # fmt: skip
    layer = {
        "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
        "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
        "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    }  # fmt: skip
    kind = gguf.GGMLQuantizationType[qtype]
    state = model.state_dict()
    if c.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    for name, tensor in state.items():
        arr = tensor.detach().float().numpy()
        if name in names:
            out = names[name]
        else:
            _, _, i, rest = name.split(".", 3)
            module, leaf = rest.rsplit(".", 1)
            out = f"blk.{i}.{layer[module]}.{leaf}"
        if arch == "llama" and out.endswith(("attn_q.weight", "attn_k.weight")):
            arr = _permute(arr, heads if "attn_q" in out else kv)
        if arr.ndim == 2 and qtype == "F16":
            w.add_tensor(out, arr.astype(np.float16))
        elif arr.ndim == 2 and qtype in ("Q4_K", "Q6_K"):
            w.add_tensor(out, k_quant_blocks(arr.shape, qtype), raw_dtype=kind)
        elif arr.ndim == 2:
            w.add_tensor(out, quantize(arr, kind), raw_dtype=kind)
        else:
            w.add_tensor(out, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tiny_model(arch: str, vocab: int, seed: int = 0, **extra: Any) -> Any:
    """A seeded random transformers model of ``arch`` (float32)."""
    import torch

    from tests.llm_models import hf_classes

    config_cls, model_cls = hf_classes(arch)
    torch.manual_seed(seed)
    config = config_cls(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
        max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
        **{"hidden_size": 64, "intermediate_size": 128, "head_dim": 16, **extra},
    )  # fmt: skip
    model = model_cls(config).eval()
    with torch.no_grad():  # weights of a trained model's scale, not init's tiny ones
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    return model
