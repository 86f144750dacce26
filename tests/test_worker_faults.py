"""Isolated kernels under faults: stalled workers, corrupted frames, errors that cross the pipe.

Workers run the reference backend. Where a test needs a worker that misbehaves in
a way no real backend can make it (raising ``CompileBudgetExhausted``, answering
garbage), the worker loop ``_serve`` runs in a thread of the test process on a real
pipe: that proves the protocol, which is all the parent sees of any backend.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends import shm, wire, worker
from anekit.errors import (
    CompileBudgetExhausted,
    CompileError,
    EvaluationError,
    MilSyntaxError,
)
from tests.test_worker import _gone

ROOT = Path(__file__).resolve().parent.parent
X = np.arange(32, dtype=np.float16).reshape(1, 4, 1, 8) / 8


@pytest.fixture(autouse=True)
def no_leaks():
    yield
    worker.flush()
    assert multiprocessing.active_children() == []


def scaled(factor: float, weight_bytes: int = 0) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 8), "fp16")
    y = b.mul(x=x, y=factor)
    if weight_bytes:  # a weight large enough that sending it fills the pipe
        n = weight_bytes // 2
        w = b.weight("w", np.zeros((1, 1, 1, n), np.float16))
        y = b.add(x=y, y=b.reduce_sum(x=w, axes=[3], keep_dims=True))
    b.output(y, "y")
    return b.build()


# -- stalled workers ---------------------------------------------------------------------------------
def test_a_stopped_worker_times_out_is_killed_and_replaced() -> None:
    with anekit.compile(scaled(2.0), backend="reference", isolate=True, timeout=1.0) as k:
        stalled = k.worker_pid
        os.kill(stalled, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(EvaluationError, match=f"{stalled} did not answer 'run' within 1 s"):
            k(x=X)
        assert time.monotonic() - start < 10
        for _ in range(50):
            if _gone(stalled):
                break
            time.sleep(0.05)
        assert _gone(stalled), "the stalled worker was not killed and reaped"
        np.testing.assert_array_equal(k(x=X)["y"], X * 2)
        assert k.worker_pid not in (None, stalled)


def test_a_large_compile_to_a_stopped_worker_times_out_instead_of_blocking() -> None:
    first = anekit.compile(scaled(2.0), backend="reference", isolate=True, timeout=1.0)
    try:
        stalled = first.worker_pid
        os.kill(stalled, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(EvaluationError, match="did not answer 'compile' within 1 s"):
            # 4 MB of weights: far more than a pipe buffers, so the send itself blocks
            anekit.compile(scaled(3.0, 4 << 20), backend="reference", isolate=True, timeout=1.0)
        assert time.monotonic() - start < 10
        np.testing.assert_array_equal(first(x=X)["y"], X * 2)  # recompiled in a new worker
        assert first.worker_pid != stalled
    finally:
        first.close()


def test_timeout_must_be_a_positive_number() -> None:
    for bad in (0, -1.0, "1", True):
        with pytest.raises(ValueError, match="timeout"):
            anekit.compile(scaled(2.0), backend="reference", isolate=True, timeout=bad)


# -- malformed frames --------------------------------------------------------------------------------
def test_malformed_commands_get_errors_and_the_worker_survives() -> None:
    with anekit.compile(scaled(2.0), backend="reference", isolate=True) as k:
        host, pid, ref = k._host, k.worker_pid, k._region.ref
        with host.lock:
            for raw in (b"\xff\x00 not json", b"[1, 2]", b'{"op": "run", "frames": -3}'):
                host._conn.send_bytes(raw)
                reply, _ = wire.recv(host._conn)
                assert reply["ok"] is False and reply["kind"] == "EvaluationError"
                assert "malformed message" in reply["message"]
        for header, message in (
            ({"op": "bogus"}, "unknown op 'bogus'"),
            ({"op": "run", "id": 999, "spans": {}}, "no kernel with id 999"),
            ({"op": "run", "id": k._id, "slot": 7}, r"spans\['in'\] must name \['x'\]"),
            (
                {"op": "run", "id": k._id, "spans": {"in": {"x": [ref, -64]}, "out": {}}},
                r"span \[.*, -64\] of 'x'",
            ),
            (
                {
                    "op": "run",
                    "id": k._id,
                    "spans": {"in": {"x": [ref, 64]}, "out": {"y": [ref, 1 << 20]}},
                },
                "do not fit region",
            ),
            ({"op": "compile", "id": 5}, "malformed compile command"),
        ):
            with pytest.raises(EvaluationError, match=message):
                host.call(header, timeout=10)
        missing = {"op": "compile", "id": 5, "backend": "reference", "options": {},
                   "region": "psm_no_such_segment", "weights": []}  # fmt: skip
        with pytest.raises(EvaluationError, match="worker raised FileNotFoundError"):
            host.call(missing, [scaled(3.0).to_text().encode()], timeout=10)
        np.testing.assert_array_equal(k(x=X)["y"], X * 2)
        assert k.worker_pid == pid, "a malformed frame cost the worker"


def _thread_worker(monkeypatch: pytest.MonkeyPatch, serve=worker._serve) -> worker.WorkerHost:
    """A host whose worker loop runs in a thread of this process, on a real pipe."""
    parent, child = multiprocessing.Pipe()
    thread = threading.Thread(target=serve, args=(child,), daemon=True)
    thread.start()
    host = worker.WorkerHost(5)
    host._conn = parent
    return host


def test_a_malformed_reply_is_an_error_and_the_worker_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def garbage(conn) -> None:
        conn.recv_bytes()
        conn.send_bytes(b"\x00 garbage")

    host = _thread_worker(monkeypatch, garbage)
    with pytest.raises(EvaluationError, match="malformed reply to 'run'"):
        host.call({"op": "run", "id": 1, "spans": {}}, timeout=10)
    assert host._conn is None, "a worker that answered garbage was kept"


# -- errors keep their class across the pipe ----------------------------------------------------------
def test_compile_budget_exhausted_arrives_as_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted(program, backend=None, **options):
        raise CompileBudgetExhausted(110, 110)

    monkeypatch.setattr(anekit.backends, "compile", exhausted)
    host = _thread_worker(monkeypatch)
    region = shm.Region.create(256)
    header = {"op": "compile", "id": 1, "backend": "reference", "options": {},
              "region": region.ref, "weights": []}  # fmt: skip
    try:
        with pytest.raises(CompileBudgetExhausted) as info:
            host.call(header, [scaled(2.0).to_text().encode()], timeout=10)
        assert (info.value.used, info.value.limit) == (110, 110)
        assert isinstance(info.value, CompileError)
        assert "compile budget exhausted" in str(info.value)
        assert "CompileBudgetExhausted" in info.value.worker_traceback
    finally:
        host.stop()
        region.close()


@pytest.mark.parametrize(
    "error, fields",
    [
        (CompileBudgetExhausted(3, 5), {"used": 3, "limit": 5}),
        (
            CompileError("ANE compile failed: x", line=4, domain="d", code=9, user_info={"k": 1}),
            {"line": 4, "domain": "d", "code": 9, "user_info": {"k": 1}},
        ),
        (MilSyntaxError("bad token", line=2, column=7), {"line": 2, "column": 7}),
        (EvaluationError("fault", domain="d", code=29), {"domain": "d", "code": 29}),
    ],
)
def test_anekit_errors_are_rebuilt_with_class_fields_and_message(error, fields) -> None:
    got = wire.rebuild_error(wire.encode_error(error))
    assert type(got) is type(error) and str(got) == str(error)
    for name, value in fields.items():
        assert getattr(got, name) == value


def test_other_errors_are_rebuilt_as_builtins_or_evaluation_errors() -> None:
    got = wire.rebuild_error(wire.encode_error(ValueError("bad value")))
    assert type(got) is ValueError and str(got) == "bad value"
    got = wire.rebuild_error(wire.encode_error(ZeroDivisionError("division by zero")))
    assert type(got) is EvaluationError and "ZeroDivisionError: division by zero" in str(got)
    forged = {"ok": False, "kind": "system", "module": "os", "message": "x", "fields": {}}
    assert type(wire.rebuild_error(forged)) is EvaluationError  # only anekit classes are imported


def test_backend_options_such_as_dialect_reach_the_backend_in_the_worker() -> None:
    # the reference backend takes no dialect: its own TypeError comes back, as a TypeError
    with pytest.raises(
        TypeError,
        match=r"reference backend options are: storage, memory_budget, numerics; found \['dialect'\]",
    ):
        anekit.compile(scaled(2.0), backend="reference", isolate=True, dialect="legacy")


# -- memory outlives the kernel -----------------------------------------------------------------------
def test_a_buffer_outlives_its_kernel_object_and_its_close() -> None:
    """Run in a child: before the fix, writing to such a buffer was a segmentation fault."""
    script = textwrap.dedent(
        """
        import gc
        import numpy as np
        import anekit
        from tests.test_worker_faults import scaled
        k = anekit.compile(scaled(2.0), backend="reference", isolate=True)
        held = k.input_buffer("x")[0, 1]
        out = k.output_buffer("y")
        held[...] = 3.0
        k.run()
        k.close()
        del k
        gc.collect()
        held[...] = 4.0
        print(float(held.sum()), float(out[0, 1].sum()))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["32.0", "48.0"]


def test_a_collected_kernel_frees_its_segment_and_its_worker() -> None:
    k = anekit.compile(scaled(2.0), backend="reference", isolate=True)
    name, pid = k._region.ref, k.worker_pid
    del k
    gc.collect()
    with pytest.raises(FileNotFoundError):
        SharedMemory(name=name)
    worker.flush()
    assert _gone(pid) or not multiprocessing.active_children()


def test_the_worker_needs_no_ane_internals() -> None:
    probe = (
        "import sys, anekit.backends.worker, anekit.backends.shm, anekit.backends.wire\n"
        "print(sorted(m for m in sys.modules if m.startswith('anekit.backends.ane')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_isolated_layout_is_dense_shared_memory_and_the_workers_is_kept() -> None:
    with anekit.compile(scaled(2.0), backend="reference", isolate=True) as k:
        x = k.layout.inputs["x"]
        assert x.strides == (64, 16, 16, 2) and x.source == "dense host memory"
        assert k.worker_layout["inputs"]["x"]["strides"] == [64, 16, 16, 2]
