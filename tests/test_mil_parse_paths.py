"""The parser's fast paths keep its guarantees: lists of numbers, weight reads, the collector.

Lists of numbers all decimal or all hex are converted by one call each, the float range by
min, max and a count of zeros; weight files are checked once per path and records once
per offset; the cyclic garbage collector is paused during a parse. Each must give what the
slow path gave: the same values, the same errors at the same places, the collector's state
as it was.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilSyntaxError, MilTypeError, WeightFileError
from anekit.mil import blob, parser
from anekit.mil.types import DType, TensorType
from anekit.mil.weights import WeightSource

LIST = """program(1.3)
{{
    func main<ios18>(tensor<{dtype}, [{n}]> x) {{
        tensor<{dtype}, [{n}]> y = add(x = x, y = tensor<{dtype}, [{n}]>([{values}]))[name = string("y")];
    }} -> (y);
}}
"""


def parse_list(values: list[str], dtype: str = "fp16") -> np.ndarray:
    text = LIST.format(dtype=dtype, n=len(values), values=", ".join(values))
    return mil.parse(text).ops[0].inputs["y"].const


@pytest.mark.parametrize(
    "spellings",
    [
        ["0x1.8p+1", "-0x1p-3", "0x1.4p+2"],  # all hex: one map of float.fromhex
        ["1.5", "-2.25e1", ".5"],  # all decimal: one map of float
        ["0x1.8p+1", "1.5", "-0x1p-3", "10"],  # mixed: each number by its own spelling
    ],
)
def test_lists_of_floats_read_every_spelling_exactly(spellings) -> None:
    expected = [float.fromhex(s) if "x" in s else float(s) for s in spellings]
    got = parse_list(spellings, "fp32")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.array(expected, dtype=np.float32))


def test_a_list_keeps_nan_signed_zero_and_the_smallest_subnormal() -> None:
    got = parse_list(["-0.0", "0x1p-24", "1"])
    assert np.signbit(got[0]) and got[0] == 0  # -0.0 stays -0.0: not a value lost
    assert got[1] == np.float16(2.0**-24)
    nan = mil.parse(LIST.format(dtype="fp16", n=2, values="1, nan")).ops[0].inputs["y"].const
    assert nan[0] == 1 and np.isnan(nan[1])


@pytest.mark.parametrize(
    ("values", "bad", "message"),
    [
        (["0x1p-3", "0x1p-30", "0x1p-2"], "0x1p-30", "would be stored as 0 in fp16"),
        (["0.5", "1e-9", "0.25"], "1e-9", "would be stored as 0 in fp16"),
        (["0.5", "-70000", "0x1p-2"], "-70000", "overflows fp16"),
        (["0x1p+15", "0x1p+16"], "0x1p+16", "overflows fp16"),
    ],
)
def test_a_value_fp16_cannot_hold_anywhere_in_a_list_is_an_error(values, bad, message) -> None:
    with pytest.raises(MilSyntaxError, match=message) as info:
        parse_list(values)
    assert info.value.line == 4  # the literal's line; the message names the value
    assert f"{float.fromhex(bad) if 'x' in bad else float(bad):g}" in str(info.value)


def test_integer_lists_reject_floats_and_out_of_range_values_at_their_column() -> None:
    np.testing.assert_array_equal(parse_list(["1", "-2", "+3"], "int32"), [1, -2, 3])
    np.testing.assert_array_equal(parse_list(["0x10", "2"], "int32"), [16, 2])  # hex ints
    text = LIST.format(dtype="int32", n=3, values="1, 2.5, 3")
    with pytest.raises(MilSyntaxError, match="expected an integer for int32, found '2.5'") as info:
        mil.parse(text)
    line = text.splitlines()[3]
    assert info.value.column == line.index("2.5") + 1
    with pytest.raises(MilSyntaxError, match="out of range for int8"):
        parse_list(["1", "200"], "int8")


def test_a_negative_dimension_in_a_type_is_an_error_at_its_column() -> None:
    text = LIST.format(dtype="fp16", n=2, values="1, 2").replace(
        "(tensor<fp16, [2]> x)", "(tensor<fp16, [ 2, -1 ]> x)"
    )
    with pytest.raises(MilSyntaxError, match="dimension must be >= 0, found -1") as info:
        mil.parse(text)
    assert info.value.column == text.splitlines()[2].index("-1") + 1


def blob_file() -> bytes:
    return blob.write_blob_file([np.arange(4, dtype=np.float16), np.ones(3, np.float32)])


def test_weight_source_reads_many_records_of_one_file_and_checks_each() -> None:
    path = "@model_path/weights/w.bin"
    data = blob_file()
    first, second = blob.layout([np.zeros(4, np.float16), np.zeros(3, np.float32)])
    source = WeightSource({path: data})
    fp16 = TensorType(DType.fp16, (2, 2))
    np.testing.assert_array_equal(source.tensor(path, first, fp16), [[0, 1], [2, 3]])
    np.testing.assert_array_equal(source.tensor(path, first, fp16), [[0, 1], [2, 3]])  # again
    np.testing.assert_array_equal(source.tensor(path, second, TensorType(DType.fp32, (3,))), 1)
    with pytest.raises(WeightFileError, match="declared dtype fp16, found fp32") as info:
        source.tensor(path, second, TensorType(DType.fp16, (3,)))
    assert info.value.offset == second
    with pytest.raises(WeightFileError, match=r"declared shape \(3,\)"):
        source.tensor(path, first, TensorType(DType.fp16, (3,)))
    with pytest.raises(WeightFileError, match="no blob record"):
        source.tensor(path, first + 64, fp16)  # inside the first blob's data
    for _ in range(2):  # a rejected path is rejected every time, not remembered as checked
        with pytest.raises(WeightFileError, match="no '..'"):
            source.tensor("@model_path/weights/../w.bin", first, fp16)


def test_weight_source_bounds_what_one_parse_copies(monkeypatch) -> None:
    monkeypatch.setattr("anekit.mil.weights.read_limit", lambda: 10)
    path = "@model_path/weights/w.bin"
    source = WeightSource({path: blob_file()})
    source.tensor(path, 64, TensorType(DType.fp16, (4,)))  # 8 bytes: within the limit
    with pytest.raises(WeightFileError, match="exceed 10 bytes"):
        source.tensor(path, 64, TensorType(DType.fp16, (4,)))  # 16 in all


def test_a_blob_file_of_no_blobs_names_the_offset_asked_for() -> None:
    reader = blob.BlobFile(blob.write_blob_file([]), "w.bin")
    with pytest.raises(WeightFileError, match="header count 0") as info:
        reader.tensor(128, np.dtype(np.float16), (1,))
    assert info.value.offset == 128


SMALL = LIST.format(dtype="fp16", n=2, values="1, 2")


@pytest.mark.parametrize("enabled", [True, False])
def test_a_parse_leaves_the_collector_as_it_found_it(enabled) -> None:
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        mil.parse(SMALL, pause_gc=True)
        assert gc.isenabled() is enabled
        with pytest.raises(MilSyntaxError):
            mil.parse(SMALL.replace("add(", "add(("), pause_gc=True)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_the_collector_is_paused_only_when_the_caller_asks(monkeypatch) -> None:
    seen: list[bool] = []
    real = parser._Parser.program

    def program(self):  # noqa: ANN001, ANN202
        seen.append(gc.isenabled())
        return real(self)

    monkeypatch.setattr(parser._Parser, "program", program)
    assert gc.isenabled()
    mil.parse(SMALL)
    mil.parse(SMALL, pause_gc=True)
    assert seen == [True, False]  # running by default, paused on request
    assert gc.isenabled()


def test_nested_and_concurrent_pauses_resume_only_when_the_last_ends() -> None:
    assert gc.isenabled()
    with parser.gc_paused():
        with parser.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with parser.gc_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    inside.wait(10)
    with parser.gc_paused():
        pass
    assert not gc.isenabled()  # the other thread's pause is still running
    release.set()
    thread.join()
    assert gc.isenabled()


def test_a_parse_makes_no_garbage_cycles() -> None:
    """What a parse drops is freed by reference counting: pausing the collector loses nothing."""
    text = "\n".join(SMALL.splitlines()[:3])
    body = "".join(
        f"        tensor<fp16, [2]> v{i} = mul(x = {'x' if i == 0 else f'v{i - 1}'}, "
        f'y = tensor<fp16, [2]>([{i}, 0x1p-{i % 9}]))[name = string("v{i}")];\n'
        for i in range(200)
    )
    text += "\n" + body + "    } -> (v199);\n}\n"
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        program = mil.parse(text)
        assert len(program.ops) == 200
        assert gc.collect() == 0  # nothing unreachable: no cycles were made and dropped
    finally:
        gc.enable() if was else gc.disable()


def test_a_type_error_points_at_its_parameter() -> None:
    """Where each argument was given is kept: a type error points at the parameter."""
    text = SMALL.replace("tensor<fp16, [2]> x)", "tensor<fp16, [2]> x, tensor<int32, [2]> k)")
    text = text.replace("y = tensor<fp16, [2]>([1, 2])", "y = k")
    with pytest.raises(MilTypeError, match="dtype int32 differs from fp16") as info:
        mil.parse(text)
    line = text.splitlines()[3]
    assert (info.value.line, info.value.column) == (4, line.index("y = k") + 1)


CONST_LINE = """program(1.3)
{{
    func main<ios18>(tensor<{dtype}, [{n}]> x) {{
        tensor<{dtype}, [{n}]> c = const()[name = string("c"), val = tensor<{dtype}, [{n}]>([{values}])];
        tensor<{dtype}, [{n}]> y = add(x = x, y = c)[name = string("y")];
    }} -> (y);
}}
"""


@pytest.mark.parametrize(
    "values",
    ["1e, 2", "0x, 1", "1.5.5, 1", "1, , 2", "+.5, 0x.8p1", "ab, 1", "1_0, 2", "0x1p, 2", "1 2, 3"]
    + ["5., -0X1P-3", "1E5, .5e-2", "0x1.8p+1, 2"],
)
@pytest.mark.parametrize("dtype", ["fp32", "int32"])
def test_a_const_lines_list_reads_as_the_token_path_reads_it(values, dtype) -> None:
    """A whole-line const's list is checked by converting it, not by the token pattern."""
    n = values.count(",") + 1

    def outcome(template: str):
        try:
            op = mil.parse(template.format(dtype=dtype, n=n, values=values)).ops[-1]
        except (MilSyntaxError, MilTypeError) as e:
            return type(e).__name__
        return op.inputs["y"].const.tolist()

    assert outcome(CONST_LINE) == outcome(LIST)


def long_statement(n: int, last: str) -> str:
    """A program whose concat names ``n`` values, one per line, commas first: the statement
    spans batches of tokens, which may end between a name and its comma."""
    head = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 2]> x) {\n"
    relus = "".join(
        f'        tensor<fp16, [1, 2]> v{i} = relu(x = x)[name = string("v{i}")];\n'
        for i in range(n)
    )
    names = "            v0" + "".join(f"\n            , v{i}" for i in range(1, n - 1))
    names += f"\n            , {last}"
    concat = (
        f"        tensor<fp16, [{n}, 2]> c = concat(axis = int32(0), interleave = bool(false), "
        f'values = (\n{names}))[name = string("c")];\n'
    )
    return head + relus + concat + "    } -> (c);\n}\n"


@pytest.mark.parametrize(("fill_chars", "ahead"), [(1 << 16, 1024), (1 << 10, 4)])
def test_a_statement_longer_than_a_batch_of_tokens_is_read_whole(
    monkeypatch, fill_chars, ahead
) -> None:
    """Tokens are made a batch at a time; a statement running past them is read again, once
    more are made, and gives what it gives when read at once, errors at the same place."""
    from anekit.mil import lexer

    monkeypatch.setattr(lexer, "_FILL_CHARS", fill_chars)
    monkeypatch.setattr(parser, "_STATEMENT_TOKENS", ahead)
    again = []
    monkeypatch.setattr(parser._Unfinished, "__init__", lambda self: again.append(1))
    n = 5000
    program = mil.parse(long_statement(n, f"v{n - 1}"))
    concat = program.ops[-1]
    assert len(concat.inputs["values"]) == n and concat.outputs[0].type.shape == (n, 2)
    assert [v.name for v in concat.inputs["values"]][-2:] == [f"v{n - 2}", f"v{n - 1}"]
    # read again a few times: as many tokens again are made each time, not one batch more
    assert 0 < len(again) < 20
    text = long_statement(n, "nowhere")
    with pytest.raises(MilTypeError, match="undefined value 'nowhere'") as info:
        mil.parse(text)
    lines = text.splitlines()
    row = next(k for k, line in enumerate(lines) if line.strip().startswith(", nowhere))"))
    assert (info.value.line, info.value.column) == (row + 1, 15)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_a_float_list_is_stored_as_numpy_stores_it_or_refused_as_storage_loss_says(dtype) -> None:
    """Lists are packed by struct (rounding to nearest even, refusing an overflow): the values
    are NumPy's conversion exactly, and a list is refused exactly where storage_loss says."""
    from anekit.mil.types import storage_loss

    rng = np.random.default_rng(7)
    np_dtype = np.float16 if dtype == "fp16" else np.float32
    info = np.finfo(np_dtype)
    edges = [0.0, -0.0, float(info.max), float(info.tiny), float(info.smallest_subnormal)]
    edges += [float(info.max) * (1 + 2.0**-12), float(info.smallest_subnormal) / 2]
    edges += [float(info.smallest_subnormal) * 0.5000001, 65519.99, 65520.0, 3.4028235e38]
    for trial in range(300):
        values = [float(x) for x in rng.standard_normal(4) * 10.0 ** rng.integers(-45, 40, 4)]
        values[trial % 4] = edges[trial % len(edges)] * (-1) ** trial
        wide = np.array(values)
        expected_loss = storage_loss(wide, DType(dtype))
        spelled = [v.hex() for v in values]
        if expected_loss is None:
            got = parse_list(spelled, dtype)
            assert got.dtype == np_dtype
            np.testing.assert_array_equal(got, wide.astype(np_dtype))
            assert list(np.signbit(got)) == list(np.signbit(wide.astype(np_dtype)))
        else:
            with pytest.raises(MilSyntaxError):
                parse_list(spelled, dtype)


@pytest.mark.parametrize(
    ("line", "tokens"),
    [
        # where two token alternatives match at one place, the one listed first wins: these
        # pin each such overlap, whatever order the pattern tries its alternatives in
        ("x = [1, 0x1p-3]", ["x", "=", "[1, 0x1p-3]"]),  # a list of numbers before "["
        ("[1, a]", ["[", "1", ",", "a", "]"]),  # not all numbers: "[" alone
        ("tensor<fp16, [2]>(t)", ["tensor<fp16, [2]>", "(", "t", ")"]),  # a type before a name
        ("tensor < fp16", ["tensor", "<", "fp16"]),  # a split type: a name, then "<"
        ("-0x1.8p+1 -1.5e3 ->", ["-0x1.8p+1", "-1.5e3", "->"]),  # hex, decimal, then "->"
        ('a"b\\"c" @p/q.r', ["a", '"b\\"c"', "@p/q.r"]),  # names and strings
        ("a ? b", ["a", "?", "b"]),  # anything else: one character
    ],
)
def test_tokens_where_alternatives_overlap(line: str, tokens: list[str]) -> None:
    reader = parser._Parser.of_line(line)
    assert reader.toks[:-1] == tokens


def test_the_one_step_float_reader_agrees_with_the_step_by_step_one(monkeypatch) -> None:
    """fp16/fp32 lists and scalars read in one step (literals.float_list, float_scalar) give
    the step-by-step reader's array, dtype and shape, or leave the literal to it, so its
    errors (message and column) are unchanged."""
    import random

    from anekit.mil import reader

    rng = random.Random(11)
    edges = [0.0, -0.0, 65504.0, 65519.99, 65520.0, 2.0**-24, 2.0**-25, 2.0**-26, 3.4e38, 3.5e38]
    edges += [1.4e-45, 7e-46, 1e308, 1.5, -2.5]
    odd = ["1e999", "0x1p99999", "1e-999", "0x1p-99999", "-0", "0x0p0", "+.5", "5.", "0X1P3"]

    def number() -> str:
        if rng.random() < 0.1:
            return rng.choice(odd)
        v = (
            rng.choice(edges)
            if rng.random() < 0.4
            else rng.gauss(0, 1) * 10.0 ** rng.randint(-9, 9)
        )
        return v.hex() if rng.random() < 0.5 else rng.choice([f"{v:.6g}", repr(v), f"{v:e}"])

    texts = []
    for _ in range(400):
        dtype, n = rng.choice(["fp16", "fp32"]), rng.choice([1, 2, 4, 8])
        body = f"[{', '.join(number() for _ in range(n + (rng.random() < 0.1)))}]"
        texts.append(f"tensor<{dtype}, [1, {n}]>({body})")
        texts.append(f"{dtype}({number()})")

    def outcome(text: str) -> tuple:
        reader.clear_caches()  # a remembered literal would hide the reader being tested
        try:
            v = reader.LiteralReader.of_line(text).literal()
        except (MilSyntaxError, MilTypeError) as e:
            return ("error", str(e))
        return (v.type, v.const.dtype, v.const.shape, v.const.tobytes())

    one_step = [outcome(t) for t in texts]
    monkeypatch.setattr(reader, "float_list", lambda *a: None)
    monkeypatch.setattr(reader, "float_scalar", lambda *a: None)
    assert [outcome(t) for t in texts] == one_step
    assert 100 < sum(o[0] != "error" for o in one_step) < len(texts) - 100  # both kinds


FAST = [  # lines read whole
    "  tensor<fp16, [1, 8]> y = mul(x = x, y = tensor<fp16, [1, 8]>([0x1p-3, -1.5e2]))"
    '[name = string("y")];',
    '  tensor<fp16, [2]> y = sub(x = a.b, y = fp16(-0x1.8p+1))[name = tensor<string, []>("y")];',
    '  tensor<fp16, [2]> y = relu()[name = string("y")];',
]
SLOW = [  # lines left to findall
    '  tensor<fp16, [2]> y = add(x = a, y = fp16(0x1p))[name = string("y")];',  # "0x1", "p"
    '  tensor<fp16, [2]> y = add(x = a, y = b, )[name = string("y")];',  # a trailing comma
    '  tensor<fp16, [2]> y = add(x = a,y = b)[name = string("y")];',
    '  tensor<fp16, [2]> y = add(x = a, y = t([1, x]))[name = string("y")];',  # "[" alone
    '  tensor<fp16, [2]> y = add(x = (a, b))[name = string("y")];',  # a tuple
    '  tensor<fp16, [2]> y = add(x = a, y = b)[name = string("y")]; // note',
]


@pytest.mark.parametrize("line", FAST + SLOW)
def test_a_statement_line_is_tokenised_as_findall_tokenises_it(line: str) -> None:
    """The whole-statement tokenizer gives findall's tokens, or leaves the line to findall."""
    from anekit.mil import lexer

    m = lexer._STATEMENT.match(line)
    expected = lexer.TOKEN.findall(line)
    got = None if m is None else lexer.statement_tokens(line, m)
    assert got == (expected if line in FAST else None)
    program = f"program(1.3)\n{{\n  func main<ios18>() {{\n{line}\n  }} -> (y);\n}}\n"
    reader = parser._Parser(program, WeightSource(None), None)
    while reader.toks[-1] is lexer.MORE:
        reader._fill()
    made = reader.toks[reader.line_starts[3] : reader.line_starts[4]]
    assert made == [t for t in expected if not t.startswith("//")]
