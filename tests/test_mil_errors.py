"""Malformed MIL text: each gives MilSyntaxError or MilTypeError at the right line and column.

Each case marks, with a '§' in the mutated text, the place a person reading the
text would point at; the marker is removed before parsing and its position is
the expected (line, column).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anekit import mil
from anekit.errors import AnekitError, MilSyntaxError, MilTypeError, WeightFileError
from tests.test_mil_text import add_weight_program, saved_model

BASE = """program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios18>(tensor<fp16, [1, 4]> x, tensor<fp16, [1, 4]> z) {
        tensor<int32, [2]> shp = const()[name = string("shp"), val = tensor<int32, [2]>([4, 1])];
        bool flag = const()[name = string("flag"), val = bool(false)];
        fp16 eps = const()[name = string("eps"), val = fp16(0x1p-3)];
        tensor<fp16, [1, 4]> s = add(x = x, y = z)[name = string("s")];
        tensor<fp16, [4, 1]> r = reshape(x = s, shape = shp)[name = string("r")];
    } -> (r);
}
"""

S, T = MilSyntaxError, MilTypeError
CASES = [
    # (label, old, new-with-§, error class)
    ("misspelt program", "program(1.3)", "§progrm(1.3)", S),
    ("bad version", "program(1.3)", "program(§1.4)", S),
    ("no paren after program", "program(1.3)", "program §1.3)", S),
    (
        "buildInfo not a dict",
        'dict<string, string>({{"coremlc-version", "3505.4.1"}})',
        '§string("x")',
        S,
    ),
    ("buildInfo unclosed", '"3505.4.1"}})]', '"3505.4.1"}})\n§{', S),
    ("unknown opset", "main<ios18>", "main<§ios99>", S),
    ("opset not closed", "main<ios18>(", "main<ios18§(", S),
    ("input without name", "[1, 4]> x,", "[1, 4]> §,", S),
    ("unknown dtype", "tensor<fp16, [1, 4]> x", "tensor<§fp64, [1, 4]> x", S),
    ("negative dimension", "tensor<fp16, [1, 4]> x", "tensor<fp16, [1, §-4]> x", S),
    ("fractional dimension", "tensor<fp16, [1, 4]> x", "tensor<fp16, [1, §4.5]> x", S),
    ("shape not closed", "tensor<fp16, [1, 4]> x", "tensor<fp16, [1, 4§> x", S),
    ("missing equals", "> s = add(", "> s §add(", S),
    (
        "missing semicolon",
        '[name = string("s")];\n        tensor',
        '[name = string("s")]\n        §tensor',
        S,
    ),
    ("unterminated string", 'name = string("s")]', 'name = string(§"s)]', S),
    ("args not closed", "y = z)[", "y = z§[", S),
    ("argument without equals", "add(x = x,", "add(x §x,", S),
    ("argument given twice", "add(x = x, y = z)", "add(x = x, §x = z)", S),
    ("stray character", 'y = z)[name = string("s")]', 'y = z)§$[name = string("s")]', S),
    ("missing arrow", "} -> (r);", "} §(r);", S),
    ("missing final semicolon", "} -> (r);\n}", "} -> (r)\n§}", S),
    ("text after program", "(r);\n}\n", "(r);\n}\n§extra\n", S),
    ("too many literal values", "tensor<int32, [2]>([4, 1])", "§tensor<int32, [2]>([4, 1, 2])", S),
    ("too few literal values", "tensor<int32, [2]>([4, 1])", "§tensor<int32, [2]>([4])", S),
    ("int out of range", "tensor<int32, [2]>([4, 1])", "§tensor<int8, [2]>([4, 300])", S),
    ("float in int tensor", "tensor<int32, [2]>([4, 1])", "tensor<int32, [2]>([4, §1.5])", S),
    ("bad bool", "val = bool(false)", "val = bool(§yes)", S),
    ("bad float", "val = fp16(0x1p-3)", "val = fp16(§zz)", S),
    ("fp16 overflow", "val = fp16(0x1p-3)", "val = §fp16(1e6)", S),
    ("uint64 outside BLOBFILE", "val = fp16(0x1p-3)", "val = §uint64(3)", S),
    ("name not a string", 'name = string("flag")', "§name = int32(3)", S),
    ("undefined value", "add(x = x, y = z)", "add(x = x, y = §q)", T),
    ("unknown op", "= add(x = x", "= §addd(x = x", T),
    ("declared type differs", "tensor<fp16, [1, 4]> s = add", "§tensor<fp16, [1, 5]> s = add", T),
    ("declared dtype differs", "tensor<fp16, [1, 4]> s = add", "§tensor<fp32, [1, 4]> s = add", T),
    (
        "operand dtype mismatch",
        "tensor<fp16, [1, 4]> z)",
        "tensor<int32, [1, 4]> z)",
        T,
        ("add(x = x, y = z)", "add(x = x, §y = z)"),
    ),
    (
        "redefined value",
        "tensor<fp16, [4, 1]> r = reshape",
        "tensor<fp16, [4, 1]> §s = reshape",
        T,
        ("(r);", "(s);"),
    ),
    ("duplicate input", "[1, 4]> z)", "[1, 4]> §x)", T),
    ("missing required parameter", "= add(x = x, y = z)", "= §add(x = x)", T),
    ("unknown parameter", "add(x = x, y = z)", "add(x = x, y = z, §w = z)", T),
    (
        "too many declared outputs",
        "tensor<fp16, [1, 4]> s = add",
        "§tensor<fp16, [1, 4]> s, tensor<fp16, [1, 4]> t = add",
        T,
    ),
    ("undefined output", "} -> (r);", "} -> (§rr);", T),
    ("wrong parameter dtype", "reshape(x = s, shape = shp)", "reshape(x = s, §shape = s)", T),
    (
        "const parameter not const",
        "tensor<fp16, [1, 4]> z)",
        "tensor<fp16, [1, 4]> z, int32 q)",
        T,
        (
            '[name = string("s")];',
            '[name = string("s")];\n        tensor<fp16, [1, 4]> sm = softmax(x = s, §axis = q)[name = string("sm")];',
        ),
    ),
]


def mutate(case: tuple) -> tuple[str, int, int]:
    """Apply a case's edits; return the text without the marker and the marker's line/column."""
    label, old, new, _cls, *more = case
    text = BASE
    for a, b in [(old, new), *more]:
        assert a in text, f"{label}: {a!r} not in text"
        text = text.replace(a, b, 1)
    index = text.index("§")
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return text.replace("§", ""), line, column


def test_base_program_is_valid() -> None:
    program = mil.parse(BASE)
    assert [op.op_type for op in program.ops] == ["const", "const", "const", "add", "reshape"]
    assert program.outputs[0].shape == (4, 1)


def test_at_least_forty_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_text_reports_line_and_column(case: tuple) -> None:
    text, line, column = mutate(case)
    with pytest.raises(case[3]) as info:
        mil.parse(text, file="model.mil")
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert err.file == "model.mil"
    assert f"model.mil:{line}:{column}" in str(err)


def test_syntax_error_shows_the_line_with_a_caret() -> None:
    text, line, column = mutate(CASES[5])
    with pytest.raises(MilSyntaxError) as info:
        mil.parse(text)
    rendered = str(info.value).splitlines()
    assert rendered[1].strip() == text.splitlines()[line - 1].strip()
    assert rendered[2].index("^") - 4 == column - 1


def test_empty_and_truncated_input() -> None:
    with pytest.raises(MilSyntaxError) as info:
        mil.parse("")
    assert (info.value.line, info.value.column) == (1, 1)
    cut = BASE[: BASE.index("reshape")]
    with pytest.raises(MilSyntaxError, match="end of input"):
        mil.parse(cut)


def test_type_error_names_op_and_parameter() -> None:
    text, _, _ = mutate(CASES[[c[0] for c in CASES].index("operand dtype mismatch")])
    with pytest.raises(MilTypeError) as info:
        mil.parse(text)
    assert info.value.op == "add" and info.value.param == "y"
    assert "int32" in str(info.value) and "fp16" in str(info.value)


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "@model_path/weights/../../secret.bin",
        "@model_path/other/w.bin",
        "@model_path/weights/",
    ],
)
def test_blobfile_paths_cannot_escape_the_weights_directory(path: str, tmp_path) -> None:
    text = BASE.replace(
        "val = tensor<int32, [2]>([4, 1])",
        f'val = tensor<int32, [2]>(BLOBFILE(path = string("{path}"), offset = uint64(64)))',
    )
    (tmp_path / "secret.bin").write_bytes(b"\0" * 256)
    with pytest.raises(WeightFileError) as info:
        mil.parse(text, tmp_path / "weights")
    assert info.value.file == path


def test_missing_weight_file_is_a_weight_error(tmp_path) -> None:
    text = BASE.replace(
        "val = tensor<int32, [2]>([4, 1])",
        'val = tensor<int32, [2]>(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(64)))',
    )
    with pytest.raises(WeightFileError, match="w.bin"):
        mil.parse(text, tmp_path)
    from anekit.mil import blob

    good = blob.write_blob_file([np.array([4, 1], dtype=np.int32)])
    program = mil.parse(text, {"@model_path/weights/w.bin": good})
    assert program.ops[0].outputs[0].const.tolist() == [4, 1]
    wrong = blob.write_blob_file([np.array([4, 1, 7], dtype=np.int32)])
    with pytest.raises(WeightFileError, match="BLOBFILE at <mil>:5"):
        mil.parse(text, {"@model_path/weights/w.bin": wrong})


# -- mutation fuzzing: the parser raises only anekit errors, and never hangs ----------------------

_TOKENS = [
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "<",
    ">",
    ",",
    ";",
    "=",
    "->",
    "tensor",
    "fp16",
    "x",
    '"',
    "1",
    "-1",
    "0x1p-3",
]


@st.composite
def mutated_texts(draw) -> str:
    text = BASE
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text) - 1))
        j = min(len(text), i + draw(st.integers(1, 12)))
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "insert"]))
        if kind == "delete":
            text = text[:i] + text[j:]
        elif kind == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        elif kind == "swap":
            k = draw(st.integers(0, len(text) - 1))
            a, b = sorted((i, k))
            text = text[:a] + text[b] + text[a + 1 : b] + text[a] + text[b + 1 :] if a < b else text
        else:
            text = text[:i] + draw(st.sampled_from(_TOKENS)) + text[i:]
    return text


@settings(max_examples=400, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_texts())
def test_mutated_programs_raise_only_anekit_errors(text: str) -> None:
    try:
        program = mil.parse(text)
    except AnekitError:
        return
    assert mil.parse(program.to_text()).to_text() == program.to_text()


@pytest.mark.parametrize(
    "cut", ["name = string(", 'name = string("s"', "val = bool(", "val = fp16("]
)
def test_text_ending_inside_a_literal_is_a_syntax_error(cut: str) -> None:
    text = BASE[: BASE.index(cut) + len(cut)]
    with pytest.raises(MilSyntaxError, match="end of input"):
        mil.parse(text)


def test_a_byte_order_mark_is_accepted(tmp_path) -> None:
    from anekit.mil.loading import decode_mil

    assert decode_mil(b"\xef\xbb\xbf" + BASE.encode(), "m.mil") == BASE


# -- bad input to the parser and the Builder (from test_review_core.py) ------------------------
def test_a_model_mil_that_is_not_utf8_is_a_syntax_error_at_the_byte(tmp_path: Path) -> None:
    directory = saved_model(tmp_path)
    text = (directory / "model.mil").read_bytes()
    (directory / "model.mil").write_bytes(text.replace(b"program(1.3)\n", b"program(1.3)\n\xff", 1))
    with pytest.raises(MilSyntaxError) as info:
        mil.load(directory)
    assert (info.value.line, info.value.column) == (2, 1)
    assert "model.mil" in str(info.value) and "0xff" in str(info.value)


def test_a_function_returning_a_value_twice_is_rejected() -> None:
    text = add_weight_program(2.0).to_text().replace("-> (y);", "-> (y, y);")
    with pytest.raises(MilTypeError, match="returns 'y' more than once"):
        mil.parse(text, add_weight_program(2.0).weight_files())


def relu_builder() -> tuple[mil.Builder, mil.Value]:
    b = mil.Builder()
    return b, b.relu(x=b.input("x", (1, 2), "fp16"))


def test_output_of_something_that_is_not_a_value_is_a_type_error() -> None:
    b, _ = relu_builder()
    with pytest.raises(TypeError, match="expected a Value of this Builder, found ndarray"):
        b.output(np.ones(2), "y")


def test_output_of_another_builders_value_is_rejected_and_leaves_it_alone() -> None:
    other, value = relu_builder()
    b, _ = relu_builder()
    with pytest.raises(ValueError, match="does not belong to this Builder"):
        b.output(value, "y")
    assert value.name == "relu"
    other.output(value, "z")
    assert [v.name for v in other.build().outputs] == ["z"]


def test_the_same_value_cannot_be_output_twice() -> None:
    b, y = relu_builder()
    b.output(y, "a")
    with pytest.raises(ValueError, match="already an output"):
        b.output(y, "b")
    assert [v.name for v in b.build().outputs] == ["a"]


def test_renaming_a_value_after_build_does_not_change_the_built_program() -> None:
    b, y = relu_builder()
    b.output(b.sigmoid(x=y), "z")
    built = b.build()
    text = built.to_text()
    with pytest.raises(ValueError, match="cannot rename 'relu'"):
        b.output(y, "renamed")
    assert built.to_text() == text


@pytest.mark.parametrize("name", ["1bad", "a-b", "with space", ""])
def test_output_and_function_names_must_be_mil_names(name: str) -> None:
    b, y = relu_builder()
    with pytest.raises(ValueError, match="invalid output name"):
        b.output(y, name)
    with pytest.raises(ValueError, match="invalid function name"):
        mil.Builder(function=name)


@pytest.mark.parametrize(
    ("shape", "error"), [((1, 2.5), TypeError), ((1, -2), ValueError), (5, TypeError)]
)
def test_input_shapes_are_not_silently_rounded_or_negative(shape, error) -> None:
    with pytest.raises(error, match="input 'x'"):
        mil.Builder().input("x", shape, "fp16")


def test_input_shapes_accept_numpy_integers() -> None:
    v = mil.Builder().input("x", np.array([1, 3]), "fp16")
    assert v.shape == (1, 3)


def test_a_weight_converted_to_int_with_loss_is_rejected() -> None:
    with pytest.raises(ValueError, match="do not fit in int32"):
        mil.Builder().weight("w", np.array([1.5, 2.0]), dtype="int32")
    exact = mil.Builder().weight("w", np.array([1.0, -2.0]), dtype="int32")
    assert exact.const.tolist() == [1, -2]


def test_a_const_that_overflows_fp16_is_rejected() -> None:
    with pytest.raises(ValueError, match="1e\\+06 overflows fp16: fp16 holds 0 and magnitudes"):
        mil.Builder().const(np.array([1e6, 1.0]), dtype="fp16")
    inf = mil.Builder().const(np.array([np.inf, 1.0]), dtype="fp16")  # inf is inf, not overflow
    assert np.isinf(inf.const[0])


def test_an_empty_weight_is_rejected_where_it_is_made() -> None:
    with pytest.raises(ValueError, match="weight 'w'"):
        mil.Builder().weight("w", np.zeros((0, 4), np.float16))
