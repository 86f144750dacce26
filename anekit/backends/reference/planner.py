"""Compile-time planning of the reference executor: value slots, steps, liveness and buffers.

A program becomes a flat list of :class:`Step` over an environment of value slots:

- ``const`` slots hold constants as the references receive them (fp16 upcast to float32,
  once, at compile time; ops whose inputs are all constants are folded here too);
- ``buffer`` slots are views into per-evaluation arenas, written with ``out=``;
- ``runtime`` slots are set on each evaluation: views of other slots, and the results of
  ops that run their registry reference.

Liveness decides which values share an arena: a buffer is free again after its last
reader, and a view or a reference result keeps every value it may alias alive as long
as itself. The planned peak (arenas plus live reference results) is checked against the
memory budget before anything is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from anekit import fp16
from anekit.backends.reference.device import SATURATED, Storage, storage_for
from anekit.backends.reference.forms import FORMS, Form, ufunc_form
from anekit.errors import CompileError, EvaluationError
from anekit.hw.numerics import ideal
from anekit.mil.ops.registry import received
from anekit.mil.ops.traits import CONST, CONSTEXPR, EXACT
from anekit.mil.program import Operation, Program, Value
from anekit.mil.types import DType, TensorType

ALIGN = 64  # bytes: arena views start on a cache line
_IDEAL = ideal()


class SlotKind(Enum):
    """Where a slot's value lives while the program runs (see the module docstring)."""

    CONST = "const"  # held from compile time
    BUFFER = "buffer"  # a view into a per-evaluation arena, written with out=
    RUNTIME = "runtime"  # set on each evaluation: a view, or a reference result


@dataclass
class Slot:
    """One value of the program in the environment."""

    name: str
    kind: SlotKind | None  # None: a slot only described (the budget check), never planned
    type: TensorType | None = None
    dtype: np.dtype | None = None  # the held dtype (float32 for fp16)
    nbytes: int = 0  # held bytes, 0 when unknown (a dynamic shape)
    const: Any = None
    arena: int = -1
    last_use: int = -1
    producer: Operation | None = None


@dataclass
class Step:
    """One op: a planned form, or its registry reference (``form is None``)."""

    op: Operation
    index: int
    ins: tuple[int, ...]  # every input slot (for liveness)
    outs: tuple[int, ...]
    form: Form | None
    rounded: tuple[int, ...]  # output buffers rounded to fp16 after the form runs
    fallback: Callable[[list, Callable], None]  # runs the reference; takes (env, rounder)
    scratch: tuple[int, ...] = ()
    storages: tuple[Storage, ...] = ()  # under a device profile: how each rounded output is stored


@dataclass
class Plan:
    """Everything the kernel needs to create evaluation states and run them."""

    slots: list[Slot]
    steps: list[Step]
    arenas: list[int]  # bytes of each arena
    inputs: list[tuple[str, int]]  # input name, slot (a buffer)
    outputs: list[tuple[str, int, np.dtype]]
    peak_bytes: int
    dead_after: list[tuple[int, ...]] = field(default_factory=list)  # runtime slots to drop


def held_dtype(dtype: DType) -> np.dtype | None:
    """The NumPy dtype a value of ``dtype`` is held in while the program runs."""
    if dtype is DType.string:
        return None
    return np.dtype(np.float32) if dtype is DType.fp16 else np.dtype(dtype.numpy)


def _held_bytes(t: TensorType) -> int:
    """Bytes a value of type ``t`` takes while held (0 when its shape is not static)."""
    dtype = held_dtype(t.dtype)
    if dtype is None or not t.is_static:
        return 0
    return math.prod(int(d) for d in t.shape) * dtype.itemsize


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def _describe(s: Slot) -> str:
    op = s.producer
    where = (
        ""
        if op is None
        else f" (op {op.op_type!r}" + (f", MIL line {op.line})" if op.line else ")")
    )
    return f"tensor {s.name!r}{where}: {s.type} holds {s.nbytes:,} bytes ({_gib(s.nbytes)})"


class Context:
    """What a form factory sees of one op at compile time (see ``forms.py``)."""

    def __init__(self, planner: Planner, op: Operation, args: dict[str, Any]) -> None:
        self._planner = planner
        self.op = op
        self._args = args  # parameter -> slot, or tuple of slots (variadic)
        self.scratch_slots: list[int] = []

    def slot(self, name: str) -> int | None:
        s = self._args.get(name)
        return s if s is None or isinstance(s, int) else None

    def slots(self, name: str) -> tuple[int, ...]:
        s = self._args.get(name, ())
        return s if isinstance(s, tuple) else (s,)

    def is_const(self, name: str) -> bool:
        s = self._args.get(name)
        return isinstance(s, int) and self._planner.slots[s].kind is SlotKind.CONST

    def const(self, name: str) -> Any:
        """A constant parameter's held value (None if omitted without default, or not const)."""
        return self._planner.slots[self._args[name]].const if self.is_const(name) else None

    def dtype(self, s: int) -> np.dtype | None:
        return self._planner.slots[s].dtype

    def shape(self, s: int) -> tuple[int, ...]:
        return tuple(int(d) for d in self._planner.slots[s].type.shape)

    def out(self, i: int = 0) -> int:
        return self._planner.slot_of[id(self.op.outputs[i])]

    def out_shape(self, i: int = 0) -> tuple[int, ...]:
        return tuple(int(d) for d in self.op.outputs[i].type.shape)

    def scratch(self, shape: tuple[int, ...], dtype: Any) -> int:
        """A buffer of ``shape`` that lives only while this op runs."""
        t = self._planner.slots[self.out()].type
        s = self._planner.new_slot(
            f"{self.op.name}/scratch{len(self.scratch_slots)}", SlotKind.BUFFER
        )
        slot = self._planner.slots[s]
        slot.dtype, slot.type = np.dtype(dtype), TensorType(t.dtype, tuple(shape))
        slot.nbytes = math.prod(shape) * slot.dtype.itemsize
        self.scratch_slots.append(s)
        return s

    def same_layout(self, o: int, *ins: int) -> tuple[int, ...]:
        """The inputs whose shape and dtype equal output ``o``'s (candidates for in-place)."""
        slots = self._planner.slots
        return tuple(
            s
            for s in ins
            if slots[s].type.shape == slots[o].type.shape and slots[s].dtype == slots[o].dtype
        )


class Planner:
    """Builds a :class:`Plan` for one program (see the module docstring)."""

    def __init__(
        self, program: Program, storage: str, memory_budget: int, profile: Any = None
    ) -> None:
        self.program = program
        self.storage = storage
        self.budget = memory_budget
        self.profile = None if profile is None or profile.is_ideal else profile
        self.slots: list[Slot] = []
        self.slot_of: dict[int, int] = {}

    def new_slot(self, name: str, kind: SlotKind) -> int:
        self.slots.append(Slot(name, kind))
        return len(self.slots) - 1

    def _value_slot(self, v: Value, kind: SlotKind) -> int:
        s = self.new_slot(v.name, kind)
        slot = self.slots[s]
        slot.type, slot.dtype = v.type, held_dtype(v.type.dtype)
        slot.nbytes, slot.producer = _held_bytes(v.type), v.producer
        self.slot_of[id(v)] = s
        return s

    def _const_slot(self, v: Value) -> int:
        s = self.slot_of.get(id(v))
        if s is None:
            s = self._value_slot(v, SlotKind.CONST)
            self.slots[s].const = received(v.const)
        return s

    def _check_sizes(self) -> None:
        """Every declared tensor against the budget, before anything is held or allocated."""
        fn = self.program.main
        values = [*fn.inputs, *(v for op in fn.ops for v in op.outputs)]
        largest = max(values, key=lambda v: _held_bytes(v.type), default=None)
        if largest is not None and _held_bytes(largest.type) > self.budget:
            slot = Slot(largest.name, None, largest.type, nbytes=_held_bytes(largest.type))
            slot.producer = largest.producer
            raise CompileError(
                f"{_describe(slot)}, more than the reference backend's memory budget of "
                f"{self.budget:,} bytes ({_gib(self.budget)}); raise it with "
                "compile(..., memory_budget=BYTES)",
                line=largest.producer.line if largest.producer else None,
            )

    def plan(self) -> Plan:
        self._check_sizes()
        fn = self.program.main
        inputs = [(v.name, self._value_slot(v, SlotKind.BUFFER)) for v in fn.inputs]
        steps: list[Step] = []
        for op in fn.ops:
            if CONST in op.opdef.traits:
                continue  # consumers take constants directly
            step = self._step(op, len(steps))
            if step is not None:
                steps.append(step)
        for v in fn.outputs:
            if id(v) not in self.slot_of:
                self._const_slot(v)  # an output that is a constant
        outputs = [(v.name, self.slot_of[id(v)], np.dtype(v.type.dtype.numpy)) for v in fn.outputs]
        self._liveness(steps, [s for _, s, _ in outputs])
        arenas = self._assign(steps, [s for _, s in inputs])
        peak = sum(arenas) + self._runtime_peak(steps)
        if peak > self.budget:
            biggest = sorted(
                (s for s in self.slots if s.kind is not SlotKind.CONST), key=lambda s: -s.nbytes
            )[:3]
            raise CompileError(
                f"the program needs {peak:,} bytes ({_gib(peak)}) of buffers at its peak, more "
                f"than the reference backend's memory budget of {self.budget:,} bytes "
                f"({_gib(self.budget)}); largest: "
                + "; ".join(_describe(s) for s in biggest)
                + "; raise it with compile(..., memory_budget=BYTES)"
            )
        dead: list[tuple[int, ...]] = [() for _ in steps]
        for i, s in enumerate(self.slots):
            if s.kind is SlotKind.RUNTIME and 0 <= s.last_use < len(steps):
                dead[s.last_use] += (i,)
        return Plan(self.slots, steps, arenas, inputs, outputs, peak, dead)

    # -- steps ------------------------------------------------------------------------------
    def _args(self, op: Operation) -> dict[str, Any]:
        """Parameter -> slot (tuples for variadic); omitted parameters with a default are consts."""
        args = op.args()
        result: dict[str, Any] = {}
        for p in op.opdef.params:
            v = op.inputs.get(p.name)
            if v is None:
                v = getattr(args, p.name)  # declared default, or None
                if v is None:
                    continue
            if isinstance(v, tuple):
                result[p.name] = tuple(self._input_slot(x) for x in v)
            else:
                result[p.name] = self._input_slot(v)
        return result

    def _input_slot(self, v: Value) -> int:
        s = self.slot_of.get(id(v))
        return s if s is not None else self._const_slot(v)

    def _step(self, op: Operation, index: int) -> Step | None:
        if op.opdef.reference is None:
            raise EvaluationError(f"op {op.op_type!r} has no reference implementation")
        args = self._args(op)
        ins = tuple(s for a in args.values() for s in (a if isinstance(a, tuple) else (a,)))
        storages = tuple(
            storage_for(op.op_type, op.opdef.numerics, self.profile)
            if self._device(op, v)
            else None
            for v in op.outputs
        )
        stores = [
            _store(v.type.dtype, self._rounds(op, v), st) for v, st in zip(op.outputs, storages)
        ]
        folded = (
            all(self.slots[s].kind is SlotKind.CONST for s in ins) and CONSTEXPR in op.opdef.traits
        )
        statics = all(v.type.is_static and held_dtype(v.type.dtype) for v in op.outputs)
        hook = self._hook(op)
        factory = None if hook is not None else _factory(op)  # a hook reads the reference
        kind = (
            SlotKind.CONST
            if folded
            else SlotKind.BUFFER
            if statics and factory
            else SlotKind.RUNTIME
        )
        outs = tuple(self._value_slot(v, kind) for v in op.outputs)
        fallback = _fallback(op, args, self.slots, outs, stores, hook, self.profile)
        if folded:
            self._fold(outs, fallback)
            return None
        form = None
        ctx = Context(self, op, args)
        if kind is SlotKind.BUFFER:
            form = factory(ctx)
            if form is None or form.view:
                for s in outs:
                    self.slots[s].kind = SlotKind.RUNTIME
                ctx.scratch_slots.clear()
        kept = [
            (s, st)
            for s, v, st in zip(outs, op.outputs, storages)
            if self._rounds(op, v) and form and not form.view
        ]
        rounded = tuple(s for s, _ in kept)
        device = tuple(st for _, st in kept if st is not None)
        scratch = tuple(ctx.scratch_slots)
        return Step(op, index, ins, outs, form, rounded, fallback, scratch, device)

    def _device(self, op: Operation, v: Value) -> bool:
        """Whether output ``v`` is stored as the engine stores it (a profile, an fp16 store)."""
        return self.profile is not None and self._rounds(op, v)

    def _hook(self, op: Operation) -> Callable | None:
        """The op's numerics hook where the profile models what it reads, else None."""
        numerics = op.opdef.numerics
        if self.profile is None or numerics is None or numerics.hook is None:
            return None
        modelled = getattr(self.profile, numerics.reads) != getattr(_IDEAL, numerics.reads)
        return numerics.hook if modelled else None

    def _rounds(self, op: Operation, v: Value) -> bool:
        """Whether output ``v`` is rounded to fp16 when stored."""
        if v.type.dtype is not DType.fp16 or self.storage != "fp16":
            return False
        # an "exact" op only moves values that are fp16 already: rounding changes nothing
        exact = EXACT in op.opdef.traits and all(
            not x.dtype.is_float or x.dtype is DType.fp16 for x in op.input_values()
        )
        return not exact

    def _fold(self, outs: tuple[int, ...], fallback: Callable) -> None:
        """Evaluate an op of constants (a constexpr) once, now; its outputs become constants."""
        env: list[Any] = [s.const for s in self.slots]
        with np.errstate(all="ignore"):
            fallback(env, None)
        for s in outs:
            self.slots[s].const = env[s]

    # -- liveness and arenas ------------------------------------------------------------------
    def _liveness(self, steps: list[Step], outputs: list[int]) -> None:
        slots = self.slots
        end = len(steps)
        for step in steps:
            for s in step.ins:
                slots[s].last_use = max(slots[s].last_use, step.index)
            for s in (*step.outs, *step.scratch):
                slots[s].last_use = max(slots[s].last_use, step.index)
        for s in outputs:
            slots[s].last_use = end
        # a view or a reference result may alias its inputs: they live as long as it does
        for step in reversed(steps):
            if step.form is not None and not step.form.view:
                continue
            last = max(slots[s].last_use for s in step.outs)
            for s in step.ins:
                if slots[s].kind is not SlotKind.CONST:
                    slots[s].last_use = max(slots[s].last_use, last)

    def _assign(self, steps: list[Step], inputs: list[int]) -> list[int]:
        """Give every buffer slot an arena; arenas are reused once their value is dead."""
        slots = self.slots
        arenas: list[int] = []
        free: list[int] = []
        holder: dict[int, int] = {}  # arena -> slot using it

        def take(s: int, reuse: int | None = None) -> None:
            need = -(-slots[s].nbytes // ALIGN) * ALIGN
            if reuse is not None:
                a = reuse
            elif free:
                fits = [a for a in free if arenas[a] >= need]
                a = (
                    min(fits, key=lambda a: arenas[a])
                    if fits
                    else max(free, key=lambda a: arenas[a])
                )
                free.remove(a)
            else:
                arenas.append(0)
                a = len(arenas) - 1
            arenas[a] = max(arenas[a], need)
            slots[s].arena = a
            holder[a] = s

        def release(s: int) -> None:
            a = slots[s].arena
            if a >= 0 and holder.get(a) == s:
                del holder[a]
                free.append(a)

        ends: dict[int, list[int]] = {}
        for i, slot in enumerate(slots):
            if slot.kind is SlotKind.BUFFER:
                ends.setdefault(slot.last_use, []).append(i)
        for s in inputs:
            take(s)
        for s in ends.get(-1, ()):
            release(s)  # an input nothing reads
        for step in steps:
            inplace = step.form.inplace if step.form is not None else ()
            for s in step.outs:
                if slots[s].kind is not SlotKind.BUFFER:
                    continue
                donor = next(
                    (
                        i
                        for i in inplace
                        if slots[i].kind is SlotKind.BUFFER
                        and slots[i].last_use == step.index
                        and slots[i].arena >= 0
                        and holder.get(slots[i].arena) == i
                        and slots[i].nbytes == slots[s].nbytes
                    ),
                    None,
                )
                if donor is not None:
                    a = slots[donor].arena
                    del holder[a]
                    take(s, reuse=a)
                else:
                    take(s)
            for s in step.scratch:
                take(s)
            for s in ends.get(step.index, ()):
                release(s)
        return arenas

    def _runtime_peak(self, steps: list[Step]) -> int:
        """The largest total of reference results alive at once (their bytes are declared)."""
        live, peak = 0, 0
        ends: dict[int, int] = {}
        for step in steps:
            for s in step.outs:
                if self.slots[s].kind is SlotKind.RUNTIME and step.form is None:
                    live += self.slots[s].nbytes
                    ends[self.slots[s].last_use] = (
                        ends.get(self.slots[s].last_use, 0) + self.slots[s].nbytes
                    )
            peak = max(peak, live)
            live -= ends.pop(step.index, 0)
        return peak


def _factory(op: Operation) -> Callable[[Context], Form | None] | None:
    """The op's planned form: derived from its registry ``ufunc``, else the ``FORMS`` table."""
    return ufunc_form if op.opdef.ufunc is not None else FORMS.get(op.op_type)


def _store(dtype: DType, rounds: bool, storage: Storage | None) -> Callable[[Any, Any], Any]:
    """How a reference result is stored: ``store(result, rounder)`` gives the held value.

    ``rounder`` is None when the result may be shared (one of the arguments): it is then
    rounded into a new array, never in place. Under a device profile (``storage``) it is
    the evaluation's :class:`StepStore`.
    """
    if storage is not None:
        return lambda r, rounder: _store_device(r, rounder, storage)
    if rounds:
        return _store_fp16
    if dtype is DType.fp16:
        return lambda r, _: np.asarray(r, dtype=np.float32)
    if dtype is DType.string:
        return lambda r, _: r
    target = dtype.numpy
    return lambda r, _: np.asarray(r).astype(target, copy=False)


def _store_fp16(r: Any, rounder: fp16.Rounder | None) -> np.ndarray:
    """Round a reference result to fp16: in place when it is a fresh float32 array."""
    r = np.asarray(r)
    fresh = r.dtype == np.float32 and r.base is None and r.flags.c_contiguous
    if rounder is not None and fresh and r.flags.writeable:
        rounder(r)
        return r
    return fp16.round_fp16(r)


def _store_device(r: Any, rounder: Any, storage: Storage) -> np.ndarray:
    """Store a reference result as the engine would, into a fresh float32 array."""
    held = np.array(r, dtype=np.float32, order="C")  # a copy: the result may be shared
    if rounder is None:  # folding constants at plan time: IEEE, as the host decompresses
        return fp16.round_fp16(held)
    rounder.store(held, storage)
    return held


def _fallback(
    op: Operation,
    args: dict[str, Any],
    slots: list[Slot],
    outs: tuple[int, ...],
    stores: list,
    hook: Callable | None = None,
    profile: Any = None,
) -> Callable[[list, Any], None]:
    """Run the op's registry reference (and its numerics hook) and store its results."""
    fn = op.opdef.reference
    consts, runtime, variadic = {}, [], []
    for name, s in args.items():
        if isinstance(s, tuple):
            variadic.append((name, s))
        elif slots[s].kind is SlotKind.CONST:
            consts[name] = slots[s].const
        else:
            runtime.append((name, s))
    single = len(outs) == 1

    def run(env: list, rounder: Any) -> None:
        kwargs = dict(consts)
        for name, s in runtime:
            kwargs[name] = env[s]
        for name, items in variadic:
            kwargs[name] = tuple(env[s] for s in items)
        try:
            result = fn(**kwargs)
        except Exception as e:  # a failure inside an op: report which op
            where = f" (MIL line {op.line})" if op.line else ""
            raise EvaluationError(f"op {op.op_type!r} {op.name!r}{where} failed: {e}") from e
        if hook is not None:
            result, events = hook(profile, kwargs, result)  # saturated, or (saturated, flushed)
            rounder.counts[SATURATED : SATURATED + np.size(events)] += events
        if single:
            # a result that is one of the arguments must not be rounded in place
            shared = any(result is v for v in kwargs.values())
            env[outs[0]] = stores[0](result, None if shared else rounder)
        else:
            for s, store, r in zip(outs, stores, result):
                env[s] = store(r, None)

    return run
