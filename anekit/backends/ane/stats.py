"""Hardware execution time through ``_ANEPerformanceStats`` (ANE_NOTES sections 2.3 and 2.5).

Passing a stats object as a request's ``perfStats:`` is the presumed way to read
the time the ANE itself spent; it is not confirmed on hardware, so kernels use it
only when compiled with ``stats=True``. Then the model's ``setPerfStatsMask:`` is
set before compile and again after load (load clears it; tmc/apple x/ane), on the
in-memory model and on the ``_ANEModel`` inside it.

Where the framework puts the numbers is a hypothesis with two readings, behind
``stats_read=``: ``"request"`` (the default, what tmc's ``telemetry/eval.go`` and
Espresso do) reads ``request.perfStatsArray()[0]``, then ``request.perfStats()``, then
the object passed in; ``"attached"`` reads only the object passed in. Where no
``hwExecutionTime`` comes back, ``Kernel.last_stats()`` returns None rather than a
guess (counters may be unavailable for in-memory MIL models); the ``stats`` rung of
``doctor --ladder`` records which reading held.
"""

from __future__ import annotations

from typing import Any

from anekit.backends.ane import facts
from anekit.errors import BackendUnavailable


def perf_mask() -> int:
    """The counter mask to set: every bit of the 4-bit mask (``data/facts.json``)."""
    return int(facts.value("perf_stats_mask"))


def set_perf_mask(models: list[Any], mask: int) -> None:
    """``setPerfStatsMask:`` on each model object that answers it."""
    for model in models:
        setter = getattr(model, "setPerfStatsMask_", None)
        if setter is not None:
            setter(mask)


def make_stats(framework: Any) -> Any | None:
    """A fresh stats object for one request, or None if the framework cannot make one."""
    try:
        cls = framework.cls("_ANEPerformanceStats")
    except BackendUnavailable:
        return None
    # alloc/init returns nil; the factory is the documented way in (ANE_NOTES 2.3).
    return cls.statsWithHardwareExecutionNS_(0)


STATS_READS = ("request", "attached")


def check_stats_read(stats_read: str) -> str:
    """ValueError for an unknown ``stats_read`` (checked before anything compiles)."""
    if stats_read not in STATS_READS:
        raise ValueError(f"stats_read must be one of {STATS_READS}, found {stats_read!r}")
    return stats_read


def _request_stats(request: Any) -> list[tuple[str, Any]]:
    """The stats objects a request itself holds after an evaluation, in tmc's order."""
    found = []
    array = getattr(request, "perfStatsArray", None)
    entries = array() if array is not None else None
    if entries is not None and int(entries.count()) > 0:
        found.append(("perfStatsArray[0]", entries.objectAtIndex_(0)))
    own = getattr(request, "perfStats", None)
    if own is not None:
        found.append(("perfStats", own()))
    return found


def hardware_seconds(request: Any, attached: Any | None, read: str) -> tuple[float, str] | None:
    """The hardware time of the last evaluation and where it was read, if anything recorded it."""
    candidates = _request_stats(request) if read == "request" else []
    candidates.append(("the attached stats object", attached))
    for where, stats in candidates:
        ns = int(stats.hwExecutionTime()) if stats is not None else 0
        if ns > 0:
            return ns * 1e-9, where
    return None
