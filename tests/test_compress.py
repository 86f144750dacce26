"""anekit.compress: each scheme on conv and linear programs, against NumPy written here.

For every scheme the compressed program is checked three ways: its stored bytes (int8
about half of fp16, 4-bit palettes about a quarter plus their tables), its outputs on
the reference backend against a NumPy decode-then-compute of the stored operands (the
decoding written here from the op definitions, not the module's), and its MIL text and
saved directory read back equal.
"""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.compression import SCHEMES, compress_with_report, find_layers
from anekit.errors import UsageError
from anekit.mil.graph import stored_form
from tests.compress_decode import decoded

RNG = np.random.default_rng(7)


def conv_program(channels: int = 64, tokens: int = 16, layers: int = 2, opset: str = "ios18"):
    """``layers`` 1x1 convs with ReLU between them, weights [C, C, 1, 1] of std 1/sqrt(C)."""
    b = mil.Builder(opset=opset)
    h = x = b.input("x", (1, channels, 1, tokens), "fp16")
    for i in range(layers):
        w = RNG.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels)
        h = b.conv(x=h, weight=b.weight(f"w{i}", w.astype(np.float16)), name=f"conv{i}")
        if i < layers - 1:
            h = b.relu(x=h, name=f"relu{i}")
    b.output(h, "y")
    del x
    return b.build()


def linear_program(d_in: int = 96, d_out: int = 128):
    b = mil.Builder()
    x = b.input("x", (8, d_in), "fp16")
    w = (RNG.standard_normal((d_out, d_in)) / np.sqrt(d_in)).astype(np.float16)
    b.output(b.linear(x=x, weight=b.weight("w", w), name="fc"), "y")
    return b.build()


def conv_reference(x: np.ndarray, weights: list[np.ndarray], *, int8_steps=None) -> np.ndarray:
    """The conv chain in NumPy: fp32 products, fp16 results, ReLU between layers."""
    h = x.astype(np.float16)
    for i, w in enumerate(weights):
        a = h[0, :, 0, :].astype(np.float32)
        if int8_steps is not None:  # W8A8: the activation as the int8 datapath sees it
            step = np.float32(np.float16(int8_steps[i]))
            q = np.clip(np.rint(a / step), -128, 127)
            a = (q * step).astype(np.float16).astype(np.float32)
        y = (w[:, :, 0, 0].astype(np.float32) @ a).astype(np.float16)
        if i < len(weights) - 1:
            y = np.maximum(y, np.float16(0))
        h = y[None, :, None, :]
    return h


def run(program, **inputs) -> np.ndarray:
    with anekit.compile(program, backend="reference") as k:
        return k(**inputs)["y"]


@pytest.mark.parametrize(
    ("scheme", "ratio", "op"),
    [
        ("int8", 0.5, "constexpr_affine_dequantize"),
        ("w8a8", 0.5, "constexpr_affine_dequantize"),
        ("lut6", 0.375, "constexpr_lut_to_dense"),
        ("lut4", 0.25, "constexpr_lut_to_dense"),
    ],
)
def test_each_scheme_on_a_conv_program(scheme, ratio, op, tmp_path) -> None:
    program = conv_program()
    result = compress_with_report(program, scheme, chip="m4", measure=False)
    small = result.program
    for layer in result.report.layers:
        dense = 64 * 64 * 2
        # 8 bits: + one fp16 scale per channel; 4/6 bits: + one 2^b-entry table per 16 channels
        extra = 64 * 2 if ratio == 0.5 else (64 // 16) * 2 ** int(ratio * 16) * 2
        assert layer.scheme == scheme and layer.dense_bytes == dense
        assert layer.stored_bytes == int(dense * ratio) + extra, layer
        kinds = [o.op_type for o in small.main.ops if o.outputs[0].name == layer.name]
        assert kinds == [op]
    x = RNG.standard_normal((1, 64, 1, 16)).astype(np.float16)
    weights = [decoded(small, f"w{i}") for i in range(2)]
    steps = None
    if scheme == "w8a8":
        ops = [o for o in small.main.ops if o.op_type in ("quantize", "dequantize")]
        assert [o.op_type for o in ops] == ["quantize", "dequantize"] * 2
        steps = [float(o.inputs["scale"].const) for o in ops[::2]]
    expected = conv_reference(x, weights, int8_steps=steps)
    np.testing.assert_allclose(run(small, x=x), expected, rtol=2e-3, atol=2e-3)
    # and the decode is not the identity: the uncompressed program differs
    dense_out = run(program, x=x).astype(np.float32)
    assert np.abs(dense_out - expected.astype(np.float32)).max() > 1e-3
    # text and directory round trips
    assert mil.parse(small.to_text(), weights=small.weight_files()) == small
    small.save(tmp_path / "model")
    loaded = mil.load(tmp_path / "model")
    assert loaded == small
    np.testing.assert_array_equal(run(loaded, x=x), run(small, x=x))


def test_int8_weights_are_within_half_a_step() -> None:
    program = conv_program(layers=1)
    small = compress_with_report(program, "int8", measure=False).program
    w = np.asarray(program.main.ops[0].outputs[0].const, dtype=np.float32)
    step = np.abs(w).max(axis=(1, 2, 3), keepdims=True) / 127
    error = np.abs(decoded(small, "w0").astype(np.float32) - w)
    assert (error <= step / 2 + 1e-3 * np.abs(w) + 1e-7).all()


def test_linear_weights_compress_and_compute() -> None:
    program = linear_program()
    x = RNG.standard_normal((8, 96)).astype(np.float16)
    for scheme in ("int8", "lut4"):
        small = compress_with_report(program, scheme, measure=False).program
        w = decoded(small, "w").astype(np.float32)
        expected = (x.astype(np.float32) @ w.T).astype(np.float16)
        np.testing.assert_allclose(run(small, x=x), expected, rtol=2e-3, atol=2e-3)


def test_per_block_int8_and_per_tensor_palettes() -> None:
    program = conv_program(layers=1)
    block = compress_with_report(program, "int8", granularity="per_block", measure=False)
    op = next(o for o in block.program.main.ops if o.outputs[0].name == "w0")
    assert op.op_type == "constexpr_blockwise_shift_scale"
    assert op.inputs["scale"].type.shape == (64, 2, 1, 1)  # 64 inputs in blocks of 32
    legacy = conv_program(layers=1, opset="ios16")  # no per-grouped tables before iOS18
    small = compress_with_report(legacy, "lut4", measure=False)
    assert small.report.layers[0].granularity == "per_tensor"
    assert small.report.layers[0].stored_bytes == 64 * 64 // 2 + 16 * 2 + 4 * 4
    x = RNG.standard_normal((1, 64, 1, 16)).astype(np.float16)
    for result in (block, small):
        expected = conv_reference(x, [decoded(result.program, "w0")])
        np.testing.assert_allclose(run(result.program, x=x), expected, rtol=2e-3, atol=2e-3)
    with pytest.raises(UsageError, match="lut4 per_grouped_channel needs opset ios18"):
        compress_with_report(legacy, "lut4", granularity="per_grouped_channel")


def test_small_weights_stay_fp16_and_the_original_is_untouched() -> None:
    program = conv_program(channels=32, layers=1)  # 1024 elements < 4096
    text = program.to_text()
    assert find_layers(program) == []
    assert anekit.compress(program, "lut4") == program
    assert len(find_layers(program, min_elements=1024)) == 1
    small = anekit.compress(program, "lut4", min_elements=1024)
    assert small != program and program.to_text() == text


def test_unknown_schemes_and_bad_options_are_usage_errors() -> None:
    program = conv_program(layers=1)
    with pytest.raises(UsageError, match="unknown compression scheme 'int3'; expected one of"):
        anekit.compress(program, "int3")
    with pytest.raises(UsageError, match="int8 has no granularity 'per_grouped_channel'"):
        anekit.compress(program, "int8", granularity="per_grouped_channel")
    with pytest.raises(UsageError, match="max_error must be a non-negative number"):
        anekit.compress(program, "int8", max_error=-1)
    with pytest.raises(UsageError, match=r"calibration sample 0 has inputs \['z'\]"):
        anekit.compress(program, "int8", max_error=0.1, calibration={"z": np.zeros(1)})


def test_stored_forms_declare_their_encoding() -> None:
    small = compress_with_report(conv_program(layers=1), "lut6", measure=False).program
    w = next(v for op in small.main.ops for v in op.outputs if v.name == "w0")
    encoding, stored = stored_form(w)
    assert (encoding.kind, encoding.bits) == ("lut", 6)
    assert stored == 64 * 64 * 6 // 8 + 4 * 64 * 2
    assert set(SCHEMES) == {"int8", "w8a8", "lut6", "lut4"}


def test_anekit_compress_is_the_package_function() -> None:
    import subprocess
    import sys

    import anekit.compression.schemes  # a submodule's import must not shadow anekit.compress

    program = conv_program(layers=1)
    assert anekit.compress(program, "int8") == anekit.compression.compress(program, "int8")
    lazy = "import anekit, sys; print('anekit.compression' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # import anekit loads no compression code
