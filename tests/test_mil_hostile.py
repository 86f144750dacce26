"""Hostile MIL text: linear time, bounded nesting, bounded messages, only anekit errors.

Each adversarial family is a megabyte of text; before this work some took minutes (a
quadratic string pattern: 40 KB of unterminated escaped quotes took 7-18 s) or raised
RecursionError. The time bound is generous (5 s for 1 MB, where a linear parser takes
well under one) so a busy machine does not make the test flaky.
"""

from __future__ import annotations

import time

import pytest

from anekit import mil
from anekit.errors import AnekitError, MilSyntaxError

MB = 1 << 20
HEAD = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4]> x) {\n"
TAIL = "\n    } -> (x);\n}\n"


def in_body(line: str) -> str:
    """A program whose one statement is ``line``."""
    return HEAD + "        " + line + TAIL


# name -> about 1 MB of text
FAMILIES = {
    "unterminated escaped quotes": in_body(
        'tensor<fp16, [1, 4]> y = relu(x = "' + '\\"' * (MB // 2)
    ),
    "escaped quotes without an opening": in_body("y = " + '\\"' * (MB // 2)),
    "quote after every backslash pair": in_body('"\\\\' * (MB // 3)),
    "digits": in_body("tensor<fp16, [1, " + "1" * MB),
    "open brackets": in_body(
        'tensor<int32, [1]> c = const()[name = string("c"), val = tensor<int32, [1]>(' + "[" * MB
    ),
    "nested dict types": "program(1.3)\n[buildInfo = dict<string, " + "dict<string, " * (MB // 13),
    "unclosed type dims": in_body("tensor<fp16, [" + "1, " * (MB // 3)),
    "unclosed number list": in_body(
        'tensor<fp16, [4]> c = const()[name = string("c"), val = tensor<fp16, [4]>(['
        + "1, " * (MB // 3)
    ),
    "names": in_body("a " * (MB // 2)),
    "open parentheses": in_body("(" * MB),
    "arguments": in_body("tensor<fp16, [1, 4]> y = relu(" + "x = x, " * (MB // 7)),
    "tensor< runs": in_body("tensor<a,[" * (MB // 10)),
    "blanks then a token": in_body(" " * MB + "x"),
    "trailing blanks": in_body("tensor<fp16, [1, 4]> y = relu(x = x)" + " " * MB),
    "tabs and form feeds": in_body("\t\f\v" * (MB // 3) + "@"),
    "a comment": in_body("// " + "x" * MB) + "garbage",
    "hex digits": in_body(
        'tensor<fp16, [1]> c = const()[name = string("c"), val = fp16(0x' + "f" * MB
    ),
    "many lines": "program(1.3)\n{\n" + "\n" * MB + "x",
    "NUL bytes": "\0" * MB,
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_megabyte_of_hostile_text_is_rejected_quickly(name: str) -> None:
    text = FAMILIES[name]
    start = time.process_time()  # this process's CPU time: other work on the machine is not ours
    with pytest.raises(AnekitError) as info:
        mil.parse(text)
    elapsed = time.process_time() - start
    assert elapsed < 5.0, f"{name}: {elapsed:.1f} s"
    assert len(str(info.value)) < 2000  # the echoed line is cut around the column


def test_deep_literal_nesting_is_a_syntax_error_not_a_recursion_error() -> None:
    text = in_body(
        'tensor<int32, [1]> c = const()[name = string("c"), val = tensor<int32, [1]>('
        + "[" * 100_000
        + "1"
        + "]" * 100_000
        + ")];"
    )
    with pytest.raises(MilSyntaxError, match="nested deeper than 64 brackets"):
        mil.parse(text)
    nested = "[" * 64 + "1" + "]" * 64  # 64 levels are fine
    ok = in_body(
        f'tensor<int32, [1]> c = const()[name = string("c"), val = tensor<int32, [1]>({nested})];'
    )
    assert mil.parse(ok.replace("-> (x)", "-> (c)")).ops[0].outputs[0].const.tolist() == [1]


def test_deep_dict_type_nesting_is_a_syntax_error_not_a_recursion_error() -> None:
    deep = "program(1.3)\n[buildInfo = dict<string, " + "dict<string, " * 100_000 + "string"
    with pytest.raises(MilSyntaxError, match="dict type nested deeper than 64 levels"):
        mil.parse(deep + ">" * 100_001 + "({})]\n{\n}\n")


def test_a_nul_byte_is_an_error_at_its_place_before_tokenising() -> None:
    text = in_body('tensor<fp16, [1, 4]> y = relu(x = x)[name = string("y")];\0')
    with pytest.raises(MilSyntaxError, match="NUL byte") as info:
        mil.parse(text)
    line = text.count("\n", 0, text.index("\0")) + 1
    column = text.index("\0") - text.rfind("\n", 0, text.index("\0"))
    assert (info.value.line, info.value.column) == (line, column)


def test_an_error_on_a_3_mb_line_echoes_a_window_around_the_column() -> None:
    name = "a" * 3_000_000
    line = f'tensor<fp16, [1, 4]> y = relu(x = x)[name = string("{name}")] $'
    with pytest.raises(MilSyntaxError) as info:
        mil.parse(in_body(line))
    err = info.value
    rendered = str(err).splitlines()
    assert len(str(err)) < 1000  # it echoed all 6 MB of the line and the caret's indent before
    assert err.column == len("        ") + line.index("$") + 1
    assert rendered[1].strip().startswith("...aaaa") and rendered[1].endswith('")] $')
    assert rendered[1][rendered[2].index("^")] == "$"  # the caret still points at the token
    # an error early on the line cuts its tail instead
    with pytest.raises(MilSyntaxError) as info:
        mil.parse(in_body(f'tensor<fp16, [1, 4]> y = $ relu(x = x)[name = string("{name}")];'))
    rendered = str(info.value).splitlines()
    assert rendered[1].endswith("aaa...") and rendered[1][rendered[2].index("^")] == "$"


def test_a_long_token_is_quoted_short() -> None:
    with pytest.raises(MilSyntaxError) as info:
        mil.parse("program(1.3)\n" + "a" * MB)
    assert "(1048576 characters)" in info.value.message and len(info.value.message) < 200


def test_control_characters_are_not_echoed_to_the_terminal() -> None:
    with pytest.raises(MilSyntaxError) as info:
        mil.parse("program(1.3)\n\x1b[2J\0\0")
    shown = str(info.value).splitlines()[1]
    assert "\0" not in str(info.value) and "\x1b" not in str(info.value)
    assert shown.strip() == "?[2J??"


def test_fmt_of_100_mb_of_nuls_fails_at_once(tmp_path) -> None:
    import subprocess
    import sys

    path = tmp_path / "nul.mil"
    path.write_bytes(b"\0" * 100_000_000)
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
        "from anekit.cli import main; sys.exit(main(['fmt', sys.argv[1]]))"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "nul.mil:1:1: NUL byte" in done.stderr
    assert time.perf_counter() - start < 15  # it took 20 s and 1.7 GB before
