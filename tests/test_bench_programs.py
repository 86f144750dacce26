"""The benchmark programs compute what they claim, checked against NumPy written here."""

from __future__ import annotations

import json

import numpy as np
import pytest

import anekit
from anekit.bench import programs, published, suites


def _run(program, **inputs):
    with anekit.compile(program, backend="reference") as k:
        return k(**inputs)


def _producer(program, name):
    return next(op for op in program.main.ops if op.outputs[0].name == name)


def _const(program, name):
    """The value of the const or constexpr output named ``name``, as float64."""
    op = _producer(program, name)
    if op.op_type == "constexpr_affine_dequantize":
        q = op.inputs["quantized_data"].const.astype(np.float64)
        scale = np.asarray(op.inputs["scale"].const, np.float64)
        return q * scale.reshape(-1, *([1] * (q.ndim - 1)))
    return np.asarray(op.outputs[0].const, np.float64)


def _fp16(a):
    return a.astype(np.float16).astype(np.float64)


def _conv1x1(w, h):
    return np.einsum("oi,bihw->bohw", w[:, :, 0, 0], h)


def test_chained_convs_fp16_matches_numpy():
    prog = programs.chained_convs(3, channels=16, spatial=(2, 4))
    x = np.random.default_rng(1).standard_normal((1, 16, 2, 4)).astype(np.float16)
    h = x.astype(np.float64)
    for i in range(3):
        h = _fp16(_conv1x1(_const(prog, f"w{i}"), h))
    y = _run(prog, x=x)["y"]
    assert y.dtype == np.float16 and y.shape == (1, 16, 2, 4)
    np.testing.assert_allclose(y.astype(np.float64), h, rtol=2e-3, atol=2e-3)


def test_chained_convs_fp32_io_casts_at_the_edges():
    prog = programs.chained_convs(2, channels=8, spatial=2, dtype="fp32")
    assert [v.dtype.value for v in (*prog.inputs, *prog.outputs)] == ["fp32", "fp32"]
    x = np.random.default_rng(2).standard_normal((1, 8, 2, 2)).astype(np.float32)
    h = _fp16(x.astype(np.float64))
    for i in range(2):
        h = _fp16(_conv1x1(_const(prog, f"w{i}"), h))
    y = _run(prog, x=x)["y"]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, h, rtol=2e-3, atol=2e-3)


def test_w8a8_chain_quantizes_weights_and_activations():
    depth, c = 3, 32
    prog = programs.chained_convs(depth, channels=c, spatial=4, w8a8=True)
    kinds = [op.op_type for op in prog.main.ops if op.op_type != "const"]
    expected = ["constexpr_affine_dequantize", "conv", "quantize", "dequantize"] * (depth - 1)
    assert kinds == expected + ["constexpr_affine_dequantize", "conv"]
    quantized = [op.outputs[0] for op in prog.main.ops if op.op_type == "quantize"]
    assert all(v.dtype.value == "int8" for v in quantized)

    step = float(programs.ACTIVATION_SCALE)
    x = np.random.default_rng(3).standard_normal((1, c, 4, 4)).astype(np.float16)
    h = x.astype(np.float64)
    for i in range(depth):
        codes = _producer(prog, f"w{i}").inputs["quantized_data"].const
        assert np.abs(codes).reshape(c, -1).max(axis=1).tolist() == [127.0] * c  # per channel
        w = _fp16(_const(prog, f"w{i}"))  # dequantized to fp16 storage
        h = _fp16(_conv1x1(w, h))
        if i + 1 < depth:
            h = np.clip(np.round(h / step), -128, 127) * step
    y = _run(prog, x=x)["y"].astype(np.float64)
    # fp32 vs float64 sums may round across a quantization boundary for a rare element
    close = np.abs(y - h) <= 1e-3 * (1 + np.abs(h))
    assert close.mean() > 0.98
    np.testing.assert_allclose(y, h, atol=2 * step)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_matmul_matches_numpy(dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 8, 16)).astype(np.float16)
    y = rng.standard_normal((1, 16, 4)).astype(np.float16)
    np_dtype = np.float16 if dtype == "fp16" else np.float32
    z = _run(programs.matmul(8, 16, 4, dtype), x=x.astype(np_dtype), y=y.astype(np_dtype))["z"]
    assert z.dtype == np_dtype and z.shape == (1, 8, 4)
    ref = _fp16(x.astype(np.float64) @ y.astype(np.float64))
    np.testing.assert_allclose(z.astype(np.float64), ref, rtol=2e-3, atol=2e-3)


def test_projection_forms_compute_the_same_product():
    c, s = 16, 8
    x = np.random.default_rng(5).standard_normal((c, s)).astype(np.float16)
    conv = programs.projection(c, s, "conv")
    w = _const(conv, "w")[:, :, 0, 0]
    ref = _fp16(w @ x.astype(np.float64))
    y_conv = _run(conv, x=x.reshape(1, c, 1, s))["y"].reshape(c, s)
    y_mm = _run(programs.projection(c, s, "matmul"), x=x.reshape(1, c, s))["y"].reshape(c, s)
    y_in = _run(
        programs.projection(c, s, "matmul_input"),
        x=x.reshape(1, c, s),
        w=w.reshape(1, c, c).astype(np.float16),
    )["y"].reshape(c, s)
    for y in (y_conv, y_mm, y_in):
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-3, atol=2e-3)
    with pytest.raises(ValueError, match="projection form"):
        programs.projection(c, s, "linear")


def test_floor_program_is_one_relu():
    x = np.linspace(-2, 2, 256, dtype=np.float16).reshape(1, 16, 1, 16)
    np.testing.assert_array_equal(_run(programs.floor_program(), x=x)["y"], np.maximum(x, 0))


def test_build_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="conv_chain, matmul or projection"):
        programs.build({"kind": "gemv", "in": 4, "out": 8})
    with pytest.raises(ValueError, match="I/O dtype"):
        programs.matmul(2, 2, 2, "bf16")


def test_descriptions_use_the_published_fields():
    # a case's description must be comparable, key for key, with published.json entries
    entries = json.loads(published.PUBLISHED_JSON.read_text())["entries"]
    ours = {
        "conv_chain": set(suites.conv_chain(8, 1, 8, 1, "fp16")),
        "matmul": set(suites.MATMUL_SCALING.program({"n": 8, "io_dtype": "fp16"})),
    }
    for e in entries:
        if e["program"]["kind"] in ours:
            assert set(e["program"]) == ours[e["program"]["kind"]], e["id"]


@pytest.mark.parametrize("outlier", [None, 600.0])
def test_transformer_matches_torch_of_the_training_blocks(outlier):
    """The decoder stack against float64 PyTorch of the model (the references of test_nn_kernels).

    With one channel at 600 (an outlier channel, as LLM residual streams have), its square
    (3.6e5) exceeds fp16's 65504 while mean(x^2) does not: an RMSNorm that stores the
    squares in fp16 gets rstd = 0 and the blocks add exactly nothing; the nn one is exact.
    """
    torch = pytest.importorskip("torch")
    from tests.test_nn_kernels import ref_attention, ref_ffn, ref_rmsnorm, rel_err

    shape = programs.TransformerShape(
        n_layers=2, dim=32, n_heads=4, n_kv_heads=2, head_dim=8, hidden_dim=48, seq=8
    )
    block = shape  # every block has the stack's shape
    x = np.random.default_rng(6).standard_normal((1, 1, block.dim, block.tokens))
    if outlier is not None:
        x[0, 0, 3] = outlier
    x = x.astype(np.float16)
    y = _run(programs.transformer(shape, seed=7), x=x)["y"]

    h = torch.tensor(x[0, 0].T.astype(np.float64))
    for layer in programs.transformer_weights(shape, seed=7):
        w = {k: torch.tensor(v.astype(np.float64)) for k, v in layer.items()}
        xn, _ = ref_rmsnorm(h, w["attn_norm"], block.norm_eps)
        h = h + ref_attention(xn, w["wq"], w["wk"], w["wv"], w["wo"], block)["o"]
        xn, _ = ref_rmsnorm(h, w["ffn_norm"], block.norm_eps)
        h = h + ref_ffn(xn, w["w1"], w["w3"], w["w2"])["f"]
    assert y.shape == x.shape
    # what the blocks add to the input carried by the residuals (fp16 rounds it by up to 0.25
    # at 600): a norm that lost the blocks would be off by 1
    added = y[0, 0].astype(np.float64) - x[0, 0]
    assert rel_err(added, h.T - torch.tensor(x[0, 0].astype(np.float64))) < 2e-2


def test_transformer_shape_is_a_validated_decoder_shape():
    """The stack's shape is the one DecoderShape: its sizes derived and validated there."""
    from anekit.errors import ModelError
    from anekit.nn.spec import BlockShape, DecoderShape

    shape = programs.TransformerShape()
    assert isinstance(shape, BlockShape) and isinstance(shape, DecoderShape)
    assert (shape.n_layers, shape.dim, shape.q_dim, shape.tokens) == (12, 256, 256, 64)
    with pytest.raises(ModelError, match="transformer shape: n_heads"):
        programs.TransformerShape(n_heads=3, n_kv_heads=2)
    with pytest.raises(ModelError, match="transformer shape: seq"):
        programs.TransformerShape(seq=0)
