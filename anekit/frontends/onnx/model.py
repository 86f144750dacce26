"""Reading an ONNX model as untrusted data: sizes checked before anything is allocated.

A ``.onnx`` file is a protobuf (at most 2 GiB, protobuf's own limit). Every tensor it
holds (initializers, ``Constant`` attributes) declares a shape and either carries its
bytes or names an external-data file with an offset and a length. Before a tensor
becomes an array, its declared size must equal the bytes that are actually there, an
external file must resolve inside the model's directory and hold the declared range,
and the total is bounded: a header declaring a 10^12-element initializer is refused
before a byte is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from anekit.errors import ConversionError
from anekit.files import model_file, open_regular, read_regular

# protobuf cannot encode a message larger than 2 GiB
MODEL_LIMIT = 2**31
# every tensor of a model, inline and external, at most this many bytes in all
TOTAL_LIMIT = 2**35
OPSETS = range(13, 22)  # the default-domain opsets this front end reads

_ITEMSIZE = {
    TensorProto.FLOAT: 4,
    TensorProto.FLOAT16: 2,
    TensorProto.BFLOAT16: 2,
    TensorProto.DOUBLE: 8,
    TensorProto.INT64: 8,
    TensorProto.INT32: 4,
    TensorProto.INT16: 2,
    TensorProto.INT8: 1,
    TensorProto.UINT8: 1,
    TensorProto.BOOL: 1,
}
# the typed repeated field each data type uses when it carries no raw_data
_TYPED_FIELD = {
    TensorProto.FLOAT: "float_data",
    TensorProto.DOUBLE: "double_data",
    TensorProto.INT64: "int64_data",
}


def _conversion_error(message: str, *, path: str | None = None) -> ConversionError:
    """The error factory anekit.files takes: ConversionError with the file named."""
    return ConversionError(f"{path}: {message}" if path else message)


@dataclass
class OnnxModel:
    """A checked ONNX model: its graph, its tensors as arrays, its fixed input shapes."""

    proto: onnx.ModelProto
    opset: int
    tensors: dict[str, np.ndarray]  # initializer name -> array (ONNX dtype kept)
    input_shapes: dict[str, tuple[int, ...]]  # graph input name -> static shape
    input_types: dict[str, int]  # graph input name -> ONNX elem_type
    names: dict[str, str] = field(default_factory=dict)  # ONNX I/O name -> MIL name
    base: Path | None = None  # the directory external data must lie in
    budget: list[int] = field(default_factory=lambda: [TOTAL_LIMIT])  # bytes still readable

    def array(self, t: TensorProto, what: str) -> np.ndarray:
        """A tensor the graph holds (a ``Constant``'s value), read within the model's budget."""
        return tensor_array(t, self.base, self.budget, what)

    @property
    def graph(self) -> onnx.GraphProto:
        return self.proto.graph

    @property
    def renamed(self) -> dict[str, str]:
        """The inputs and outputs whose ONNX names were not valid MIL names, old -> new."""
        return {k: v for k, v in self.names.items() if k != v}


def read_model(
    source: str | os.PathLike[str] | onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> OnnxModel:
    """Read and check a model (a path, or a ModelProto whose external data lies beside nothing).

    Raises:
        ConversionError: a file that is not an ONNX model, an opset outside 13-21, a tensor
            whose declared size does not match its bytes, external data outside the model's
            directory, a dynamic input dimension not fixed by ``input_shapes``.
    """
    if isinstance(source, onnx.ModelProto):
        proto, base = source, None
    else:
        path = Path(source)
        data = read_regular(path, limit=MODEL_LIMIT, what="an ONNX model", error=_conversion_error)
        try:
            proto = onnx.load_model_from_string(data)
        except Exception as e:  # protobuf raises DecodeError and others for garbage
            raise ConversionError(f"{path}: not an ONNX model ({type(e).__name__}: {e})") from e
        base = path.parent
    if proto.functions:
        proto = onnx.inliner.inline_local_functions(proto)
    opset = _default_opset(proto)
    budget = [TOTAL_LIMIT]
    tensors = _initializers(proto.graph, base, budget)
    shapes, types = _inputs(proto.graph, tensors, input_shapes or {})
    model = OnnxModel(proto, opset, tensors, shapes, types, base=base, budget=budget)
    model.names = io_names(proto.graph, tensors)
    return model


def _default_opset(proto: onnx.ModelProto) -> int:
    versions = {o.domain: o.version for o in proto.opset_import}
    version = versions.get("", versions.get("ai.onnx"))
    if version is None or version not in OPSETS:
        raise ConversionError(
            f"the model imports default-domain opset {version}; this front end reads opsets "
            f"{OPSETS.start}-{OPSETS.stop - 1} (re-export with opset_version in that range)"
        )
    return version


def _initializers(
    graph: onnx.GraphProto, base: Path | None, budget: list[int]
) -> dict[str, np.ndarray]:
    tensors = {}
    for t in graph.initializer:
        tensors[t.name] = tensor_array(t, base, budget, f"initializer {t.name!r}")
    for t in graph.sparse_initializer:
        raise ConversionError(f"sparse initializer {t.values.name!r}: sparse tensors are not read")
    return tensors


def declared_bytes(t: TensorProto, what: str) -> int:
    """The bytes a tensor's dims and data type declare, checked to be a sane size."""
    itemsize = _ITEMSIZE.get(t.data_type)
    if itemsize is None:
        name = TensorProto.DataType.Name(t.data_type) if t.data_type else "UNDEFINED"
        raise ConversionError(f"{what}: data type {name} is not supported")
    count = 1
    for d in t.dims:
        if d < 0:
            raise ConversionError(f"{what}: negative dimension in shape {list(t.dims)}")
        count *= d
        if count * itemsize > TOTAL_LIMIT:
            raise ConversionError(
                f"{what}: shape {list(t.dims)} declares more than {TOTAL_LIMIT} bytes"
            )
    return count * itemsize


def tensor_array(t: TensorProto, base: Path | None, budget: list[int], what: str) -> np.ndarray:
    """A TensorProto's array, after its declared size is checked against the bytes present.

    ``budget`` holds the bytes the model may still read; this tensor's are taken from it.
    """
    size = declared_bytes(t, what)
    if size > budget[0]:
        raise ConversionError(
            f"{what}: its {size} bytes exceed the model's {TOTAL_LIMIT}-byte limit"
        )
    budget[0] -= size
    if t.data_location == TensorProto.EXTERNAL:
        t = _with_external_bytes(t, base, size, what)
    else:
        _check_inline(t, size, what)
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # onnx raises ValueError/TypeError for malformed tensors
        raise ConversionError(f"{what}: cannot be read ({type(e).__name__}: {e})") from e


def _check_inline(t: TensorProto, size: int, what: str) -> None:
    itemsize = _ITEMSIZE[t.data_type]
    if t.HasField("raw_data"):
        found = len(t.raw_data)
    else:
        typed = _TYPED_FIELD.get(t.data_type, "int32_data")  # ONNX keeps small ints in int32_data
        found = len(getattr(t, typed)) * itemsize
    if found != size:
        raise ConversionError(
            f"{what}: shape {list(t.dims)} needs {size} bytes, the model holds {found}"
        )


def _external_fields(t: TensorProto, what: str) -> tuple[str, int, int | None]:
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise ConversionError(f"{what}: external data offset/length are not integers") from None
    if not location or os.path.isabs(location) or offset < 0 or (length is not None and length < 0):
        raise ConversionError(
            f"{what}: external data needs a relative location and non-negative offset/length, "
            f"found location {location!r}, offset {offset}, length {length}"
        )
    return location, offset, length


def _with_external_bytes(t: TensorProto, base: Path | None, size: int, what: str) -> TensorProto:
    location, offset, length = _external_fields(t, what)
    if base is None:
        raise ConversionError(
            f"{what}: stored in external file {location!r}, but the model was given in memory; "
            "pass its path instead"
        )
    if length is not None and length != size:
        raise ConversionError(
            f"{what}: shape {list(t.dims)} needs {size} bytes, external data says {length}"
        )
    file = model_file(base, location, what=f"{what}'s external data", error=_conversion_error)
    with open_regular(
        file, limit=TOTAL_LIMIT, what="external tensor data", error=_conversion_error
    ) as f:
        available = os.fstat(f.fileno()).st_size
        if offset + size > available:
            raise ConversionError(
                f"{what}: needs bytes {offset}..{offset + size} of {location!r}, "
                f"which holds {available}"
            )
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        raise ConversionError(f"{what}: {location!r} shrank while being read")
    loaded = TensorProto()
    loaded.CopyFrom(t)
    del loaded.external_data[:]
    loaded.data_location = TensorProto.DEFAULT
    loaded.raw_data = data
    return loaded


def _inputs(
    graph: onnx.GraphProto, tensors: Mapping[str, np.ndarray], fixed: Mapping[str, Sequence[int]]
) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Each graph input's static shape and type (initializers listed as inputs are not inputs)."""
    shapes, types = {}, {}
    names = [i.name for i in graph.input if i.name not in tensors]
    unknown = sorted(set(fixed) - set(names))
    if unknown:
        raise ConversionError(
            f"input_shapes names {unknown}, which are not inputs of the model ({names})"
        )
    for value in graph.input:
        if value.name in tensors:
            continue
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            raise ConversionError(f"input {value.name!r}: a {kind}, expected a tensor")
        declared = _declared_dims(value)
        shapes[value.name] = _static_shape(value.name, declared, fixed.get(value.name))
        types[value.name] = value.type.tensor_type.elem_type
    return shapes, types


def _declared_dims(value: onnx.ValueInfoProto) -> list[int | str] | None:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim
    ]


def _static_shape(
    name: str, declared: list[int | str] | None, fixed: Sequence[int] | None
) -> tuple[int, ...]:
    if fixed is not None:
        shape = tuple(int(d) for d in fixed)
        if any(d <= 0 for d in shape) or (declared is not None and len(declared) != len(shape)):
            raise ConversionError(
                f"input {name!r}: input_shapes gives {list(shape)}, the model declares {declared}"
            )
        clash = [
            (i, d) for i, d in enumerate(declared or []) if isinstance(d, int) and d != shape[i]
        ]
        if clash:
            raise ConversionError(
                f"input {name!r}: input_shapes gives {list(shape)}, but dimension {clash[0][0]} "
                f"is fixed at {clash[0][1]} by the model"
            )
        return shape
    if declared is None or any(not isinstance(d, int) or d <= 0 for d in declared):
        raise ConversionError(
            f"input {name!r} has dynamic or unknown dimensions {declared}; the ANE compiles "
            f"static shapes only: pass input_shapes={{{name!r}: [...]}}"
        )
    return tuple(declared)


def mil_name(name: str) -> str:
    """An ONNX name made a valid MIL name: other characters become ``_``, a leading digit gets
    a ``v_`` prefix (``input.1`` -> ``input_1``, ``onnx::MatMul_12`` -> ``onnx__MatMul_12``)."""
    clean = re.sub(r"\W", "_", name, flags=re.ASCII)
    return clean if re.match(r"[A-Za-z_]", clean) else "v_" + clean


def io_names(graph: onnx.GraphProto, tensors: Mapping[str, np.ndarray]) -> dict[str, str]:
    """ONNX input/output name -> MIL name, deterministic: inputs then outputs in graph order, a
    name already taken gets ``_1``, ``_2``, ..."""
    ordered = [i.name for i in graph.input if i.name not in tensors] + [
        o.name for o in graph.output
    ]
    names: dict[str, str] = {}
    taken: set[str] = set()
    for name in ordered:
        if name in names:
            continue
        candidate = base = mil_name(name)
        i = 1
        while candidate in taken:
            candidate, i = f"{base}_{i}", i + 1
        names[name] = candidate
        taken.add(candidate)
    return names
