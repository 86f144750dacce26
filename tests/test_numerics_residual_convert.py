"""Residual scaling or a refusal for ``from_torch`` programs (issue 25 item 5).

The outlier Llama of test_numerics_llm (written by transformers; its residual stream peaks at
72,852, one MLP output near 33,000) converted with ``from_torch`` for an M4: the fidelity
gate runs on the m4 profile, finds the overflow, scales the residual stream by alpha (the
pass in ``anekit.passes.residual``, shared with ``anekit.llm``) and the program then matches
transformers' float32 logits. A model whose stream cannot be scaled soundly is refused with
the op, its MIL line, its source line and the bound.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import anekit  # noqa: E402
from anekit.errors import NumericsOverflow  # noqa: E402
from anekit.frontends.envelope import ResidualScaled  # noqa: E402
from anekit.passes.residual import choose_alpha, find_stream, scale_residual  # noqa: E402
from tests.test_numerics_llm import IDS, outlier_model  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def outlier(tmp_path_factory):
    return outlier_model(tmp_path_factory.mktemp("outlier"))


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _logits(program, numerics: str) -> np.ndarray:
    ids = np.asarray([IDS], np.int32)
    with anekit.compile(program, backend="reference", numerics=numerics) as k:
        return np.asarray(k(input_ids=ids)["logits"], np.float32)


def test_from_torch_scales_the_outlier_stream_and_matches_transformers(outlier) -> None:
    ids = torch.tensor([IDS])
    with torch.no_grad():
        want = outlier(ids).logits.numpy()
    with pytest.warns(ResidualScaled, match=r"peaks at 7\d{4}.*alpha = 0.0625"):
        program = anekit.from_torch(outlier, (ids,), chip="m4", outputs="logits")
    assert program.build_info["anekit-residual-scale"] == "0.0625"
    got = _logits(program, "m4")  # the gate's profile: the chip's
    assert _rel(got, want) < 0.03, _rel(got, want)
    # without the rewrite the golden model shows what the engine would do
    plain = anekit.from_torch(outlier, (ids,), chip="m4", outputs="logits", verify=False)
    bad = _logits(plain, "m4")
    assert not np.isfinite(bad).all() or _rel(bad, want) > 0.5


def test_the_stream_of_a_converted_llama_is_found_and_scaling_it_changes_nothing() -> None:
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, head_dim=16,
                                      vocab_size=96, max_position_embeddings=64)  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.tensor([IDS])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResidualScaled)  # a healthy model is left as it is
        program = anekit.from_torch(model, (ids,), chip="m4", outputs="logits")
    stream = find_stream(program.main)
    assert stream.unsound is None
    assert len(stream.norms) == 5  # two per layer and the final one
    assert len(stream.writers) == 5  # the embedding, then o_proj and down_proj per layer
    base = _logits(program, "ideal")
    for alpha in (1.0, 1 / 16, 2.0**-10):
        scaled = _logits(scale_residual(program, alpha, stream), "ideal")
        np.testing.assert_allclose(scaled, base, atol=4e-3 * np.abs(base).max())


class _Unnormed(torch.nn.Module):
    """A residual stream read by a linear layer directly (no norm): scaling it is unsound."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(4, 4, bias=False)
        self.out = torch.nn.Linear(4, 2, bias=False)
        with torch.no_grad():
            self.up.weight.fill_(5000.0)
            self.out.weight.fill_(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.up(x)  # 20001 per channel: fp16-exact
        return self.out(h)  # 4 * 2 * 20001 = 160008: past fp16 and the cliff


def test_a_stream_that_cannot_be_scaled_is_refused_with_op_line_source_and_bound() -> None:
    with pytest.raises(NumericsOverflow) as caught:
        anekit.from_torch(_Unnormed().eval(), (torch.ones(1, 3, 4),), chip="m4")
    error = caught.value
    assert "no RMSNorm or LayerNorm reads a residual stream" in str(error)
    assert error.op_type == "conv" and isinstance(error.line, int)
    assert "observed [160008" in error.bound
    assert error.source.startswith("in module out (Linear)")  # where in the user's model


def test_choose_alpha_is_shared_with_the_llm_calibration() -> None:
    from anekit.llm import residual

    assert residual.choose_alpha is choose_alpha
    assert choose_alpha(72852.5) == 1 / 16 and choose_alpha(100.0) == 1.0


def test_convert_file_scales_the_saved_outlier_model_too(outlier, tmp_path) -> None:
    from anekit.frontends.torch import convert_file

    outlier.config.use_cache = False
    exported = torch.export.export(outlier, (torch.tensor([IDS]),), strict=False)
    torch.export.save(exported, str(tmp_path / "m.pt2"))
    with pytest.warns(ResidualScaled, match="alpha = 0.0625"):
        conversion = convert_file(tmp_path / "m.pt2", tmp_path / "out", chip="m4", estimate=False)
    assert conversion.fidelity.worst.rel_error < 0.03
    assert conversion.program.build_info["anekit-residual-scale"] == "0.0625"
    assert "anekit-residual-scale" in (tmp_path / "out" / "model.mil").read_text()
