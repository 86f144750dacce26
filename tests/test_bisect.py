"""``anekit.doctor.bisect``: compile failures narrowed to their ops, with the compiles counted.

The compilers here are stand-ins that fail on planted ops: one op, a pair that fails only
together, and an op that fails only at a large shape. They stand for the ANE compiler,
which this machine does not have; each counts its calls independently of the bisection's
own count.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from anekit import cli, mil
from anekit.doctor import bisect as bisection
from anekit.errors import BackendUnavailable, CompileError, UsageError
from anekit.mil.ops import traits


def chain(n: int, wide_at: int | None = None) -> mil.Program:
    """``n`` adds and relus alternating (``2n`` ops); a concat doubles the width at ``wide_at``."""
    b = mil.Builder()
    v = b.input("x", (1, 8, 1, 16), "fp16")
    for i in range(n):
        if i == wide_at:
            v = b.concat(values=(v, v), axis=3)
        v = b.relu(x=b.add(x=v, y=float(i % 7)))
    b.output(v, "y")
    return mil.parse(b.build().to_text())  # parsed: every op has its MIL line


def computing(program: mil.Program) -> list:
    return [op for op in program.main.ops if traits.CONST not in op.opdef.traits]


class Planted:
    """A stand-in compiler: fails when ``fails(names, program)`` says so; counts its calls."""

    def __init__(self, fails) -> None:
        self.fails, self.calls = fails, 0

    def __call__(self, program: mil.Program) -> None:
        self.calls += 1
        names = {op.name for op in program.main.ops}
        if self.fails(names, program):
            raise CompileError("ANECCompile() FAILED")


@pytest.mark.parametrize("n, position", [(8, 0), (20, 13), (64, 127), (64, 64)])
def test_one_planted_op_is_found_in_logarithmic_compiles(n: int, position: int) -> None:
    program = chain(n)
    culprit = computing(program)[position]
    compiler = Planted(lambda names, p: culprit.name in names)
    found = bisection.bisect(program, compiler)
    assert [c.op for c in found.ops] == [culprit.name]
    assert found.ops[0].line == culprit.line and found.ops[0].kind == culprit.op_type
    total = found.ops_in_program
    assert total == 2 * n and found.compiles == compiler.calls
    assert compiler.calls <= 2 * math.ceil(math.log2(total)) + 2
    assert computing(found.program) == [culprit]  # the failing sub-program is the op alone
    assert found.error == "CompileError: ANECCompile() FAILED"


@pytest.mark.parametrize("first, second", [(3, 100), (0, 127), (60, 61)])
def test_a_pair_that_fails_only_together_is_found(first: int, second: int) -> None:
    program = chain(64)
    a, b = computing(program)[first], computing(program)[second]
    compiler = Planted(lambda names, p: a.name in names and b.name in names)
    found = bisection.bisect(program, compiler)
    assert [c.op for c in found.ops] == [a.name, b.name]
    assert compiler.calls <= 2 * (math.ceil(math.log2(128)) + 1) + 1  # O(k log n), k = 2


def test_three_that_fail_only_together_cost_k_log_n() -> None:
    program = chain(64)
    planted = [computing(program)[i] for i in (10, 50, 90)]
    compiler = Planted(lambda names, p: all(op.name in names for op in planted))
    found = bisection.bisect(program, compiler)
    assert [c.op for c in found.ops] == [op.name for op in planted]
    assert compiler.calls <= 3 * (math.ceil(math.log2(128)) + 1) + 1


def test_a_failure_that_depends_on_a_shape_keeps_its_shape_across_the_cut() -> None:
    """Only an add on 32-wide rows fails: the cut hands the op its wide input, so it still does."""
    program = chain(16, wide_at=9)

    def wide_add(names, p) -> bool:
        return any(op.op_type == "add" and op.outputs[0].shape[-1] == 32 for op in p.main.ops)

    found = bisection.bisect(program, Planted(wide_add))
    (culprit,) = found.ops
    assert culprit.kind == "add"
    (wide,) = found.program.main.inputs  # the cut's input, as wide as in the program
    assert wide.shape == (1, 8, 1, 32)
    narrow = [op for op in computing(program) if op.op_type == "add"
              and op.outputs[0].shape[-1] == 32]  # fmt: skip
    assert culprit.op == narrow[0].name  # the first of the failing ops in program order


def test_the_sub_program_of_a_cut_is_a_valid_program_that_runs() -> None:
    """Values the kept ops read from ops left out become inputs; unread results outputs."""
    import anekit

    program = chain(4)
    ops = computing(program)
    sub = bisection.sub_program(program, [ops[2], ops[3], ops[6]])
    assert [v.name for v in sub.main.inputs] == [ops[1].outputs[0].name, ops[5].outputs[0].name]
    assert [v.name for v in sub.main.outputs] == [ops[3].outputs[0].name, ops[6].outputs[0].name]
    x = np.full((1, 8, 1, 16), 0.5, np.float16)
    with anekit.compile(mil.parse(sub.to_text()), backend="reference") as k:
        out = k(**{v.name: x for v in sub.main.inputs})
    np.testing.assert_array_equal(out[ops[3].outputs[0].name], x + 1)  # relu(x + 1), x = 0.5
    np.testing.assert_array_equal(out[ops[6].outputs[0].name], x + 3)  # add(x, 3)


def test_a_program_that_compiles_is_not_bisected() -> None:
    with pytest.raises(UsageError, match="the program compiles"):
        bisection.bisect(chain(4), Planted(lambda names, p: False))


def test_the_checker_rule_that_predicted_a_culprit_is_named() -> None:
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 70000), "fp16")  # wider than the chip's limit: a checker error
    b.output(b.relu(x=b.add(x=x, y=1.0)), "y")
    program = mil.parse(b.build().to_text())
    found = bisection.bisect(program, Planted(lambda names, p: "y" in names))
    (culprit,) = found.ops
    assert culprit.predicted_by and "no rule predicted this" not in found.lines()[1]
    quiet = bisection.bisect(chain(4), Planted(lambda names, p: "relu_1" in names))
    assert quiet.ops[0].predicted_by == () and quiet.lines()[1].endswith("no rule predicted this")


def test_each_compile_can_run_in_a_fresh_process() -> None:
    """The mechanism, shown with the reference backend: passes here; the ANE fails off macOS."""
    bisection.compile_in_fresh_process(chain(2), backend="reference", options={}, timeout=120)
    from anekit.backends import ane

    if ane.available()[0]:
        pytest.skip("this machine has an ANE")
    with pytest.raises(CompileError, match="BackendUnavailable: backend 'ane'"):
        bisection.compile_in_fresh_process(chain(2), backend="ane", timeout=120)
    with pytest.raises(BackendUnavailable, match="bisecting needs the ANE"):
        bisection.bisect(chain(2))


def test_anekit_doctor_bisect(tmp_path: Path, capsys, monkeypatch) -> None:
    program = chain(8)
    culprit = computing(program)[5]
    source = program.save(tmp_path / "p")
    monkeypatch.setattr(bisection, "default_compile",
                        lambda: Planted(lambda names, p: culprit.name in names))  # fmt: skip
    record = tmp_path / "bisect.json"
    assert cli.main(["doctor", "--bisect", str(source), "--json", str(record)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 op(s) of 16 make the compile fail")
    assert (
        out[1]
        == f"  {culprit.op_type} {culprit.name!r} at line {culprit.line}: no rule predicted this"
    )
    saved = json.loads(record.read_text())
    assert saved["culprits"][0]["op"] == culprit.name and saved["compiles"] >= 2
    assert mil.parse(saved["failing_program"]).main.ops  # the reproducer parses
