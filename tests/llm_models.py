"""Small random-init Hugging Face models and tokenizers, saved to temporary directories (no downloads)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

CORPUS = (
    "Once upon a time there was a little robot. The robot liked to read books about the sea. "
    "Every day it walked to the library and asked for a new story. "
) * 4


@dataclass(frozen=True)
class Case:
    """One saved model: architecture, storage dtype, head tying, KV heads, config style."""

    arch: str
    dtype: str  # "bfloat16" | "float16"
    tied: bool
    kv_heads: int
    style: str  # "new" (rope_parameters, dtype) | "old" (rope_theta, torch_dtype)
    sliding_window: int | None = None

    @property
    def id(self) -> str:
        attn = {1: "mqa", 4: "mha"}.get(self.kv_heads, "gqa")
        tie = "tied" if self.tied else "untied"
        return f"{self.arch}-{self.dtype[:4]}-{tie}-{attn}-{self.style}"


def hf_classes(arch: str) -> tuple[Any, Any]:
    import transformers

    names = {
        "llama": ("LlamaConfig", "LlamaForCausalLM"),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
        "mistral": ("MistralConfig", "MistralForCausalLM"),
        "phi3": ("Phi3Config", "Phi3ForCausalLM"),
        "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
        "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
        "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
        "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    }[arch]
    return getattr(transformers, names[0]), getattr(transformers, names[1])


def save_model(directory: Path, case: Case, vocab: int = 96, seed: int = 0, **config: Any) -> Any:
    """Save a random-init model of ``case`` to ``directory``; returns the float32 reference model.

    The reference is loaded back from the saved files, so it has exactly the weights
    anekit reads (rounded to the storage dtype).
    """
    import torch

    config_cls, model_cls = hf_classes(case.arch)
    kw: dict[str, Any] = dict(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=case.kv_heads,
        head_dim=16,
        vocab_size=vocab,
        max_position_embeddings=256,
        tie_word_embeddings=case.tied,
        initializer_range=0.08,
        rms_norm_eps=1e-5,
    )
    if case.arch == "llama":  # Llama 3.1 frequency scaling, active at these tiny sizes
        kw["rope_parameters"] = {
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        }
    if case.arch in ("mistral", "phi3", "gemma2", "gemma3"):
        kw["sliding_window"] = case.sliding_window
    kw.update(config)
    torch.manual_seed(seed)
    model = model_cls(config_cls(**kw)).eval()
    with torch.no_grad():  # RMSNorm gains and biases start at 1 and 0: make them matter
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    model.to(getattr(torch, case.dtype)).save_pretrained(directory)
    reference = model_cls.from_pretrained(directory, dtype=torch.float32).eval()
    if case.style == "old":
        to_old_style(directory / "config.json")
    return reference


def to_old_style(path: Path) -> None:
    """Rewrite a saved config.json in the older style: top-level rope_theta/rope_scaling, torch_dtype."""
    raw = json.loads(path.read_text())
    rope = dict(raw.pop("rope_parameters"))
    raw["rope_theta"] = rope.pop("rope_theta")
    kind = rope.pop("rope_type", "default")
    raw["rope_scaling"] = None if kind == "default" else {"rope_type": kind, **rope}
    raw["torch_dtype"] = raw.pop("dtype")
    path.write_text(json.dumps(raw, indent=2))


def reference_logits(model: Any, ids: list[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def save_tokenizer(directory: Path, vocab_size: int = 96) -> Any:
    """Train a byte-level BPE tokenizer on a small corpus and save its tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<eos>"],
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer=trainer)
    tok.save(str(directory / "tokenizer.json"))
    return tok


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute error relative to the largest reference magnitude."""
    return float(np.abs(got - ref).max() / np.abs(ref).max())


class RecordingSink(io.StringIO):
    """A text sink that remembers each write, to see that text arrives piece by piece."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)


def save_draft_pair(directory: Path, draft_layers: int = 1, target_layers: int = 3,
                    seed: int = 0, **config: Any) -> tuple[Path, Path]:  # fmt: skip
    """A Llama draft and a deeper target that computes the same function (its extra layers'
    output projections are zero, so they add nothing to the residual stream): proposals
    agree with the target except where fp16 rounding splits a near-tie. Saved in fp16 to
    ``directory/draft`` and ``directory/target``."""
    import torch

    config_cls, model_cls = hf_classes("llama")
    kw: dict[str, Any] = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=16, vocab_size=96,
                              max_position_embeddings=256, initializer_range=0.08,
                              tie_word_embeddings=False)  # fmt: skip
    kw.update(config)
    torch.manual_seed(seed)
    draft = model_cls(config_cls(num_hidden_layers=draft_layers, **kw)).eval()
    target = model_cls(config_cls(num_hidden_layers=target_layers, **kw)).eval()
    state = target.state_dict()
    state.update(draft.state_dict())  # shared embedding, layers, norm, head
    for i in range(draft_layers, target_layers):
        for name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            state[f"model.layers.{i}.{name}"].zero_()
    target.load_state_dict(state)
    for name, model in (("draft", draft), ("target", target)):
        model.to(torch.float16).save_pretrained(directory / name)
    return directory / "draft", directory / "target"
