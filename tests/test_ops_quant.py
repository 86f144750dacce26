"""cast, quantize, dequantize and constexpr ops: rounding, saturation, errors, MIL text.

Expected values are written out by hand from the documented rules (round half to
even, saturate, (q - zero_point) * scale) or taken from coremltools' docstrings.
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.errors import EvaluationError, MilTypeError
from anekit.mil.blob import write_blob_file
from anekit.mil.ops import registry
from anekit.mil.types import DType
from tests.optest import run_reference

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics


def _run_one(op: str, x: np.ndarray, x_dtype: str, opset: str = "ios18", /, **params) -> np.ndarray:
    b = mil.Builder(opset)
    name = "x" if op == "cast" else "input"
    v = b.input("v", x.shape, x_dtype)
    b.output(getattr(b, op)(**{name: v}, **params), "y")
    return run_reference(b.build(), {"v": x})["y"]


def _quantize(x, dtype="fp32", **params) -> np.ndarray:
    return _run_one(
        "quantize", np.asarray(x, dtype=np.dtype(dtype.replace("fp", "float"))), dtype, **params
    )


# -- quantize --------------------------------------------------------------------------------


def test_quantize_rounds_half_to_even() -> None:
    got = _quantize(
        [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 0.49], scale=np.float32(1), output_dtype="int8"
    )
    np.testing.assert_array_equal(got, [0, 2, 2, 0, -2, -2, 4, 0])


def test_quantize_rounds_before_adding_the_zero_point() -> None:
    # round(2.5) + 1 = 3, whereas round(2.5 + 1) would be 4.
    got = _quantize([2.5, 0.5], scale=np.float32(1), zero_point=np.int8(1), output_dtype="int8")
    np.testing.assert_array_equal(got, [3, 1])


def test_quantize_saturates_at_int8_bounds() -> None:
    x = [126.5, 127.5, 1e6, np.inf, -127.5, -128.5, -129, -1e6, -np.inf]
    got = _quantize(x, scale=np.float32(1), output_dtype="int8")
    np.testing.assert_array_equal(got, [126, 127, 127, 127, -128, -128, -128, -128, -128])
    assert got.dtype == np.int8


def test_quantize_uint8_and_int8_differ_by_range_and_zero_point() -> None:
    x = [-1.0, 0.0, 100.0, 127.0, 200.0, 300.0]
    as_uint8 = _quantize(x, scale=np.float32(1), zero_point=np.uint8(128), output_dtype="uint8")
    as_int8 = _quantize(x, scale=np.float32(1), zero_point=np.int8(0), output_dtype="int8")
    np.testing.assert_array_equal(as_uint8, [127, 128, 228, 255, 255, 255])
    np.testing.assert_array_equal(as_int8, [-1, 0, 100, 127, 127, 127])
    assert as_uint8.dtype == np.uint8 and as_int8.dtype == np.int8
    assert _quantize([-3.0], scale=np.float32(1), output_dtype="uint8")[0] == 0


def test_quantize_per_axis_scale_and_zero_point() -> None:
    x = np.array([[1.0, 1.0, 1.0], [-6.0, 10.0, 0.75]], np.float16)
    got = _run_one(
        "quantize",
        x,
        "fp16",
        scale=np.array([0.5, 4.0, 0.25], np.float16),
        zero_point=np.array([0, 10, -100], np.int8),
        axis=1,
        output_dtype="int8",
    )
    # columns: x / 0.5 + 0, x / 4 + 10 (2.5 -> 2), x / 0.25 - 100
    np.testing.assert_array_equal(got, [[2, 10, -96], [-12, 12, -97]])


def test_quantize_refuses_nan() -> None:
    with pytest.raises(EvaluationError, match="NaN"):
        _quantize([1.0, np.nan], scale=np.float32(1), output_dtype="int8")


@pytest.mark.parametrize(
    "params, param, fragment",
    [
        ({"scale": np.float32(0)}, "scale", "non-zero"),
        ({"scale": np.array([1, 0], np.float32), "axis": 0}, "scale", "non-zero"),
        ({"scale": np.array([1, 2, 3], np.float32)}, "axis", "needs an axis"),
        ({"scale": np.array([1, 2, 3], np.float32), "axis": 1}, "scale", "expected 4 values"),
        ({"scale": np.float32(1), "axis": 0}, "axis", "takes no axis"),
        ({"scale": np.float32(1), "zero_point": np.uint8(3)}, "zero_point", "differs"),
        (
            {"scale": np.array([1, 2], np.float32), "zero_point": np.int8(0), "axis": 0},
            "zero_point",
            "one rank",
        ),
    ],
)
def test_quantize_rejects_bad_parameters(params, param, fragment) -> None:
    b = mil.Builder()
    x = b.input("x", (2, 4), "fp32")
    with pytest.raises(MilTypeError, match=fragment) as err:
        b.quantize(input=x, output_dtype="int8", **params)
    assert (err.value.op, err.value.param) == ("quantize", param)


def test_quantize_output_dtype_must_be_8_bit() -> None:
    b = mil.Builder()
    with pytest.raises(MilTypeError, match="int8 or uint8") as err:
        b.quantize(input=b.input("x", (2,), "fp32"), scale=np.float32(1), output_dtype="int16")
    assert err.value.param == "output_dtype"


def test_quantize_needs_ios17() -> None:
    b = mil.Builder("ios16")
    x = b.input("x", (2,), "fp32")
    with pytest.raises(AttributeError, match="ios17"):
        b.quantize(input=x, scale=np.float32(1), output_dtype="int8")


# -- dequantize ------------------------------------------------------------------------------


def test_dequantize_formula_and_fp16_overflow_to_inf() -> None:
    q = np.array([-128, -1, 0, 127], np.int8)
    got = _run_one("dequantize", q, "int8", scale=np.float16(1000), zero_point=np.int8(-1))
    # (q + 1) * 1000: -127000 and 128000 leave fp16 (max 65504) and become -inf and inf.
    np.testing.assert_array_equal(got, [-np.inf, 0, 1000, np.inf])
    assert got.dtype == np.float16
    got32 = _run_one("dequantize", q, "int8", scale=np.float32(1000), zero_point=np.int8(-1))
    np.testing.assert_array_equal(got32, [-127000, 0, 1000, 128000])


def test_dequantize_uint8_per_axis() -> None:
    q = np.array([[0, 255], [128, 64]], np.uint8)
    got = _run_one(
        "dequantize",
        q,
        "uint8",
        scale=np.array([0.5, 2.0], np.float32),
        zero_point=np.array([128, 0], np.uint8),
        axis=0,
    )
    np.testing.assert_array_equal(got, [[-64.0, 63.5], [256.0, 128.0]])  # rows: (q - zp) * s


# -- cast ------------------------------------------------------------------------------------


def test_cast_float_to_int_truncates_toward_zero() -> None:
    x = np.array([-2.75, -0.5, 0.5, 2.75, 1e4], np.float16)
    np.testing.assert_array_equal(_run_one("cast", x, "fp16", dtype="int32"), [-2, 0, 0, 2, 10000])


@pytest.mark.parametrize(
    "x, src, dst",
    [
        (np.array([1.0, np.nan], np.float32), "fp32", "int32"),
        (np.array([np.inf], np.float16), "fp16", "int32"),
        (np.array([3e9], np.float32), "fp32", "int32"),
        (np.array([128.5], np.float32), "fp32", "int8"),
        (np.array([300, 1], np.int32), "int32", "uint8"),
        (np.array([-1], np.int32), "int32", "uint16"),
    ],
)
def test_cast_refuses_values_the_target_cannot_hold(x, src, dst) -> None:
    with pytest.raises(EvaluationError, match=f"no {dst} representation"):
        _run_one("cast", x, src, dtype=dst)


def test_cast_edges_that_are_exact() -> None:
    assert _run_one("cast", np.array([-128.9], np.float32), "fp32", dtype="int8")[0] == -128
    big = _run_one("cast", np.array([65519, 2049], np.int32), "int32", dtype="fp16")
    np.testing.assert_array_equal(big, [65504, 2048])  # round to nearest; 2049 ties to even


@pytest.mark.parametrize(
    ("values", "dtype"),
    [([70000, 3], "int32"), ([1e5, 0.5], "fp32"), ([65520.0, 1.0], "fp32")],
)
def test_cast_to_fp16_rejects_finite_values_beyond_its_range(values, dtype) -> None:
    with pytest.raises(EvaluationError, match=r"op 'cast'.*1 of 2 values overflow fp16"):
        _run_one("cast", np.array(values, DType(dtype).numpy), dtype, dtype="fp16")


def test_constant_folding_leaves_an_overflowing_cast_to_fail_at_run_time() -> None:
    from anekit.passes import fold_constants

    b = mil.Builder()
    x = b.input("x", (2,), "fp16")
    c = b.cast(x=b.const(np.array([70000, 1], np.int32)), dtype="fp16")
    b.output(b.add(x=x, y=c), "y")
    folded = fold_constants(b.build())
    assert "cast" in [op.op_type for op in folded.ops]  # not folded into an inf constant
    with pytest.raises(EvaluationError, match="op 'cast'"):
        run_reference(folded, {"x": np.zeros(2, np.float16)})


def test_cast_targets_by_opset() -> None:
    b = mil.Builder("ios16")
    x = b.input("x", (2,), "fp16")
    with pytest.raises(MilTypeError, match="expected one of") as err:
        b.cast(x=x, dtype="int8")
    assert err.value.param == "dtype"
    assert (
        mil.Builder("ios17")
        .cast(x=mil.Builder("ios17").input("x", (2,), "fp16"), dtype="int8")
        .dtype.value
        == "int8"
    )
    with pytest.raises(MilTypeError, match="expected dtype"):
        b.cast(x=b.input("u", (2,), "uint8"), dtype="fp16")


# -- constexpr ops ---------------------------------------------------------------------------


def test_constexpr_inputs_must_be_const() -> None:
    b = mil.Builder()
    q = b.input("q", (2, 3), "int8")
    with pytest.raises(MilTypeError, match="compile-time constant") as err:
        b.constexpr_affine_dequantize(
            quantized_data=q, zero_point=np.int8(0), scale=np.float16(1), axis=0
        )
    assert (err.value.op, err.value.param) == ("constexpr_affine_dequantize", "quantized_data")
    with pytest.raises(MilTypeError, match="compile-time constant") as err:
        b.constexpr_blockwise_shift_scale(data=q, scale=np.ones((1, 1), np.float16))
    assert err.value.param == "data"


def test_constexpr_traits() -> None:
    for name in ("constexpr_affine_dequantize", "constexpr_sparse_to_dense"):
        assert {"constexpr", "attributes"} <= registry.get(name).traits
    assert "attributes" in registry.get("constexpr_lut_to_dense", "ios17").traits
    ios18 = registry.get("constexpr_lut_to_dense", "ios18")
    assert "constexpr" in ios18.traits and "attributes" not in ios18.traits
    assert "attributes" not in registry.get("constexpr_blockwise_shift_scale").traits


_Q = np.array([[-128, 0, 5], [127, 1, -3]], np.int8)
_PATH = "@model_path/weights/weight.bin"
_TEXT = f"""program(1.3)
{{
    func main<ios18>(tensor<fp16, [2, 3]> x) {{
        tensor<fp16, [2, 3]> w = constexpr_affine_dequantize()[name = string("w"), axis = int32(0), quantized_data = tensor<int8, [2, 3]>(BLOBFILE(path = string("{_PATH}"), offset = uint64(64))), scale = tensor<fp16, [2]>([0x1p-1, 0x1p-2]), zero_point = int8(1)];
        tensor<fp16, [2, 3]> y = add(x = x, y = w)[name = string("y")];
    }} -> (y);
}}
"""


def test_affine_dequantize_attribute_form_with_blobfile_round_trips() -> None:
    weights = {_PATH: write_blob_file([_Q])}
    prog = mil.parse(_TEXT, weights)
    assert prog.to_text() == _TEXT
    assert prog.weight_files() == weights
    op = prog.ops[0]
    assert op.op_type == "constexpr_affine_dequantize" and not op.inputs["quantized_data"].name
    np.testing.assert_array_equal(op.inputs["quantized_data"].const, _Q)
    x = np.full((2, 3), 0.5, np.float16)
    got = run_reference(prog, {"x": x})["y"]
    want = (np.array(_Q, np.float64) - 1) * np.array([[0.5], [0.25]]) + 0.5
    np.testing.assert_array_equal(got, want)
    legacy = prog.to_text("legacy")
    assert 'constexpr_affine_dequantize()[name = tensor<string, []>("w")' in legacy
    assert mil.parse(legacy, weights).to_text("legacy") == legacy


def test_affine_dequantize_rejects_bad_shapes() -> None:
    b = mil.Builder()
    with pytest.raises(MilTypeError, match="expected 2 values") as err:
        b.constexpr_affine_dequantize(
            quantized_data=_Q, zero_point=np.int8(0), scale=np.ones(3, np.float16), axis=0
        )
    assert err.value.param == "scale"
    with pytest.raises(MilTypeError, match="out of range"):
        b.constexpr_affine_dequantize(
            quantized_data=_Q, zero_point=np.int8(0), scale=np.float16(1), axis=2
        )


def _pack(values: list[int], nbits: int) -> np.ndarray:
    """Pack fields least significant bit first (coremltools' documented order), bit by bit."""
    bits = [(v >> k) & 1 for v in values for k in range(nbits)]
    out = np.zeros(-(-len(bits) // 8), np.uint8)
    for i, bit in enumerate(bits):
        out[i // 8] |= bit << (i % 8)
    return out


def _lut16(indices: np.ndarray, lut: np.ndarray, shape: list[int]) -> np.ndarray:
    b = mil.Builder("ios16")
    out = b.constexpr_lut_to_dense(indices=indices, lut=lut, shape=np.array(shape, np.uint32))
    b.output(out, "y")
    return run_reference(b.build(), {})["y"]


def test_lut_to_dense_ios16_docstring_example() -> None:
    """n_bits = 2, shape (5,): byte 0 holds i3 i2 i1 i0 = 01 10 11 00, byte 1 holds i4 = 11."""
    lut = np.array([10, 20, 30, 40], np.float16)
    got = _lut16(np.array([0b01101100, 0b00000011], np.uint8), lut, [5])
    np.testing.assert_array_equal(got, [10, 40, 30, 20, 40])


@pytest.mark.parametrize("nbits", [1, 2, 4, 6, 8])
def test_lut_to_dense_ios16_every_width(nbits: int) -> None:
    rng = np.random.default_rng(nbits)
    keys = rng.integers(0, 2**nbits, 15).tolist()
    lut = rng.integers(-128, 128, 2**nbits).astype(np.int8)
    got = _lut16(_pack(keys, nbits), lut, [3, 5])
    np.testing.assert_array_equal(got, np.array([lut[k] for k in keys]).reshape(3, 5))


def test_lut_to_dense_ios16_errors() -> None:
    b = mil.Builder("ios16")
    with pytest.raises(MilTypeError, match="2, 4, 16, 64 or 256") as err:
        b.constexpr_lut_to_dense(
            indices=np.zeros(2, np.uint8),
            lut=np.zeros(3, np.float16),
            shape=np.array([4], np.uint32),
        )
    assert err.value.param == "lut"
    with pytest.raises(MilTypeError, match="need 2 bytes") as err:
        b.constexpr_lut_to_dense(
            indices=np.zeros(3, np.uint8),
            lut=np.zeros(4, np.float16),
            shape=np.array([5], np.uint32),
        )
    assert err.value.param == "indices"


def test_lut_to_dense_ios18_errors() -> None:
    b = mil.Builder()
    idx = np.zeros((4, 6), np.uint8)
    with pytest.raises(MilTypeError, match="256 entries"):
        b.constexpr_lut_to_dense(indices=idx, lut=np.zeros((1, 1, 16, 1), np.float16))
    with pytest.raises(MilTypeError, match="groups dividing"):
        b.constexpr_lut_to_dense(indices=idx, lut=np.zeros((3, 1, 256, 1), np.float16))
    with pytest.raises(MilTypeError, match="need a vector_axis") as err:
        b.constexpr_lut_to_dense(indices=idx, lut=np.zeros((1, 1, 256, 2), np.float16))
    assert err.value.param == "vector_axis"


def test_blockwise_shift_scale_errors() -> None:
    b = mil.Builder()
    data = np.zeros((4, 6), np.int8)
    with pytest.raises(MilTypeError, match="one scale per block") as err:
        b.constexpr_blockwise_shift_scale(data=data, scale=np.ones((3, 1), np.float16))
    assert err.value.param == "scale"
    with pytest.raises(MilTypeError, match="data's dtype int8"):
        b.constexpr_blockwise_shift_scale(
            data=data, scale=np.ones((2, 2), np.float16), offset=np.zeros((2, 2), np.uint8)
        )
    with pytest.raises(MilTypeError, match="scale's shape"):
        b.constexpr_blockwise_shift_scale(
            data=data, scale=np.ones((2, 2), np.float16), offset=np.zeros((2, 1), np.int8)
        )


def test_sparse_to_dense_mask_checks() -> None:
    b = mil.Builder(opset="ios17")  # the iOS16 form: a flat uint8 bit mask and a shape
    values = np.ones(2, np.float16)
    shape = np.array([2, 3], np.uint32)
    with pytest.raises(MilTypeError, match="sets 3 bits") as err:
        b.constexpr_sparse_to_dense(
            nonzero_data=values, mask=np.array([0b111], np.uint8), shape=shape
        )
    assert err.value.param == "nonzero_data"
    with pytest.raises(MilTypeError, match="past the last element"):
        b.constexpr_sparse_to_dense(
            nonzero_data=values, mask=np.array([0b1000001], np.uint8), shape=shape
        )


def test_constexpr_cost_nothing_at_run_time() -> None:
    b = mil.Builder()
    b.output(
        b.constexpr_blockwise_shift_scale(
            data=np.ones((4, 4), np.int8), scale=np.ones((1, 1), np.float16)
        ),
        "y",
    )
    cost = b.build().ops[-1].cost()
    assert (cost.flops, cost.bytes_read, cost.bytes_written) == (0, 0, 0)
