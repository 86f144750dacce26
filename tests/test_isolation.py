"""The per-test process isolation of ``pytest -m ane`` (``tests/isolation.py``), run on itself."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest_plugins = ["pytester"]

CASES = """
import os, signal, json, pathlib
import pytest

LOG = pathlib.Path(os.environ["PIDS"])

def record(name):
    with LOG.open("a") as f:
        f.write(json.dumps([name, os.getpid()]) + "\\n")

@pytest.mark.isolated
def test_first():
    record("first")

@pytest.mark.isolated
def test_crashes():
    record("crashes")
    os.kill(os.getpid(), signal.SIGSEGV)

@pytest.mark.isolated
def test_fails():
    assert 1 + 1 == 3, "arithmetic"

@pytest.mark.isolated
def test_skips():
    pytest.skip("not here")

def test_in_place():
    record("in_place")
"""


def test_each_isolated_test_runs_in_its_own_process(pytester: pytest.Pytester, monkeypatch) -> None:
    pids = pytester.path / "pids.jsonl"
    monkeypatch.setenv("PIDS", str(pids))
    # the child pytest runs in a temporary directory: it finds tests.isolation through the
    # checkout, not through the current directory
    path = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    pytester.makepyfile(test_cases=CASES)
    result = pytester.runpytest_subprocess("-p", "tests.isolation", "-rA")
    result.assert_outcomes(passed=2, failed=2, skipped=1)
    seen = dict(json.loads(line) for line in pids.read_text().splitlines())
    assert len({seen["first"], seen["crashes"], seen["in_place"]}) == 3
    out = result.stdout.str()
    assert "the test's process died of SIGSEGV" in out  # the crash cost one test
    assert "arithmetic" in out and "not here" in out
