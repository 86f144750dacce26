"""On a Mac: the Metal view over real IOSurface memory, and the tracer on the real runtime.

Marked ``ane``: skipped, with the reason, where there is no ANE (``conftest.py``). The
Metal tests also need ``pyobjc-framework-Metal`` (``pip install 'anekit[metal]'``). These
are the hardware halves of ``test_metal_view.py`` and ``test_trace.py``; the experiments
themselves run with ``anekit probe`` (docs/probe.md), each in its own process.
"""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit.ladder import cases

pytestmark = pytest.mark.ane


def test_the_metal_buffer_is_the_surface_memory() -> None:
    pytest.importorskip("Metal")
    case = cases.affine((1, 4, 1, 3), "fp16")  # padded rows
    with anekit.compile(case.program, backend="ane") as k:
        view = k.input_buffer("x")
        mb = view.metal_buffer()
        assert mb.length >= k.layout.inputs["x"].nbytes and mb.row_stride % 64 == 0
        view[...] = case.inputs["x"]
        contents = mb.buffer.contents().as_buffer(mb.length)
        rows = [np.frombuffer(contents[mb.offset + r * mb.strides[1]:][:6], np.float16)
                for r in range(4)]  # fmt: skip
        assert np.array_equal(np.stack(rows).reshape(1, 4, 1, 3), case.inputs["x"])
        k.run()
        assert np.array_equal(k.output_buffer("y"), case.expected["y"])


def test_a_trace_of_a_compile_sees_the_in_memory_sequence_and_restores_it() -> None:
    case = cases.affine((1, 64, 1, 64), "fp16")
    with anekit.trace() as t:
        with anekit.compile(case.program, backend="ane") as k:
            got = k(**case.inputs)["y"]
    selectors = [c.selector for c in t.records]
    for expected in ("compileWithQoS:options:error:", "loadWithQoS:options:error:",
                     "evaluateWithQoS:options:request:error:", "unloadWithQoS:error:"):  # fmt: skip
        assert expected in selectors, expected
    assert np.array_equal(got, case.expected["y"])
    with anekit.compile(case.program, backend="ane") as k:  # behaves the same afterwards
        assert np.array_equal(k(**case.inputs)["y"], case.expected["y"])
