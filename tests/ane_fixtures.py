"""Stand-in frameworks ready for a test: a fresh compile budget and no pause between load tries."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from tests.ane_fake import FakeFramework

F = TypeVar("F", bound=FakeFramework)


def fresh(tmp_path: Path, monkeypatch: Any, cls: type[F] = FakeFramework) -> F:  # type: ignore[assignment]
    """A stand-in framework of ``cls`` under ``tmp_path``, with a fresh compile budget."""
    from anekit.backends import budget
    from anekit.backends.ane import kernel

    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    monkeypatch.setattr(kernel, "LOAD_RETRY_DELAY_S", 0.0)
    return cls(tmp_path / "T")


def rung_context(tmp_path: Path, monkeypatch: Any, framework: Any, options: dict[str, Any]) -> Any:
    """A ladder rung's Context over ``framework`` (made by :func:`fresh`)."""
    from anekit.ladder.runner import Context

    ctx = Context(options, None, tmp_path)
    ctx.resources["framework"] = framework
    return ctx
