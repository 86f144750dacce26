"""Placement receipts: where a kernel runs, by which route, and why earlier choices were skipped.

Every :class:`~anekit.backends.base.Kernel` carries one as ``kernel.placement``. A
backend's kernel states its engine and path; ``anekit.compile`` adds the backends it
passed over on the way (``skipped``: each with its reason), so a program that lands
on the CPU always says why, never silently. Where the route reports a device per
operation (CoreML's ``MLComputePlan`` on macOS 14.4+), ``ops`` lists each one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

DEVICES = ("ane", "gpu", "cpu", "unknown")  # what an OpPlacement's device can be


@dataclass(frozen=True)
class OpPlacement:
    """The device one operation of the program runs on, as the route reported it."""

    op: str  # the op's name in the program
    kind: str  # its type, e.g. "conv"
    device: str  # one of DEVICES
    line: int | None = None  # its line in the program's MIL text, where known
    supported: tuple[str, ...] = ()  # the devices the route says it could have used

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "kind": self.kind, "device": self.device, "line": self.line,
                "supported": list(self.supported)}  # fmt: skip


@dataclass(frozen=True)
class Placement:
    """Where a kernel runs and why.

    Attributes:
        backend: the backend's name ("ane", "coreml", "reference").
        engine: what executes it ("Apple Neural Engine", "CPU", "CoreML: CPU and Neural
            Engine").
        path: the route to it ("private in-memory _ANEInMemoryModel", "CoreML MLModel"...).
        ops: per-operation devices, where the route reports them (else empty).
        skipped: ``(backend, reason)`` for every backend tried before this one and passed over.
        chosen_by: "asked for" (a backend named by the caller or ``$ANEKIT_BACKEND``) or
            "default order".
        notes: anything else the route said (a cached self-check verdict, a cache hit).
    """

    backend: str
    engine: str
    path: str
    ops: tuple[OpPlacement, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    chosen_by: str = "asked for"
    notes: tuple[str, ...] = field(default=())

    def chosen(self, skipped: tuple[tuple[str, str], ...], chosen_by: str) -> Placement:
        """This receipt with how the backend was chosen (``anekit.compile`` calls it)."""
        return replace(self, skipped=skipped, chosen_by=chosen_by)

    def devices(self) -> dict[str, int]:
        """How many operations run on each device (empty where the route does not say)."""
        return dict(Counter(op.device for op in self.ops))

    def summary(self) -> str:
        """One line: ``placement: ane (Apple Neural Engine via ...)``, with the op counts."""
        counts = ", ".join(f"{n} on {d}" for d, n in sorted(self.devices().items()))
        ops = f"; ops: {counts}" if counts else ""
        return f"placement: {self.backend} ({self.engine} via {self.path}; {self.chosen_by}){ops}"

    def lines(self) -> list[str]:
        """The summary, then one line per skipped backend and per note."""
        out = [self.summary()]
        out += [f"  skipped {name}: {reason}" for name, reason in self.skipped]
        out += [f"  note: {note}" for note in self.notes]
        return out

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "backend": self.backend,
            "engine": self.engine,
            "path": self.path,
            "chosen_by": self.chosen_by,
            "skipped": [{"backend": n, "reason": r} for n, r in self.skipped],
            "devices": self.devices(),
            "ops": [op.as_dict() for op in self.ops],
            "notes": list(self.notes),
            "lines": self.lines(),
        }
