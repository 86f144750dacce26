"""The reference kernel: a planned program run over per-evaluation states of buffers."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from anekit import fp16
from anekit.backends.base import Buffer, BufferSet, Kernel
from anekit.backends.reference.device import CliffEvents, CliffRow, DeviceRounder, StepStore
from anekit.backends.reference.planner import ALIGN, Plan, Planner, SlotKind, Step, held_dtype
from anekit.config import physical_memory
from anekit.errors import AnekitError, EvaluationError
from anekit.hw.numerics import NumericsProfile, ideal
from anekit.mil.program import Operation, Program

NAME = "reference"
STORAGE_MODES = ("fp16", "fp32")
BUDGET_FRACTION = 0.5  # of physical memory, the default memory budget


def default_memory_budget() -> int:
    """Half of this machine's physical memory, in bytes (8 GiB assumed where unknown)."""
    return int(max(physical_memory(), 1) * BUDGET_FRACTION)


class _State:
    """The memory of one evaluation in flight: arenas, the environment, bound steps, scratch."""

    __slots__ = ("env", "program", "rounder", "arenas", "inputs", "counts")

    def __init__(self, plan: Plan, device: bool) -> None:
        self.arenas = [_aligned(n) for n in plan.arenas]
        self.rounder = fp16.Rounder(silenced=True)  # steps run under np.errstate
        # under a device profile: the events of the evaluation, a row per step
        self.counts = np.zeros((len(plan.steps), 3), np.int64) if device else None
        stores = _step_stores(self.counts)
        env: list[Any] = [None] * len(plan.slots)
        for i, s in enumerate(plan.slots):
            if s.kind is SlotKind.CONST:
                env[i] = s.const
            elif s.kind is SlotKind.BUFFER:
                shape = tuple(int(d) for d in s.type.shape)
                env[i] = self.arenas[s.arena][: s.nbytes].view(s.dtype).reshape(shape)
        self.env = env
        self.inputs = [env[slot] for _, slot in plan.inputs]  # their arena views
        self.program = [
            (_bind(step, plan, env, self.rounder, stores(step.index)), plan.dead_after[step.index])
            for step in plan.steps
        ]


def _step_stores(counts: np.ndarray | None) -> Callable[[int], StepStore | None]:
    """The StepStore of each step under a device profile (None under the ideal one)."""
    if counts is None:
        return lambda i: None
    device = DeviceRounder()
    return lambda i: StepStore(device, counts[i])


def aligned_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zeroed C-contiguous array starting on an ``ALIGN``-byte boundary, as arena views do."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    raw = _aligned(max(n, 1))
    raw[:] = 0
    return raw[:n].view(dtype).reshape(shape)


def _aligned(nbytes: int) -> np.ndarray:
    """``nbytes`` of uninitialised memory starting on an ``ALIGN``-byte boundary."""
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + nbytes]


def c_ordered(a: np.ndarray) -> bool:
    """Whether ``a``'s memory order is C's: strides of dims longer than 1 positive, decreasing.

    A ufunc then allocates its result C-contiguous, as the buffers are (gaps allowed).
    """
    if a.flags.c_contiguous:
        return True
    last = None
    for n, s in zip(a.shape, a.strides):
        if n == 1:
            continue
        if s <= 0 or (last is not None and s > last):
            return False
        last = s
    return True


def _bind(
    step: Step, plan: Plan, env: list, rounder: fp16.Rounder, store: StepStore | None
) -> Callable[[list], None]:
    """The callable that runs one step on a state's environment (``store``: a device profile's)."""
    form, fallback = step.form, step.fallback
    storing = rounder if store is None else store  # what the reference's results are stored by
    if form is None:
        return lambda env: fallback(env, storing)
    if form.view:
        return form.run
    run = form.run
    finish = _finisher(step, rounder, store)
    checks = tuple(s for s in form.ordered if plan.slots[s].kind is SlotKind.RUNTIME)
    if not checks:
        if finish is None:
            return run

        def run_finish(env: list) -> None:
            run(env)
            finish(env)

        return run_finish
    restore = tuple((o, env[o]) for o in step.outs)

    def guarded(env: list) -> None:
        for s in checks:
            if not c_ordered(env[s]):
                fallback(env, storing)  # the reference's layout, for this evaluation
                return
        for o, buf in restore:
            env[o] = buf
        run(env)
        if finish is not None:
            finish(env)

    return guarded


def _finisher(
    step: Step, rounder: fp16.Rounder, store: StepStore | None
) -> Callable[[list], None] | None:
    """What stores a form's fp16 outputs after it ran (None: it has none to round)."""
    rounded = step.rounded
    if not rounded:
        return None
    if store is not None:
        pairs = tuple(zip(rounded, step.storages))
        put = store.store

        def device(env: list) -> None:
            for o, st in pairs:
                put(env[o], st)

        return device
    if len(rounded) == 1:
        (o,) = rounded
        return lambda env: rounder(env[o])

    def each(env: list) -> None:
        for o in rounded:
            rounder(env[o])

    return each


class ReferenceKernel(Kernel):
    """A Program planned into steps over value slots; buffers are reused by liveness.

    Buffer sets (``buffers()``) hold each input in the executor's own form (fp16 values
    as float32, see :mod:`anekit.backends.reference`), so a run reads them in place,
    through read-only views; ``compact=True`` sets hold fp16 as float16 and convert on
    each run (the primary set behind ``input_buffer`` is one). Outputs are copied out of
    the evaluation's buffers into the set's.
    """

    backend = NAME
    engine = "CPU"
    route = "the NumPy reference backend (the ANE's numerics modelled)"

    def __init__(
        self,
        program: Program,
        storage: str = "fp16",
        memory_budget: int | None = None,
        profile: NumericsProfile | None = None,
    ) -> None:
        super().__init__(program)
        self.storage = storage
        self.profile = ideal() if profile is None else profile
        self.memory_budget = default_memory_budget() if memory_budget is None else memory_budget
        self.plan = Planner(program, storage, self.memory_budget, self.profile).plan()
        self._device = not self.profile.is_ideal
        self._states: list[_State] = []
        self._state_lock = threading.Lock()
        self._last_counts: np.ndarray | None = None

    @property
    def numerics(self) -> str:
        """The name of the numerics profile this kernel stores by ("ideal", "m4", ...)."""
        return self.profile.name

    @property
    def events(self) -> CliffEvents:
        """The cliff events of the last evaluation that finished (none under "ideal")."""
        counts = self._last_counts
        rows = []
        if counts is not None:
            for i in np.flatnonzero(counts.any(axis=1)).tolist():
                op, (sat, flushed, replaced) = self.plan.steps[i].op, counts[i].tolist()
                name = op.outputs[0].name if op.outputs else op.name
                rows.append(CliffRow(name, op.op_type, op.line, sat, flushed, replaced))
        return CliffEvents(self.profile.name, tuple(rows))

    @property
    def planned_bytes(self) -> int:
        """Bytes one evaluation in flight needs at its peak (buffers and reference results)."""
        return self.plan.peak_bytes

    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        state = self._acquire()
        try:
            env = self._execute(state, inputs)
            return {name: _fresh(env[slot], dtype) for name, slot, dtype in self.plan.outputs}
        finally:
            self._give_back(state)

    def _make_buffers(self, share: dict[str, Buffer], compact: bool) -> BufferSet:
        inputs = {}
        for spec in self.inputs:
            buf = share.get(spec.name)
            if buf is None:
                array = aligned_array(spec.shape, self._form(spec, compact))
                buf = Buffer(spec, array, array, NAME)
            inputs[spec.name] = buf
        outputs = {}
        for spec in self.outputs:
            array = aligned_array(spec.shape, self._form(spec, compact))
            outputs[spec.name] = Buffer(spec, array, array, NAME)
        return BufferSet(self, inputs, outputs, shared=frozenset(share))

    def _binding_problem(self, name: str, buf: Buffer) -> str | None:
        if buf.kind != NAME or not isinstance(buf.memory, np.ndarray):
            return f"of a reference kernel cannot bind a buffer of kind {buf.kind!r}"
        return None

    def _run_buffers(self, buffers: BufferSet) -> None:
        state = self._acquire()
        try:
            env = self._execute(state, {s.name: buffers.input(s.name) for s in self.inputs},
                                in_place=True)  # fmt: skip
            for name, slot, _ in self.plan.outputs:
                fp16.cast_into(buffers.output(name), env[slot])
        finally:
            self._give_back(state)

    def trace(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        """Every op output of one evaluation, by value name, as held (fp16 as float32 values).

        For debugging and tests: each value is copied right after its op, before its
        buffer is reused.
        """
        values: dict[str, np.ndarray] = {}
        with self._in_flight():
            state = self._acquire()
            try:
                self._execute(state, self.validate(inputs), trace=values)
            finally:
                self._give_back(state)
        return values

    def _release(self) -> None:
        with self._state_lock:
            self._states.clear()

    def _form(self, spec: Any, compact: bool) -> np.dtype:
        """The dtype a buffer set holds ``spec`` in: the executor's held form, or compact fp16."""
        return np.dtype(spec.dtype.numpy) if compact else held_dtype(spec.dtype)

    # -- states ---------------------------------------------------------------------------
    def _acquire(self) -> _State:
        """A free evaluation state, or a new one (its buffers are allocated now, lazily)."""
        with self._state_lock:
            if self._states:
                return self._states.pop()
        return _State(self.plan, self._device)

    def _give_back(self, state: _State) -> None:
        with self._state_lock:
            if not self._closed:
                self._states.append(state)

    def _execute(
        self,
        state: _State,
        inputs: dict[str, np.ndarray],
        trace: dict | None = None,
        *,
        in_place: bool = False,
        bind_only: bool = False,
    ) -> list:
        """Run the plan; ``in_place``: read inputs held in the executor's form where they are.

        ``bind_only``: bind the inputs and run nothing (:meth:`taps` runs the steps).
        """
        env = state.env
        for (name, slot), arena in zip(self.plan.inputs, state.inputs):
            value = inputs[name]
            if in_place and value.dtype == arena.dtype and value.flags.c_contiguous:
                view = value.view()
                view.flags.writeable = False  # no step may write into the caller's memory
                env[slot] = view
            else:
                env[slot] = arena
                fp16.cast_into(arena, value)
        if bind_only:
            return env
        for step in self._steps(state):
            if trace is not None:
                for v, s in zip(step.op.outputs, step.outs):
                    trace[v.name] = np.array(env[s], copy=True)
        return env

    def _steps(self, state: _State) -> Iterator[Step]:
        """Run the plan on ``state.env`` (inputs bound), yielding each step after it ran.

        A step's outputs are in the environment until the next one runs.
        """
        env, steps = state.env, self.plan.steps
        if state.counts is not None:
            state.counts.fill(0)
        # fp16 overflow to inf and NaN are the modelled behaviour, not errors
        with np.errstate(all="ignore"):
            i = 0
            try:
                for i, (fn, dead) in enumerate(state.program):
                    fn(env)
                    yield steps[i]
                    for s in dead:
                        env[s] = None
            except AnekitError:
                raise
            except Exception as e:  # a failure inside an op: report which op
                op = steps[i].op
                where = f" (MIL line {op.line})" if op.line else ""
                raise EvaluationError(f"op {op.op_type!r} {op.name!r}{where} failed: {e}") from e
        if state.counts is not None:
            self._last_counts = state.counts.copy()

    def taps(self, inputs: dict[str, Any]) -> Iterator[tuple[Operation, dict[str, np.ndarray]]]:
        """Evaluate op by op: yields each op and its outputs by value name, as held.

        The arrays are the evaluation's own buffers, valid until the next op runs (copy
        what must outlive it): memory stays that of one evaluation (``anekit.diff``).
        """
        with self._in_flight():
            state = self._acquire()
            try:
                self._execute(state, self.validate(inputs), bind_only=True)
                env = state.env
                for step in self._steps(state):
                    yield step.op, {v.name: env[s] for v, s in zip(step.op.outputs, step.outs)}
            finally:
                self._give_back(state)


def _fresh(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A new array of the output's dtype (the state's buffers are reused)."""
    if dtype == np.float16:
        return fp16.to_fp16(value)
    value = np.asarray(value)
    return value.astype(dtype) if value.dtype != dtype else value.copy()
