"""The garbage guard reads the golden model's cliff events per program run (issues 23, 25).

One block kernel serves every layer, so its ``events`` after a step describe only the last
layer: the runners keep each run's events, and the guard names the first layer and op
where values were saturated or replaced. The model below saturates one MLP gate unit of
layer 1 (about 45000 > 32752, N1) whose up projection is zero: the engine's inf times 0
is replaced, the stream stays finite and the logits look fine, so only the events tell.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from anekit.errors import GarbageValues
from anekit.llm.guard import GarbageWarning, check_cliffs
from tests.test_garbage_guard import _arrays, _model


def _saturating() -> dict[str, np.ndarray]:
    arrays = _arrays()
    arrays["model.embed_tokens.weight"][:, 3] = 1000.0  # xn[3] ~ sqrt(32) in every token
    arrays["model.layers.1.post_attention_layernorm.weight"][3] = 1.0
    gate = arrays["model.layers.1.mlp.gate_proj.weight"]
    gate[0] = 0.0
    gate[0, 3] = 8000.0  # ~45000: above the matmul cliff, inside fp16
    arrays["model.layers.1.mlp.up_proj.weight"][0] = 0.0
    return arrays


@pytest.mark.parametrize("compress", [None, "fp16"])
def test_cliff_events_warn_once_naming_the_layer_and_op(compress) -> None:
    where = "layer 1" if compress is None else "layers 0-2 (one segment program)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _model(_saturating(), numerics="m4", compress=compress) as m:
            logits = m.logits([1, 5, 7])
            m.generate([1, 5, 7], 2, stop=())
            last = m.runner.kernels()[0].events  # the kernel's own: its last run only
    assert np.isfinite(logits).all()
    messages = [str(w.message) for w in caught if issubclass(w.category, GarbageWarning)]
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"{where}: under numerics 'm4'")
    assert "positions 0-2" in messages[0] and "'h13" in messages[0] and "saturated" in messages[0]
    if compress is None:
        assert last.saturated == 0  # layer 2 ran last: the kernel alone would not tell


@pytest.mark.parametrize("compress", [None, "fp16"])
def test_strict_raises_naming_the_position_layer_and_op(compress) -> None:
    with _model(_saturating(), numerics="m4", compress=compress, strict=True) as m:
        with pytest.raises(GarbageValues) as caught:
            m.logits([1, 5, 7])
    error = caught.value
    assert error.position == 0
    layer = "layer 1" if compress is None else "layers 0-2 (one segment program)"
    assert error.where.startswith(f"{layer}, op 'h13")
    assert "matmul" in str(error) and "saturated to inf" in str(error)


@pytest.mark.parametrize("strict", [False, True])
def test_under_ideal_there_are_no_events_and_nothing_is_said(strict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", GarbageWarning)
        with _model(_saturating(), numerics="ideal", strict=strict) as m:
            assert np.isfinite(m.logits([1, 5, 7])).all()  # IEEE fp16 holds 45000
            assert not m.runner.kernels()[0].events


def test_a_healthy_model_has_no_cliff_warning_on_the_default_profile() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", GarbageWarning)
        with _model(_arrays(), strict=True) as m:  # flushed subnormals are routine: ignored
            assert len(m.generate([1, 5, 7], 4, stop=())) == 4


def test_check_cliffs_without_events_and_at_the_head() -> None:
    from anekit.backends.reference.device import CliffEvents, CliffRow

    flushed = CliffEvents("m4", (CliffRow("xn", "real_div", 3, 0, 5, 0),))
    replaced = CliffEvents("m4", (CliffRow("logits0", "matmul", 9, 0, 0, 2),))
    assert check_cliffs([(range(0, 1), flushed)], None, start=4, tokens=1, strict=True) is None
    with pytest.raises(GarbageValues, match="position 4, the output head, op 'logits0'"):
        check_cliffs([(range(0, 1), flushed)], replaced, start=4, tokens=1, strict=True)
    message = check_cliffs([], replaced, start=4, tokens=1, strict=False)
    assert message is not None and "position 4:" in message and "replaced" in message
