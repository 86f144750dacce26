"""AdamW against torch.optim.AdamW, the schedule, clipping and the loss scaler."""

from __future__ import annotations

import math

import numpy as np
import pytest

from anekit.train.config import TrainConfig
from anekit.train.optim import AdamW, LossScaler, clip_grad_norm, learning_rate
from anekit.train.params import Params, ParamSpec

torch = pytest.importorskip("torch")


def small_params() -> Params:
    return Params([ParamSpec("w", (3, 4), True, 0.02), ParamSpec("g", (4,), False, 0.0)])


def test_adamw_matches_torch_with_decay_only_on_matrices() -> None:
    cfg = TrainConfig(lr=1e-2, weight_decay=0.1, beta1=0.9, beta2=0.95, adam_eps=1e-8)
    rng = np.random.default_rng(0)
    params = small_params()
    params.flat[:] = rng.standard_normal(params.flat.size)
    w = torch.tensor(params["w"].astype(np.float64), requires_grad=True)
    g = torch.tensor(params["g"].astype(np.float64), requires_grad=True)
    ref = torch.optim.AdamW(
        [{"params": [w], "weight_decay": 0.1}, {"params": [g], "weight_decay": 0.0}],
        lr=1e-2, betas=(0.9, 0.95), eps=1e-8,
    )  # fmt: skip
    opt = AdamW(params, cfg)
    grads = params.zeros_like()
    for step in range(5):
        lr = 1e-2 * (step + 1) / 5  # a changing learning rate, as the schedule gives
        grads.flat[:] = rng.standard_normal(grads.flat.size)
        opt.update(params, grads, lr)
        for group in ref.param_groups:
            group["lr"] = lr
        w.grad, g.grad = (
            torch.tensor(grads["w"].astype(np.float64)),
            torch.tensor(grads["g"].astype(np.float64)),
        )
        ref.step()
    # fp32 against float64: five updates of size ~lr agree to fp32 rounding
    np.testing.assert_allclose(params["w"], w.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(params["g"], g.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert opt.t == 5


def test_schedule_warms_up_then_decays_to_min_lr() -> None:
    cfg = TrainConfig(steps=110, warmup=10, lr=1e-3, min_lr=1e-4)
    assert learning_rate(0, cfg) == pytest.approx(1e-4)
    assert learning_rate(9, cfg) == pytest.approx(1e-3)
    assert learning_rate(10, cfg) == pytest.approx(1e-3)
    assert learning_rate(60, cfg) == pytest.approx(0.5 * (1e-3 + 1e-4))
    assert learning_rate(110, cfg) == pytest.approx(1e-4)
    assert learning_rate(500, cfg) == pytest.approx(1e-4)
    lrs = [learning_rate(s, cfg) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_clip_scales_to_the_limit_and_reports_the_norm_before() -> None:
    grads = small_params()
    grads.flat[:] = 1.0
    norm = clip_grad_norm(grads, 2.0)
    assert norm == pytest.approx(4.0)  # sqrt(16 ones)
    assert float(np.linalg.norm(grads.flat)) == pytest.approx(2.0, rel=1e-5)
    assert clip_grad_norm(grads, 0) == pytest.approx(2.0, rel=1e-5)  # 0: no clipping


def test_loss_scaler_halves_on_overflow_and_grows_after_a_run() -> None:
    s = LossScaler(256.0, growth_interval=3)
    assert not s.update(finite=False) and s.scale == 128.0
    assert all(s.update(finite=True) for _ in range(2)) and s.scale == 128.0
    assert s.update(finite=True) and s.scale == 256.0 and s.good_steps == 0
    for _ in range(20):
        s.update(finite=False)
    assert s.scale == 1.0  # never below 1


def test_params_views_share_one_buffer_and_decay_comes_first() -> None:
    p = small_params()
    p["w"] += 1.0
    assert p.flat[:12].sum() == 12 and p.flat[12:].sum() == 0
    assert p.n_decay == 12
    with pytest.raises(ValueError, match="before those without"):
        Params([ParamSpec("g", (2,), False, 0.0), ParamSpec("w", (2, 2), True, 0.02)])
    assert math.prod(p["w"].shape) == 12
