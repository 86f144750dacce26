"""No silent loss in constants: what a literal spells is what is stored, or it is an error.

A float may round (that is what a float literal means); a finite value that would become
inf, a nonzero value that would become 0 and an integer that would change are rejected,
in MIL text and in the Builder alike, and the message says what the dtype holds.
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilSyntaxError, MilTypeError

CONST = """program(1.3)
{{
    func main<ios18>(tensor<{dtype}, [2]> x) {{
        tensor<{dtype}, [2]> c = const()[name = string("c"), val = tensor<{dtype}, [2]>([1, {value}])];
        tensor<{dtype}, [2]> y = add(x = x, y = c)[name = string("y")];
    }} -> (y);
}}
"""
INLINE = CONST.replace(
    'tensor<{dtype}, [2]> c = const()[name = string("c"), val = tensor<{dtype}, [2]>([1, {value}])];\n',
    "",
).replace("add(x = x, y = c)", "add(x = x, y = {dtype}({value}))")


def parse_value(value: str, dtype: str, template: str = CONST) -> np.ndarray:
    program = mil.parse(template.format(dtype=dtype, value=value))
    op = program.ops[0]
    return op.outputs[0].const if op.op_type == "const" else op.inputs["y"].const


@pytest.mark.parametrize("template", [CONST, INLINE], ids=["const", "inline"])
@pytest.mark.parametrize(
    ("value", "dtype", "message"),
    [
        ("1e39", "fp32", r"value 1e\+39 overflows fp32"),
        ("0x1p+128", "fp32", "overflows fp32"),
        ("1e999", "fp32", "'1e999' is beyond every float dtype"),
        ("0x1p99999", "fp32", "'0x1p99999' is beyond every float dtype"),
        ("-1e999", "fp16", "'-1e999' is beyond every float dtype"),
        ("70000", "fp16", "value 70000 overflows fp16"),
        ("65520", "fp16", "value 65520 overflows fp16"),
        ("1e-9", "fp16", "value 1e-09 would be stored as 0 in fp16"),
        ("0x1p-25", "fp16", "would be stored as 0 in fp16"),  # half the smallest subnormal
        ("1e-50", "fp32", "would be stored as 0 in fp32"),
        ("1e-999", "fp32", "'1e-999' is beyond every float dtype"),
    ],
)
def test_float_literals_that_would_change_are_rejected(value, dtype, message, template) -> None:
    with pytest.raises(MilSyntaxError, match=message) as info:
        parse_value(value, dtype, template)
    assert "holds 0 and magnitudes" in str(info.value)  # says what the dtype can hold


@pytest.mark.parametrize(
    ("value", "dtype", "stored"),
    [
        ("65519", "fp16", 65504.0),  # rounds to the largest finite value
        ("0x1p-24", "fp16", 2.0**-24),  # the smallest subnormal is kept
        ("0x1.8p-25", "fp16", 2.0**-24),  # above half of it: rounds up, not to 0
        ("3.4028234e38", "fp32", float(np.finfo(np.float32).max)),
        ("inf", "fp16", np.inf),  # inf is a value, not an overflow
        ("0x0p+0", "fp16", 0.0),
        ("-0.0", "fp32", 0.0),
    ],
)
def test_float_literals_at_the_edges_are_kept(value, dtype, stored) -> None:
    for template in (CONST, INLINE):
        got = np.asarray(parse_value(value, dtype, template)).ravel()[-1]
        assert float(got) == stored


@pytest.mark.parametrize("digits", ["١٢", "１２", "٣"])
def test_non_ascii_digits_are_not_numbers(digits) -> None:
    with pytest.raises(MilSyntaxError, match="expected"):
        parse_value(digits, "int32")
    text = CONST.format(dtype="fp16", value="1").replace("[2]> x", f"[{digits}]> x")
    with pytest.raises(MilSyntaxError):
        mil.parse(text)


@pytest.mark.parametrize("spelling", ["1_000", "infinity", "Infinity", "NaN", "iNf"])
def test_only_mil_spellings_of_numbers_are_numbers(spelling) -> None:
    with pytest.raises(MilSyntaxError):
        parse_value(spelling, "fp32")


def test_a_dimension_beyond_int64_is_an_error() -> None:
    text = CONST.format(dtype="fp16", value="1").replace("[2]> x", "[9223372036854775808]> x")
    with pytest.raises(MilSyntaxError, match="beyond int64"):
        mil.parse(text)
    text = CONST.format(dtype="fp16", value="1").replace("[2]> x", "[1_0]> x")
    with pytest.raises(MilSyntaxError, match="expected a dimension"):
        mil.parse(text)


# -- the Builder's literal policy ----------------------------------------------------------------
def fp16_input() -> tuple[mil.Builder, mil.Value]:
    b = mil.Builder()
    return b, b.input("x", (1, 4), "fp16")


@pytest.mark.parametrize(
    ("y", "message"),
    [
        (70000.0, "70000 overflows fp16: fp16 holds 0 and magnitudes 5.96e-08 to 65504"),
        (1e-9, "1e-09 would be stored as 0 in fp16"),
        (70000, "70000 overflows fp16"),
        (
            2049,
            "integer 2049 is not exactly representable in fp16 \\(it would be stored as 2048\\)",
        ),
        ([1.0, 1e6], "1e\\+06 overflows fp16"),
    ],
)
def test_builder_python_numbers_that_fp16_cannot_hold_are_rejected(y, message) -> None:
    b, x = fp16_input()
    with pytest.raises(MilTypeError, match=message) as info:
        b.add(x=x, y=y)
    assert info.value.param == "y"


def test_builder_python_numbers_that_fp16_holds_are_stored_as_rounded() -> None:
    b, x = fp16_input()
    for y, stored in [(0.1, np.float16(0.1)), (65519.0, 65504.0), (2048, 2048.0), (1e-7, 2**-23)]:
        v = b.add(x=x, y=y).producer.inputs["y"]
        assert v.dtype is mil.DType.fp16
        assert float(v.const) == float(stored), y


def test_fp32_domain_rejects_fp32_overflow() -> None:
    b = mil.Builder()
    x = b.input("x", (2,), "fp32")
    with pytest.raises(MilTypeError, match="overflows fp32"):
        b.mul(x=x, y=1e39)
    assert float(b.mul(x=x, y=1e38).producer.inputs["y"].const) == pytest.approx(1e38, rel=1e-7)


def test_builder_const_with_a_dtype_rejects_underflow_too() -> None:
    with pytest.raises(ValueError, match="1e-09 would be stored as 0 in fp16"):
        mil.Builder().const(np.array([1e-9, 1.0]), dtype="fp16")
    # an array already of the dtype is stored as it is: the caller did the rounding
    kept = mil.Builder().const(np.array([1e-9, 1.0]).astype(np.float16))
    assert kept.const.tolist() == [0.0, 1.0]


def test_an_integer_of_thousands_of_digits_is_a_syntax_error() -> None:
    # Python's int() refuses over 4300 digits with a ValueError: it must not leak
    for literal in (f"[1, {'9' * 5000}]", f"[{'9' * 5000}, 1]"):
        text = CONST.format(dtype="int32", value="1").replace("[1, 1]", literal)
        with pytest.raises(MilSyntaxError, match="5000 digits is out of range|expected"):
            mil.parse(text)


@pytest.mark.parametrize("spaced", [False, True])
def test_a_type_of_more_than_64_dimensions_is_a_syntax_error(spaced) -> None:
    # NumPy cannot make such an array: it raised ValueError (found by the fuzzer)
    dims = ", ".join(["1"] * 65)
    spelling = f"tensor < fp16, [{dims}] >" if spaced else f"tensor<fp16, [{dims}]>"
    text = CONST.format(dtype="fp16", value="1").replace("tensor<fp16, [2]> x", f"{spelling} x")
    with pytest.raises(MilSyntaxError, match="a type of rank 65: at most 64 dimensions"):
        mil.parse(text)
    ok = CONST.format(dtype="fp16", value="1").replace("[2]> x", f"[{', '.join(['1'] * 64)}]> x")
    with pytest.raises(MilTypeError):  # 64 dimensions parse; this program's add does not fit
        mil.parse(ok)


def test_an_unclosed_list_of_dimensions_is_refused_within_the_rank_limit() -> None:
    # it was read to its end (350k dimensions) before the rank was checked
    dims = "1, " * 350_000
    text = CONST.format(dtype="fp16", value="1").replace(
        "tensor<fp16, [2]> x", f"tensor<fp16, [{dims}"
    )
    with pytest.raises(MilSyntaxError, match="a type of more than 64 dimensions") as info:
        mil.parse(text)
    assert info.value.column < 10_000  # stopped near the start of the list, not at its end
