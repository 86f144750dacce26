"""Small random models of the six kinds the ONNX front end covers, and exporting them.

Shared by the ONNX tests: each export runs in the test (no downloads), with either of
``torch.onnx.export``'s exporters: the dynamo one (torch 2.13's default: opset 20, weights
in an external-data file beside the model) or the legacy TorchScript one (opset 17).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import torch
import transformers


class Ids(torch.nn.Module):
    """A Hugging Face model called on token ids alone, its first result returned."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = torch.ones_like(ids)
        return self.model(input_ids=ids, attention_mask=mask, use_cache=False, return_dict=False)[0]


class Block(torch.nn.Module):
    """A ResNet basic block: two 3x3 convolutions with batch norm, and the skip connection."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
        self.c2, self.b2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))


def _randomize_bn(model: torch.nn.Module) -> torch.nn.Module:
    """Batch norms with non-trivial running statistics (fresh ones are the identity)."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model


def build(kind: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A seeded random model of ``kind`` and its example input."""
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 8))
    image = torch.randn(1, 3, 16, 16)
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
        return model, (torch.randn(2, 8),)
    if kind == "cnn":
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, stride=2), torch.nn.AvgPool2d(3),
            torch.nn.Flatten(), torch.nn.Linear(8, 3),
        )  # fmt: skip
        return _randomize_bn(model), (image,)
    if kind == "resnet":
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 7, stride=2, padding=3), torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1), Block(8), Block(8),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10),
        )  # fmt: skip
        return _randomize_bn(model), (torch.randn(1, 3, 32, 32),)
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=32,
        )  # fmt: skip
        return Ids(transformers.BertModel(config)), (ids,)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=32,
            attn_implementation="eager", bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        return Ids(transformers.GPT2LMHeadModel(config)), (ids,)
    if kind == "vit":
        config = transformers.ViTConfig(
            image_size=16, patch_size=4, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64,
        )  # fmt: skip
        return transformers.ViTModel(config), (image,)
    raise ValueError(kind)


def export(model: torch.nn.Module, args: tuple, path: Path, dynamo: bool, **kwargs) -> Path:
    """``torch.onnx.export`` quietly (its progress lines and warnings are not the test's)."""
    options = {"dynamo": dynamo, **kwargs}
    if not dynamo:
        options.setdefault("opset_version", 17)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), args, str(path), **options)
    return path
