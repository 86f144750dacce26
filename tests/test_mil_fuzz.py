"""Fuzzing MIL text: grammar-aware mutations raise only anekit errors, within time and memory.

Each input (tests/milfuzz.py: nesting, huge and negative dimensions, long lines, extreme
numbers, unicode, NULs, splices) is parsed in a worker process under ``RLIMIT_AS`` (3 GiB)
and must answer within ``TIMEOUT`` seconds. By default each test runs one batch of
examples (a few seconds); ``ANEKIT_FUZZ_SECONDS=N`` keeps drawing batches for N seconds.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.milfuzz import Worker, mutate

FUZZ_SECONDS = float(os.environ.get("ANEKIT_FUZZ_SECONDS", "0"))
TIMEOUT = 10.0  # seconds per input: generous, a linear parser answers these in well under one
EXAMPLES = 150


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=TIMEOUT)
    yield w
    w.close()


def _batch(worker: Worker, outcomes: Counter, max_repeat: int) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.randoms(use_true_random=False))
    def one(r) -> None:
        outcome = worker.run(mutate(r, max_repeat))
        outcomes[outcome] += 1
        assert outcome in ("ok", "anekit"), f"{outcome}: {dict(worker.details)}"

    one()


@pytest.mark.parametrize("max_repeat", [200, 20_000], ids=["short", "long-lines"])
def test_mutated_mil_raises_only_anekit_errors_in_time_and_memory(worker, max_repeat) -> None:
    outcomes: Counter[str] = Counter()
    end = time.monotonic() + FUZZ_SECONDS
    _batch(worker, outcomes, max_repeat)
    while time.monotonic() < end:
        _batch(worker, outcomes, max_repeat)
    assert outcomes["ok"] + outcomes["anekit"] == sum(outcomes.values()) >= EXAMPLES


FAKE_PARSE = """
import time
from anekit.errors import AnekitError
def parse(text):
    if text == "hang":
        time.sleep(60)
    if text == "memory":
        return bytearray(8 << 30)
    if text == "other":
        raise ValueError("boom")
    raise AnekitError("rejected")
"""


def test_the_harness_tells_each_outcome_apart(tmp_path) -> None:
    # a stand-in anekit whose parse hangs, allocates, or raises on request: the counts the
    # fuzz tests rely on really distinguish these from a clean rejection
    (tmp_path / "anekit" / "mil").mkdir(parents=True)
    (tmp_path / "anekit" / "__init__.py").write_text("")
    (tmp_path / "anekit" / "errors.py").write_text("class AnekitError(Exception):\n    pass\n")
    (tmp_path / "anekit" / "mil" / "__init__.py").write_text(FAKE_PARSE)
    w = Worker(root=str(tmp_path), memory=2 << 30, timeout=2.0)
    try:
        outcomes = [w.run(t) for t in ("x", "other", "hang", "memory", "x")]
    finally:
        w.close()
    assert outcomes == ["anekit", "other", "hang", "memory", "anekit"]
    assert w.details == Counter({"other ValueError: boom": 1})
