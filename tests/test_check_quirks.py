"""Checker rules for the numerics catalogue rows that are compiler or engine bugs (N6, N15,
N17): each fires on the program pattern its source describes and stays silent on the
neighbouring patterns the source found correct."""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.hw.compat import check
from anekit.mil.program import Program


def hits(program: Program, rule: str, chip: str = "m4") -> list:
    return [d for d in check(program, chip) if d.rule == rule]


# -- N6: floor/ceil/round + scalar multiply; muls(0) after a reduce ------------------------------
SCALE = np.float16(-1.206)  # issue #112's reproducer


def rounded_then(op: str, first: str = "floor", scale=SCALE, swap: bool = False):
    b = mil.Builder()
    x = b.input("x", (1, 4), "fp16")
    r = b.add_op(first, {"x": x})
    operands = {"x": scale, "y": r} if swap else {"x": r, "y": scale}
    b.output(b.add_op(op, operands), "y")
    return b.build()


@pytest.mark.parametrize("first", ["floor", "ceil", "round"])
@pytest.mark.parametrize("swap", [False, True])
def test_fused_scale_dropped_fires_on_a_scalar_multiply_after_rounding(first, swap):
    found = hits(rounded_then("mul", first, swap=swap), "fused-scale-dropped")
    assert len(found) == 1 and found[0].op == "mul" and first in found[0].message
    assert "scalar -1.20" in found[0].message
    assert "N6" in found[0].source and "#112" in found[0].source


def test_fused_scale_dropped_is_silent_where_the_source_found_it_correct():
    assert not hits(rounded_then("add"), "fused-scale-dropped")  # an add lands in the offset slot
    assert not hits(rounded_then("mul", "abs"), "fused-scale-dropped")  # abs, relu honour the gain
    assert not hits(rounded_then("mul", "relu"), "fused-scale-dropped")
    full = np.full((1, 4), -1.206, np.float16)  # a full-shape constant blocks the fold
    assert not hits(rounded_then("mul", scale=full), "fused-scale-dropped")
    b = mil.Builder()  # a runtime multiplier is no scalar the compiler can fold
    x, s = b.input("x", (1, 4), "fp16"), b.input("s", (1, 1), "fp16")
    b.output(b.add_op("mul", {"x": b.add_op("floor", {"x": x}), "y": s}), "y")
    assert not hits(b.build(), "fused-scale-dropped")


def reduced_times(scale, reduce: str = "reduce_max") -> Program:
    b = mil.Builder()
    x = b.input("x", (1, 8), "fp16")
    r = b.add_op(reduce, {"x": x, "axes": np.array([-1], np.int32), "keep_dims": True})
    b.output(b.add_op("mul", {"x": r, "y": scale}), "y")
    return b.build()


def test_zero_scale_after_reduce_fires_on_mul_by_scalar_zero_only():
    for reduce in ("reduce_max", "reduce_sum", "reduce_mean"):
        found = hits(reduced_times(np.float16(0.0), reduce), "zero-scale-after-reduce")
        assert len(found) == 1 and "sub(x, x)" in found[0].message and reduce in found[0].message
    assert not hits(reduced_times(np.float16(2.0)), "zero-scale-after-reduce")
    assert not hits(rounded_then("mul", "relu", scale=np.float16(0.0)), "zero-scale-after-reduce")


# -- N15: fused attention's reliability window ---------------------------------------------------
def attention(length: int, keys: int, mask_heads: int | None = None) -> Program:
    b = mil.Builder()
    q = b.input("q", (1, 2, length, 8), "fp16")
    k = b.input("k", (1, 2, keys, 8), "fp16")
    params = {"query": q, "key": k, "value": k}
    if mask_heads is not None:
        mask = np.broadcast_to(np.float16(0), (1, mask_heads, length, keys))
        params["attn_mask"] = b.weight("m", mask)
    b.output(b.add_op("scaled_dot_product_attention", params), "y")
    return b.build()


def test_sdpa_window_errors_above_2048_keys():
    found = hits(attention(4, 4096), "sdpa-window")
    assert len(found) == 1 and found[0].severity == "error" and "4096 keys" in found[0].message
    assert not hits(attention(4, 2048), "sdpa-window")  # ~3e-3 up to 2048


def test_sdpa_window_warns_when_both_lengths_reach_512():
    found = hits(attention(512, 512), "sdpa-window")
    assert len(found) == 1 and found[0].severity == "warning" and "0.67" in found[0].message
    assert not hits(attention(511, 2048), "sdpa-window")
    assert not hits(attention(2048, 511), "sdpa-window")


def test_sdpa_window_names_a_per_head_mask():
    found = hits(attention(8, 8, mask_heads=2), "sdpa-window")
    assert len(found) == 1 and "per-head mask (2 planes)" in found[0].message
    assert not hits(attention(8, 8, mask_heads=1), "sdpa-window")


# -- N17: per-block integer weights ---------------------------------------------------------------
def blockwise(scale_shape: tuple[int, ...], dtype=np.int8) -> Program:
    b = mil.Builder()
    x = b.input("x", (1, 64), "fp16")
    w = b.add_op(
        "constexpr_blockwise_shift_scale",
        {
            "data": np.ones((16, 64), dtype),
            "scale": np.full(scale_shape, 0.5, np.float16),
        },
    )
    b.output(b.add_op("linear", {"x": x, "weight": w}), "y")
    return b.build()


def test_blockwise_int_fires_on_blocks_along_an_axis():
    found = hits(blockwise((16, 2)), "blockwise-int")  # blocks of 32 along the input axis
    assert len(found) == 1 and "blocks of 32 along axis 1" in found[0].message
    assert "int8" in found[0].message and "#279" in found[0].source
    assert hits(blockwise((16, 4), np.uint8), "blockwise-int")


def test_blockwise_int_is_silent_per_channel_per_tensor_and_for_float_data():
    assert not hits(blockwise((16, 1)), "blockwise-int")  # per output channel
    assert not hits(blockwise((1, 1)), "blockwise-int")  # per tensor
    assert not hits(blockwise((16, 2), np.float16), "blockwise-int")  # not integer weights
