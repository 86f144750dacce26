"""Hardware tests: the ANE backend on a real Apple Neural Engine, checked against the reference backend.

Every test here is marked ``ane``; ``conftest.py`` skips them, with the reason,
where ``anekit.backends.ane.available()`` is False. Tolerances are for fp16
storage with an accumulator of undocumented width (ANE_NOTES section 1).

The unaligned shapes (rows not a multiple of 64 bytes) and the three-input,
three-output program whose signature, alphabetical and size orders differ are the
ones ``doctor --ladder`` uses (:mod:`anekit.ladder.cases`, outputs computed in
NumPy): they fail on hardware if the layout or binding rules are wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends import ane, reference
from anekit.ladder import cases
from anekit.mil import blob
from tests.examples import SECTION_3_EXAMPLE

pytestmark = pytest.mark.ane

RNG = np.random.default_rng(2024)
ATOL, RTOL = 2e-2, 2e-2


def conv_example() -> mil.Program:
    w = (RNG.standard_normal((128, 64, 1, 1)) / 8).astype(np.float16)
    return mil.parse(
        SECTION_3_EXAMPLE, weights={"@model_path/weights/weight.bin": blob.write_blob_file([w])}
    )


def matmul_runtime_operands() -> mil.Program:
    b = mil.Builder()
    x, y = b.input("x", (1, 64, 96), "fp16"), b.input("y", (1, 96, 32), "fp16")
    b.output(b.matmul(x=x, y=y), "z")
    return b.build()


def elementwise_chain() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 32, 1, 64), "fp16")
    s = b.sigmoid(x=b.add(x=b.mul(x=x, y=0.5), y=0.25))
    b.output(b.softmax(x=b.sub(x=s, y=x), axis=3), "p")
    b.output(b.reduce_sum(x=x, axes=[3], keep_dims=True), "r")
    return b.build()


def dynamic_weight_linear() -> mil.Program:
    """ANE_NOTES section 5: activations and weights packed in one input, sliced apart, matmul."""
    ic, seq, oc = 64, 32, 48
    b = mil.Builder()
    packed = b.input("xw", (1, ic, 1, seq + oc), "fp16")
    x = b.slice_by_size(x=packed, begin=[0, 0, 0, 0], size=[1, ic, 1, seq])
    w = b.slice_by_size(x=packed, begin=[0, 0, 0, seq], size=[1, ic, 1, oc])
    xt = b.reshape(x=x, shape=[1, ic, seq])
    wt = b.reshape(x=w, shape=[1, ic, oc])
    b.output(b.matmul(x=wt, y=xt, transpose_x=True), "y")
    return b.build()


def three_inputs() -> mil.Program:
    b = mil.Builder()
    a, c, d = b.input("a", (1, 16, 1, 32)), b.input("c", (1, 16, 1, 8)), b.input("d", (1, 16, 1, 1))
    b.output(b.concat(values=[b.mul(x=a, y=d), b.add(x=c, y=d)], axis=3), "o")
    return b.build()


EXAMPLES = {
    "conv_example": conv_example,
    "matmul_runtime_operands": matmul_runtime_operands,
    "elementwise_chain": elementwise_chain,
    "dynamic_weight_linear": dynamic_weight_linear,
    "three_inputs": three_inputs,
}


def inputs_for(program: mil.Program) -> dict[str, np.ndarray]:
    return {
        v.name: (RNG.standard_normal(v.shape) / 2).astype(v.dtype.numpy)
        for v in program.main.inputs
    }


def assert_matches_reference(
    program: mil.Program, got: dict[str, np.ndarray], inputs: dict
) -> None:
    want = reference.compile(program)(**inputs)
    for name, value in want.items():
        np.testing.assert_allclose(
            got[name].astype(np.float32),
            value.astype(np.float32),
            atol=ATOL,
            rtol=RTOL,
            err_msg=name,
        )


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("pack_inputs", [True, False])
def test_compile_run_and_compare_with_reference(name: str, pack_inputs: bool) -> None:
    program = EXAMPLES[name]()
    inputs = inputs_for(program)
    with ane.compile(program, pack_inputs=pack_inputs) as k:
        assert_matches_reference(program, k(**inputs), inputs)
        for key, value in inputs.items():
            k.input_buffer(key)[...] = value
        k.run()
        assert_matches_reference(
            program, {o.name: k.output_buffer(o.name) for o in k.outputs}, inputs
        )


def test_default_backend_is_ane_here() -> None:
    with anekit.compile(elementwise_chain()) as k:
        assert k.backend == "ane"


def test_submit_with_127_in_flight() -> None:
    program = matmul_runtime_operands()
    batches = [inputs_for(program) for _ in range(127)]
    with ane.compile(program) as k:
        assert k.max_in_flight() == 127
        futures = [k.submit(**inputs) for inputs in batches]
        for inputs, future in zip(batches, futures):
            assert_matches_reference(program, future.result(), inputs)


def test_compile_budget_recycling_in_a_worker() -> None:
    kernels = []
    pids = set()
    for i in range(12):
        b = mil.Builder()
        x = b.input("x", (1, 16, 1, 32), "fp16")
        b.output(b.mul(x=x, y=float(i + 1)), "y")
        program = b.build()
        k = anekit.compile(program, backend="ane", isolate=True, recycle_after=5)
        kernels.append((program, k))
        pids.add(k.worker_pid)
    assert len(pids) >= 3, "12 compiles with recycle_after=5 should use at least three workers"
    for program, k in kernels:
        inputs = inputs_for(program)
        assert_matches_reference(program, k(**inputs), inputs)
        k.close()


def test_stats_give_hardware_time_or_none() -> None:
    program = elementwise_chain()
    with ane.compile(program, stats=True) as k:
        k(**inputs_for(program))
        stats = k.last_stats()
    assert stats is None or (stats["hw_s"] > 0 and stats["wall_s"] > 0)


def test_compile_mlmodelc_through_ane_client(tmp_path) -> None:
    ct = pytest.importorskip("coremltools")
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64, 1, 32))], opset_version=ct.target.iOS18)
    def prog(x):  # type: ignore[no-untyped-def]
        return mb.add(x=mb.mul(x=x, y=2.0), y=1.0)

    model = ct.convert(prog, minimum_deployment_target=ct.target.iOS18)
    with anekit.compile_mlmodelc(model.get_compiled_model_path()) as k:
        inputs = inputs_for(k.program)
        assert_matches_reference(k.program, k(**inputs), inputs)


UNALIGNED = cases.unaligned_cases()


@pytest.mark.parametrize("case", UNALIGNED, ids=[c.name for c in UNALIGNED])
@pytest.mark.parametrize("layout", ["auto", "model"])
def test_unaligned_rows_give_exact_results(case: cases.Case, layout: str) -> None:
    with ane.compile(case.program, layout=layout) as k:
        source = k.layout.inputs["x"].source
        got = cases.compare(case, k(**case.inputs))
        assert got["match"], f"{got} with strides {k.layout.inputs['x'].strides} from {source}"
        k.input_buffer("x")[...] = case.inputs["x"]
        k.run()
        assert cases.compare(case, {"y": k.output_buffer("y")})["match"], source


@pytest.mark.parametrize(
    "options",
    [{}, {"pack_inputs": False}, {"pack_inputs": False, "canonical_io": False}],
    ids=["packed", "canonical", "as-written"],
)
def test_three_inputs_and_outputs_bind_to_the_right_tensors(options: dict) -> None:
    case = cases.binding_case()
    with ane.compile(case.program, **options) as k:
        got = cases.compare(case, k(**case.inputs))
        assert got["match"], f"{got}; binding {k.plan.binding}, notes {k.layout.notes}"


def test_the_compiled_model_reports_layout_and_symbols() -> None:
    """If this fails, the backend runs on computed strides and signature order: say so."""
    with ane.compile(cases.binding_case().program, pack_inputs=False, canonical_io=False) as k:
        assert all(b.source == "model attributes" for b in k.layout.inputs.values()), k.layout
        assert k.plan.binding == "symbols", k.layout.notes
