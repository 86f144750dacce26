"""``from_onnx``: an ONNX model to a verified, ANE-friendly MIL program; ``convert_file`` also
saves it, checks and estimates it for a chip (``anekit convert model.onnx``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from anekit import hw
from anekit.errors import ConversionError
from anekit.frontends.conversion import Conversion, save_conversion
from anekit.frontends.fidelity import TOLERANCE, Fidelity, compare_arrays, verify
from anekit.frontends.onnx.lower import ProgressFn, convert_model
from anekit.frontends.onnx.model import OnnxModel, read_model
from anekit.frontends.onnx.ops import OPS
from anekit.mil import Program
from anekit.passes import Pass, chip_profile
from anekit.passes import convert as convert_pipeline

Source = str | os.PathLike[str] | onnx.ModelProto
REFERENCE = "onnxruntime fp32"
_NUMPY = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.INT64: np.int64,
    TensorProto.INT32: np.int32,
    TensorProto.BOOL: np.bool_,
}


def from_onnx(
    source: Source,
    *,
    chip: str | hw.Chip | None = None,
    passes: Sequence[Pass | str] | None = None,
    verify: bool = True,
    tolerance: float = TOLERANCE,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    name: str = "main",
    progress: ProgressFn | None = None,
) -> Program:
    """Convert an ONNX model (a ``.onnx`` path or a ModelProto) to a MIL program.

    Args:
        source: the model. External-data files are read only from the model's directory.
        chip (str or Chip): the chip whose limits the passes respect. Default: None, this Mac's chip, else m4.
        passes (sequence of Pass or str): the rewrite passes, in order. Default: None, i.e.
            ``anekit.passes.CONVERT_PASSES``; ``()`` keeps the fp32 program.
        verify (bool): run the program once on the reference backend against onnxruntime
            on random inputs and raise ConversionError if an output's relative error
            exceeds ``tolerance``. Default: True (needs onnxruntime).
        tolerance (float): see ``verify``. Default: 2e-2.
        input_shapes (mapping): input name -> static shape, for inputs the model declares
            with dynamic dimensions.
        name (str): the MIL function's name. Default: ``"main"``.
        progress (callable): ``progress(done, total)`` over the graph's nodes.

    Returns:
        mil.Program: inputs and outputs keep their ONNX names where they are valid MIL
        names; others are renamed (:func:`anekit.frontends.onnx.io_names` gives the map).
    """
    model = read_model(source, input_shapes)
    program = convert_pipeline(
        convert_model(model, OPS, name=name, progress=progress), passes, chip
    )
    if verify:
        check_fidelity(model, program, tolerance)
    return program


def io_names(
    source: Source, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> dict[str, str]:
    """ONNX input/output name -> the program's name for it (renamed where not a valid MIL name)."""
    return dict(read_model(source, input_shapes).names)


def example_inputs(model: OnnxModel, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs by ONNX name: floats normal, integers below the smallest table they index."""
    rng = np.random.default_rng(seed)
    result = {}
    for name, shape in model.input_shapes.items():
        kind = model.input_types[name]
        dtype = _NUMPY.get(kind)
        if dtype is None:
            raise ConversionError(f"input {name!r}: no example values for ONNX type {kind}")
        if np.dtype(dtype).kind == "f":
            result[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            result[name] = rng.random(shape) < 0.5
        else:
            result[name] = rng.integers(0, _index_bound(model, name), shape).astype(dtype)
    return result


def _index_bound(model: OnnxModel, name: str) -> int:
    """The length of the smallest constant table a ``Gather`` reads at ``name`` (through casts)."""
    aliases, bound = {name}, None
    for node in model.graph.node:
        if node.op_type == "Cast" and node.input[0] in aliases:
            aliases.add(node.output[0])
        elif node.op_type == "Gather" and node.input[1] in aliases:
            table = model.tensors.get(node.input[0])
            if table is not None:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                length = table.shape[axis]
                bound = length if bound is None else min(bound, length)
    return bound or 2


def onnxruntime_outputs(model: OnnxModel, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs as onnxruntime computes them (its CPU provider, fp32)."""
    try:
        import onnxruntime
    except ImportError as e:
        raise ConversionError(
            "the fidelity gate needs onnxruntime: pip install 'anekit[onnx]', or verify=False"
        ) from e
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in model.tensors.items())
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    result = session.run(None, dict(inputs))
    return [np.asarray(r, dtype=np.float32) for r in result]


def compare(
    source: Source | OnnxModel,
    program: Program,
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    backend: str = "reference",
    numerics: Any = None,
) -> Fidelity:
    """Run onnxruntime and ``program`` on the same inputs (random by default); report per output
    (``numerics``: the reference backend's profile; default: its own)."""
    model = source if isinstance(source, OnnxModel) else read_model(source)
    feeds = dict(inputs) if inputs is not None else example_inputs(model)
    want = onnxruntime_outputs(model, feeds)
    return compare_arrays(
        program, program_feeds(model, program, feeds), want, backend, REFERENCE, numerics
    )


def program_feeds(
    model: OnnxModel, program: Program, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Inputs by ONNX name as the program takes them: by MIL name, in its dtypes."""
    by_mil = {model.names[n]: a for n, a in feeds.items()}
    return {v.name: by_mil[v.name].astype(v.dtype.numpy) for v in program.main.inputs}


def check_fidelity(model: OnnxModel, program: Program, tolerance: float = TOLERANCE) -> Fidelity:
    """Compare ``program`` with onnxruntime on the reference backend; raise if out of tolerance."""
    fidelity = compare(model, program)
    verify(fidelity, tolerance)
    return fidelity


def convert_file(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    chip: str | hw.Chip | None = None,
    check: bool = True,
    estimate: bool = True,
    passes: Sequence[Pass | str] | None = None,
    progress: ProgressFn | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    compress: str | None = None,
    max_error: float | None = None,
    numerics: Any = None,
) -> Conversion:
    """Convert a ``.onnx`` file: write ``out_dir/model.mil`` + ``weights/``, compare with
    onnxruntime on random inputs, check and estimate for ``chip``; ``compress`` as in
    ``anekit.frontends.torch.convert_file``. ``Conversion.renamed`` lists renamed I/O names.
    The fidelity gate runs on ``numerics`` (default: the profile of ``chip``)."""
    chip = chip_profile(chip)  # an unknown chip fails before the slow work
    model = read_model(path, input_shapes)
    program = convert_pipeline(convert_model(model, OPS, progress=progress), passes, chip)
    feeds = example_inputs(model)
    fidelity = compare(model, program, feeds, numerics=numerics or chip)
    result = save_conversion(
        program, out_dir, nodes=len(model.graph.node), chip=chip, check=check,
        estimate=estimate, fidelity=fidelity, inputs=program_feeds(model, program, feeds),
        compress=compress,
        max_error=max_error,
    )  # fmt: skip
    result.renamed = model.renamed
    return result
