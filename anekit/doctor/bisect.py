"""Compile failures bisected to the operations that cause them.

``bisect(program, compile=...)`` finds a smallest set of operations whose sub-program
still fails to compile. A sub-program keeps the chosen ops and the constants they read;
every value they read from an op left out becomes an input of the sub-program (same
name, same type), and every value they make that no chosen op reads becomes an output.
So a failure that depends on a shape keeps its shape.

The search assumes failure is monotone (a set that fails still fails with more ops) and
grows the culprit set one op at a time: binary search for the shortest prefix of the
program (in program order, ending before the last culprit found) that fails together
with the culprits found so far; its last op is a culprit. One culprit costs at most
``2 * ceil(log2 n) + 2`` compiles (in practice ``ceil(log2 n) + 2``); ``k`` culprits that
fail only together cost ``O(k log n)``.

On a Mac each compile runs in a fresh process (:func:`compile_in_fresh_process`): a
failed compile can poison the process that made it (ANE_NOTES 2.4).
``anekit doctor --bisect PROGRAM`` prints the culprits, their MIL lines, the checker rule
that predicted each (or "no rule predicted this") and a JSON record to attach to a report.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anekit.errors import AnekitError, BackendUnavailable, CompileError, UsageError
from anekit.mil.ops import traits
from anekit.mil.program import Function, Operation, Program, Value
from anekit.mil.rewrite import replace_main

Compile = Callable[[Program], Any]  # raises on a failed compile, returns on success
FRESH_PROCESS_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Culprit:
    """One operation of the smallest failing set."""

    op: str  # its name
    kind: str  # its type
    line: int | None  # its line in the program's MIL text, where the program came from text
    predicted_by: tuple[str, ...]  # the checker rules that flagged it (empty: none did)

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "kind": self.kind,
            "line": self.line,
            "predicted_by": list(self.predicted_by),
        }


@dataclass(frozen=True)
class Bisection:
    """The smallest failing set of operations, and how it was found.

    Attributes:
        ops: the culprits, in program order.
        compiles: how many compiles the search made (the full program's included).
        error: the failure of the smallest failing sub-program, as text.
        program: that sub-program (save it to reproduce the failure).
        ops_in_program: how many computing (non-constant) ops the program has.
    """

    ops: tuple[Culprit, ...]
    compiles: int
    error: str
    program: Program = field(repr=False)
    ops_in_program: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON record a user can attach to a report."""
        return {
            "culprits": [c.as_dict() for c in self.ops],
            "compiles": self.compiles,
            "error": self.error,
            "ops_in_program": self.ops_in_program,
            "failing_program": self.program.to_text(),
        }

    def lines(self) -> list[str]:
        """What ``anekit doctor --bisect`` prints."""
        head = (
            f"{len(self.ops)} op(s) of {self.ops_in_program} make the compile fail "
            f"({self.compiles} compiles):"
        )
        out = [head]
        for c in self.ops:
            where = f"line {c.line}" if c.line is not None else "no line (a built program)"
            rule = ", ".join(c.predicted_by) if c.predicted_by else "no rule predicted this"
            out.append(f"  {c.kind} {c.op!r} at {where}: {rule}")
        out.append(f"  the failure: {self.error}")
        return out


def sub_program(program: Program, chosen: Sequence[Operation]) -> Program:
    """The program of ``chosen`` ops alone: cut inputs become inputs, unread results outputs."""
    fn = program.main
    keep = {id(op) for op in chosen}
    consts: dict[int, Operation] = {}
    inputs: dict[int, Value] = {}
    for op in chosen:
        for v in op.input_values():
            maker = v.producer
            if maker is None or id(maker) in keep:
                if maker is None and v.const is None and id(v) not in inputs:
                    inputs[id(v)] = v  # an input of the program itself
                continue
            if traits.CONST in maker.opdef.traits:
                consts[id(maker)] = maker
            elif id(v) not in inputs:
                inputs[id(v)] = v  # made by an op left out: an input of the cut
    read = {id(v) for op in chosen for v in op.input_values()}
    returned = {id(v) for v in fn.outputs}
    outputs = [v for op in chosen for v in op.outputs if id(v) not in read or id(v) in returned]
    ops = tuple(op for op in fn.ops if id(op) in keep or id(op) in consts)
    ordered_inputs = tuple(sorted(inputs.values(), key=_position(fn)))
    return replace_main(program, Function(fn.name, ordered_inputs, ops, tuple(outputs), fn.opset))


def _position(fn: Function) -> Callable[[Value], int]:
    """Sort key: a value's place in the program (function inputs first)."""
    order = {id(v): i for i, v in enumerate(fn.inputs)}
    for i, op in enumerate(fn.ops):
        for v in op.outputs:
            order[id(v)] = len(fn.inputs) + i
    return lambda v: order.get(id(v), -1)


class _Search:
    """The compiles of one bisection, counted, with the last failure kept."""

    def __init__(self, program: Program, compile: Compile) -> None:
        self.program, self._compile = program, compile
        self.compiles = 0
        self.failures: dict[tuple[int, ...], str] = {}

    def fails(self, ops: Sequence[Operation]) -> bool:
        """Whether the sub-program of ``ops`` fails to compile (an empty set never does)."""
        if not ops:
            return False
        candidate = sub_program(self.program, ops)
        self.compiles += 1
        try:
            self._compile(candidate)
        except Exception as e:  # any failure of the compiler is the answer, with its text
            self.failures[tuple(id(op) for op in ops)] = f"{type(e).__name__}: {e}"
            return True
        return False


def bisect(program: Program, compile: Compile | None = None) -> Bisection:
    """The smallest set of ``program``'s ops whose sub-program still fails ``compile``.

    Args:
        program: a program that fails to compile.
        compile: compiles a program, raising on failure. Default: the ANE in a fresh
            process per compile (:func:`default_compile`).
    Raises:
        UsageError: the whole program compiles (there is nothing to bisect).
        BackendUnavailable: no ``compile`` given and this machine has no ANE.
    """
    search = _Search(program, compile or default_compile())
    candidates = [op for op in program.main.ops if traits.CONST not in op.opdef.traits]
    if not search.fails(candidates):
        raise UsageError("the program compiles: there is no failure to bisect")
    found: list[Operation] = []
    upper = len(candidates)  # culprits lie in candidates[:upper]
    while not search.fails(_ordered(found, candidates)):
        j = _shortest_failing_prefix(search, candidates, upper, found)
        found.append(candidates[j])
        upper = j
    culprits = _ordered(found, candidates)
    return Bisection(
        ops=_described(program, culprits),
        compiles=search.compiles,
        error=search.failures[tuple(id(op) for op in culprits)],
        program=sub_program(program, culprits),
        ops_in_program=len(candidates),
    )


def _shortest_failing_prefix(
    search: _Search, candidates: list[Operation], upper: int, found: list[Operation]
) -> int:
    """The index of the last op of the shortest prefix of ``candidates[:upper]`` that fails with
    ``found`` (the whole range fails with it: the caller knows)."""
    low, high = 0, upper - 1  # the answer lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        if search.fails(_ordered([*found, *candidates[: middle + 1]], candidates)):
            high = middle
        else:
            low = middle + 1
    return low


def _ordered(ops: Sequence[Operation], candidates: list[Operation]) -> list[Operation]:
    chosen = {id(op) for op in ops}
    return [op for op in candidates if id(op) in chosen]


def _described(program: Program, culprits: list[Operation]) -> tuple[Culprit, ...]:
    """Each culprit with the checker rules that flagged it (by its name, else its line)."""
    from anekit.hw import check

    findings = [d for d in check(program) if d.severity in ("error", "warning")]
    out = []
    for op in culprits:
        names = {op.name, *(v.name for v in op.outputs)}
        rules = tuple(
            sorted(
                {
                    d.rule
                    for d in findings
                    if d.name in names or (d.line is not None and d.line == op.line)
                }
            )
        )
        out.append(Culprit(op.name, op.op_type, op.line, rules))
    return tuple(out)


# -- a compile in a fresh process ------------------------------------------------------------------
def default_compile() -> Compile:
    """The ANE, one fresh process per compile; BackendUnavailable (with the reason) without one:
    every compile would fail, and the bisection would blame the first op."""
    from anekit.backends import ane

    ok, reason = ane.available()
    if not ok:
        raise BackendUnavailable(f"bisecting needs the ANE: {reason}", backend="ane")
    return compile_in_fresh_process


ANE_OPTIONS = {"check": False}  # the compiler is what is asked, not the checker


def compile_in_fresh_process(
    program: Program,
    backend: str = "ane",
    options: dict[str, Any] | None = None,
    timeout: float = FRESH_PROCESS_TIMEOUT_S,
) -> None:
    """Compile (and close) ``program`` on ``backend`` with ``options`` (default: the ANE's with
    the checker off) in a new Python process; CompileError if it fails there, crashes or hangs."""
    options = ANE_OPTIONS if options is None else options
    with tempfile.TemporaryDirectory(prefix="anekit-bisect-") as scratch:
        where = program.save(Path(scratch) / "program")
        command = [
            sys.executable,
            "-m",
            "anekit.doctor.bisect",
            str(where),
            backend,
            json.dumps(options),
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CompileError(f"the compile gave no answer within {timeout:g} s") from None
    if done.returncode == 0:
        return
    lines = done.stdout.strip().splitlines()
    try:
        record = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise CompileError(
            f"the compiling process ended with {done.returncode}: {done.stderr.strip()[-300:]}"
        ) from None
    raise CompileError(f"{record['type']}: {record['message']}", line=record.get("line"))


def _child(path: str, backend: str, options: str) -> int:
    """In the fresh process: compile the saved program; print the error as JSON on failure."""
    import anekit
    from anekit.mil.loading import load_path

    try:
        anekit.compile(load_path(path), backend=backend, **json.loads(options)).close()
    except AnekitError as e:
        print(
            json.dumps(
                {"type": type(e).__name__, "message": str(e), "line": getattr(e, "line", None)}
            )
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:4]))
