"""ONNX models as untrusted input: sizes, external-data paths, shapes, opsets, unknown ops."""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import anekit  # noqa: E402
from anekit.errors import ConversionError  # noqa: E402
from anekit.frontends import onnx as aonnx  # noqa: E402


def linear_model(weight: TensorProto, opset: int = 17) -> onnx.ModelProto:
    """y = x @ W with W the given initializer (x [1, 4])."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", weight.name], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def external(name: str, location: str, dims: list[int], offset: int = 0, length: int | None = None):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset)}
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        t.external_data.add(key=k, value=v)
    return t


def save(model: onnx.ModelProto, path) -> str:
    path.write_bytes(model.SerializeToString())
    return str(path)


def test_external_data_inside_the_directory_is_read(tmp_path) -> None:
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    (tmp_path / "w.bin").write_bytes(b"\0" * 8 + w.tobytes())
    path = save(
        linear_model(external("W", "w.bin", [4, 3], offset=8, length=48)), tmp_path / "m.onnx"
    )
    prog = anekit.from_onnx(path, passes=())
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    with anekit.compile(prog, backend="reference") as k:
        np.testing.assert_allclose(k(x=x)["y"], x @ w, rtol=1e-6)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "sub/../../outside.bin"])
def test_external_data_outside_the_directory_refused(tmp_path, location: str) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\0" * 48)
    path = save(linear_model(external("W", location, [4, 3])), model_dir / "m.onnx")
    with pytest.raises(
        ConversionError, match="initializer 'W'.*(inside the directory|relative location)"
    ):
        anekit.from_onnx(path)


def test_external_data_link_in_the_directory_followed_to_a_regular_file(tmp_path) -> None:
    """As for every model file (anekit.files.model_file): the name is judged as written; a
    link the directory's owner placed there (the hub cache's ../../blobs) is followed, and
    what it reaches must be a regular file of the declared size."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    (tmp_path / "blob.bin").write_bytes(w.tobytes())
    os.symlink(tmp_path / "blob.bin", model_dir / "w.bin")
    os.symlink(tmp_path, model_dir / "d.bin")
    path = save(linear_model(external("W", "w.bin", [4, 3])), model_dir / "m.onnx")
    assert anekit.from_onnx(path, passes=()) is not None
    to_dir = save(linear_model(external("W", "d.bin", [4, 3])), model_dir / "d.onnx")
    with pytest.raises(ConversionError, match="a directory"):
        anekit.from_onnx(to_dir)


def test_external_data_range_checked(tmp_path) -> None:
    (tmp_path / "w.bin").write_bytes(b"\0" * 40)
    short = save(linear_model(external("W", "w.bin", [4, 3])), tmp_path / "short.onnx")
    with pytest.raises(ConversionError, match=r"needs bytes 0\.\.48 of 'w.bin', which holds 40"):
        anekit.from_onnx(short)
    lying = save(linear_model(external("W", "w.bin", [4, 3], length=8)), tmp_path / "lying.onnx")
    with pytest.raises(ConversionError, match="needs 48 bytes, external data says 8"):
        anekit.from_onnx(lying)
    (tmp_path / "fifo").mkdir()
    dev = save(linear_model(external("W", "fifo", [4, 3])), tmp_path / "dir.onnx")
    with pytest.raises(ConversionError, match="a directory"):
        anekit.from_onnx(dev)


def test_in_memory_model_with_external_data_refused() -> None:
    with pytest.raises(ConversionError, match="given in memory"):
        anekit.from_onnx(linear_model(external("W", "w.bin", [4, 3])))


def test_huge_declared_initializer_refused_before_allocating(tmp_path) -> None:
    huge = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 10**12])
    huge.raw_data = b"\0" * 16
    with pytest.raises(ConversionError, match="declares more than"):
        anekit.from_onnx(linear_model(huge))
    lying = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 3000])
    lying.raw_data = b"\0" * 16
    with pytest.raises(ConversionError, match="needs 48000 bytes, the model holds 16"):
        anekit.from_onnx(linear_model(lying))
    typed = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, 3], float_data=[1.0] * 5)
    with pytest.raises(ConversionError, match="needs 48 bytes, the model holds 20"):
        anekit.from_onnx(linear_model(typed))
    negative = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[4, -3])
    with pytest.raises(ConversionError, match="negative dimension"):
        anekit.from_onnx(linear_model(negative))


def test_bad_shapes_name_the_node() -> None:
    w = numpy_helper.from_array(np.ones((5, 3), np.float32), "W")  # x is [1, 4]: 4 != 5
    with pytest.raises(ConversionError, match="node 'mm'"):
        anekit.from_onnx(linear_model(w))
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([4, 2], np.int64), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(
        ConversionError, match=r"Reshape node 'bad_reshape': cannot reshape \[2, 3\]"
    ):
        anekit.from_onnx(model)


def test_opset_and_garbage_refused(tmp_path) -> None:
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    with pytest.raises(ConversionError, match="opset 11; .* 13-21"):
        anekit.from_onnx(linear_model(w, opset=11))
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(ConversionError, match="not an ONNX model"):
        anekit.from_onnx(garbage)
    with pytest.raises(ConversionError, match="cannot read an ONNX model"):
        anekit.from_onnx(tmp_path / "missing.onnx")


def test_fused_and_unknown_ops_listed_with_node_op_and_domain() -> None:
    h = [1, 8, 16]
    nodes = [
        helper.make_node("SkipLayerNormalization", ["x", "x", "g", "b"], ["n"], name="skip_ln",
                         domain="com.microsoft"),
        helper.make_node("Attention", ["n", "w", "bias"], ["a"], name="attn", num_heads=2,
                         domain="com.microsoft"),
        helper.make_node("Einsum", ["a", "a"], ["y"], name="ein", equation="bij,bkj->bik"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, h)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(s, np.float32), n) for n, s in
         (("g", [16]), ("b", [16]), ("w", [16, 48]), ("bias", [48]))],
    )  # fmt: skip
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    with pytest.raises(ConversionError) as info:
        anekit.from_onnx(model)
    assert info.value.problems == (
        ("skip_ln", "com.microsoft::SkipLayerNormalization", "domain 'com.microsoft'"),
        ("attn", "com.microsoft::Attention", "domain 'com.microsoft'"),
        ("ein", "ai.onnx::Einsum", "domain 'ai.onnx'"),
    )
    assert "3 node(s) use 3 op(s) with no lowering" in str(info.value)


def test_constant_subgraph_folds_and_unlowered_constant_ops_are_fine() -> None:
    """Shape -> Gather -> ... -> Reshape folds; a constant Einsum folds through onnx.reference."""
    a = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "a")
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Einsum", ["a", "a"], ["gram"], equation="ij,kj->ik"),
        helper.make_node("ReduceSum", ["gram"], ["total"], keepdims=0),
        helper.make_node("Mul", ["flat", "total"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [a, numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.array([0], np.int64), "zero1"),
         numpy_helper.from_array(np.array([-1], np.int64), "minus1")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    prog = anekit.from_onnx(model, passes=())
    assert [op.op_type for op in prog.main.ops if op.op_type != "const"] == ["reshape", "mul"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    with anekit.compile(prog, backend="reference") as k:
        np.testing.assert_allclose(k(x=x)["y"], x.reshape(2, -1) * (arr @ arr.T).sum(), rtol=1e-6)
    assert aonnx.compare(model, prog).worst.rel_error < 1e-6


def test_constant_with_external_data_checked_like_an_initializer(tmp_path) -> None:
    """A Constant node's tensor may name external data too: the same checks apply, and what
    folds is the array read (onnx.reference never sees the file name)."""
    (tmp_path / "outside.bin").write_bytes(np.ones(3, np.float32).tobytes())
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "c.bin").write_bytes(np.arange(3, dtype=np.float32).tobytes())

    def model(location: str) -> onnx.ModelProto:
        nodes = [helper.make_node("Constant", [], ["c"], value=external("c", location, [3])),
                 helper.make_node("Neg", ["c"], ["nc"]),
                 helper.make_node("Add", ["x", "nc"], ["y"])]  # fmt: skip
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )  # fmt: skip
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    inside = save(model("c.bin"), model_dir / "in.onnx")
    prog = anekit.from_onnx(inside, passes=(), verify=False)
    with anekit.compile(prog, backend="reference") as k:
        np.testing.assert_allclose(k(x=np.ones(3, np.float32))["y"], [1, 0, -1])
    outside = save(model("../outside.bin"), model_dir / "out.onnx")
    with pytest.raises(ConversionError, match="inside the directory"):
        anekit.from_onnx(outside, verify=False)
