"""A CoreML prediction on the Neural Engine: run it under the tracer to see CoreML's private calls.

    pip install coremltools
    anekit trace -- python examples/coreml_prediction.py
    anekit trace --jsonl coreml.jsonl --class _ANEClient --class _ANEModel \\
        -- python examples/coreml_prediction.py

CoreML reaches the ANE through AppleNeuralEngine.framework in this same process, so
every message it sends to ``_ANEClient``, ``_ANEModel``, ``_ANERequest`` (and the other
traced classes) goes through the tracer's wrappers: the timeline shows which private
calls a prediction makes, in which order, with which arguments (the seed's discovery
method). The model is ``y = 2x + 1`` on ``[1, 64, 1, 64]``, built with coremltools' MIL
builder and converted with ``compute_units=CPU_AND_NE``.
"""

from __future__ import annotations

import sys

import numpy as np


def main() -> int:
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 1, 64))])
    def affine(x):
        return mb.add(x=mb.mul(x=x, y=2.0), y=1.0)

    model = ct.convert(affine, convert_to="mlprogram", compute_units=ct.ComputeUnit.CPU_AND_NE)
    x = np.arange(64 * 64, dtype=np.float32).reshape(1, 64, 1, 64) % 61 / 4
    (y,) = model.predict({"x": x}).values()
    ok = np.allclose(y, 2 * x + 1, atol=0.05)
    print(f"CoreML prediction: {'right numbers' if ok else 'WRONG numbers'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
