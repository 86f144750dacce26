"""Single ONNX ops through ``from_onnx``, each against onnxruntime on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import anekit  # noqa: E402
from anekit.frontends import onnx as aonnx  # noqa: E402

RNG = np.random.default_rng(0)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# (id, op, input shape, constant inputs (None: left out), attributes, opset)
CASES = [
    (
        "gemm_trans_alpha_beta",
        "Gemm",
        [4, 3],
        [f32(5, 4), f32(1, 5)],
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
        17,
    ),
    ("gemm_full_c", "Gemm", [3, 4], [f32(4, 5), f32(3, 5)], {}, 17),
    ("matmul_rank4", "MatMul", [2, 2, 3, 4], [f32(4, 5)], {}, 17),
    (
        "slice_negative_step",
        "Slice",
        [4, 6],
        [i64(-1, 5), i64(-100, 0), i64(0, 1), i64(-2, -2)],
        {},
        17,
    ),
    ("slice_clamped", "Slice", [4, 6], [i64(1), i64(2**62), i64(1)], {}, 17),
    ("pad_reflect", "Pad", [1, 2, 5, 5], [i64(0, 0, 1, 2, 0, 0, 2, 1)], {"mode": "reflect"}, 18),
    ("pad_constant_axes", "Pad", [2, 5], [i64(1, 2), np.array(1.5, np.float32), i64(1)], {}, 18),
    ("split_uneven_num_outputs", "Split", [7, 2], [], {"axis": 0, "num_outputs": 3}, 18),
    ("split_sizes", "Split", [2, 7], [i64(2, 5)], {"axis": 1}, 17),
    ("expand", "Expand", [3, 1], [i64(2, 3, 4)], {}, 17),
    ("tile", "Tile", [2, 3], [i64(2, 1)], {}, 17),
    ("clip_const", "Clip", [3, 4], [np.array(-0.5, np.float32), np.array(0.5, np.float32)], {}, 17),
    ("clip_low_only", "Clip", [3, 4], [np.array(0.1, np.float32)], {}, 17),
    ("hard_swish", "HardSwish", [3, 4], [], {}, 17),
    ("hard_sigmoid", "HardSigmoid", [3, 4], [], {"alpha": 0.3, "beta": 0.4}, 17),
    ("leaky_relu", "LeakyRelu", [3, 4], [], {"alpha": 0.2}, 17),
    ("gelu_tanh", "Gelu", [3, 4], [], {"approximate": "tanh"}, 20),
    ("log_softmax", "LogSoftmax", [3, 5], [], {"axis": 0}, 17),
    ("reduce_mean_input_axes", "ReduceMean", [2, 3, 4], [i64(-1, 0)], {"keepdims": 0}, 18),
    ("reduce_sum_attr_axes", "ReduceMax", [2, 3, 4], [], {"axes": [1]}, 17),
    (
        "max_pool_ceil",
        "MaxPool",
        [1, 2, 7, 7],
        [],
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        17,
    ),
    (
        "avg_pool_pads",
        "AveragePool",
        [1, 2, 6, 6],
        [],
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        17,
    ),
    (
        "avg_pool_count_pad",
        "AveragePool",
        [1, 2, 6, 6],
        [],
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        17,
    ),
    (
        "conv_same_upper_groups",
        "Conv",
        [1, 4, 5, 5],
        [f32(4, 2, 3, 3), f32(4)],
        {"auto_pad": "SAME_UPPER", "group": 2},
        17,
    ),
    (
        "conv_asymmetric_pads",
        "Conv",
        [1, 2, 5, 5],
        [f32(3, 2, 2, 2)],
        {"pads": [0, 1, 1, 0], "strides": [2, 1], "dilations": [1, 2]},
        17,
    ),
    ("instance_norm", "InstanceNormalization", [2, 3, 4, 4], [f32(3), f32(3)], {}, 17),
    ("layer_norm_axis", "LayerNormalization", [2, 3, 4], [f32(3, 4), f32(3, 4)], {"axis": 1}, 17),
    (
        "gather_elements",
        "GatherElements",
        [3, 4],
        [i64(0, 2, -1, 1).reshape(1, 4)],
        {"axis": 0},
        17,
    ),
    ("gather_scattered", "Gather", [5, 4], [i64(4, 0, 2)], {"axis": 0}, 17),
    ("squeeze_unsqueeze", "Squeeze", [3, 1, 4, 1], [i64(1)], {}, 17),
    ("transpose_default", "Transpose", [2, 3, 4], [], {}, 17),
    ("flatten_axis", "Flatten", [2, 3, 4], [], {"axis": 2}, 17),
    ("reciprocal", "Reciprocal", [3, 4], [], {}, 17),
    ("neg_max", "Max", [3, 4], [f32(4), f32(3, 1)], {}, 17),
]


def one_op_model(op: str, shape: list[int], consts: list, attrs: dict, opset: int):
    names = ["x"] + [f"c{i}" for i in range(len(consts))]
    outputs = ["y", "y1", "y2"] if attrs.get("num_outputs") == 3 else (
        ["y", "y1"] if op == "Split" else ["y"])  # fmt: skip
    node = helper.make_node(op, names, outputs, name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(c), n) for n, c in zip(names[1:], consts)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("op", "shape", "consts", "attrs", "opset"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])  # fmt: skip
def test_op_matches_onnxruntime(op, shape, consts, attrs, opset) -> None:
    model = one_op_model(op, shape, consts, attrs, opset)
    faithful = anekit.from_onnx(model, passes=(), verify=False)
    assert aonnx.compare(model, faithful).worst.rel_error < 1e-5
    anekit.from_onnx(model)  # the default passes, within the gate's 2e-2


def test_runtime_ids_gather_and_where_mask() -> None:
    """Token ids into an embedding table, masked by Where; int64 ids become int32 inputs."""
    table = f32(10, 4)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"]),
        helper.make_node("Cast", ["ids"], ["idsf"], to=TensorProto.FLOAT),
        helper.make_node("Greater", ["idsf", "five"], ["big"]),
        helper.make_node("Unsqueeze", ["big", "last"], ["big3"]),
        helper.make_node("Where", ["big3", "emb", "zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.float32(5), "five"),
         numpy_helper.from_array(i64(-1), "last"), numpy_helper.from_array(np.float32(0), "zero")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    prog = anekit.from_onnx(model)
    assert prog.main.inputs[0].dtype.value == "int32"
    ids = np.array([[0, 9, 6], [5, 3, 7]], np.int64)
    fidelity = aonnx.compare(model, prog, {"ids": ids})
    assert fidelity.worst.rel_error < 2e-3
    with anekit.compile(prog, backend="reference") as k:
        got = k(ids=ids.astype(np.int32))["y"]
    np.testing.assert_allclose(got, np.where((ids > 5)[..., None], table[ids], 0), atol=2e-3)
