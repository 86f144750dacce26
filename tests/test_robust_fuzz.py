"""Fuzzers of the binary and checkpoint readers: only anekit errors, no hang, memory bounded.

``tests/fuzz_harness.py`` runs in a subprocess under an address-space limit
(``resource.setrlimit``) and a per-input time bound, for ``$ANEKIT_FUZZ_SECONDS`` seconds per
target (default 1; set it to 600 for a long campaign).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("safetensors")
pytest.importorskip("flatbuffers")

HARNESS = Path(__file__).parent / "fuzz_harness.py"
TARGETS = ("hwx", "flatbuffer", "weights", "state.json", "safetensors", "pt2", "config.json", "gguf",
           "tokenizer.bin", "llama2c")  # fmt: skip
SECONDS = float(os.environ.get("ANEKIT_FUZZ_SECONDS", "1"))


@pytest.fixture(scope="module")
def results() -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, str(HARNESS), str(SECONDS), *TARGETS],
        capture_output=True, text=True, env=env, timeout=120 + 10 * SECONDS * len(TARGETS),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("target", TARGETS)
def test_fuzzed_reader_raises_only_anekit_errors(results: dict, target: str) -> None:
    counts = results[target]
    assert counts["inputs"] >= 10, counts  # the target really ran
    assert (counts["non_anekit"], counts["hangs"], counts["memory"]) == (0, 0, 0), counts
