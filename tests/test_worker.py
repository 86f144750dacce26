"""Isolated kernels: the worker process machinery, tested with the reference backend inside it."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import threading
from multiprocessing.shared_memory import SharedMemory

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends import reference, shm, worker
from anekit.errors import EvaluationError, UsageError

RNG = np.random.default_rng(11)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _segment_exists(name: str) -> bool:
    try:
        SharedMemory(name=name).close()
    except FileNotFoundError:
        return False
    return True


@pytest.fixture(autouse=True)
def no_leaks(monkeypatch: pytest.MonkeyPatch):
    """Every test must leave no worker process and none of its shared-memory segments behind."""
    created: list[str] = []
    make = shm.Region.create

    def recording(nbytes: int, **options: bool) -> shm.Region:
        region = make(nbytes, **options)
        created.append(region.ref)
        return region

    monkeypatch.setattr(shm.Region, "create", staticmethod(recording))
    yield created
    worker.flush()  # what collected kernels left behind
    assert multiprocessing.active_children() == []
    assert [name for name in created if _segment_exists(name)] == []


def two_in_two_out() -> mil.Program:
    """Two inputs, a weight file and two outputs, so every transport path carries data."""
    b = mil.Builder()
    x = b.input("x", (1, 8, 1, 16), "fp16")
    g = b.input("g", (1, 8, 1, 1), "fp16")
    w = b.weight("w", RNG.standard_normal((1, 8, 1, 16)).astype(np.float16))
    b.output(b.add(x=b.mul(x=x, y=g), y=w), "y")
    b.output(b.reduce_sum(x=x, axes=[3], keep_dims=True), "s")
    return b.build()


def scaled(factor: float) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 8), "fp16")
    b.output(b.mul(x=x, y=factor), "y")
    return b.build()


def slow_program() -> mil.Program:
    """Eight chained 384x384 matmuls: long enough to be killed while it runs."""
    b = mil.Builder()
    x = b.input("x", (1, 384, 384), "fp32")
    y = x
    for _ in range(8):
        y = b.matmul(x=y, y=x)
    b.output(y, "y")
    return b.build()


def inputs_for(program: mil.Program) -> dict[str, np.ndarray]:
    return {v.name: RNG.standard_normal(v.shape).astype(v.dtype.numpy) for v in program.main.inputs}


def expected(program: mil.Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return reference.compile(program)(**inputs)


def test_isolated_kernel_gives_the_reference_results() -> None:
    program = two_in_two_out()
    inputs = inputs_for(program)
    want = expected(program, inputs)
    with anekit.compile(program, backend="reference", isolate=True) as k:
        assert isinstance(k, worker.IsolatedKernel) and k.backend == "reference"
        assert k.worker_pid not in (None, os.getpid())
        got = k(**inputs)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
        for name, value in inputs.items():
            k.input_buffer(name)[...] = value
        k.run()
        for name in want:
            np.testing.assert_array_equal(k.output_buffer(name), want[name])
        other = inputs_for(program)
        np.testing.assert_array_equal(k(**other)["y"], expected(program, other)["y"])
        np.testing.assert_array_equal(k.input_buffer("x"), inputs["x"])  # __call__ left it alone
        futures = [k.submit(**other) for _ in range(3)]
        for f in futures:
            np.testing.assert_array_equal(f.result()["s"], expected(program, other)["s"])


def test_worker_is_recycled_after_n_compiles_and_kernels_survive() -> None:
    kernels = [
        anekit.compile(scaled(f), backend="reference", isolate=True, recycle_after=2)
        for f in (2.0, 3.0)
    ]
    first = kernels[0].worker_pid
    assert kernels[1].worker_pid == first
    kernels.append(anekit.compile(scaled(5.0), backend="reference", isolate=True, recycle_after=2))
    second = kernels[2].worker_pid
    assert second != first and _gone(first), "the full worker was not replaced and reaped"
    x = RNG.standard_normal((1, 4, 1, 8)).astype(np.float16)
    # kernel 0 was compiled in the first worker: it is compiled again in the second
    np.testing.assert_array_equal(kernels[0](x=x)["y"], expected(scaled(2.0), {"x": x})["y"])
    assert kernels[0].worker_pid == second
    # the second worker has now compiled two kernels: kernel 1 forces a third worker
    np.testing.assert_array_equal(kernels[1](x=x)["y"], expected(scaled(3.0), {"x": x})["y"])
    assert kernels[1].worker_pid not in (first, second)
    for k in kernels:
        k.close()


def test_worker_crash_mid_run_is_an_evaluation_error_and_the_next_call_recovers() -> None:
    program = slow_program()
    inputs = {"x": (RNG.standard_normal((1, 384, 384)) * 0.05).astype(np.float32)}
    with anekit.compile(program, backend="reference", isolate=True) as k:
        victim = k.worker_pid
        threading.Timer(0.3, os.kill, (victim, signal.SIGKILL)).start()
        with pytest.raises(EvaluationError, match=f"worker process {victim} died"):
            for _ in range(200):  # keeps the worker busy until the kill lands
                k(**inputs)
        assert _gone(victim)
        got = k(**inputs)["y"]
        assert k.worker_pid not in (None, victim)
    np.testing.assert_allclose(got, expected(program, inputs)["y"], rtol=1e-6)


def test_errors_in_the_worker_come_back_typed() -> None:
    with pytest.raises(
        TypeError,
        match="reference backend options are: storage, memory_budget, numerics; found \\[.qos.\\]",
    ):
        anekit.compile(scaled(2.0), backend="reference", isolate=True, qos=21)


def test_options_must_survive_json_and_recycle_after_must_fit_the_budget() -> None:
    with pytest.raises(TypeError, match="JSON"):
        anekit.compile(scaled(2.0), backend="reference", isolate=True, thing=object())
    for bad in (0, 111):
        with pytest.raises(ValueError, match="recycle_after"):
            anekit.compile(scaled(2.0), backend="reference", isolate=True, recycle_after=bad)


def test_closing_with_a_buffer_still_held_frees_the_segment(no_leaks: list[str]) -> None:
    k = anekit.compile(scaled(2.0), backend="reference", isolate=True)
    held = k.input_buffer("x")
    held[...] = 1.0
    assert len(no_leaks) == 1 and _segment_exists(no_leaks[0])
    k.close()
    k.close()  # a second close does nothing
    assert not _segment_exists(no_leaks[0])
    assert held.shape == (1, 4, 1, 8)
    held[0, 1] = 5.0  # the memory is still mapped: the view holds its region
    assert float(held.sum()) == 32 - 8 + 40


def test_layout_aligns_every_tensor() -> None:
    specs = scaled(2.0)
    with anekit.compile(specs, backend="reference") as k:
        offsets, size = shm.layout(k.inputs + k.outputs)
    assert offsets == {"x": 0, "y": 64} and size == 128


def test_buffer_sets_live_in_shared_memory_and_bind_across_isolated_kernels(
    no_leaks: list[str],
) -> None:
    """Each set is a region of its own; a buffer bound into another kernel's set is one memory."""
    program, other = two_in_two_out(), two_in_two_out()
    with (
        anekit.compile(program, backend="reference", isolate=True) as k,
        anekit.compile(other, backend="reference", isolate=True) as k2,
    ):
        before = len(no_leaks)
        a, b = k.buffers(), k.buffers()
        guest = k2.buffers(share={"g": a.buffer("g")})
        assert len(no_leaks) == before + 3, "one shared-memory region per set"
        assert np.shares_memory(guest.input("g"), a.input("g"))
        ins_a, ins_b = inputs_for(program), inputs_for(program)
        for s, ins in ((a, ins_a), (b, ins_b)):
            for name, value in ins.items():
                s.write(name, value)
        guest.write("x", ins_b["x"])
        k.run(a)
        assert k.submit(b).result() is b
        k2.run(guest)
        for s, ins in ((a, ins_a), (b, ins_b)):
            for name, want in expected(program, ins).items():
                np.testing.assert_array_equal(s.output(name), want)
        mixed = {"x": ins_b["x"], "g": ins_a["g"]}  # g read from a's memory
        np.testing.assert_array_equal(guest.output("y"), expected(other, mixed)["y"])
        with pytest.raises(UsageError, match="needs a buffer of another isolated kernel"):
            with anekit.compile(program, backend="reference") as local:
                k.buffers(share={"g": local.buffers().buffer("g")})
        regions = no_leaks[before:]
        del a, b, guest, s
        gc.collect()
        assert [r for r in regions if _segment_exists(r)] == [], "a collected set's region stayed"
