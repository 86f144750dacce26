"""The ANE rewrite passes on hand-built MIL programs: each is output-equivalent on the reference
backend (exactly where it only moves or folds values, within fp16 rounding where it changes
the dtype or the op), and does the rewrite it claims."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit import passes as P
from anekit.errors import ConversionError
from anekit.hw import get_chip
from anekit.hw.numerics import MASK_MIN

RNG = np.random.default_rng(11)
M4 = get_chip("m4")


def run(prog: mil.Program, **inputs: np.ndarray) -> dict[str, np.ndarray]:
    with anekit.compile(prog, backend="reference") as k:
        return {k_: v.astype(np.float32) for k_, v in k(**inputs).items()}


def op_types(prog: mil.Program) -> list[str]:
    return [op.op_type for op in prog.main.ops if op.op_type != "const"]


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_fold_constants_is_exact_and_removes_constant_ops() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 6), "fp16")
    c = b.mul(x=b.const(np.arange(12, dtype=np.float16).reshape(3, 4)), y=np.float16(0.5))
    c = b.reshape(x=b.transpose(x=c, perm=[1, 0]), shape=[1, 12])
    half = b.slice_by_size(x=c, begin=[0, 0], size=[1, 6])
    b.output(b.add(x=x, y=half), "y")
    prog = b.build()
    folded = P.fold_constants(prog, M4)
    assert op_types(folded) == ["add"]
    x_in = RNG.standard_normal((2, 6)).astype(np.float16)
    np.testing.assert_array_equal(run(folded, x=x_in)["y"], run(prog, x=x_in)["y"])


def _attention_with(mask: np.ndarray) -> mil.Program:
    b = mil.Builder()
    s = b.input("scores", (2, 4, 4), "fp32")
    masked = b.add(x=s, y=b.const(mask))
    other = b.maximum(x=s, y=b.const(np.full((4,), -np.inf, np.float32)))  # no mask: untouched
    b.output(b.softmax(x=masked, axis=-1), "p")
    b.output(other, "m")
    return b.build()


def test_finite_masks_makes_softmax_masks_finite_and_keeps_the_result() -> None:
    mask = np.triu(np.full((4, 4), -np.inf, np.float32), 1)
    mask[0, 3] = np.finfo(np.float32).min  # transformers' masks use the dtype's minimum
    prog = _attention_with(mask)
    new = P.finite_masks(prog, M4)
    consts = {
        op.name: np.asarray(op.outputs[0].const) for op in new.main.ops if op.op_type == "const"
    }
    masks = [c for c in consts.values() if c.shape == (4, 4)]
    assert len(masks) == 1 and masks[0].min() == MASK_MIN and np.isfinite(masks[0]).all()
    assert any(c.shape == (4,) and np.isneginf(c).all() for c in consts.values())
    scores = RNG.standard_normal((2, 4, 4)).astype(np.float32)
    before, after = run(prog, scores=scores), run(new, scores=scores)
    np.testing.assert_array_equal(after["p"], before["p"])
    np.testing.assert_array_equal(after["m"], before["m"])


def test_fp16_pass_within_rounding_and_keeps_a_tiny_norm_epsilon() -> None:
    b = mil.Builder()
    x = b.input("x", (3, 16), "fp32")
    h = b.mul(x=x, y=b.weight("w", RNG.standard_normal(16).astype(np.float32)))
    h = b.layer_norm(x=h, axes=[1], gamma=np.ones(16, np.float32), epsilon=np.float32(1e-12))
    b.output(b.cast(x=b.add(x=h, y=np.float32(1.0)), dtype="fp32"), "y")
    prog = b.build()
    new = P.fp16(prog, M4)
    assert new.main.inputs[0].dtype is mil.DType.fp16
    assert new.main.outputs[0].dtype is mil.DType.fp16
    assert "cast" not in op_types(new)  # the fp32 -> fp32 cast became fp16 -> fp16: gone
    norm = next(op for op in new.main.ops if op.op_type == "layer_norm")
    assert norm.inputs["epsilon"].dtype is mil.DType.fp32  # 1e-12 would flush: kept fp32
    assert float(norm.inputs["epsilon"].const) == pytest.approx(1e-12)
    x_in = RNG.standard_normal((3, 16)).astype(np.float32)
    assert rel(run(new, x=x_in)["y"], run(prog, x=x_in)["y"]) < 2e-3


@pytest.mark.parametrize(
    "value,message", [(1e6, "overflows fp16"), (1e-9, "flushes to zero")]
)  # fmt: skip
def test_fp16_pass_refuses_lossy_constants(value: float, message: str) -> None:
    b = mil.Builder()
    x = b.input("x", (4,), "fp32")
    b.output(b.mul(x=x, y=b.const(np.full(4, value, np.float32), name="scale")), "y")
    with pytest.raises(ConversionError, match=message) as err:
        P.fp16(b.build(), M4)
    assert "'scale'" in str(err.value) and "mul" in str(err.value)


def test_fp16_pass_allows_values_below_fp16_rounding_of_the_largest() -> None:
    """A weight tensor whose tiny entries flush loses nothing fp16 could have kept."""
    b = mil.Builder()
    x = b.input("x", (4,), "fp32")
    b.output(b.mul(x=x, y=b.const(np.array([1.0, 1e-9, -2.0, 0.5], np.float32))), "y")
    new = P.fp16(b.build(), M4)
    assert new.main.inputs[0].dtype is mil.DType.fp16


def _embedding(rows: int, dtype: str = "fp16") -> tuple[mil.Program, np.ndarray]:
    b = mil.Builder()
    ids = b.input("ids", (1, 7), "int32")
    table = RNG.standard_normal((rows, 5)).astype(mil.DType(dtype).numpy)
    b.output(b.gather(x=b.weight("table", table), indices=ids, axis=0), "e")
    return b.build(), table


def test_gather_to_matmul_is_exact_in_vocabulary_chunks() -> None:
    prog, table = _embedding(23)
    small = dataclasses.replace(M4, max_input_channels=10)  # 23 rows: chunks 10, 10, 3
    new = P.gather_to_matmul(prog, small)
    ops = op_types(new)
    assert "gather" not in ops and ops.count("matmul") == 3
    ids = RNG.integers(0, 23, (1, 7)).astype(np.int32)
    np.testing.assert_array_equal(run(new, ids=ids)["e"], table[ids].astype(np.float32))
    np.testing.assert_array_equal(run(new, ids=ids)["e"], run(prog, ids=ids)["e"])


def test_ane_layout_convs_in_channel_token_layout_with_transposes_only_at_the_edges() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 6, 16), "fp16")
    w1 = RNG.standard_normal((32, 16)).astype(np.float16) * np.float16(0.25)
    w2 = RNG.standard_normal((32, 16)).astype(np.float16) * np.float16(0.25)
    h = b.gelu(x=b.linear(x=x, weight=b.weight("w1", w1), bias=np.zeros(32, np.float16)))
    h = b.matmul(x=h, y=b.weight("w2", w2))  # [1, 6, 32] @ [32, 16]
    h = b.add(x=h, y=x)  # residual: x moves to [1, C, 1, S] once and is shared
    scale = b.pow(x=b.add(x=b.reduce_mean(x=b.mul(x=h, y=h), axes=[-1], keep_dims=True), y=np.float16(1e-5)), y=np.float16(-0.5))  # fmt: skip
    h = b.layer_norm(x=b.mul(x=h, y=scale), axes=[-1], epsilon=np.float16(1e-5))
    b.output(b.softmax(x=h, axis=-1), "y")
    prog = b.build()
    new = P.ane_layout(prog, M4)
    ops = op_types(new)
    assert ops.count("conv") == 2 and "linear" not in ops and "matmul" not in ops
    assert ops.count("transpose") == 2  # in once (x), out once (y)
    for op in new.main.ops:
        if op.op_type == "conv":
            assert op.outputs[0].shape == (1, 32 if op.outputs[0].shape[1] == 32 else 16, 1, 6)
    x_in = RNG.standard_normal((1, 6, 16)).astype(np.float16)
    got, want = run(new, x=x_in)["y"], run(prog, x=x_in)["y"]
    assert got.shape == want.shape == (1, 6, 16)
    assert rel(got, want) < 2e-3  # same math; fp16 rounding of reordered sums


def test_split_wide_splits_channels_and_rejoins() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 12, 1, 5), "fp16")
    w = RNG.standard_normal((10, 12, 1, 1)).astype(np.float16) * np.float16(0.3)
    bias = RNG.standard_normal(10).astype(np.float16)
    b.output(b.conv(x=x, weight=b.weight("w", w), bias=b.weight("bias", bias)), "y")
    prog = b.build()
    chip = dataclasses.replace(M4, max_dim_channel=4, max_input_channels=5)
    new = P.split_wide(prog, chip)
    convs = [op for op in new.main.ops if op.op_type == "conv"]
    assert len(convs) == 3 * 3  # output channels 4+4+2, input channels 5+5+2
    assert all(op.outputs[0].shape[1] <= 4 and op.inputs["x"].shape[1] <= 5 for op in convs)
    x_in = RNG.standard_normal((1, 12, 1, 5)).astype(np.float16)
    assert rel(run(new, x=x_in)["y"], run(prog, x=x_in)["y"]) < 2e-3


def test_default_passes_are_visible_and_can_be_switched_off() -> None:
    names = [p.name for p in P.CONVERT_PASSES]
    assert names == [
        "fold_constants",
        "finite_masks",
        "stable_forms",
        "fp16",
        "gather_to_matmul",
        "ane_layout",
        "split_wide",
        "bool_logic",
        "expand_attention",
        "pad_contractions",
        "legacy_dialect",
    ]
    prog, _ = _embedding(9, "fp32")
    assert P.convert(prog, passes=()) is prog
    only = P.convert(prog, passes=["fp16"])
    assert "gather" in op_types(only) and only.main.outputs[0].dtype is mil.DType.fp16
    with pytest.raises(ConversionError, match="unknown pass 'nope'"):
        P.convert(prog, passes=["nope"])
