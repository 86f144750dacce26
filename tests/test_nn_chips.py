"""Kernels made for a chip pass its checker: padded where zeros change nothing, refused otherwise.

M1's matmul inner dimension must be a multiple of 32 (ANE_NOTES 2.4). The attention kernels
contract over head_dim (stories15m: 48); made for m1 they zero-pad it inside the kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.errors import UsageError
from anekit.hw import check
from anekit.nn import BlockShape, block_kernels

S48 = BlockShape(
    n_layers=1, vocab_size=2, dim=96, n_heads=2, n_kv_heads=2, head_dim=48, hidden_dim=64, seq=32
)


def errors(kernels, chip: str) -> dict[str, set[str]]:
    return {
        name: {d.rule for d in check(kd.program, chip) if d.severity == "error"}
        for name, kd in kernels.items()
    }


def test_m1_kernels_pad_head_dim_and_pass_the_checker() -> None:
    plain = errors(block_kernels(S48), "m1")
    assert plain["attention_forward"] == {"m1-matmul-k"}  # what the padding fixes
    assert plain["attention_backward"] == {"m1-matmul-k"}
    made = block_kernels(S48, chip="m1")
    assert all(not found for found in errors(made, "m1").values())
    # the layouts the CPU packs and splits are the same
    for name, kd in block_kernels(S48).items():
        assert made[name].input.shape == kd.input.shape
        assert made[name].output.channels == kd.output.channels


def test_stories15m_kernels_pass_the_m1_checker() -> None:
    from anekit.train.config import get_config

    shape = get_config("stories15m").model.block(4)  # head_dim 48
    assert all(not found for found in errors(block_kernels(shape, chip="m1"), "m1").values())


@pytest.mark.parametrize("name", ["attention_forward", "attention_backward"])
def test_padded_kernels_compute_what_the_plain_ones_do(name: str) -> None:
    plain = block_kernels(S48, (name,))[name]
    padded = block_kernels(S48, (name,), chip="m1")[name]
    assert padded.program.to_text() != plain.program.to_text()
    x = (np.random.default_rng(0).standard_normal(plain.input.shape) * 0.5).astype(np.float16)
    with anekit.compile(plain.program, backend="reference") as k:
        want = k(x=x)["y"].astype(np.float32)
    with anekit.compile(padded.program, backend="reference") as k:
        got = k(x=x)["y"].astype(np.float32)
    # zeros add nothing to a sum; only the fp32 summation order may differ
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_a_shape_the_chip_rejects_is_refused_before_compiling(monkeypatch) -> None:
    from anekit import backends
    from anekit.train.config import ModelConfig
    from anekit.train.model import Model

    odd = BlockShape(
        n_layers=1,
        vocab_size=2,
        dim=40,
        n_heads=1,
        n_kv_heads=1,
        head_dim=40,
        hidden_dim=64,
        seq=32,
    )
    with pytest.raises(UsageError, match=r"kernel attention_forward for dim 40.*m1-matmul-k"):
        block_kernels(odd, chip="m1")
    assert block_kernels(odd, chip="m4")  # M4 has no such rule

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled a kernel the checker rejects")

    monkeypatch.setattr(backends, "compile", no_compile)
    cfg = ModelConfig(
        name="odd", dim=40, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=40, hidden_dim=64,
        vocab_size=16, seq_len=32,
    )  # fmt: skip
    with pytest.raises(UsageError, match="cannot run on m1"):
        Model(cfg, 1, "reference", chip="m1")


def test_the_trainer_makes_its_kernels_for_its_chip() -> None:
    from anekit.train.config import ModelConfig, TrainConfig
    from anekit.train.loop import Trainer

    cfg = ModelConfig(
        name="odd", dim=40, n_layers=1, n_heads=1, n_kv_heads=1, head_dim=40, hidden_dim=64,
        vocab_size=16, seq_len=32,
    )  # fmt: skip
    tokens = np.arange(200, dtype=np.uint16) % 16
    with pytest.raises(UsageError, match="cannot run on m1"):
        Trainer(cfg, TrainConfig(steps=1, batch_size=1), tokens, "reference", chip="m1")
    trainer = Trainer(cfg, TrainConfig(steps=1, batch_size=1), tokens, "reference", chip="m4")
    try:
        assert trainer.model.chip == "m4"
    finally:
        trainer.close()
