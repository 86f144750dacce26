"""Generic op tests: every case of every op family goes through every tool.

For each case: the Builder builds it, inferred shapes equal the hand-computed
ones, MIL text printing is a fixed point of parse/print, save/load gives the
same program, and the reference backend matches the case's independent
reference on random inputs.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from anekit import mil
from anekit.mil.ops import registry
from tests.opcases import Case, all_cases
from tests.optest import run_reference

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics

CASES = all_cases()


def build(case: Case) -> mil.Program:
    b = mil.Builder(opset=case.opset)
    case.build(b)
    return b.build()


def random_inputs(program: mil.Program, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard normal floats (rounded to their dtype), small ints, random bools."""
    out = {}
    for v in program.inputs:
        dtype, shape = v.dtype, tuple(v.shape)
        if dtype.is_float:
            out[v.name] = rng.standard_normal(shape).astype(dtype.numpy)
        elif dtype.is_int:
            info = np.iinfo(dtype.numpy)
            out[v.name] = rng.integers(max(info.min, -5), min(info.max, 5) + 1, shape).astype(
                dtype.numpy
            )
        else:
            out[v.name] = rng.random(shape) < 0.5
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_inferred_shapes_match_hand_computed(case: Case) -> None:
    program = build(case)
    assert {v.name: tuple(v.shape) for v in program.outputs} == case.shapes


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_text_round_trip_is_a_fixed_point(case: Case) -> None:
    program = build(case)
    text = program.to_text()
    again = mil.parse(text, program.weight_files())
    assert again.to_text() == text
    assert again == program
    if all(registry.OPSETS.index(op.opdef.since) <= 1 for op in program.ops) and _same_in_ios16(
        program
    ):
        legacy = program.to_text("legacy")
        assert legacy.startswith("program(1.0)")
        assert mil.parse(legacy, program.weight_files()).to_text("legacy") == legacy


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_save_load_round_trip(case: Case, tmp_path) -> None:
    program = build(case)
    program.save(tmp_path / "m")
    loaded = mil.load(tmp_path / "m")
    assert loaded == program
    for name, data in program.weight_files().items():
        assert (tmp_path / "m" / "weights" / name.split("/")[-1]).read_bytes() == data


@pytest.mark.parametrize("case", [c for c in CASES if c.expect], ids=lambda c: c.id)
def test_reference_matches_independent_formula(case: Case) -> None:
    program = build(case)
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    for _ in range(2):
        inputs = case.make_inputs(rng) if case.make_inputs else random_inputs(program, rng)
        got = run_reference(program, inputs)
        as64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in inputs.items()}
        expected = case.expect(**as64)
        assert set(got) == set(expected)
        for name, want in expected.items():
            have = got[name]
            spec = next(v for v in program.outputs if v.name == name)
            assert have.dtype == spec.dtype.numpy, name
            want = np.asarray(want)
            assert have.shape == want.shape, name
            if have.dtype.kind == "f":
                np.testing.assert_allclose(
                    have.astype(np.float64),
                    want,
                    rtol=case.rtol,
                    atol=case.atol,
                    equal_nan=True,
                    err_msg=f"{case.id} output {name}",
                )
            else:
                np.testing.assert_array_equal(have, want.astype(have.dtype), err_msg=case.id)


def _same_in_ios16(program: mil.Program) -> bool:
    """Whether every op's ios16 declaration is the one the program was built with."""
    return all(registry.get(op.op_type, "ios16") is op.opdef for op in program.ops)


def test_every_registered_op_is_complete() -> None:
    """Every op has a reference, a docstring, a cost rule and at least one case."""
    covered = {c.op for c in CASES}
    problems = []
    for opdef in registry.all_ops():
        if opdef.reference is None:
            problems.append(f"{opdef.name}: no reference")
        if len(opdef.doc.strip()) < 20:
            problems.append(f"{opdef.name}: no docstring")
        if opdef.cost is None and "elementwise" not in opdef.traits:
            problems.append(f"{opdef.name}: no cost rule (and not elementwise)")
        if opdef.name not in covered:
            problems.append(f"{opdef.name}: no test case")
    assert not problems, "\n".join(problems)


EXACT_CASES = [
    c for c in CASES if "exact" in registry.get(c.op, c.opset).traits and c.make_inputs is None
]


@pytest.mark.parametrize("case", EXACT_CASES, ids=lambda c: c.id)
def test_exact_ops_only_move_values(case: Case) -> None:
    """An "exact" op's fp16 outputs need no rounding: the reference backend relies on it."""
    from anekit.backends.reference import ReferenceKernel

    program = build(case)
    kernel = ReferenceKernel(program, storage="fp32")  # no rounding anywhere in between
    values = kernel.trace(random_inputs(program, np.random.default_rng(7)))
    for op in program.ops:
        if "exact" not in op.opdef.traits:
            continue
        for v in op.outputs:
            if v.dtype is mil.DType.fp16:
                value = np.asarray(values[v.name], dtype=np.float32)
                np.testing.assert_array_equal(value.astype(np.float16).astype(np.float32), value)
