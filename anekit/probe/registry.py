"""The declaration of an experiment, and the requirements an experiment can name.

An :class:`Experiment` is data: its name, the question it answers, what it needs
(names from :data:`REQUIREMENTS`), the function that runs it, the observations it
records and the conflicting published claims it settles. :meth:`Experiment.rung`
turns it into a :class:`~anekit.ladder.runner.Rung`, so the doctor ladder's runner
runs it in its own process with a timeout and skips it, saying why, where a
requirement does not hold.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anekit.backends.ane import framework, host
from anekit.ladder.runner import Context, Rung


@dataclass(frozen=True)
class Requirement:
    """Something an experiment needs: what it is, and why it is missing here (None if present)."""

    what: str
    problem: Callable[[], str | None]


def _ane() -> str | None:
    # the host first (loads nothing); then the framework, loaded once, never raising
    return host.problem(host.facts()) or framework.problem()


def _metal() -> str | None:
    if importlib.util.find_spec("Metal") is None:
        return "pyobjc-framework-Metal is not installed (pip install 'anekit[metal]')"
    return None


REQUIREMENTS: dict[str, Requirement] = {
    "ane": Requirement("a Mac with an Apple Neural Engine", _ane),
    "metal": Requirement("Metal through PyObjC", _metal),
}


@dataclass(frozen=True)
class Experiment:
    """One experiment of ``anekit probe``.

    Attributes:
        name: its identifier on the command line and in the report.
        question: what it answers, in one sentence.
        needs: names in :data:`REQUIREMENTS`, checked in order before it runs.
        run: the experiment; records with ``ctx.observe``, raises only when it cannot go on.
        records: the observations it makes, each ``"key: what it means"``.
        settles: the published claims it settles (docs/probe.md gives the sources).
        headline: its finding in one line, read from what it observed (the summary).
        timeout_s: how long its process may take.
    """

    name: str
    question: str
    needs: tuple[str, ...]
    run: Callable[[Context], None]
    records: tuple[str, ...]
    settles: str
    headline: Callable[[dict[str, Any]], str] | None = None
    timeout_s: float = 180.0

    def skip_reason(self, options: dict[str, Any]) -> str | None:
        """Why this experiment cannot run here, or None."""
        for need in self.needs:
            reason = REQUIREMENTS[need].problem()
            if reason is not None:
                return f"{need}: {reason}"
        return None

    def rung(self) -> Rung:
        """The runner's view of it: no prerequisite rungs, skipped where a need is missing."""
        return Rung(self.name, self.question, self.run, (), self.timeout_s, skip=self.skip_reason)
