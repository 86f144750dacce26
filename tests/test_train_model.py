"""A full training step on ``tiny`` against PyTorch autograd of the whole model in float64.

The reference is the model written token-major with PyTorch ops (the per-block
references of ``test_nn_kernels``), from the same fp32 parameters.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from anekit.train.config import get_config  # noqa: E402
from anekit.train.model import Model  # noqa: E402
from anekit.train.params import init_params, param_specs  # noqa: E402
from tests.test_backends_isolate import FAKE, register_fake_backend  # noqa: E402
from tests.test_nn_kernels import ref_attention, ref_rmsnorm  # noqa: E402

# Gradients pass through 2 x n_layers fp16 kernels (about 100 rounded ops) and fp16 taps;
# relative errors per tensor of 1.5e-3 (loss scale 256) to 6e-3 (no loss scaling: small
# gradients lose bits in fp16) are the noise floor here. A wrong formula
# (a missed residual, a transposed weight, an unscaled gradient) is off by order 1.
GRAD_RTOL = 1.5e-2
LOSS_RTOL = 1e-4  # the loss is one scalar averaged over all tokens: fp16 noise averages out


def torch_loss(params: dict[str, torch.Tensor], tokens: np.ndarray, cfg) -> torch.Tensor:
    batch = tokens.shape[0]
    s = cfg.block(batch)
    inp = torch.tensor(tokens[:, :-1].reshape(-1))
    h = params["embed"][inp]
    for i in range(cfg.n_layers):
        p = {k.split(".", 2)[2]: v for k, v in params.items() if k.startswith(f"layers.{i}.")}
        xn, _ = ref_rmsnorm(h, p["attn_norm"], cfg.norm_eps)
        h = h + ref_attention(xn, p["wq"], p["wk"], p["wv"], p["wo"], s)["o"]
        xn, _ = ref_rmsnorm(h, p["ffn_norm"], cfg.norm_eps)
        h1, h3 = xn @ p["w1"], xn @ p["w3"]
        h = h + (torch.nn.functional.silu(h1) * h3) @ p["w2"].T
    hn, _ = ref_rmsnorm(h, params["final_norm"], cfg.norm_eps)
    logits = hn @ params["embed"].T
    return torch.nn.functional.cross_entropy(logits, torch.tensor(tokens[:, 1:].reshape(-1)))


def trained_a_little(cfg, seed: int = 0):
    """Parameters away from their initial symmetry (gains != 1), like those of a real run."""
    rng = np.random.default_rng(seed)
    params = init_params(cfg, rng)
    for spec in params.specs:
        params[spec.name] += rng.standard_normal(spec.shape).astype(np.float32) * (
            0.1 if spec.std == 0 else spec.std
        )
    return params


@pytest.mark.parametrize("loss_scale", [1.0, 256.0])
def test_every_gradient_of_a_tiny_step_matches_torch(loss_scale: float) -> None:
    cfg = get_config("tiny").model
    params = trained_a_little(cfg)
    tokens = np.random.default_rng(1).integers(0, cfg.vocab_size, size=(2, cfg.seq_len + 1))
    grads = params.zeros_like()
    with Model(cfg, batch=2, backend="reference", numerics="ideal") as model:
        model.load(params)
        loss = model.loss_and_grads(params, grads, tokens, grad_scale=loss_scale)
    grads.flat /= loss_scale

    ref_params = {
        k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in params.views.items()
    }
    ref_loss = torch_loss(ref_params, tokens, cfg)
    ref_loss.backward()
    assert abs(loss - ref_loss.item()) / ref_loss.item() < LOSS_RTOL
    names = [s.name for s in param_specs(cfg)]
    assert sorted(names) == sorted(ref_params)
    worst = {}
    for name in names:
        want = ref_params[name].grad.numpy()
        worst[name] = np.linalg.norm(grads[name] - want) / np.linalg.norm(want)
    bad = {k: f"{v:.2e}" for k, v in worst.items() if not v < GRAD_RTOL}
    assert not bad, f"gradients off: {bad}"


def test_the_model_isolates_its_kernels_where_the_backend_has_a_compile_budget(monkeypatch):
    """train asks for isolate="auto": a backend declaring a budget gets every kernel in a worker."""
    cfg = get_config("tiny").model
    isolated = register_fake_backend(monkeypatch, budget=7)
    with Model(cfg, batch=1, backend=FAKE) as model:
        assert len(isolated) == len(model.kernels) == 4
        assert {backend for backend, _ in isolated} == {FAKE}
    with Model(cfg, batch=1, backend="reference", training=False) as model:
        assert len(model.kernels) == 2
    assert len(isolated) == 4  # the reference declares no budget: compiled in process
