"""Hardware execution time through ``_ANEPerformanceStats`` (ANE_NOTES section 2.3).

Passing a stats object as a request's ``perfStats:`` is the presumed way to read
the time the ANE itself spent; it is not confirmed on hardware, so kernels use it
only when compiled with ``stats=True``. Where it yields no ``hwExecutionTime``,
``Kernel.last_stats()`` returns None rather than a guess.
"""

from __future__ import annotations

from typing import Any

from anekit.errors import BackendUnavailable


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
