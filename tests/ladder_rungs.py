"""A synthetic ladder for the runner's tests: rungs that pass, fail, crash, hang and depend.

Each rung runs in its own child process (``python -m anekit.ladder.runner``); this
module is imported there by name, so it must not need anything a child lacks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from anekit.errors import CompileError
from anekit.ladder.runner import Context, Rung


def passes(ctx: Context) -> None:
    ctx.observe("answer", 42)
    ctx.observe("nested", {"list": [1, 2], "text": "x"})


def fails(ctx: Context) -> None:
    ctx.observe("before", True)
    raise CompileError("ANE compile failed: nope", domain="com.apple.ane", code=3,
                       user_info={"NSLocalizedDescription": "nope"})  # fmt: skip


def crashes(ctx: Context) -> None:
    ctx.observe("before_the_crash", "kept")
    os.kill(os.getpid(), signal.SIGSEGV)


def hangs(ctx: Context) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    ctx.observe("grandchild", child.pid)
    time.sleep(120)


def reads_report(ctx: Context) -> None:
    """What the report on disk says while this rung runs: earlier rungs must be in it."""
    report = json.loads(Path(ctx.options["report"]).read_text())
    ctx.observe("rungs_on_disk", [r["name"] for r in report["rungs"]])


RUNGS = (
    Rung("passes", "Does a rung that passes pass?", passes),
    Rung("fails", "Is a raised error recorded with its fields?", fails),
    Rung("after_fail", "Is a dependant of a failed rung skipped?", passes, ("fails",)),
    Rung("crashes", "Is a segmentation fault one crashed rung?", crashes, ("passes",)),
    Rung("after_crash", "Is a dependant of a crashed rung skipped?", passes, ("crashes",)),
    Rung("hangs", "Is a hang one timed-out rung?", hangs, timeout_s=3.0),
    Rung("reads_report", "Was the report written after every rung?", reads_report),
    Rung("not_here", "Is a rung's own skip reason used?", passes, skip=lambda o: "not on Tuesdays"),
)
