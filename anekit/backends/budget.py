"""The per-process ANE compile budget: count compiles and stop before the framework breaks.

The framework leaks resources on every compile; after about 119 compiles in one
process further compiles fail silently (ANE_NOTES section 2.4, from maderix/ANE).
``BUDGET`` counts them and raises :class:`CompileBudgetExhausted` at a safer limit,
so a long-running program switches to a recycled worker
(``anekit.compile(..., isolate=True)``, see :mod:`anekit.backends.worker`).
"""

from __future__ import annotations

import threading

from anekit.errors import CompileBudgetExhausted

OBSERVED_LIMIT = 119  # compiles per process before failures (ANE_NOTES 2.4, maderix/ANE)
DEFAULT_LIMIT = 110  # stop with a margin: the observed figure is approximate


class CompileBudget:
    """A thread-safe count of compiles with a hard limit."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if not 1 <= limit <= OBSERVED_LIMIT:
            raise ValueError(
                f"compile budget limit must be in [1, {OBSERVED_LIMIT}], found {limit}"
            )
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    @property
    def remaining(self) -> int:
        return self.limit - self._used

    def charge(self) -> None:
        """Count one compile; CompileBudgetExhausted if the limit is reached (nothing is counted)."""
        with self._lock:
            if self._used >= self.limit:
                raise CompileBudgetExhausted(self._used, self.limit)
            self._used += 1


BUDGET = CompileBudget()


def compiles_used() -> int:
    """How many ANE compiles this process has made."""
    return BUDGET.used
