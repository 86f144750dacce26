"""Read an exported ``.mlpackage`` back with coremltools, as a reference independent of anekit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from anekit.mil.ops import traits
from anekit.mil.program import Program
from anekit.passes.coreml import coremltools

# coremltools' FeatureType dataType -> anekit's dtype name
ARRAY_TYPES = {65552: "fp16", 65568: "fp32", 131104: "int32"}


def read_back(path: Path) -> dict[str, Any]:
    """The package's I/O, ops (type and output names) and constants, as coremltools reads them."""
    ct = coremltools()
    from coremltools.converters.mil.frontend.milproto.load import load

    model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    fn = spec.mlProgram.functions["main"]
    ops = fn.block_specializations[fn.opset].operations
    weights = path / "Data" / "com.apple.CoreML" / "weights"
    pymil = load(spec, spec.specificationVersion, file_weights_dir=str(weights))
    consts = {op.outputs[0].name: op.outputs[0].val for op in pymil.functions["main"].operations
              if op.op_type == "const"}  # fmt: skip
    return {
        "inputs": [_feature(f) for f in spec.description.input],
        "outputs": [_feature(f) for f in spec.description.output],
        "ops": [(op.type, [o.name for o in op.outputs]) for op in ops],
        "opset": fn.opset,
        "consts": consts,
    }


def _feature(f: Any) -> tuple[str, str, tuple[int, ...]]:
    array = f.type.multiArrayType
    return f.name, ARRAY_TYPES[array.dataType], tuple(array.shape)


def ours(program: Program) -> dict[str, Any]:
    """The same record of an anekit program."""
    fn = program.main
    return {
        "inputs": [(v.name, str(v.dtype), tuple(v.shape)) for v in fn.inputs],
        "outputs": [(v.name, str(v.dtype), tuple(v.shape)) for v in fn.outputs],
        "ops": [(op.op_type, [v.name for v in op.outputs]) for op in fn.ops],
        "opset": fn.opset.upper().replace("IOS", "CoreML"),
    }


def assert_same(program: Program, path: Path) -> dict[str, Any]:
    """The package holds ``program``: its I/O, its ops in order with their names, its constants.

    Constants are compared by name and value (the export may add broadcast copies of a
    constant where coremltools' inference needs them: docs/coreml.md, findings).
    """
    theirs, mine = read_back(path), ours(program)
    assert theirs["inputs"] == mine["inputs"]
    assert theirs["outputs"] == mine["outputs"]
    assert _computed(theirs["ops"]) == _computed(mine["ops"])
    for op in program.main.ops:
        v = op.outputs[0]
        if traits.CONST in op.opdef.traits:
            assert v.name in theirs["consts"], v.name
            got, want = np.asarray(theirs["consts"][v.name]), np.asarray(v.const)
            np.testing.assert_array_equal(got.astype(want.dtype), want, err_msg=v.name)
    return theirs


def _computed(ops: list[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    return [op for op in ops if op[0] != "const"]
