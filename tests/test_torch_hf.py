"""Raw Hugging Face models through ``from_torch``: padded attention masks as keyword inputs,
ModelOutput names, ``outputs=``, caches, nested pytree outputs and advanced indexing."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import anekit  # noqa: E402
from anekit.errors import ConversionError  # noqa: E402
from anekit.frontends.torch import compare  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")
TOLERANCE = 2e-2


def padded_batch(vocab: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(3, vocab, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0  # the second sequence is 5 tokens long, padded to 8
    return ids, mask


def run(prog, feeds: dict[str, torch.Tensor], numerics: str = "ideal") -> dict[str, np.ndarray]:
    inputs = {v.name: feeds[v.name].numpy().astype(v.dtype.numpy) for v in prog.main.inputs}
    with anekit.compile(prog, backend="reference", numerics=numerics) as k:
        out = k(**inputs)
    return {name: np.asarray(value, np.float32) for name, value in out.items()}


def per_position_errors(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Relative L2 error of each (batch, position) row of a [B, S, D] output."""
    return np.linalg.norm(got - want, axis=-1) / np.linalg.norm(want, axis=-1)


ENCODERS = {
    "bert": lambda: transformers.BertModel(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, initializer_range=0.3)),
    "roberta": lambda: transformers.RobertaModel(transformers.RobertaConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=40, initializer_range=0.3)),
    "distilbert": lambda: transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
        max_position_embeddings=32, initializer_range=0.3)),
}  # fmt: skip


@pytest.mark.parametrize("numerics", ["m4", "m1", "ideal"])
@pytest.mark.parametrize("family", sorted(ENCODERS))
def test_encoder_on_a_padded_batch_matches_pytorch_at_every_position(
    family: str, numerics: str
) -> None:
    torch.manual_seed(0)
    model = ENCODERS[family]().eval()
    ids, mask = padded_batch()
    prog = anekit.from_torch(model, (ids,), {"attention_mask": mask})
    assert [v.name for v in prog.main.inputs] == ["input_ids", "attention_mask"]
    got = run(prog, {"input_ids": ids, "attention_mask": mask}, numerics)  # the chip's profile
    with torch.no_grad():
        want = model(ids, attention_mask=mask)
        unmasked = model(ids).last_hidden_state.numpy()
    errors = per_position_errors(got["last_hidden_state"], want.last_hidden_state.numpy())
    assert errors.max() < TOLERANCE, errors
    # the mask matters: the padded row differs from the unmasked model's, the full row not
    masked_off = per_position_errors(got["last_hidden_state"], unmasked)
    assert masked_off[1, :5].min() > 5 * errors.max()
    assert masked_off[0].max() < TOLERANCE


def test_bert_outputs_are_named_and_selectable() -> None:
    torch.manual_seed(0)
    model = ENCODERS["bert"]().eval()
    ids, mask = padded_batch()
    full = anekit.from_torch(model, (ids,), {"attention_mask": mask})
    assert [v.name for v in full.main.outputs] == ["last_hidden_state", "pooler_output"]
    hidden = anekit.from_torch(model, (ids,), {"attention_mask": mask}, outputs="last_hidden_state")
    assert [v.name for v in hidden.main.outputs] == ["last_hidden_state"]
    assert len(hidden.main.ops) < len(full.main.ops)  # the pooler was not kept
    with pytest.raises(ConversionError, match="last_hidden_state, pooler_output"):
        anekit.from_torch(model, (ids,), outputs=["logits"])


def test_gpt2_lm_head_with_its_default_config_converts_without_the_cache() -> None:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=32)
    assert config.use_cache  # the default: the model returns a DynamicCache
    model = transformers.GPT2LMHeadModel(config).eval()
    ids, _ = padded_batch()
    with pytest.warns(UserWarning, match="without its KV cache"):
        prog = anekit.from_torch(model, (ids[:1],))
    assert [v.name for v in prog.main.outputs] == ["logits"]
    with torch.no_grad():
        want = model(ids[:1]).logits.numpy()
    got = run(prog, {"input_ids": ids[:1]})["logits"]
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert 0 < rel < TOLERANCE


class Nested(torch.nn.Module):
    def forward(self, x: torch.Tensor, *, scale: torch.Tensor) -> dict:
        return {"sum": x + scale, "parts": (x * 2, {"neg": -x}), "list": [x - 1]}


def test_nested_pytree_outputs_are_named_after_their_paths() -> None:
    x, scale = torch.randn(2, 3), torch.randn(2, 3)
    prog = anekit.from_torch(Nested(), (x,), {"scale": scale}, passes=())
    names = [v.name for v in prog.main.outputs]
    assert names == ["sum", "parts_0", "parts_1_neg", "list_0"]
    got = run(prog, {"x": x, "scale": scale})
    np.testing.assert_allclose(got["parts_1_neg"], -x.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["sum"], (x + scale).numpy(), rtol=1e-6)
    report = compare(Nested(), (x,), prog, kwargs={"scale": scale})
    assert [o.name for o in report.outputs] == names and report.worst.rel_error < 1e-6


class Indexing(torch.nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        if self.kind == "adjacent":
            return x[:, i, j]
        if self.kind == "apart":  # the broadcast index dims go first, as in NumPy
            return x[i, :, j]
        return x[torch.arange(x.shape[0])[:, None], torch.arange(x.shape[1])]  # a grid: reshape


@pytest.mark.parametrize("kind", ["adjacent", "apart", "grid"])
def test_advanced_indexing_with_several_index_tensors(kind: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5)
    i = torch.tensor([[0, -1], [2, 1]])  # negative indices wrap, as in PyTorch
    j = torch.tensor([1, -2])
    model = Indexing(kind)
    prog = anekit.from_torch(model, (x, i, j), passes=())
    want = model(x, i, j).numpy()
    got = run(prog, {"x": x, "i": i, "j": j})["output"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    ops = {op.op_type for op in prog.main.ops}
    assert ("gather" in ops) == (kind != "grid")


def test_boolean_mask_indexing_names_the_alternative() -> None:
    class Masked(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.where(x > 0, x, torch.zeros_like(x))[x[:, :1].squeeze(1) > 9]

    with pytest.raises(ConversionError):
        anekit.from_torch(Masked(), (torch.randn(4, 3),))
