"""Whole models through ``anekit.from_torch``: PyTorch modules and Hugging Face transformers.

Every model is built from a small config with seeded random weights (no downloads). Each
test converts it with the default passes, runs the program on the reference backend,
measures the relative error against PyTorch fp32 here (independently of the fidelity
report), and checks the program for an M4 with no errors.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import anekit  # noqa: E402
from anekit.mil import DType  # noqa: E402
from tests import torch_zoo  # noqa: E402

TOLERANCE = 2e-2
# torch.export's pytree code warns about its own deprecated API
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _seed() -> None:
    torch.manual_seed(0)


def torch_outputs(model: torch.nn.Module, args: tuple) -> list[np.ndarray]:
    with torch.no_grad():
        out = model.eval()(*args)
    leaves = torch.utils._pytree.tree_leaves(out)
    return [t.float().numpy() for t in leaves if isinstance(t, torch.Tensor)]


def run_program(prog: anekit.mil.Program, args: tuple) -> list[np.ndarray]:
    inputs = {
        v.name: a.numpy().astype(v.dtype.numpy) for v, a in zip(prog.main.inputs, args, strict=True)
    }
    with anekit.compile(prog, backend="reference") as k:
        out = k(**inputs)
    return [out[v.name].astype(np.float32) for v in prog.main.outputs]


def assert_converts(
    model: torch.nn.Module, args: tuple, *, check: bool = True
) -> anekit.mil.Program:
    """Convert, compare every output with PyTorch fp32 (L2 relative error), check for M4."""
    prog = anekit.from_torch(model, args)  # verify=True: raises above 2e-2 itself
    want, got = torch_outputs(model, args), run_program(prog, args)
    assert len(got) == len(want)
    for g, w, v in zip(got, want, prog.main.outputs):
        assert g.shape == w.shape, v.name
        rel = np.linalg.norm(g - w) / np.linalg.norm(w)
        assert rel < TOLERANCE, f"{v.name}: relative error {rel:.3g}"
        assert rel > 0  # fp16 storage: an exact match would mean PyTorch was not compared
    if check:
        errors = [d for d in anekit.check(prog, chip="m4") if d.severity == "error"]
        assert errors == []
    return prog


def test_mlp_keeps_input_names_dtypes_and_layout() -> None:
    _seed()
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 5))
    prog = assert_converts(model, (torch.randn(3, 7, 16),))
    (x,) = prog.main.inputs
    assert (x.name, x.dtype, x.shape) == ("input", DType.fp16, (3, 7, 16))
    (out,) = prog.main.outputs
    assert (out.name, out.shape) == ("output", (3, 7, 5))
    ops = [op.op_type for op in prog.main.ops]
    assert "linear" not in ops and ops.count("conv") == 2  # both layers became 1x1 convs
    assert ops.count("transpose") == 2  # into [1, C, 1, S] once, out once


def test_small_cnn_with_batchnorm_and_pooling() -> None:
    _seed()
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=2, dilation=2, groups=2),
        torch.nn.BatchNorm2d(8),
        torch.nn.Tanh(),
        torch.nn.AvgPool2d(2),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )
    with torch.no_grad():  # non-trivial running statistics
        for m in model:
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    assert_converts(model, (torch.randn(1, 3, 16, 16),))


def test_transformer_encoder_layer() -> None:
    _seed()
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, activation="gelu")
    assert_converts(layer, (torch.randn(1, 8, 32),))


def test_multihead_attention_returns_both_outputs() -> None:
    _seed()
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(1, 6, 32)
    prog = assert_converts(mha, (x, x, x))
    assert [v.name for v in prog.main.inputs] == ["query", "key", "value"]
    assert [v.name for v in prog.main.outputs] == ["output_0", "output_1"]


def test_bert_model() -> None:
    _seed()
    config = transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32,
    )  # fmt: skip
    ids = torch.randint(0, 99, (1, 8))
    prog = assert_converts(transformers.BertModel(config), (ids,))
    (x,) = prog.main.inputs
    assert (x.name, x.dtype) == ("input_ids", DType.int32)
    assert [v.name for v in prog.main.outputs] == ["last_hidden_state", "pooler_output"]
    assert "gather" not in {op.op_type for op in prog.main.ops}  # embeddings became matmuls


def test_gpt2_model() -> None:
    _seed()
    config = transformers.GPT2Config(
        vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=32, use_cache=False,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    assert_converts(transformers.GPT2Model(config), (torch.randint(0, 99, (1, 8)),))


def test_llama_model_with_gqa_and_rope() -> None:
    _seed()
    config = transformers.LlamaConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=32, use_cache=False,
    )  # fmt: skip
    prog = assert_converts(transformers.LlamaModel(config), (torch.randint(0, 99, (1, 8)),))
    assert {"cos", "sin"}.isdisjoint(op.op_type for op in prog.main.ops)  # RoPE tables folded


def test_vit_model() -> None:
    _seed()
    config = transformers.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64,
    )  # fmt: skip
    assert_converts(transformers.ViTModel(config), (torch.randn(1, 3, 16, 16),))


def test_resnet_model() -> None:
    _seed()
    model, args, _ = torch_zoo.resnet()
    assert_converts(model, args)
