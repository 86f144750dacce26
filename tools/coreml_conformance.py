"""MIL op conformance: coremltools' own op tests run through anekit's reference backend.

coremltools ships its MIL op tests inside the package
(``coremltools/converters/mil/mil/ops/tests/``): each builds a program with coremltools'
builder and checks Core ML's outputs against expected arrays through ``run_compare_builder``.
This pytest plugin replaces that function: the same program is translated op by op into
an anekit Builder program, run on the reference backend, and compared with the test's
expected outputs (the test's tolerances; fp16-precision configurations at fp16 tolerance,
since their expectations come from fp32 arithmetic). Only ML Program (``mlprogram``)
configurations run; the neural-network backend's are skipped.

    make conformance                       # every op test (long: thousands of cases)
    python -m pytest -p tools.coreml_conformance --pyargs \\
        coremltools.converters.mil.mil.ops.tests.iOS15.test_image_resizing -q

At the end a summary line counts the cases: compared and equal, compared and different
(``mismatch``), refused by anekit's op checks (``refused``), and not translatable.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest

COUNTS: collections.Counter[str] = collections.Counter()
FP16_TOLERANCE = 1e-2  # rtol and atol for configurations run in fp16 precision


class Untranslatable(Exception):
    """A coremltools program anekit's translator cannot express (not an op verdict)."""


def _dtype(var: Any) -> str:
    from coremltools.converters.mil.mil import types

    return types.builtin_to_string(var.dtype)


def _const(b: Any, var: Any) -> Any:
    val = var.val
    if isinstance(val, str):
        return b.const(val)
    if val is None:
        raise Untranslatable(f"const {var.name} has no value")
    dtype = _dtype(var)
    arr = np.asarray(val)
    if dtype in ("fp64", "int64", "uint64"):
        raise Untranslatable(f"{dtype} constant {var.name}")
    return b.const(arr, dtype=dtype)


def translate(func: Any, opset: str) -> Any:
    """A coremltools ``Function`` as an anekit Program (ops in order, names kept)."""
    from anekit import mil

    b = mil.Builder(opset=opset)
    env: dict[int, Any] = {}
    for name, var in func.inputs.items():
        if any(not isinstance(d, (int, np.integer)) for d in var.shape):
            raise Untranslatable(f"input {name} has a symbolic shape {var.shape}")
        env[id(var)] = b.input(name, tuple(int(d) for d in var.shape), _dtype(var))

    def value(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        if id(v) not in env:
            if v.op is not None and v.op.op_type != "const":
                raise Untranslatable(f"{v.name} is used before its op")
            env[id(v)] = _const(b, v)
        return env[id(v)]

    for op in func.operations:
        if op.op_type == "const":
            env[id(op.outputs[0])] = _const(b, op.outputs[0])
            continue
        params = {k: value(v) for k, v in op.inputs.items()}
        out = b.add_op(op.op_type, params, op.name)
        outs = out if isinstance(out, tuple) else (out,)
        for old, new in zip(op.outputs, outs, strict=True):
            env[id(old)] = new
    for i, var in enumerate(func.outputs):
        b.output(value(var), f"out{i}")
    return b.build()


def _opset(target: Any) -> str:
    return f"ios{max(15, int(str(target.name).replace('iOS', '')))}"


def run_compare_builder(build, input_placeholders, input_values=None, expected_output_types=None,
                        expected_outputs=None, backend=None, atol=1e-04, rtol=1e-05,
                        frontend_only=False, **_: Any):  # fmt: skip
    """coremltools' ``run_compare_builder``, answered by anekit's reference backend."""
    from coremltools.converters.mil import mil as ct_mil
    from coremltools.converters.mil.mil import Function

    import anekit
    from anekit.errors import AnekitError

    if backend is None or backend.backend != "mlprogram":
        pytest.skip("anekit runs ML Programs only")
    with Function(input_placeholders, opset_version=backend.opset_version) as func:
        outs = build(**func.inputs)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        func.set_outputs(outs)
        ct_mil.Program().add_function("main", func)
    if frontend_only or expected_outputs is None:
        COUNTS["no expected outputs"] += 1
        return None
    try:
        program = translate(func, _opset(backend.opset_version))
    except Untranslatable as e:
        COUNTS["untranslatable"] += 1
        pytest.skip(f"untranslatable: {e}")
    except AnekitError as e:
        kind = "unknown op" if "unknown op" in str(e) else "refused"
        COUNTS[kind] += 1
        raise AssertionError(f"anekit refused the program ({kind}): {e}") from None
    want = expected_outputs if isinstance(expected_outputs, list) else [expected_outputs]
    feeds = {k: np.asarray(v) for k, v in (input_values or {}).items()}
    if backend.precision == "fp16":
        atol, rtol = max(atol, FP16_TOLERANCE), max(rtol, FP16_TOLERANCE)
    try:
        with anekit.compile(program, backend="reference", **_ideal()) as kernel:
            got = kernel(**{v.name: feeds[v.name].astype(v.dtype.numpy) for v in program.inputs})
    except AnekitError as e:
        COUNTS["refused"] += 1
        raise AssertionError(f"anekit refused to run it: {e}") from None
    for i, w in enumerate(want):
        g = np.asarray(got[f"out{i}"])
        w = np.asarray(w)
        if g.shape != w.shape or not np.allclose(g.astype(np.float64), w.astype(np.float64),
                                                   atol=atol, rtol=rtol, equal_nan=True):  # fmt: skip
            COUNTS["mismatch"] += 1
            raise AssertionError(f"output {i}: anekit {g.ravel()[:8]} vs expected {w.ravel()[:8]}")
    COUNTS["equal"] += 1
    return None


def _ideal() -> dict[str, str]:
    """``numerics="ideal"`` where the reference backend takes it (IEEE fp16, no ANE cliffs)."""
    import inspect

    import anekit

    takes = "numerics" in inspect.signature(anekit.compile).parameters
    return {"numerics": "ideal"} if takes else {}


def pytest_configure(config: Any) -> None:
    from coremltools.converters.mil.mil.ops.tests import testing_utils

    testing_utils.run_compare_builder = run_compare_builder


def pytest_terminal_summary(terminalreporter: Any) -> None:
    total = sum(COUNTS.values())
    parts = ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items()))
    terminalreporter.write_line(f"anekit conformance: {total} cases: {parts}")
