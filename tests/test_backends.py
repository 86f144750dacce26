"""The Kernel API and backend selection, on the reference backend."""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends import reference, resolve_backend
from anekit.errors import AnekitError, BackendUnavailable
from tests.examples import SECTION_3_EXAMPLE
from tests.test_mil_text import add_weight_program

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics


def fp16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float64)


def test_ane_notes_section_3_example_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((128, 64, 1, 1)) * 0.1).astype(np.float16)
    program = mil.parse(
        SECTION_3_EXAMPLE, {"@model_path/weights/weight.bin": mil.blob.write_blob_file([w])}
    )
    assert program.to_text() == SECTION_3_EXAMPLE  # the documented text is our printer's output
    x = rng.standard_normal((1, 64, 1, 32)).astype(np.float16)
    with anekit.compile(program, backend="reference") as k:
        y = k(x=x)["y"]
    # a 1x1 conv is a matrix product over channels, accumulated wider than fp16
    expected = np.einsum(
        "oi,is->os", w[:, :, 0, 0].astype(np.float64), x[0, :, 0, :].astype(np.float64)
    )
    assert y.dtype == np.float16 and y.shape == (1, 128, 1, 32)
    np.testing.assert_allclose(
        y[0, :, 0, :].astype(np.float64), fp16(expected), rtol=2e-3, atol=2e-3
    )


def causal_attention(heads: int = 2, seq: int = 8, dim: int = 4) -> mil.Program:
    b = mil.Builder()
    q = b.input("q", (1, heads, seq, dim), "fp16")
    k = b.input("k", (1, heads, seq, dim), "fp16")
    v = b.input("v", (1, heads, seq, dim), "fp16")
    mask = np.triu(np.full((seq, seq), -1e4, np.float16), 1).reshape(1, 1, seq, seq)
    scores = b.matmul(x=q, y=k, transpose_y=True)
    scores = b.add(x=b.mul(x=scores, y=1 / np.sqrt(dim)), y=b.const(mask, name="mask"))
    b.output(b.matmul(x=b.softmax(x=scores, axis=-1), y=v), "o")
    return b.build()


def test_causal_attention_with_additive_mask_matches_numpy() -> None:
    rng = np.random.default_rng(5)
    inputs = {n: rng.standard_normal((1, 2, 8, 4)).astype(np.float16) for n in "qkv"}
    with anekit.compile(causal_attention(), backend="reference") as kernel:
        o = kernel(**inputs)["o"].astype(np.float64)
    q, k, v = (inputs[n].astype(np.float64)[0] for n in "qkv")
    s = q @ k.transpose(0, 2, 1) / 2.0
    s[:, np.triu_indices(8, 1)[0], np.triu_indices(8, 1)[1]] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(o[0], p @ v, rtol=1e-2, atol=5e-3)
    # causality: the first position attends only to itself
    np.testing.assert_allclose(o[0, :, 0, :], v[:, 0, :], rtol=1e-3, atol=1e-3)


def simple() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (2, 3), "fp16")
    n = b.input("n", (3,), "int32")
    b.output(b.mul(x=x, y=2.0), "y")
    b.output(b.add(x=n, y=1), "m")
    return b.build()


def test_kernel_describes_inputs_and_outputs() -> None:
    with anekit.compile(simple(), backend="reference") as k:
        assert [(s.name, s.shape, str(s.dtype)) for s in k.inputs] == [
            ("x", (2, 3), "fp16"),
            ("n", (3,), "int32"),
        ]
        assert [s.name for s in k.outputs] == ["y", "m"]
        assert k.backend == "reference"


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"x": np.zeros((2, 3))}, r"missing \['n'\]"),
        ({"x": np.zeros((2, 3)), "n": np.zeros(3, np.int32), "z": 1}, r"unknown \['z'\]"),
        ({"x": np.zeros((3, 2)), "n": np.zeros(3, np.int32)}, r"'x': expected shape \[2, 3\]"),
        ({"x": np.zeros((1, 2, 3)), "n": np.zeros(3, np.int32)}, "rank 3"),
        ({"x": np.zeros((2, 3)), "n": np.array([0.5, 1, 2])}, "'n': expected int32, found float64"),
        (
            {"x": np.zeros((2, 3)), "n": np.array([2**40, 0, 0])},
            r"'n': value 1099511627776 at index \[0\] does not fit int32",
        ),
        (
            {"x": np.full((2, 3), 2049), "n": np.zeros(3, np.int32)},
            r"'x': value 2049 at index \[0, 0\] does not fit fp16",
        ),
    ],
)
def test_inputs_are_validated(inputs: dict, message: str) -> None:
    with (
        anekit.compile(simple(), backend="reference") as k,
        pytest.raises(ValueError, match=message),
    ):
        k(**inputs)


def test_float_inputs_convert_to_the_declared_dtype() -> None:
    with anekit.compile(simple(), backend="reference") as k:
        out = k(x=np.full((2, 3), 0.1), n=np.arange(3, dtype=np.int64))
    assert out["y"].dtype == np.float16
    assert out["y"][0, 0] == np.float16(np.float16(0.1) * 2)
    assert out["m"].tolist() == [1, 2, 3]


def test_buffers_run_in_place_and_submit_runs_many() -> None:
    with anekit.compile(simple(), backend="reference") as k:
        k.input_buffer("x")[:] = 1.5
        k.input_buffer("n")[:] = [4, 5, 6]
        k.run()
        assert k.output_buffer("y").tolist() == [[3.0] * 3] * 2
        assert k.output_buffer("m").tolist() == [5, 6, 7]
        futures = [k.submit(x=np.full((2, 3), i), n=np.arange(3)) for i in range(64)]
        results = [f.result() for f in futures]
        assert [r["y"][0, 0] for r in results] == [2.0 * i for i in range(64)]
        with pytest.raises(KeyError, match="no input 'bogus'"):
            k.input_buffer("bogus")
    with pytest.raises(AnekitError, match="closed"):
        k(x=np.zeros((2, 3)), n=np.zeros(3, np.int32))


def test_fp16_storage_overflows_to_inf_and_propagates_nan() -> None:
    b = mil.Builder()
    x = b.input("x", (3,), "fp16")
    b.output(b.mul(x=x, y=1000.0), "y")
    with anekit.compile(b.build(), backend="reference") as k:
        y = k(x=np.array([100.0, np.nan, -100.0]))["y"]
    assert np.isposinf(y[0]) and np.isnan(y[1]) and np.isneginf(y[2])


def test_backend_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANEKIT_BACKEND", raising=False)
    ane_ok = anekit.backends._module("ane").available()[0]
    assert resolve_backend() == ("ane" if ane_ok else "reference")
    monkeypatch.setenv("ANEKIT_BACKEND", "reference")
    assert resolve_backend() == "reference"
    assert anekit.compile(simple()).backend == "reference"
    monkeypatch.setenv("ANEKIT_BACKEND", "gpu")
    with pytest.raises(
        BackendUnavailable, match="unknown backend 'gpu'.*available here: .*reference"
    ):
        anekit.compile(simple())
    if not ane_ok:
        with pytest.raises(BackendUnavailable, match="backend 'ane' is unavailable: .*macOS"):
            anekit.compile(simple(), backend="ane")


def test_compile_takes_only_programs() -> None:
    with pytest.raises(TypeError, match="mil.Program"):
        anekit.compile("model.mil")


def test_fp32_storage_rounds_only_the_outputs() -> None:
    b = mil.Builder()
    x = b.input("x", (2,), "fp16")
    b.output(b.mul(x=b.mul(x=x, y=1024.0), y=1 / 1024), "y")
    program = b.build()
    x = np.array([100.0, 0.1])
    with anekit.compile(program, backend="reference") as faithful:
        y16 = faithful(x=x)["y"]
    with anekit.compile(program, backend="reference", storage="fp32") as fast:
        y32 = fast(x=x)["y"]
    assert np.isposinf(y16[0])  # 100 * 1024 overflows fp16 storage between the ops
    assert y32[0] == np.float16(100.0) and y32.dtype == np.float16
    with pytest.raises(ValueError, match="storage must be one of"):
        anekit.compile(program, backend="reference", storage="bf16")


def test_run_on_a_closed_reference_kernel_is_an_error() -> None:
    kernel = reference.compile(add_weight_program(2.0))
    kernel.close()
    with pytest.raises(AnekitError, match="closed"):
        kernel.run()
