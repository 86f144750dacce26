"""The ANE's self-check: may the default backend order pick the private ``ane`` route here?

``available()`` says the framework loads; it cannot say the private API still works on
this macOS build (Apple changes it without notice). So before ``compile(backend=None)``
picks ``ane``, a small program is compiled and run once in a fresh process (a failed
compile can poison a process) and compared with NumPy. The verdict is cached per macOS
build and anekit version in ``config.cache_dir()/ane-selfcheck.json``, so later
compiles stay fast; a new macOS build or anekit version checks again. A failing verdict
sends the default order on to ``coreml`` and says why (``kernel.placement.skipped``).

``python -m anekit.backends.ane.selfcheck`` runs the check itself and prints its verdict
as JSON (that is what the fresh process runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from anekit import config
from anekit.errors import UsageError
from anekit.files import read_regular, write_atomic

CACHE_FILE = "ane-selfcheck.json"
TIMEOUT_S = 120.0
MAX_CACHE_BYTES = 1 << 20
SHAPE = (1, 64, 1, 64)

Verdict = tuple[bool, str]


def macos_build() -> str:
    """This macOS build (``sysctl kern.osversion``, e.g. "24D70"), or "unknown"."""
    try:
        out = subprocess.run(["sysctl", "-n", "kern.osversion"], capture_output=True, text=True,
                             timeout=10, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def cache_key() -> str:
    """What a verdict holds for: this macOS build and this anekit version."""
    import anekit

    return f"macOS {macos_build()}, anekit {anekit.__version__}"


def verdict(run: Callable[[], Verdict] | None = None, cache: Path | None = None) -> Verdict:
    """Whether the private route passed its self-check here, and why; cached per build/version."""
    path = cache if cache is not None else config.cache_dir() / CACHE_FILE
    key = cache_key()
    known = _read(path)
    if key in known:
        entry = known[key]
        return bool(entry["ok"]), f"{entry['reason']} (self-check cached for {key})"
    ok, reason = (run or run_in_fresh_process)()
    known[key] = {"ok": ok, "reason": reason}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(known, indent=1) + "\n").encode())
    except OSError as e:  # an unwritable cache costs speed, not the verdict
        reason += f" (not cached: {e})"
    return ok, reason


def _read(path: Path) -> dict[str, Any]:
    """The cached verdicts; an unreadable or malformed file counts as empty (it is rewritten)."""
    try:
        data = json.loads(read_regular(path, limit=MAX_CACHE_BYTES, what="a self-check cache"))
    except (OSError, UsageError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items()
            if isinstance(v, dict) and isinstance(v.get("ok"), bool) and "reason" in v}  # fmt: skip


def run_in_fresh_process() -> Verdict:
    """Run :func:`check` in a new Python process with a timeout; a crash is a failed verdict."""
    root = str(Path(__file__).resolve().parents[3])  # this anekit, installed or a checkout
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, os.environ.get(
        "PYTHONPATH")))))  # fmt: skip
    command = [sys.executable, "-m", "anekit.backends.ane.selfcheck"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return False, f"the self-check gave no answer within {TIMEOUT_S:g} s"
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return bool(answer["ok"]), str(answer["reason"])
    except (IndexError, KeyError, TypeError, ValueError):
        tail = (done.stderr or done.stdout).strip()[-300:]
        return False, f"the self-check process exited with {done.returncode}: {tail}"


def check() -> Verdict:
    """Compile ``y = 2x + 1`` on the private route, run it once, compare with NumPy."""
    from anekit.backends import ane
    from anekit.mil import Builder

    b = Builder()
    x = b.input("x", SHAPE, "fp16")
    b.output(b.add(x=b.mul(x=x, y=2.0), y=1.0), "y")
    inputs = (np.arange(np.prod(SHAPE)) % 64 / 4).astype(np.float16).reshape(SHAPE)
    try:
        with ane.compile(b.build()) as k:
            got = k(x=inputs)["y"]
    except Exception as e:  # whatever the private API raises is the verdict's reason
        return False, f"the self-check program failed: {type(e).__name__}: {e}"
    want = inputs * np.float16(2) + np.float16(1)
    if not np.array_equal(got, want):
        wrong = int(np.sum(got != want))
        return False, f"the self-check program gave {wrong} wrong values of {want.size}"
    return True, "the self-check program compiled, ran and matched NumPy"


if __name__ == "__main__":
    ok, reason = check()
    print(json.dumps({"ok": ok, "reason": reason}))
