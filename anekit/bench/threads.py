"""Pinning the thread pools a measurement runs on, so a busy machine cannot skew it.

NumPy's BLAS (and any OpenMP runtime) starts one thread per core by default. On a shared
machine those threads contend with other work and with each other, and a small kernel
can take a hundred times longer than it does on one thread. :func:`pinned` limits every
pool it can reach to the same count: BLAS and OpenMP through threadpoolctl (optional,
``pip install threadpoolctl``), and PyTorch's intra-op pool when torch is already imported
(it is never imported here). What was and was not pinned is reported, never assumed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np  # noqa: F401  (loads NumPy's BLAS, so threadpoolctl can find its pool)

from anekit.errors import UsageError

DEFAULT_THREADS = 1
MISSING = (
    "threadpoolctl is not installed, so BLAS threads are not pinned: pip install threadpoolctl"
)


def check_threads(threads: int) -> int:
    """The thread count, or a UsageError saying what was expected."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UsageError(f"threads: expected a whole number of at least 1, found {threads!r}")
    return threads


@contextlib.contextmanager
def pinned(threads: int = DEFAULT_THREADS) -> Iterator[dict[str, Any]]:
    """Limit BLAS, OpenMP and (if imported) torch threads to ``threads`` inside the block.

    Yields a report: ``{"threads", "pinned", "pools": [{"api", "library", "threads"}],
    "torch": threads or None, "note"}``; ``pinned`` is false when threadpoolctl is missing.
    """
    threads = check_threads(threads)
    report: dict[str, Any] = {"threads": threads, "pinned": False, "pools": [], "torch": None}
    with contextlib.ExitStack() as stack:
        try:
            from threadpoolctl import threadpool_info, threadpool_limits
        except ImportError:
            report["note"] = MISSING
        else:
            stack.enter_context(threadpool_limits(limits=threads))
            report["pinned"] = True
            report["pools"] = [
                {"api": p["internal_api"], "library": p["prefix"], "threads": p["num_threads"]}
                for p in threadpool_info()
            ]
            report["note"] = ""
        torch = sys.modules.get("torch")  # only if the caller imported it: never import it here
        if torch is not None:
            before = torch.get_num_threads()
            torch.set_num_threads(threads)
            stack.callback(torch.set_num_threads, before)
            report["torch"] = threads
        yield report


def describe(report: dict[str, Any]) -> str:
    """One line saying how many threads each pool ran on (or why none was pinned)."""
    if not report["pinned"]:
        return f"threads: NOT pinned ({report['note']})"
    pools = ", ".join(f"{p['api']} {p['threads']}" for p in report["pools"]) or "no BLAS pool found"
    torch = f", torch {report['torch']}" if report["torch"] is not None else ""
    return f"threads: pinned to {report['threads']} ({pools}{torch})"
