"""Packing and Layout: CPU writes and in-program slices agree, folds included."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.mil.builder import Builder
from anekit.nn.packing import Layout, Packing


def packed_round_trip(
    pk: Packing, arrays: dict[str, np.ndarray], names: list[str]
) -> dict[str, np.ndarray]:
    """Pack on the CPU, slice the fields out inside a program, return what the program sees."""
    b = Builder()
    x = b.input("x", pk.shape, "fp16")
    for name, v in pk.unpack(b, x, names).items():
        b.output(b.identity(x=v), f"out_{name}")
    with anekit.compile(b.build(), backend="reference") as k:
        return k(x=pk.pack(**arrays))


def test_direct_and_folded_fields_come_back_unchanged() -> None:
    rng = np.random.default_rng(0)
    pk = Packing(6, [("x", 6, 5), ("g", 6, 1), ("tap", 10, 9), ("odd", 7, 4)])
    assert pk.fields["tap"].folded and pk.fields["tap"].block == 6  # 90 elements = 6 x 15
    assert pk.fields["odd"].block == 4  # 28 elements: largest divisor <= 6 is 4
    arrays = {
        n: rng.standard_normal((f.rows, f.cols)).astype(np.float16) for n, f in pk.fields.items()
    }
    got = packed_round_trip(pk, arrays, list(arrays))
    for name, a in arrays.items():
        assert np.array_equal(got[f"out_{name}"].reshape(a.shape), a), name
        assert np.array_equal(pk.read(pk.pack(**arrays), name), a)
    assert pk.width == 5 + 1 + 15 + 7


def test_span_covers_adjacent_fields() -> None:
    pk = Packing(4, [("a", 4, 2), ("b", 4, 3), ("t", 2, 4)])
    arrays = {"a": np.ones((4, 2), np.float16), "b": np.full((4, 3), 2, np.float16)}
    b = Builder()
    x = b.input("x", pk.shape, "fp16")
    b.output(pk.span(b, x, ["a", "b"]), "ab")
    with anekit.compile(b.build(), backend="reference") as k:
        ab = k(x=pk.pack(**arrays))["ab"][0, 0]
    assert np.array_equal(ab, np.concatenate([arrays["a"], arrays["b"]], axis=1))
    with pytest.raises(ValueError, match="not adjacent"):
        pk.span(Builder(), x, ["a", "t"])


def test_packing_errors_name_the_field() -> None:
    pk = Packing(4, [("w", 4, 3)])
    with pytest.raises(ValueError, match=r"'w': expected shape \[4, 3\], found \[3, 4\]"):
        pk.write(pk.empty(), "w", np.zeros((3, 4)))
    with pytest.raises(KeyError, match="no packing field 'v'"):
        pk.write(pk.empty(), "v", np.zeros((4, 3)))
    with pytest.raises(ValueError, match="declared twice"):
        Packing(4, [("w", 4, 1), ("w", 4, 1)])


def test_fp32_values_beyond_fp16_become_inf() -> None:
    pk = Packing(2, [("w", 2, 1)])
    buf = pk.pack(w=np.array([[1e6], [-1e6]], np.float32))
    assert np.isposinf(buf[0, 0, 0, 0]) and np.isneginf(buf[0, 0, 1, 0])


def test_layout_concat_and_split() -> None:
    out = Layout(3, [("a", 2), ("b", 1)])
    b = Builder()
    a = b.input("a", (1, 1, 2, 3), "fp16")
    c = b.input("c", (1, 1, 1, 3), "fp16")
    b.output(out.concat(b, {"a": a, "b": c}, "y"))
    va, vc = (
        np.arange(6, dtype=np.float16).reshape(1, 1, 2, 3),
        np.full((1, 1, 1, 3), 9, np.float16),
    )
    with anekit.compile(b.build(), backend="reference") as k:
        parts = out.split(k(a=va, c=vc)["y"])
    assert np.array_equal(parts["a"], va[0, 0]) and np.array_equal(parts["b"], vc[0, 0])
    with pytest.raises(ValueError, match="in order"):
        out.concat(b, {"b": c, "a": a}, "z")
