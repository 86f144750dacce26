"""Synthetic ``anekit probe`` experiments for the runner test: real experiments on the
stand-in (each builds its own in its process), one that crashes, one that hangs.

Each runs in its own child process (``python -m anekit.ladder.runner tests.probe_rungs``),
which imports this module by name.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from anekit.ladder.runner import Context, Rung
from anekit.probe import dispatch, weights
from anekit.probe.registry import Experiment
from tests.probe_fake import ProbeFramework


def on_fake(run: Callable[[Context], None]) -> Callable[[Context], None]:
    def wrapped(ctx: Context) -> None:
        ctx.resources["framework"] = ProbeFramework(ctx.scratch / "T")
        run(ctx)

    return wrapped


def crashes(ctx: Context) -> None:
    ctx.observe("before_the_crash", "kept")
    os.kill(os.getpid(), signal.SIGSEGV)


def hangs(ctx: Context) -> None:
    ctx.observe("started", True)
    time.sleep(120)


EXPERIMENTS = (
    Experiment("realtime", "Real time on the stand-in?", (), on_fake(dispatch.realtime),
               ("latency",), "none", headline=dispatch.realtime_headline),
    Experiment("crashes", "Is a segmentation fault one crashed experiment?", (), crashes,
               ("before_the_crash",), "none"),
    Experiment("hangs", "Is a hang one timed-out experiment?", (), hangs, ("started",), "none",
               timeout_s=3.0),
    Experiment("weight-reload", "Weights on the stand-in?", (), on_fake(weights.weight_reload),
               ("after_reload",), "none", headline=weights.weight_reload_headline),
    Experiment("needs-metal", "Is a missing requirement a skip with the reason?", ("metal",),
               crashes, (), "none"),
)  # fmt: skip
RUNGS: tuple[Rung, ...] = tuple(e.rung() for e in EXPERIMENTS)
