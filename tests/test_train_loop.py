"""The training loop on ``tiny``: the loss falls, and a resumed run repeats an uninterrupted one exactly."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors")

from anekit.train.config import get_config  # noqa: E402
from anekit.train.data import default_corpus  # noqa: E402
from anekit.train.loop import Trainer  # noqa: E402

TINY = get_config("tiny")


def test_loss_falls_by_a_quarter_within_60_steps() -> None:
    trainer = Trainer(TINY.model, TINY.train, default_corpus(), backend="reference")
    try:
        losses = [trainer.train_step().loss for _ in range(60)]
    finally:
        trainer.close()
    # ln(256) = 5.55 at the start; the corpus' byte unigram entropy alone is below 3.5 nats
    assert losses[0] == pytest.approx(np.log(256), abs=0.2)
    assert np.mean(losses[-5:]) < 0.75 * losses[0]


def test_resumed_run_repeats_the_uninterrupted_losses_exactly(tmp_path: Path) -> None:
    cfg = dataclasses.replace(TINY.train, steps=4, batch_size=1, warmup=2, grad_accum=2)
    tokens = default_corpus()

    def run(trainer: Trainer, steps: int) -> list[float]:
        return [trainer.train_step().loss for _ in range(steps)]

    whole = Trainer(TINY.model, cfg, tokens, backend="reference")
    expected = run(whole, 4)
    final = whole.params.flat.copy()
    whole.close()

    first = Trainer(TINY.model, cfg, tokens, backend="reference")
    losses = run(first, 2)
    first.save(tmp_path)
    first.close()
    second = Trainer(TINY.model, dataclasses.replace(cfg, seed=99), tokens, backend="reference")
    second.restore(tmp_path)  # the checkpoint's weights, RNG and data order win over the new seed
    losses += run(second, 2)
    assert losses == expected
    assert np.array_equal(second.params.flat, final)
    second.close()


@pytest.mark.ane
def test_tiny_trains_on_the_ane() -> None:
    trainer = Trainer(TINY.model, TINY.train, default_corpus(), backend="ane")
    try:
        losses = [trainer.train_step().loss for _ in range(30)]
    finally:
        trainer.close()
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < 0.8 * losses[0]
