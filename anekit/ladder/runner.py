"""A generic runner for ladders of experiments: each rung in its own subprocess, with a timeout.

A ladder is a list of declared :class:`Rung` objects (name, the question it settles,
the rungs it needs, its run function, a timeout) in a module that exposes them as
``RUNGS``. :func:`run_ladder` runs them in order. Each rung runs in a fresh
``python -m anekit.ladder.runner`` child, so a segmentation fault or a hang costs
that rung, not the report: the parent records ``crash`` or ``timeout`` and goes on.
A rung whose prerequisite did not pass is skipped, saying which one and why. The
report is rewritten (atomically) after every rung, so it is complete up to the last
rung whatever happens next.

A rung's run function gets a :class:`Context`: ``ctx.observe(key, value)`` records
what it saw, one JSON line at a time, flushed at once (what was observed before a
crash survives it); raising fails the rung, with the exception's type, message,
NSError domain, code and userInfo, and traceback in the report.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from anekit.files import write_atomic

STATUSES = ("pass", "fail", "skip", "crash", "timeout")
MAX_OUTPUT_CHARS = 4000  # of a child's stdout/stderr kept in the report
_RESULT = "__result__"  # the key of a child's last line: how its run function ended


class Context:
    """What a rung's run function works with: options, observations, a scratch directory."""

    def __init__(self, options: dict[str, Any], log: Path | None, scratch: Path) -> None:
        self.options = options
        self.scratch = scratch
        self.observed: dict[str, Any] = {}
        self.resources: dict[str, Any] = {}  # shared objects, e.g. a framework stand-in in tests
        self._log = log

    def observe(self, key: str, value: Any) -> Any:
        """Record one observation (JSON-ready, else its ``str``); returns ``value``.

        The report is meant to be shared: the user's home directory in a recorded string (an
        interpreter's or a module's path) is written as ``~``.
        """
        shared = _without_home(value)
        self.observed[key] = shared
        if self._log is not None:
            with self._log.open("a", encoding="utf-8") as f:
                f.write(json.dumps({key: shared}, default=str) + "\n")
                f.flush()
        return value


def _without_home(value: Any) -> Any:
    """``value`` with the home directory replaced by ``~`` in its strings (lists, dicts too)."""
    home = os.path.expanduser("~")
    if isinstance(value, str) and home not in ("~", "/") and home in value:
        return value.replace(home, "~")
    if isinstance(value, dict):
        return {k: _without_home(v) for k, v in value.items()}
    if isinstance(value, list) or type(value) is tuple:
        return type(value)(_without_home(v) for v in value)
    return value


@dataclass(frozen=True)
class Rung:
    """One experiment of a ladder.

    Attributes:
        name: its identifier in the report.
        question: what it settles, in one sentence.
        run: the experiment; records with ``ctx.observe``, raises to fail.
        needs: rungs that must pass first (otherwise this one is skipped).
        timeout_s: how long its subprocess may take.
        skip: returns why the rung cannot run here (given the options), or None.
    """

    name: str
    question: str
    run: Callable[[Context], None]
    needs: tuple[str, ...] = ()
    timeout_s: float = 60.0
    skip: Callable[[dict[str, Any]], str | None] | None = field(default=None, compare=False)


def describe_exception(e: BaseException) -> dict[str, Any]:
    """The report's record of a failure: type, message, NSError fields, traceback."""
    record = {"type": f"{type(e).__module__}.{type(e).__qualname__}", "message": str(e)}
    for key in ("domain", "code", "user_info", "line"):
        value = getattr(e, key, None)
        if value is not None:
            record[key] = value
    record["traceback"] = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return record


def run_ladder(
    module: str,
    rungs: Sequence[Rung],
    *,
    options: dict[str, Any] | None = None,
    report_path: Path | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    extra: dict[str, Any] | None = None,
    key: str = "rungs",
) -> dict[str, Any]:
    """Run ``rungs`` (declared as ``RUNGS`` in ``module``) in order; returns the report.

    The results are the list ``report[key]`` (``"experiments"`` for ``anekit probe``).
    """
    options = dict(options or {})
    report: dict[str, Any] = {
        "ladder": module,
        "options": options,
        **(extra or {}),
        key: [],
    }
    status: dict[str, str] = {}
    roots: dict[str, str] = {}  # a skipped rung's first cause
    for rung in rungs:
        reason, root = _skip_reason(rung, status, roots, options)
        if reason is not None:
            result = _result(rung, "skip", 0.0, {}, reason=reason)
            roots[rung.name] = root or reason
        else:
            result = run_rung(module, rung, options)
        status[rung.name] = result["status"]
        report[key].append(result)
        if report_path is not None:
            write_atomic(report_path, (json.dumps(report, indent=1, default=str) + "\n").encode())
        if on_result is not None:
            on_result(result)
    return report


def _skip_reason(
    rung: Rung, status: dict[str, str], roots: dict[str, str], options: dict[str, Any]
) -> tuple[str | None, str | None]:
    """Why ``rung`` must be skipped (None if it may run), and the first cause behind that."""
    for need in rung.needs:
        if status.get(need) != "pass":
            root = roots.get(need)
            because = f" ({root})" if root else ""
            return f"needs {need!r}, which {_past(status.get(need))}{because}", root
    return (rung.skip(options) if rung.skip is not None else None), None


def _past(status: str | None) -> str:
    return {
        None: "has not run",
        "fail": "failed",
        "skip": "was skipped",
        "crash": "crashed",
        "timeout": "timed out",
    }.get(status, str(status))


def _result(
    rung: Rung,
    status: str,
    seconds: float,
    observed: dict[str, Any],
    *,
    reason: str | None = None,
    error: dict[str, Any] | None = None,
    output: dict[str, str] | None = None,
) -> dict[str, Any]:
    result = {
        "name": rung.name,
        "question": rung.question,
        "needs": list(rung.needs),
        "status": status,
        "seconds": round(seconds, 4),
        "observed": observed,
        "reason": reason,
        "error": error,
    }
    if output:
        result["output"] = output
    return result


def run_rung(module: str, rung: Rung, options: dict[str, Any]) -> dict[str, Any]:
    """Run one rung in a child process and read back what it observed."""
    with tempfile.TemporaryDirectory(prefix="anekit-rung-") as scratch:
        log = Path(scratch) / "observed.jsonl"
        command = [
            sys.executable,
            "-m",
            "anekit.ladder.runner",
            module,
            rung.name,
            json.dumps(options),
            str(log),
            scratch,
        ]
        start = time.perf_counter()
        child = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
            start_new_session=True,
        )
        try:
            out, err = child.communicate(timeout=rung.timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(child)
            out, err = child.communicate()
            timed_out = True
        seconds = time.perf_counter() - start
        observed, ending = _read_log(log)
    output = {
        k: v.decode("utf-8", "replace")[-MAX_OUTPUT_CHARS:]
        for k, v in (("stdout", out), ("stderr", err))
        if v
    }
    if timed_out:
        return _result(
            rung,
            "timeout",
            seconds,
            observed,
            output=output,
            reason=f"no answer within {rung.timeout_s:g} s; the process was killed",
        )
    if ending == "pass" and child.returncode == 0:
        return _result(rung, "pass", seconds, observed, output=output)
    if isinstance(ending, dict):
        return _result(rung, "fail", seconds, observed, error=ending, output=output)
    return _result(
        rung, "crash", seconds, observed, output=output, reason=_exit_reason(child.returncode)
    )


def child_env() -> dict[str, str]:
    """The environment of a child process: anekit importable from where this one came from."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _kill_group(child: subprocess.Popen) -> None:
    """Kill a timed-out rung and everything it started (it leads its own session)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        child.kill()


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process died of {name}"
    return f"the process exited with code {code} without reporting a result"


def _read_log(log: Path) -> tuple[dict[str, Any], Any]:
    """The observations a child wrote, and how it said its run ended (None if it never said)."""
    observed: dict[str, Any] = {}
    ending: Any = None
    if not log.is_file():
        return observed, ending
    for line in log.read_text("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash
        if isinstance(record, dict) and _RESULT in record:
            ending = record[_RESULT]
        elif isinstance(record, dict):
            observed.update(record)
    return observed, ending


def child_main(argv: Sequence[str]) -> int:
    """In the rung's process: run it, logging observations and how it ended."""
    module, name, options, log, scratch = argv
    rungs = {r.name: r for r in importlib.import_module(module).RUNGS}
    ctx = Context(json.loads(options), Path(log), Path(scratch))
    try:
        rungs[name].run(ctx)
    except Exception as e:
        ctx.observe(_RESULT, describe_exception(e))
        return 1
    ctx.observe(_RESULT, "pass")
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
