"""Hardware execution time through ``_ANEPerformanceStats`` (ANE_NOTES sections 2.3 and 2.5).

Passing a stats object as a request's ``perfStats:`` is the presumed way to read
the time the ANE itself spent; it is not confirmed on hardware, so kernels use it
only when compiled with ``stats=True``. Then the model's ``setPerfStatsMask:`` is
set before compile and again after load (load clears it; tmc/apple x/ane), on the
in-memory model and on the ``_ANEModel`` inside it. Where no ``hwExecutionTime``
comes back, ``Kernel.last_stats()`` returns None rather than a guess (counters may
be unavailable for in-memory MIL models).
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


def hardware_seconds(stats: Any | None) -> float | None:
    """The hardware time a stats object recorded for the last evaluation, if it recorded one."""
    if stats is None:
        return None
    ns = int(stats.hwExecutionTime())
    return ns * 1e-9 if ns > 0 else None
