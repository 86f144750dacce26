"""The accuracy gate: compress, measure, and fall back layer by layer until the budget holds.

Every layer starts on the first rung of its ladder (``anekit.compression.auto``; for a named
scheme the ladder is that scheme alone). The program is measured against the
uncompressed original on the reference backend (``anekit.compression.calibrate``). While
the error is over ``max_error``, the layer whose compression costs the most accuracy
moves down one rung (to a more accurate scheme, finally to fp16), and the program is
measured again. "Costs the most" is the layer's *own* error: the program's output
error with only that layer compressed at its current rung, measured once per rung.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from anekit.compression.auto import Rung

Measure = Callable[[dict[str, Rung]], float]  # chosen rungs by layer -> output error
# the layers whose rungs no longer make sense once others moved (e.g. W8A8 left alone)
Unsettled = Callable[[dict[str, Rung]], set[str]]


@dataclass(frozen=True)
class GateResult:
    """Where the gate left every layer.

    Attributes:
        rungs: layer -> its rung, or absent for fp16.
        error: the program's output error with those rungs.
        own: layer -> the output error with only that layer compressed at its final rung
            (measured for every layer that stayed compressed and every one that moved).
        fallbacks: (layer, from scheme, to scheme or "fp16") in the order they happened.
        within: whether the final error is within the budget.
    """

    rungs: dict[str, Rung]
    error: float
    own: dict[str, float]
    fallbacks: tuple[tuple[str, str, str], ...]
    within: bool


def gate(
    ladders: dict[str, list[Rung]],
    measure: Measure,
    max_error: float,
    unsettled: Unsettled | None = None,
) -> GateResult:
    """Fall back layer by layer, largest own error first, until ``measure`` is within budget.

    After every move, each layer ``unsettled`` names moves down too (a W8A8 layer whose
    chain neighbours all fell back has nothing left to chain with).
    """
    level = {name: 0 for name, ladder in ladders.items() if ladder}
    rungs = {name: ladders[name][0] for name in level}
    error = measure(rungs)
    own: dict[str, float] = {}
    fallbacks: list[tuple[str, str, str]] = []
    if error <= max_error:
        return GateResult(rungs, error, own, (), True)
    queue: list[tuple[float, str, int]] = []  # (-own error, layer, its level then)
    for name, rung in rungs.items():
        own[name] = measure({name: rung})
        heapq.heappush(queue, (-own[name], name, 0))

    def step(name: str) -> None:
        old = rungs.pop(name)[0].name
        level[name] += 1
        if level[name] < len(ladders[name]):
            rungs[name] = ladders[name][level[name]]
            own[name] = measure({name: rungs[name]})
            heapq.heappush(queue, (-own[name], name, level[name]))
            fallbacks.append((name, old, rungs[name][0].name))
        else:
            own[name] = 0.0  # fp16 again: the layer adds no error
            fallbacks.append((name, old, "fp16"))

    while queue and error > max_error:
        _, name, at = heapq.heappop(queue)
        if name not in rungs or at != level[name]:
            continue  # moved since (a stale entry of the queue)
        step(name)
        while unsettled is not None and (moved := unsettled(rungs)):
            for other in sorted(moved):
                step(other)
        error = measure(rungs)
    return GateResult(rungs, error, own, tuple(fallbacks), error <= max_error)
