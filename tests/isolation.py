"""A pytest plugin: every test marked ``isolated`` (and every ``ane`` test) runs in a fresh process.

A failed compile can poison the process that made it (ANE_NOTES 2.4: the compile budget,
a framework that stops answering), and a segmentation fault in PyObjC would end the whole
session. So each such test is run by a new ``python -m pytest NODEID`` (a fresh
interpreter, never ``fork``: the Objective-C runtime is not fork-safe) with a timeout; the
parent reports the child's outcome as the test's, and a crash or a hang as a failure that
says so. It needs no plugin package (no extra): it is this file, loaded by
``tests/conftest.py``. In the child the variable ``ANEKIT_ISOLATED_CHILD`` is set, so the
test runs in place there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from _pytest.reports import TestReport

CHILD = "ANEKIT_ISOLATED_CHILD"
TIMEOUT_S = float(os.environ.get("ANEKIT_ISOLATED_TIMEOUT", "600"))
MARKERS = ("isolated", "ane")
MAX_OUTPUT = 6000


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "isolated: run this test in a fresh Python process")


def _isolated(item: pytest.Item) -> bool:
    if os.environ.get(CHILD) or item.get_closest_marker("skip") is not None:
        return False
    return any(item.get_closest_marker(m) is not None for m in MARKERS)


def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run an isolated test in a child process and report its outcome here."""
    if not _isolated(item):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    item.ihook.pytest_runtest_logreport(report=run_in_child(item))
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def run_in_child(item: pytest.Item) -> TestReport:
    """The report of ``item`` run by a fresh ``python -m pytest``."""
    root = Path(str(item.config.rootpath))
    with tempfile.TemporaryDirectory(prefix="anekit-isolated-") as scratch:
        xml = Path(scratch) / "result.xml"
        command = [sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", "no:cacheprovider",
                   f"--junitxml={xml}", "-o", "junit_family=xunit1"]  # fmt: skip
        env = dict(os.environ, **{CHILD: "1"})
        start = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, start_new_session=True)  # fmt: skip
        except subprocess.TimeoutExpired as e:
            text = f"no answer within {TIMEOUT_S:g} s in its own process; it was killed"
            return _report(item, "failed", text, time.perf_counter() - start, str(e.stdout or ""))
        seconds = time.perf_counter() - start
        output = (done.stdout + done.stderr)[-MAX_OUTPUT:]
        outcome, message = _outcome(xml, done.returncode)
    return _report(item, outcome, message, seconds, output)


def _outcome(xml: Path, code: int) -> tuple[str, str]:
    """The child's outcome from its JUnit XML, or from how its process ended."""
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return "failed", f"the test's process died of {name}"
    try:
        case = ElementTree.parse(xml).getroot().find(".//testcase")
    except (OSError, ElementTree.ParseError):
        case = None
    if case is None:
        return "failed", f"the test's process exited with {code} without a result"
    for tag in ("failure", "error"):
        found = case.find(tag)
        if found is not None:
            return "failed", (found.text or found.get("message") or tag).strip()
    skipped = case.find("skipped")
    if skipped is not None:
        return "skipped", skipped.get("message") or "skipped"
    return "passed", ""


def _report(
    item: pytest.Item, outcome: str, message: str, seconds: float, output: str
) -> TestReport:
    longrepr: object = None
    if outcome == "failed":
        longrepr = f"[in its own process]\n{message}\n--- the process's output ---\n{output}"
    elif outcome == "skipped":
        path, line, _ = item.location
        longrepr = (str(path), (line or 0) + 1, message)
    return TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, outcome,
                      longrepr, "call", duration=seconds)  # fmt: skip
