"""Data-movement ops: what the generic case loop cannot express.

Type errors (each a MilTypeError naming op and parameter), opset differences
(reshape's rule for 0, gather's negative indices), run-time index checks, costs,
and known answers published by coremltools.
"""

from __future__ import annotations

import numpy as np
import pytest

from anekit import mil
from anekit.errors import EvaluationError, MilTypeError
from anekit.mil.ops import registry
from anekit.mil.ops.traits import EXACT
from tests.optest import run_reference


def _one_op(op: str, x_shape: tuple, dtype: str = "fp16", opset: str = "ios18", /, **params):
    b = mil.Builder(opset)
    x = b.input("x", x_shape, dtype)
    out = getattr(b, op)(x=x, **params)
    for i, v in enumerate(out if isinstance(out, tuple) else (out,)):
        b.output(v, f"y{i}")
    return b.build()


def _rejects(op: str, param: str, x_shape: tuple, /, match=None, opset="ios18", **params):
    with pytest.raises(MilTypeError, match=match) as err:
        _one_op(op, x_shape, "fp16", opset, **params)
    assert err.value.op == op and err.value.param == param, str(err.value)
    return err.value


# -- reshape ---------------------------------------------------------------------------------


def test_reshape_count_mismatch_names_shape_and_both_counts() -> None:
    err = _rejects("reshape", "shape", (2, 3, 4), shape=[5, 4])
    assert "[5, 4]" in err.message and "20" in err.message and "24" in err.message


@pytest.mark.parametrize(
    "shape, fragment",
    [([-1, -1], "at most one -1"), ([2, -2], ">= -1"), ([5, -1], "multiple")],
)
def test_reshape_rejects_bad_specs(shape, fragment) -> None:
    _rejects("reshape", "shape", (2, 3, 4), match=fragment, shape=shape)


def test_reshape_zero_copies_same_index_in_ios15_and_aligns_right_in_ios17() -> None:
    old = _one_op("reshape", (2, 3, 4), "fp16", "ios15", shape=[0, -1, 0])
    new = _one_op("reshape", (2, 3, 4), "fp16", "ios17", shape=[0, -1, 0])
    assert old.outputs[0].shape == (2, 3, 4)  # x.shape[0], rest, x.shape[2]
    assert new.outputs[0].shape == (2, 3, 4)
    old2 = _one_op("reshape", (2, 3, 4), "fp16", "ios16", shape=[0, 0, -1])
    new2 = _one_op("reshape", (2, 3, 4), "fp16", "ios18", shape=[0, -1])
    assert old2.outputs[0].shape == (2, 3, 4)
    assert new2.outputs[0].shape == (3, 8)  # zeros take x.shape from the right
    x = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    np.testing.assert_array_equal(run_reference(new2, {"x": x})["y0"], x.reshape(3, 8))


def test_reshape_ios15_zero_needs_equal_rank() -> None:
    _rejects("reshape", "shape", (2, 3, 4), opset="ios15", match="len", shape=[0, -1])


def test_reshape_shape_must_be_const() -> None:
    b = mil.Builder()
    x = b.input("x", (2, 3), "fp16")
    s = b.input("s", (2,), "int32")
    with pytest.raises(MilTypeError, match="compile-time constant") as err:
        b.reshape(x=x, shape=s)
    assert err.value.param == "shape"


# -- transpose, squeeze, expand_dims, flatten2d ------------------------------------------------


@pytest.mark.parametrize("perm", [[0, 1], [0, 1, 1], [0, 1, 3]])
def test_transpose_rejects_non_permutations(perm) -> None:
    _rejects("transpose", "perm", (2, 3, 4), perm=perm)


def test_expand_dims_and_flatten2d_axis_ranges() -> None:
    _rejects("expand_dims", "axes", (2, 3), axes=[3])
    _rejects("expand_dims", "axes", (2, 3), axes=[0, 0])
    _rejects("flatten2d", "axis", (2, 3), axis=3)
    _rejects("squeeze", "x", ())


# -- concat, stack, split, tile --------------------------------------------------------------


def _join(op: str, shapes, dtypes=None, **params):
    b = mil.Builder()
    dtypes = dtypes or ["fp16"] * len(shapes)
    values = [b.input(f"v{i}", s, d) for i, (s, d) in enumerate(zip(shapes, dtypes, strict=True))]
    return getattr(b, op)(values=values, **params)


@pytest.mark.parametrize(
    "shapes, params, fragment",
    [
        ([(2, 3), (3, 3)], {"axis": 1}, "except on axis 1"),
        ([(2, 3), (2, 4)], {"axis": 1, "interleave": True}, "interleave"),
        ([(2, 3), (2, 3, 1)], {"axis": 0}, "equal shapes"),
        ([(2, 3)], {"axis": 2}, "out of range"),
    ],
)
def test_concat_rejects_mismatched_inputs(shapes, params, fragment) -> None:
    with pytest.raises(MilTypeError, match=fragment) as err:
        _join("concat", shapes, **params)
    assert err.value.op == "concat"


def test_concat_and_stack_need_one_dtype() -> None:
    with pytest.raises(MilTypeError, match="differs") as err:
        _join("concat", [(2,), (2,)], ["fp16", "fp32"], axis=0)
    assert err.value.param == "values"
    with pytest.raises(MilTypeError, match="equal shapes"):
        _join("stack", [(2,), (3,)], axis=0)


def test_concat_interleave_matches_docstring_example() -> None:
    """coremltools' concat docstring: in1 rows then in2 rows alternate."""
    b = mil.Builder()
    a, c = b.input("a", (3, 2), "fp32"), b.input("c", (3, 2), "fp32")
    b.output(b.concat(values=[a, c], axis=0, interleave=True), "y")
    in1 = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    in2 = np.array([[7, 8], [9, 10], [11, 12]], np.float32)
    got = run_reference(b.build(), {"a": in1, "c": in2})["y"]
    np.testing.assert_array_equal(got, [[1, 2], [7, 8], [3, 4], [9, 10], [5, 6], [11, 12]])


@pytest.mark.parametrize(
    "params, param",
    [
        ({"num_splits": 4, "axis": 1}, "num_splits"),
        ({"split_sizes": [2, 3], "axis": 1}, "split_sizes"),
        ({"split_sizes": [6, 0], "axis": 1}, "split_sizes"),
        ({"num_splits": 3, "split_sizes": [2, 4], "axis": 1}, "num_splits"),
        ({"axis": 1}, "num_splits"),
    ],
)
def test_split_rejects_bad_sizes(params, param) -> None:
    _rejects("split", param, (2, 6), **params)


def test_tile_needs_positive_reps_per_dimension() -> None:
    _rejects("tile", "reps", (2, 3), reps=[2])
    _rejects("tile", "reps", (2, 3), reps=[2, 0])


# -- slices ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, param, fragment",
    [
        ({"begin": [0, 0], "end": [2, 3], "stride": [1, 0]}, "stride", "is 0"),
        ({"begin": [1, 0], "end": [1, 3]}, "end", "slices to nothing"),
        ({"begin": [0], "end": [2, 3]}, "begin", "2 entries"),
        ({"begin": [5, 0], "end": [0, 3], "squeeze_mask": [True, False]}, "begin", "out of range"),
    ],
)
def test_slice_by_index_rejects(params, param, fragment) -> None:
    _rejects("slice_by_index", param, (4, 3), match=fragment, **params)


def test_slice_by_index_negative_stride_through_first_element_with_end_mask() -> None:
    prog = _one_op(
        "slice_by_index", (5,), "int32", begin=[3], end=[0], stride=[-1], end_mask=[True]
    )
    x = np.arange(5, dtype=np.int32) * 10
    np.testing.assert_array_equal(run_reference(prog, {"x": x})["y0"], [30, 20, 10, 0])


def test_slice_by_size_const_window_must_fit() -> None:
    _rejects("slice_by_size", "begin", (4, 6), begin=[3, 0], size=[2, 6])
    _rejects("slice_by_size", "size", (4, 6), begin=[0, 0], size=[0, 6])


def test_slice_by_size_runtime_begin_checked_at_run_time() -> None:
    b = mil.Builder()
    x, begin = b.input("x", (4, 6), "fp16"), b.input("begin", (2,), "int32")
    b.output(b.slice_by_size(x=x, begin=begin, size=[2, 3]), "y")
    prog = b.build()
    x_val = np.arange(24, dtype=np.float16).reshape(4, 6)
    got = run_reference(prog, {"x": x_val, "begin": np.array([-2, 3], np.int32)})["y"]
    np.testing.assert_array_equal(got, x_val[2:4, 3:6])
    with pytest.raises(EvaluationError, match="slice_by_size"):
        run_reference(prog, {"x": x_val, "begin": np.array([3, 0], np.int32)})
    with pytest.raises(MilTypeError, match="constant begin"):
        b.slice_by_size(x=x, begin=begin, size=[-1, 3])


# -- gathers ---------------------------------------------------------------------------------


def _gather_program(opset: str, x_shape=(4, 3), i_shape=(2,), **params):
    b = mil.Builder(opset)
    x, i = b.input("x", x_shape, "fp32"), b.input("i", i_shape, "int32")
    b.output(b.gather(x=x, indices=i, **params), "y")
    return b.build()


def test_gather_negative_indices_wrap_until_ios16_and_are_rejected_from_ios17() -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([-1, 0], np.int32)
    got = run_reference(_gather_program("ios16"), {"x": x, "i": idx})["y"]
    np.testing.assert_array_equal(got, x[[3, 0]])
    with pytest.raises(EvaluationError, match=r"index -1 out of range \[0, 4\)"):
        run_reference(_gather_program("ios17"), {"x": x, "i": idx})
    with pytest.raises(EvaluationError, match="out of range"):
        run_reference(_gather_program("ios15"), {"x": x, "i": np.array([4, 0], np.int32)})


def test_gather_parameters_by_opset() -> None:
    with pytest.raises(MilTypeError, match="unknown parameter") as err:
        _gather_program("ios15", (2, 3), (2, 2), axis=1, batch_dims=1)
    assert err.value.param == "batch_dims"
    with pytest.raises(MilTypeError, match="batch_dims"):
        _gather_program("ios16", (2, 3), (2, 2), axis=0, batch_dims=1)
    with pytest.raises(MilTypeError, match="leading 1 dimensions differ"):
        _gather_program("ios16", (2, 3), (3, 2), axis=1, batch_dims=1)


def test_gather_validate_indices_checks_const_indices() -> None:
    b = mil.Builder()
    x = b.input("x", (4, 3), "fp16")
    b.gather(x=x, indices=[3, 0], validate_indices=True)  # in range: fine
    with pytest.raises(MilTypeError, match=r"out of \[0, 4\)") as err:
        b.gather(x=x, indices=[4, 0], validate_indices=True)
    assert err.value.param == "indices"


def test_gather_along_axis_shape_rule() -> None:
    b = mil.Builder()
    x, i = b.input("x", (3, 4), "fp16"), b.input("i", (2, 4), "int32")
    with pytest.raises(MilTypeError, match="except on axis 1") as err:
        b.gather_along_axis(x=x, indices=i, axis=1)
    assert err.value.param == "indices"
    assert b.gather_along_axis(x=x, indices=i, axis=0).shape == (2, 4)


def test_gather_traits_and_cost() -> None:
    prog = _gather_program("ios18", (100, 8), (5,))
    op = prog.ops[-1]
    assert EXACT in op.opdef.traits  # rows of x: the reference backend need not round again
    cost = op.cost()
    assert cost.flops == 0
    assert cost.bytes_written == 5 * 8 * 4
    assert cost.bytes_read == 5 * 8 * 4 + 5 * 4  # the gathered rows and the indices


def test_data_movement_costs_are_moves() -> None:
    t = _one_op("transpose", (2, 3, 4), perm=[2, 1, 0]).ops[-1].cost()
    assert t.flops == 0 and t.bytes_written == 48 and t.bytes_read >= 48
    s = _one_op("slice_by_size", (8, 8), begin=[0, 0], size=[2, 8]).ops[-1].cost()
    assert s.flops == 0 and s.bytes_read == s.bytes_written == 32


# -- pad, block rearrangements, generated tensors ---------------------------------------------


@pytest.mark.parametrize(
    "params, param, fragment",
    [
        ({"pad": [1, 2, 3]}, "pad", "even count"),
        ({"pad": [0, 0, 0, 0, 0, 0, 0, 0]}, "pad", "at most 3"),
        ({"pad": [4, 0], "mode": "reflect"}, "pad", "at most 3"),
        ({"pad": [0, 5], "mode": "replicate"}, "pad", "at most 4"),
        ({"pad": [1, 1], "mode": "wrap"}, "mode", "expected one of"),
    ],
)
def test_pad_rejects(params, param, fragment) -> None:
    _rejects("pad", param, (2, 3, 4), match=fragment, **params)


def test_pad_replicate_up_to_size_is_allowed() -> None:
    prog = _one_op("pad", (1, 3), "fp32", pad=[0, 0, 3, 3], mode="replicate")
    got = run_reference(prog, {"x": np.array([[1, 2, 3]], np.float32)})["y0"]
    np.testing.assert_array_equal(got, [[1, 1, 1, 1, 2, 3, 3, 3, 3]])


def test_depth_to_space_and_pixel_shuffle_match_neuralnetwork_proto_example() -> None:
    """The [C=8, H=1, W=2] example of ReorganizeDataLayerParams (NeuralNetwork.proto)."""
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 8, 1, 2)
    dcr = run_reference(_one_op("depth_to_space", (1, 8, 1, 2), "fp32", block_size=2), {"x": x})
    crd = run_reference(_one_op("pixel_shuffle", (1, 8, 1, 2), "fp32", upscale_factor=2), {"x": x})
    np.testing.assert_array_equal(
        dcr["y0"][0], [[[1, 5, 2, 6], [9, 13, 10, 14]], [[3, 7, 4, 8], [11, 15, 12, 16]]]
    )
    np.testing.assert_array_equal(
        crd["y0"][0], [[[1, 3, 2, 4], [5, 7, 6, 8]], [[9, 11, 10, 12], [13, 15, 14, 16]]]
    )


def test_space_to_batch_matches_coremltools_test_values() -> None:
    """Values of TestSpaceToBatch / TestBatchToSpace (coremltools ops/tests/iOS14)."""
    x = np.arange(1, 17, dtype=np.float32).reshape(2, 1, 2, 4)
    s2b = _one_op(
        "space_to_batch", (2, 1, 2, 4), "fp32", block_shape=[2, 2], paddings=[[0, 0], [2, 0]]
    )
    got = run_reference(s2b, {"x": x})["y0"]
    rows = [[0, 1, 3], [0, 9, 11], [0, 2, 4], [0, 10, 12], [0, 5, 7], [0, 13, 15], [0, 6, 8]]
    rows.append([0, 14, 16])
    np.testing.assert_array_equal(got.reshape(8, 3), rows)
    b2s = _one_op(
        "batch_to_space", (8, 1, 1, 3), "fp32", block_shape=[2, 2], crops=[[0, 0], [2, 0]]
    )
    np.testing.assert_array_equal(run_reference(b2s, {"x": got})["y0"], x)


def test_block_ops_check_divisibility_and_rank() -> None:
    _rejects("depth_to_space", "x", (1, 6, 2, 2), match="multiple", block_size=2)
    _rejects("space_to_depth", "x", (1, 2, 3, 4), match="multiple", block_size=2)
    _rejects("pixel_shuffle", "x", (8, 2, 2), match="rank 4", upscale_factor=2)
    _rejects(
        "space_to_batch", "paddings", (1, 1, 3, 4), block_shape=[2, 2], paddings=[[0, 0], [0, 0]]
    )
    _rejects("batch_to_space", "x", (3, 1, 2, 2), block_shape=[2, 2], crops=[[0, 0], [0, 0]])


def test_pixel_unshuffle_needs_ios16() -> None:
    with pytest.raises(AttributeError, match="ios16"):
        _one_op("pixel_unshuffle", (1, 1, 4, 4), "fp16", "ios15", downscale_factor=2)
    assert _one_op("pixel_unshuffle", (1, 1, 4, 4), downscale_factor=2).outputs[0].shape == (
        1,
        4,
        2,
        2,
    )


def test_generated_tensor_errors() -> None:
    b = mil.Builder()
    with pytest.raises(MilTypeError, match="empty") as err:
        b.range_1d(start=3, end=3, step=1)
    assert err.value.op == "range_1d"
    with pytest.raises(MilTypeError, match="step must not be 0"):
        b.range_1d(start=0, end=3, step=0)
    with pytest.raises(MilTypeError, match="positive sizes"):
        b.fill(shape=[2, 0])
    with pytest.raises(MilTypeError, match=">= 1") as err:
        b.one_hot(indices=b.input("i", (2,), "int32"), one_hot_vector_size=0)
    assert err.value.param == "one_hot_vector_size"
    _rejects("band_part", "x", (4,))
    _rejects("shape", "x", ())


def test_data_movement_ops_declare_their_cost() -> None:
    names = (
        "reshape transpose squeeze expand_dims flatten2d reverse concat stack split tile pad "
        "fill range_1d shape one_hot band_part slice_by_index slice_by_size depth_to_space "
        "space_to_depth pixel_shuffle pixel_unshuffle space_to_batch batch_to_space"
    ).split()
    for name in names:
        opdef = registry.get(name)
        assert opdef.cost is not None, name
