"""The MIL text printer and parser: dialects, literals, procedures, comments, weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilTypeError
from anekit.mil import blob


def small_program() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4), "fp16")
    w = b.weight("w", np.arange(8, dtype=np.float16).reshape(2, 4))
    b.output(b.identity(x=x), "y")
    b.output(w, "w")
    return b.build()


def test_printer_matches_the_documented_dialect() -> None:
    text = small_program().to_text()
    lines = text.splitlines()
    assert lines[0] == "program(1.3)"
    assert lines[1].startswith('[buildInfo = dict<string, string>({{"coremlc-component-MIL", ')
    assert lines[3] == "    func main<ios18>(tensor<fp16, [1, 4]> x) {"
    assert lines[4] == (
        '        tensor<fp16, [2, 4]> w = const()[name = string("w"), val = tensor<fp16, [2, 4]>'
        '(BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(64)))];'
    )
    assert lines[5] == '        tensor<fp16, [1, 4]> y = identity(x = x)[name = string("y")];'
    assert lines[6] == "    } -> (y, w);"
    assert lines[7] == "}"


def test_legacy_dialect_spells_scalars_as_rank0_tensors() -> None:
    text = small_program().to_text("legacy")
    assert text.startswith(
        "program(1.0)\n[buildInfo = dict<tensor<string, []>, tensor<string, []>>("
    )
    assert "func main<ios16>(" in text
    assert 'name = tensor<string, []>("y")' in text
    assert "offset = tensor<uint64, []>(64)" in text
    program = mil.parse(text, small_program().weight_files())
    assert program.version == "1.0" and program.main.opset == "ios16"
    assert program.to_text("legacy") == text


def test_weight_file_is_a_correct_milblob() -> None:
    files = small_program().weight_files()
    assert list(files) == ["@model_path/weights/w.bin"]
    records = blob.read_records(files["@model_path/weights/w.bin"])
    assert [(r.offset, r.data_offset, r.size) for r in records] == [(64, 128, 16)]


def test_literals_hex_floats_inf_nan_and_nested_build_info() -> None:
    text = """program(1.3)
[buildInfo = dict<string, dict<string, string>>({{"outer", {{"k", "v"}, {"k2", "v2"}}}})]
{
    // a comment line

    func main<ios18>(tensor<fp32, [3]> x) {
        tensor<fp32, [3]> c = const()[name = string("c"), val = tensor<fp32, [3]>([0x1.8p+1, -inf, nan])];  # trailing
        tensor<fp32, [2, 2]> m = const()[name = string("m"), val = tensor<fp32, [2, 2]>([[1, 2.5], [3e-1, -4]])];
        tensor<fp32, [3]> y = identity(x = x)[name = string("y")];
    } -> (y, c, m);
}
"""
    program = mil.parse(text)
    assert program.build_info == {"outer": {"k": "v", "k2": "v2"}}
    c = program.ops[0].outputs[0].const
    assert c[0] == 3.0 and np.isneginf(c[1]) and np.isnan(c[2])
    np.testing.assert_array_equal(
        program.ops[1].outputs[0].const, np.float32([[1, 2.5], [0.3, -4]])
    )
    printed = program.to_text()
    assert "[0x1.8p+1, -inf, nan]" in printed
    assert mil.parse(printed).to_text() == printed


def test_procedures_are_kept_and_main_is_the_default() -> None:
    text = """program(1.3)
{
    func main<ios18>(tensor<fp16, [2]> x) {
        tensor<fp16, [2]> y = identity(x = x)[name = string("y")];
    } -> (y);
    func second<ios17>(tensor<int32, [3]> a) {
        tensor<int32, [3]> b = identity(x = a)[name = string("b")];
    } -> (b);
}
"""
    program = mil.parse(text)
    assert list(program.functions) == ["main", "second"]
    assert program.functions["second"].opset == "ios17"
    assert program.main.outputs[0].name == "y"
    assert mil.parse(program.to_text()).to_text() == program.to_text()


def test_multi_blob_file_and_loose_offsets_normalise(tmp_path) -> None:
    a = np.arange(4, dtype=np.float16)
    c = np.arange(6, dtype=np.int8)
    data = blob.write_blob_file([a, c])
    offsets = blob.layout([a, c])
    text = f"""program(1.3)
{{
    func main<ios18>(tensor<fp16, [4]> x) {{
        tensor<fp16, [4]> a = const()[name = string("a"), val = tensor<fp16, [4]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64({offsets[0]})))];
        tensor<int8, [6]> c = const()[name = string("c"), val = tensor<int8, [6]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64({offsets[1]})))];
        tensor<fp16, [4]> y = identity(x = x)[name = string("y")];
    }} -> (y, a, c);
}}
"""
    (tmp_path / "weight.bin").write_bytes(data)
    program = mil.parse(text, tmp_path)
    assert program.weight_files() == {"@model_path/weights/weight.bin": data}
    assert program.to_text() == text
    np.testing.assert_array_equal(program.ops[1].outputs[0].const, c)


def test_builder_turns_python_values_into_named_consts() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 2), "fp16")
    k = b.const([1, 2, 3])
    s = b.const("same")
    f = b.const(np.float16(0.5))
    b.output(b.identity(x=x), "y")
    for v in (k, s, f):
        b.output(v)
    program = b.build()
    assert [v.type for v in program.outputs[1:]] == [
        mil.TensorType(mil.DType.int32, (3,)),
        mil.TensorType(mil.DType.string, ()),
        mil.TensorType(mil.DType.fp16, ()),
    ]


def test_builder_rejects_lossy_and_unknown_values() -> None:
    b = mil.Builder()
    with pytest.raises(TypeError, match="float64"):
        b.weight("w", np.zeros(3))
    with pytest.raises(ValueError, match="int32"):
        b.const(np.array([2**40]))
    with pytest.raises(AttributeError, match="no op 'frobnicate'"):
        getattr(b, "frobnicate")  # noqa: B009
    b.input("x", (1,))
    with pytest.raises(ValueError, match="already used"):
        b.input("x", (1,))
    x = b.input("z", (2,))
    with pytest.raises(MilTypeError, match="unknown parameter"):
        b.identity(x=x, bogus=x)
    with pytest.raises(MilTypeError, match="required parameter is missing"):
        b.identity()


def test_builder_methods_are_listed_for_completion() -> None:
    assert "identity" in dir(mil.Builder())


def test_save_writes_atomically_and_load_round_trips(tmp_path) -> None:
    program = small_program()
    out = program.save(tmp_path / "model")
    assert sorted(p.name for p in out.iterdir()) == ["model.mil", "weights"]
    assert not [p for p in (out / "weights").iterdir() if p.name.startswith(".")]
    assert mil.load(out) == program


def test_attribute_only_ops_take_weights_inline_as_blobfile() -> None:
    b = mil.Builder(opset="ios16")
    x = b.input("x", (4, 4), "fp16")
    q = b.weight("q", np.arange(16, dtype=np.int8).reshape(4, 4))
    w = b.constexpr_affine_dequantize(
        quantized_data=q, zero_point=np.int8(0), scale=np.float16(0.5), axis=0
    )
    b.output(b.add(x=x, y=w), "y")
    program = b.build()
    assert [op.op_type for op in program.ops] == ["constexpr_affine_dequantize", "add"]
    line = program.to_text().splitlines()[4]
    assert "constexpr_affine_dequantize()[name = " in line
    assert (
        'quantized_data = tensor<int8, [4, 4]>(BLOBFILE(path = string("@model_path/weights/q.bin")'
        in line
    )
    assert mil.parse(program.to_text(), program.weight_files()) == program


def test_legacy_printing_refuses_ops_newer_than_ios16() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 2, 3, 4), "fp16")
    b.output(b.scaled_dot_product_attention(query=x, key=x, value=x), "y")
    with pytest.raises(MilTypeError, match="needs opset ios18"):
        b.build().to_text("legacy")


# -- the parser's process-wide caches are bounded ----------------------------------------------
def _const_program(literal: str) -> str:
    return (
        "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [2]> x) {\n"
        f'        tensor<fp16, [2]> c = const()[name = string("c"), val = {literal}];\n'
        '        tensor<fp16, [2]> y = add(x = x, y = c)[name = string("y")];\n'
        "    } -> (y);\n}\n"
    )


def test_literal_and_type_caches_have_a_bound() -> None:
    from anekit.mil import reader

    for i in range(reader.CACHE_ENTRIES + 50):  # more distinct literals than the cache holds
        mil.parse(_const_program(f"tensor<fp16, [2]>([{i}, 1])"))
    assert len(reader._LITERALS) == reader.CACHE_ENTRIES
    assert "tensor<fp16, [2]>([0, 1])" not in reader._LITERALS  # the oldest went first
    assert f"tensor<fp16, [2]>([{reader.CACHE_ENTRIES + 49}, 1])" in reader._LITERALS
    assert reader._tensor_type.cache_info().maxsize == reader.CACHE_ENTRIES
    assert not hasattr(reader, "TYPES")  # the unbounded type-token dict is gone


def test_a_long_literal_is_not_kept_after_its_program() -> None:
    import gc
    import weakref

    values = ", ".join(str(i) for i in range(200))  # longer than CACHED_LITERAL_CHARS
    text = (
        "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [200]> x) {\n"
        f'        tensor<fp16, [200]> c = const()[name = string("c"), val = tensor<fp16, [200]>([{values}])];\n'
        '        tensor<fp16, [200]> y = add(x = x, y = c)[name = string("y")];\n'
        "    } -> (y);\n}\n"
    )
    program = mil.parse(text)
    array = program.ops[0].outputs[0].const
    assert array.shape == (200,) and array[199] == 199
    ref = weakref.ref(array)
    del program, array
    gc.collect()
    assert ref() is None


def test_inline_tensor_literals_parse_as_arguments() -> None:
    # the printer writes an inline literal argument in place; the parser must read it back
    text = (
        "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [2, 3]> x) {\n"
        "        tensor<fp16, [3]> y = reduce_sum(x = x, axes = tensor<int32, [1]>([0]), "
        'keep_dims = bool(false))[name = string("y")];\n'
        "    } -> (y);\n}\n"
    )
    program = mil.parse(text)
    assert program.ops[0].inputs["axes"].const.tolist() == [0]
    assert mil.parse(program.to_text()) == program


# -- saving and loading (from test_review_core.py) ---------------------------------------------
def add_weight_program(value: float) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4), "fp16")
    b.output(b.add(x=x, y=b.weight("w", np.full((1, 4), value, np.float16))), "y")
    return b.build()


def saved_model(tmp_path: Path) -> Path:
    return add_weight_program(2.0).save(tmp_path / "model")


def test_a_save_rejected_by_the_dialect_leaves_the_directory_as_it_was(tmp_path: Path) -> None:
    directory = saved_model(tmp_path)
    before = {p.name: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    b = mil.Builder()
    q = b.input("q", (1, 2, 4), "fp16")
    attended = b.scaled_dot_product_attention(query=q, key=q, value=q)
    b.add(x=attended, y=b.weight("w", np.full((1, 2, 4), 7.0, np.float16)))
    b.output(attended, "y")
    with pytest.raises(MilTypeError):  # scaled_dot_product_attention is an ios18 op
        b.build().save(directory, dialect="legacy")
    after = {p.name: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    assert after == before


def test_weights_in_a_subdirectory_of_weights_are_saved_there(tmp_path: Path) -> None:
    program = add_weight_program(3.0)
    moved = {k.replace("/w.bin", "/sub/w.bin"): v for k, v in program.weight_files().items()}
    parsed = mil.parse(program.to_text().replace("/w.bin", "/sub/w.bin"), moved)
    directory = parsed.save(tmp_path / "model")
    assert (directory / "weights" / "sub" / "w.bin").is_file()
    loaded = mil.load(directory)
    assert loaded.ops[0].outputs[0].const.tolist() == [[3.0] * 4]


def test_a_model_mil_with_windows_line_endings_still_loads(tmp_path: Path) -> None:
    directory = saved_model(tmp_path)
    text = (directory / "model.mil").read_bytes()
    (directory / "model.mil").write_bytes(text.replace(b"\n", b"\r\n"))
    assert mil.load(directory) == add_weight_program(2.0)


@pytest.mark.parametrize("text", ["carriage\rreturn", "crlf\r\nend", "both\\r\tkinds"])
def test_string_constants_survive_save_and_load(tmp_path: Path, text: str) -> None:
    b = mil.Builder()
    b.output(b.input("x", (2,), "fp16"))
    b.const(text, name="s")
    loaded = mil.load(b.build().save(tmp_path / "model"))
    assert loaded.ops[0].outputs[0].const == text


def _weighted(values: list[float]) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, len(values)), "fp16")
    b.output(b.add(x=x, y=b.weight("w", np.array([values], np.float16))), "y")
    return b.build()


def test_programs_compare_weights_by_array_bit_for_bit() -> None:
    assert _weighted([1.0, 2.0]) == _weighted([1.0, 2.0])
    assert _weighted([1.0, 2.0]) != _weighted([1.0, 3.0])  # same text, other weights
    assert _weighted([np.nan, 2.0]) == _weighted([np.nan, 2.0])  # NaN is its own bits
    assert _weighted([0.0, 2.0]) != _weighted([-0.0, 2.0])  # as the weight files differ
    parsed = mil.parse(_weighted([5.0, 6.0]).to_text(), _weighted([5.0, 6.0]).weight_files())
    assert parsed == _weighted([5.0, 6.0])


# -- the verifier's inference cache ---------------------------------------------------------------
def _reads_x(infer_values: frozenset[str]):
    from anekit.mil.ops.registry import OpDef, param
    from anekit.mil.types import DType, TensorType

    return OpDef(
        name="reads_x",
        params=(param("x", [DType.int32]),),
        infer=lambda a: TensorType(DType.fp16, (int(np.asarray(a.x.const)[0]),)),
        infer_values=infer_values,
    )


def _int_const(values: list[int]) -> mil.Value:
    from anekit.mil.types import DType, TensorType

    return mil.Value("", TensorType(DType.int32, (len(values),)), None, np.array(values, np.int32))


def test_inference_cannot_read_an_undeclared_value() -> None:
    from anekit.errors import MilTypeError
    from anekit.mil.verify import check_op

    with pytest.raises(MilTypeError, match="declare"):
        check_op(_reads_x(frozenset()), {"x": _int_const([2])})


def test_inference_cached_by_the_values_it_reads() -> None:
    from anekit.mil.verify import check_op

    opdef = _reads_x(frozenset({"x"}))
    assert check_op(opdef, {"x": _int_const([2])})[0].shape == (2,)
    assert check_op(opdef, {"x": _int_const([3])})[0].shape == (3,)  # not the cached (2,)
    assert check_op(opdef, {"x": _int_const([2])})[0].shape == (2,)


def test_the_inference_cache_has_a_bound() -> None:
    from anekit.mil import verify

    verify.clear_cache()
    b = mil.Builder()
    x = b.input("x", (1, 4096 + 60), "fp16")
    for n in range(1, verify.INFER_CACHE_ENTRIES + 50):  # a distinct signature each
        b.slice_by_size(x=x, begin=[0, 0], size=[1, n])
    assert len(verify._INFER_CACHE) == verify.INFER_CACHE_ENTRIES
