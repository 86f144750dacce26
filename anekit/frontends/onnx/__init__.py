"""The ONNX front end: a checked ``.onnx`` model -> one table of ONNX ops -> MIL -> ANE passes.

    import anekit
    prog = anekit.from_onnx("model.onnx")            # verified against onnxruntime by default
    report = anekit.frontends.onnx.compare("model.onnx", prog)
    print(report)                                    # relative error, max abs error, cosine

Importing this package imports onnx; ``import anekit`` does not.
"""

from __future__ import annotations

try:
    import onnx  # noqa: F401
except ImportError as e:  # the optional dependency is missing: say how to get it
    raise ImportError("anekit's ONNX front end needs onnx: pip install 'anekit[onnx]'") from e

from anekit.frontends.onnx.frontend import (
    check_fidelity,
    compare,
    convert_file,
    example_inputs,
    from_onnx,
    io_names,
    onnxruntime_outputs,
)
from anekit.frontends.onnx.lower import convert_model, unsupported_nodes
from anekit.frontends.onnx.model import OnnxModel, read_model
from anekit.frontends.onnx.ops import OPS

__all__ = [
    "OPS",
    "OnnxModel",
    "check_fidelity",
    "compare",
    "convert_file",
    "convert_model",
    "example_inputs",
    "from_onnx",
    "io_names",
    "onnxruntime_outputs",
    "read_model",
    "unsupported_nodes",
]
