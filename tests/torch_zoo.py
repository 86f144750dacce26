"""The test zoo: small PyTorch and Hugging Face models (seeded random weights, no downloads),
each as ``(module, args, kwargs)``; the zoo tests convert every one for every chip."""

from __future__ import annotations

from collections.abc import Callable

import torch


def _transformers():
    import transformers

    return transformers


def mlp():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 5))
    return model, (torch.randn(3, 7, 16),), {}


def cnn():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, stride=2, padding=2, dilation=2, groups=2),
        torch.nn.BatchNorm2d(8), torch.nn.Tanh(), torch.nn.AvgPool2d(2),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
    )  # fmt: skip
    with torch.no_grad():  # non-trivial running statistics
        for m in model:
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(1, 3, 16, 16),), {}


def encoder_layer():
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, activation="gelu")
    return layer, (torch.randn(1, 8, 32),), {}


def bert():
    t = _transformers()
    config = t.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32,
    )  # fmt: skip
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    return t.BertModel(config), (torch.randint(0, 99, (2, 8)),), {"attention_mask": mask}


def gpt2():
    t = _transformers()
    config = t.GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                          bos_token_id=0, eos_token_id=0)  # fmt: skip
    return t.GPT2LMHeadModel(config), (torch.randint(0, 99, (1, 8)),), {"use_cache": False}


def llama():
    t = _transformers()
    config = t.LlamaConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=32, use_cache=False,
    )  # fmt: skip
    return t.LlamaModel(config), (torch.randint(0, 99, (1, 8)),), {}


def vit():
    t = _transformers()
    config = t.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64,
    )  # fmt: skip
    return t.ViTModel(config), (torch.randn(1, 3, 16, 16),), {}


def resnet():
    t = _transformers()
    config = t.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"
    )
    model = t.ResNetModel(config)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(1, 3, 32, 32),), {}


ZOO: dict[str, Callable] = {
    "mlp": mlp, "cnn": cnn, "encoder_layer": encoder_layer, "bert": bert, "gpt2": gpt2,
    "llama": llama, "vit": vit, "resnet": resnet,
}  # fmt: skip
