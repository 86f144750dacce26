"""The multi-input packing pass and size ordering: packed programs compute exactly what the originals do."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from anekit import mil
from anekit.backends import reference
from anekit.errors import MilTypeError
from anekit.mil.rewrite import rename_io, substitute
from anekit.passes import InputPacking, device, fold_constants, order_by_size, pack_inputs

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics

RNG = np.random.default_rng(5)


# -- programs: each builder returns a verified program with two or more inputs --------------------
def same_shapes() -> mil.Program:
    b = mil.Builder()
    x, y = b.input("x", (1, 8, 1, 16)), b.input("y", (1, 8, 1, 16))
    b.output(b.mul(x=b.add(x=x, y=y), y=y), "z")
    return b.build()


def different_last_dims() -> mil.Program:
    b = mil.Builder()
    a, c, d = b.input("a", (1, 4, 1, 8)), b.input("c", (1, 4, 1, 3)), b.input("d", (1, 4, 1, 1))
    b.output(b.concat(values=[b.mul(x=a, y=d), c], axis=3), "out")
    return b.build()


def different_ranks() -> mil.Program:
    b = mil.Builder()
    x, s, m = b.input("x", (1, 6, 1, 4)), b.input("s", (1, 6, 1, 1)), b.input("m", (6, 4))
    y = b.add(x=b.mul(x=x, y=s), y=b.reshape(x=m, shape=[1, 6, 1, 4]))
    b.output(y, "y")
    return b.build()


def attention_scores() -> mil.Program:
    b = mil.Builder()
    q, k, v = b.input("q", (1, 16, 8)), b.input("k", (1, 16, 8)), b.input("v", (1, 16, 8))
    scores = b.softmax(x=b.matmul(x=q, y=k, transpose_y=True), axis=-1)
    b.output(b.matmul(x=scores, y=v), "o")
    return b.build()


def dynamic_weight_linear() -> mil.Program:
    """The training recipe's shapes: activations [1, IC, 1, SEQ] and weights [1, IC, 1, OC]."""
    b = mil.Builder()
    x, w = b.input("x", (1, 32, 1, 16)), b.input("w", (1, 32, 1, 24))
    xt = b.reshape(x=x, shape=[1, 32, 16])
    wt = b.reshape(x=w, shape=[1, 32, 24])
    y = b.matmul(x=wt, y=xt, transpose_x=True)  # [1, 24, 16]
    b.output(b.reshape(x=y, shape=[1, 24, 1, 16]), "y")
    return b.build()


def reused_and_passed_through() -> mil.Program:
    b = mil.Builder()
    x, y = b.input("x", (1, 4, 1, 8)), b.input("y", (1, 4, 1, 8))
    b.output(b.add(x=b.mul(x=x, y=x), y=b.mul(x=x, y=y)), "z")
    b.output(b.identity(x=y), "y_copy")
    return b.build()


def with_weight_files() -> mil.Program:
    b = mil.Builder()
    x, g = b.input("x", (1, 16, 1, 8)), b.input("g", (1, 16, 1, 1))
    w = b.weight("w", (RNG.standard_normal((8, 16, 1, 1)) / 4).astype(np.float16))
    bias = b.weight("bias", RNG.standard_normal((1, 8, 1, 1)).astype(np.float16))
    b.output(b.add(x=b.conv(x=b.mul(x=x, y=g), weight=w), y=bias), "y")
    return b.build()


def int32_inputs() -> mil.Program:
    b = mil.Builder()
    i, j = b.input("i", (2, 5), "int32"), b.input("j", (2, 3), "int32")
    b.output(b.concat(values=[b.add(x=i, y=7), b.mul(x=j, y=j)], axis=1), "k")
    return b.build()


def fp32_softmax_of_parts() -> mil.Program:
    b = mil.Builder()
    parts = [b.input(f"p{n}", (1, 3, 1, w), "fp32") for n, w in enumerate((2, 5, 9))]
    b.output(b.softmax(x=b.concat(values=parts, axis=3), axis=3), "sm")
    return b.build()


def tiny_mixed_shapes() -> mil.Program:
    b = mil.Builder()
    a, c, d = b.input("a", (1,)), b.input("c", (3,)), b.input("d", (2, 2))
    total = b.add(x=b.reduce_sum(x=d, axes=[0, 1], keep_dims=False), y=b.reduce_sum(x=c, axes=[0]))
    b.output(b.mul(x=a, y=total), "t")
    return b.build()


def unused_input() -> mil.Program:
    b = mil.Builder()
    x, _ = b.input("x", (1, 4, 1, 4)), b.input("ignored", (1, 4, 1, 2))
    b.output(b.sigmoid(x=x), "y")
    return b.build()


def name_clash_with_packed() -> mil.Program:
    b = mil.Builder()
    packed, other = b.input("packed", (1, 2, 1, 4)), b.input("packed_1", (1, 2, 1, 4))
    b.output(b.sub(x=packed, y=other), "packed_out")
    return b.build()


PROGRAMS: dict[str, Callable[[], mil.Program]] = {
    f.__name__: f
    for f in (
        same_shapes,
        different_last_dims,
        different_ranks,
        attention_scores,
        dynamic_weight_linear,
        reused_and_passed_through,
        with_weight_files,
        int32_inputs,
        fp32_softmax_of_parts,
        tiny_mixed_shapes,
        unused_input,
        name_clash_with_packed,
    )
}


def random_inputs(program: mil.Program) -> dict[str, np.ndarray]:
    result = {}
    for v in program.main.inputs:
        if v.dtype.is_int:
            result[v.name] = RNG.integers(-50, 50, v.shape).astype(v.dtype.numpy)
        else:
            result[v.name] = RNG.standard_normal(v.shape).astype(v.dtype.numpy)
    return result


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_packed_program_gives_identical_outputs(name: str) -> None:
    program = PROGRAMS[name]()
    packed, packing = pack_inputs(program)
    assert packing is not None
    assert [v.name for v in packed.main.inputs] == [packing.name]
    assert [v.name for v in packed.main.outputs] == [v.name for v in program.main.outputs]
    original = reference.compile(program)
    rewritten = reference.compile(packed)
    for _ in range(3):
        inputs = random_inputs(program)
        want = original(**inputs)
        got = rewritten(**{packing.name: packing.pack(inputs)})
        assert set(got) == set(want)
        for out in want:
            np.testing.assert_array_equal(got[out], want[out], err_msg=f"{name}: output {out}")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_packed_program_is_valid_mil_text_with_the_same_weights(name: str) -> None:
    program = PROGRAMS[name]()
    packed, _ = pack_inputs(program)
    assert packed.weight_files() == program.weight_files()
    again = mil.parse(packed.to_text(), weights=packed.weight_files())
    assert again.to_text() == packed.to_text()


def test_original_program_is_untouched() -> None:
    program = with_weight_files()
    text = program.to_text()
    pack_inputs(program)
    assert program.to_text() == text
    assert [v.name for v in program.main.inputs] == ["x", "g"]


def test_leading_dims_agree_so_inputs_concatenate_along_the_last_axis() -> None:
    _, packing = pack_inputs(different_last_dims())
    assert packing.shape == (1, 4, 1, 12)
    assert [(s.name, s.offset, s.width) for s in packing.segments] == [
        ("a", 0, 8),
        ("c", 8, 3),
        ("d", 11, 1),
    ]


def test_other_shapes_are_flattened_to_1_1_1_n() -> None:
    _, packing = pack_inputs(different_ranks())
    assert packing.shape == (1, 1, 1, 24 + 6 + 24)
    assert [s.packed_shape for s in packing.segments] == [
        (1, 1, 1, 24),
        (1, 1, 1, 6),
        (1, 1, 1, 24),
    ]


def test_views_are_zero_copy_and_pack_unpack_round_trip() -> None:
    for make in (different_last_dims, different_ranks):
        program = make()
        _, packing = pack_inputs(program)
        inputs = random_inputs(program)
        packed = packing.pack(inputs)
        for name, view in packing.views(packed).items():
            assert np.shares_memory(view, packed), name
            np.testing.assert_array_equal(view, inputs[name])
        back = packing.unpack(packed)
        for name, value in inputs.items():
            np.testing.assert_array_equal(back[name], value)
            assert not np.shares_memory(back[name], packed)


def test_writing_a_view_fills_the_packed_array_in_place() -> None:
    _, packing = pack_inputs(different_ranks())
    packed = np.zeros(packing.shape, np.float16)
    packing.views(packed)["m"][...] = np.arange(24, dtype=np.float16).reshape(6, 4)
    np.testing.assert_array_equal(packed[0, 0, 0, 30:], np.arange(24))
    assert not packed[0, 0, 0, :30].any()


def test_mixed_dtypes_cannot_be_packed() -> None:
    b = mil.Builder()
    x, i = b.input("x", (1, 4), "fp16"), b.input("i", (1, 4), "int32")
    b.output(b.identity(x=x), "y")
    b.output(b.identity(x=i), "j")
    with pytest.raises(MilTypeError, match=r"different dtypes .*x: fp16, i: int32"):
        pack_inputs(b.build())


def test_single_input_programs_are_left_alone() -> None:
    b = mil.Builder()
    b.output(b.sigmoid(x=b.input("x", (1, 4))), "y")
    program = b.build()
    assert pack_inputs(program) == (program, None)


def test_pack_checks_names_and_shapes() -> None:
    _, packing = pack_inputs(same_shapes())
    with pytest.raises(ValueError, match="exactly the inputs"):
        packing.pack({"x": np.zeros((1, 8, 1, 16))})
    with pytest.raises(ValueError, match="expected shape"):
        packing.pack({"x": np.zeros((1, 8, 1, 16)), "y": np.zeros((1, 8, 1, 15))})
    assert isinstance(packing, InputPacking)


def test_order_by_size_sorts_inputs_up_and_outputs_down() -> None:
    b = mil.Builder()
    big, small, mid = b.input("big", (1, 64)), b.input("small", (1, 2)), b.input("mid", (1, 8))
    b.output(b.identity(x=small), "o_small")
    b.output(b.identity(x=big), "o_big")
    b.output(b.identity(x=mid), "o_mid")
    program = b.build()
    ordered = order_by_size(program)
    assert [v.name for v in ordered.main.inputs] == ["small", "mid", "big"]
    assert [v.name for v in ordered.main.outputs] == ["o_big", "o_mid", "o_small"]
    inputs = random_inputs(program)
    want, got = reference.compile(program)(**inputs), reference.compile(ordered)(**inputs)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    assert order_by_size(ordered) is ordered


def test_order_by_size_keeps_ties_in_program_order() -> None:
    program = same_shapes()
    assert order_by_size(program) is program


# -- the chip's dimension limit (issue 12, item 7) ---------------------------------------------------
def wide_inputs(widths: tuple[int, ...], channels: int = 1) -> mil.Program:
    b = mil.Builder()
    xs = [b.input(f"x{i}", (1, channels, 1, w)) for i, w in enumerate(widths)]
    for i, x in enumerate(xs):
        b.output(b.mul(x=x, y=float(i + 2)), f"y{i}")
    return b.build()


def assert_same_outputs(program: mil.Program, packed: mil.Program, packing) -> None:
    inputs = random_inputs(program)
    got = reference.compile(packed)(**{packing.name: packing.pack(inputs)})
    for i, name in enumerate(inputs):  # each output is (i + 2) * input i, computed here in NumPy
        want = (inputs[name].astype(np.float32) * (i + 2)).astype(np.float16)
        np.testing.assert_array_equal(got[f"y{i}"], want, err_msg=name)


def test_inputs_over_the_limit_fold_into_rows_of_one_width() -> None:
    program = wide_inputs((48, 64, 32))  # each within the limit of 64, together 144
    packed, packing = pack_inputs(program, max_dim=64)
    assert packing.shape == (1, 9, 1, 16)  # W = gcd(48, 64, 32) = 16: 3 + 4 + 2 rows
    assert [(s.packed_shape, s.offset, s.axis) for s in packing.segments] == [
        ((1, 3, 1, 16), 0, 1),
        ((1, 4, 1, 16), 3, 1),
        ((1, 2, 1, 16), 7, 1),
    ]
    assert max(d for v in packed.main.inputs for d in v.shape) <= 64
    for op in packed.ops:
        for v in (*op.input_values(), *op.outputs):
            assert all(d <= 64 for d in v.shape), (op.op_type, v.name, v.shape)
    assert_same_outputs(program, packed, packing)


def test_rows_take_the_widest_width_dividing_every_input() -> None:
    program = wide_inputs((24, 40))  # gcd 8: W = 8 gives 3 + 5 rows
    packed, packing = pack_inputs(program, max_dim=40)
    assert packing.shape == (1, 8, 1, 8)
    assert [(s.offset, s.width) for s in packing.segments] == [(0, 3), (3, 5)]
    packed_array = packing.pack(random_inputs(program))
    for name, view in packing.views(packed_array).items():
        assert np.shares_memory(view, packed_array), name
    assert_same_outputs(program, packed, packing)


def test_inputs_that_cannot_fold_within_the_limit_stay_unpacked() -> None:
    program = wide_inputs((61, 59))  # coprime sizes: rows of width 1 would be 120 > 64
    assert pack_inputs(program, max_dim=64) == (program, None)
    assert pack_inputs(program, max_dim=120)[1].shape == (1, 1, 1, 120)


def test_the_default_limit_is_65536_and_same_leading_dims_still_concatenate() -> None:
    program = wide_inputs((40000, 30000), channels=1)
    _, packing = pack_inputs(program)
    assert packing.shape[1] > 1 and max(packing.shape) <= 65536  # 70000 would be over
    _, packing = pack_inputs(wide_inputs((30000, 30000)))
    assert packing.shape == (1, 1, 1, 60000)


# -- substitute: rewrites rebuild ops ------------------------------------------------------------
def test_substitute_rebuilds_the_op_and_leaves_the_original_alone() -> None:
    program = same_shapes()
    add = next(op for op in program.ops if op.op_type == "add")
    x = program.main.inputs[0]
    other = mil.Value("w", x.type)
    new = substitute(add, {id(x): other})
    assert new is not add and new.inputs["x"] is other and new.inputs["y"] is add.inputs["y"]
    assert [v.name for v in new.outputs] == [v.name for v in add.outputs]
    assert new.outputs[0] is not add.outputs[0] and new.outputs[0].producer is new
    assert add.inputs["x"] is x and add.outputs[0].producer is add


def test_rename_io_renames_the_interface_and_leaves_the_original_alone() -> None:
    b = mil.Builder()
    x, y = b.input("x", (1, 4, 1, 8)), b.input("y", (1, 4, 1, 8))
    s = b.add(x=x, y=y)
    b.output(b.mul(x=s, y=y), "z")
    b.output(s, "s")
    b.output(x, "x")  # an output that is an input needs its own value under its new name
    program = b.build()
    before = program.to_text()
    renamed = rename_io(
        program, {"x": "i0_x", "y": "i1_y"}, {"z": "o0_z", "s": "o1_s", "x": "o2_x"}
    )
    assert program.to_text() == before
    fn = renamed.main
    assert [v.name for v in fn.inputs] == ["i0_x", "i1_y"]
    assert [v.name for v in fn.outputs] == ["o0_z", "o1_s", "o2_x"]
    assert fn.outputs[2].producer is not None and fn.outputs[2].producer.op_type == "identity"
    xs = RNG.standard_normal((1, 4, 1, 8)).astype(np.float16)
    ys = RNG.standard_normal((1, 4, 1, 8)).astype(np.float16)
    with reference.compile(program) as k, reference.compile(renamed) as r:
        want, got = k(x=xs, y=ys), r(i0_x=xs, i1_y=ys)
    np.testing.assert_array_equal(got["o0_z"], want["z"])
    np.testing.assert_array_equal(got["o1_s"], want["s"])
    np.testing.assert_array_equal(got["o2_x"], xs)
    assert mil.parse(renamed.to_text(), renamed.weight_files()) == renamed


def test_substitute_refuses_a_value_of_another_type() -> None:
    program = same_shapes()
    add = next(op for op in program.ops if op.op_type == "add")
    x = program.main.inputs[0]
    with pytest.raises(MilTypeError, match=r"cannot substitute 'w' .*\[1, 8, 1, 8\].* for 'x'"):
        substitute(add, {id(x): mil.Value("w", mil.TensorType(mil.DType.fp16, (1, 8, 1, 8)))})


# -- fold_constants --------------------------------------------------------------------------------
def foldable() -> mil.Program:
    """A runtime mul and add around constant work: a weight transpose and reshape, a scale."""
    b = mil.Builder()
    x = b.input("x", (1, 8, 1, 16))
    w = b.weight("w", RNG.standard_normal((16, 8)).astype(np.float16))
    w_rows = b.reshape(x=b.transpose(x=w, perm=[1, 0]), shape=[1, 8, 1, 16])
    scale = b.mul(x=b.const(np.float16(3.0)), y=b.const(np.float16(0.5)))
    halves = b.split(
        x=b.const(np.arange(16, dtype=np.float16).reshape(1, 1, 1, 16)), num_splits=2, axis=3
    )
    b.output(b.add(x=b.mul(x=x, y=scale), y=w_rows), "y")
    b.output(b.mul(x=x, y=b.concat(values=[halves[1], halves[0]], axis=3)), "z")
    return b.build()


def runtime_ops(program: mil.Program) -> list[str]:
    return [op.op_type for op in program.ops if op.op_type != "const"]


def assert_equivalent(program: mil.Program, folded: mil.Program) -> None:
    for _ in range(3):
        inputs = random_inputs(program)
        want = reference.compile(program)(**inputs)
        got = reference.compile(folded)(**inputs)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_fold_constants_computes_the_constant_work_once() -> None:
    program = foldable()
    folded = fold_constants(program)
    assert runtime_ops(program) == [
        "transpose", "reshape", "mul", "split", "mul", "add", "concat", "mul"
    ]  # fmt: skip
    assert runtime_ops(folded) == ["mul", "add", "mul"]
    assert_equivalent(program, folded)


def test_folded_values_are_what_numpy_computes() -> None:
    program = foldable()
    w = next(v.const for v in program.ops[0].input_values())
    folded = fold_constants(program)
    by_name = {op.outputs[0].name: op for op in folded.ops if op.op_type == "const"}
    rows = by_name["reshape"].inputs["val"]
    np.testing.assert_array_equal(rows.const, w.T.reshape(1, 8, 1, 16))
    assert rows.blob is not None  # made from a weight: stays in a weight file
    assert by_name["mul"].inputs["val"].const == np.float16(1.5)
    assert by_name["mul"].inputs["val"].blob is None  # made from literals: inline
    swapped = np.concatenate([np.arange(8, 16), np.arange(8)])  # split, then concat reversed
    np.testing.assert_array_equal(by_name["concat"].outputs[0].const[0, 0, 0], swapped)
    # the transposed weight replaced the original: one weight file, no dead const left
    assert list(folded.weight_files()) == ["@model_path/weights/reshape.bin"]
    assert sorted(by_name) == ["concat", "mul", "reshape"] and len(folded.ops) == 3 + 3


def test_folded_program_round_trips_through_text() -> None:
    folded = fold_constants(foldable())
    again = mil.parse(folded.to_text(), weights=folded.weight_files())
    assert again == folded


def test_fold_leaves_the_original_untouched() -> None:
    program = foldable()
    text, weights = program.to_text(), program.weight_files()
    fold_constants(program)
    assert program.to_text() == text and program.weight_files() == weights
    unchanged = same_shapes()
    assert fold_constants(unchanged) is unchanged  # nothing to fold: the same object


def test_large_results_of_small_literals_stay_ops() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 1, 256, 256))
    ones = b.fill(shape=np.array([1, 1, 256, 256], np.int32), value=np.float16(1.0))  # 128 kB
    b.output(b.add(x=x, y=ones), "y")
    program = b.build()
    assert "fill" in runtime_ops(fold_constants(program))
    folded = fold_constants(program, max_bytes=1 << 20)
    assert "fill" not in runtime_ops(folded)
    assert folded.ops[0].inputs["val"].blob is not None  # 65536 values: a weight file, not text
    assert len(folded.to_text()) < 2000
    assert_equivalent(program, folded)


def test_constexpr_weights_stay_compressed() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 8, 1, 4))
    w = b.constexpr_affine_dequantize(
        quantized_data=RNG.integers(-8, 8, (8, 8, 1, 1)).astype(np.int8),
        zero_point=np.int8(0),
        scale=np.float16(0.25),
        axis=0,
    )
    b.output(b.conv(x=x, weight=b.mul(x=w, y=np.float16(2.0))), "y")
    program = b.build()
    folded = fold_constants(program)
    assert runtime_ops(folded) == ["constexpr_affine_dequantize", "mul", "conv"]
    assert folded == program


def test_fp16_overflow_and_program_outputs_stay_ops() -> None:
    b = mil.Builder()
    x = b.input("x", (4,))
    big = b.mul(x=b.const(np.full(4, 300, np.float16)), y=b.const(np.full(4, 300, np.float16)))
    b.output(b.add(x=x, y=big), "y")  # 90000 overflows fp16: folding would hide the inf
    b.output(b.sub(x=b.const(np.ones(4, np.float16)), y=b.const(np.ones(4, np.float16))), "z")
    program = b.build()
    folded = fold_constants(program)
    assert runtime_ops(folded) == ["mul", "add", "sub"]
    assert_equivalent(program, folded)
    assert np.isinf(reference.compile(folded)(x=np.zeros(4, np.float16))["y"]).all()


def test_device_pipeline_folds_then_packs_then_orders() -> None:
    b = mil.Builder()
    x, y = b.input("x", (1, 4, 1, 8)), b.input("y", (1, 4, 1, 2))
    scale = b.mul(x=b.const(np.float16(2.0)), y=b.const(np.float16(4.0)))
    b.output(b.mul(x=x, y=scale), "small_first")
    b.output(b.mul(x=y, y=scale), "then_big")
    program = b.build()
    prepared, packing = device(program)
    assert packing is not None and packing.shape == (1, 4, 1, 10)
    assert [op.op_type for op in prepared.ops].count("mul") == 2  # the scale is folded
    assert [v.name for v in prepared.main.outputs] == ["small_first", "then_big"]
    inputs = random_inputs(program)
    got = reference.compile(prepared)(**{packing.name: packing.pack(inputs)})
    want = reference.compile(program)(**inputs)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    unpacked, none = device(program, pack=False)
    assert none is None and [v.name for v in unpacked.main.inputs] == ["y", "x"]


def test_packing_rank_0_inputs() -> None:
    b = mil.Builder()
    a, c = b.input("a", (), "fp16"), b.input("c", (), "fp16")
    b.output(b.sub(x=a, y=c), "r")
    packed, packing = pack_inputs(b.build())
    assert packing is not None
    out = reference.compile(packed)(**{packing.name: packing.pack({"a": 5.0, "c": 1.5})})
    assert out["r"] == np.float16(5.0) - np.float16(1.5)
