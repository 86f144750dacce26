"""Closing a kernel while other threads use it: close waits for calls in flight, later calls are typed.

On the reference backend and on the ANE backend against the recording stand-in
(``tests/ane_fake.py``; our side of the contract only: that no evaluation is in flight
when the model is unloaded and that no surface is used after it is released).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends import budget
from anekit.backends.ane import compile as ane_compile
from anekit.backends.ane import kernel as ane_kernel
from anekit.errors import KernelClosed
from tests.ane_fake import FakeFramework

SHAPE = (1, 8, 1, 32)
X = np.linspace(-2, 2, 256, dtype=np.float16).reshape(SHAPE)


def program() -> mil.Program:
    b = mil.Builder()
    x = b.input("x", SHAPE, "fp16")
    y = x
    for _ in range(20):  # long enough for calls to overlap the close
        y = b.add(x=b.mul(x=y, y=0.5), y=x)
    b.output(y, "y")
    return b.build()


EXPECTED = anekit.compile(program(), backend="reference")(x=X)["y"]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeFramework:
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    monkeypatch.setattr(ane_kernel, "LOAD_RETRY_DELAY_S", 0.0)
    return FakeFramework(tmp_path / "T")


def hammer(k: anekit.Kernel) -> tuple[list[BaseException], int]:
    """Four threads call the kernel every way there is while this one closes it."""
    errors: list[BaseException] = []
    done = [0]
    lock = threading.Lock()

    def calls(bs) -> list[Callable[[], None]]:
        def run_set() -> None:
            bs.input("x")[...] = X
            k.run(bs)
            np.testing.assert_array_equal(bs.output("y"), EXPECTED)

        return [
            lambda: np.testing.assert_array_equal(k(x=X)["y"], EXPECTED),
            run_set,
            lambda: np.testing.assert_array_equal(k.submit(x=X).result()["y"], EXPECTED),
            lambda: k.submit(bs).result(),
            lambda: k.buffers(),
            lambda: k.run(),
        ]

    def loop(seed: int) -> None:
        bs = k.buffers()
        work = calls(bs)
        i = seed
        while True:
            try:
                work[i % len(work)]()
            except BaseException as e:  # every failure is recorded, KernelClosed ends the loop
                with lock:
                    errors.append(e)
                return
            with lock:
                done[0] += 1
            i += 1

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(4)]
    [t.start() for t in threads]
    deadline = time.monotonic() + 5
    while done[0] < 40 and time.monotonic() < deadline:
        time.sleep(0.005)
    k.close()
    [t.join(10) for t in threads]
    return errors, done[0]


def test_reference_kernel_closed_under_load_raises_only_kernel_closed() -> None:
    k = anekit.compile(program(), backend="reference")
    errors, done = hammer(k)
    assert done >= 40
    assert [type(e) for e in errors] == [KernelClosed] * 4, errors
    assert "is closed" in str(errors[0])
    for late in (
        lambda: k(x=X),
        k.run,
        lambda: k.submit(x=X),
        k.buffers,
        lambda: k.trace({"x": X}),
    ):
        with pytest.raises(KernelClosed):
            late()


def test_ane_kernel_closed_under_load_raises_only_kernel_closed(fake: FakeFramework) -> None:
    fake.evaluate_delay = 0.001
    k = ane_compile(program(), framework=fake)
    errors, done = hammer(k)
    assert done >= 40
    assert [type(e) for e in errors] == [KernelClosed] * 4, errors
    assert fake.violations == [] and all(s.locks == 0 for s in fake.surfaces)
    assert len(fake.calls_to("unloadWithQoS:error:")) == 1


def test_close_waits_for_the_evaluation_in_flight_before_unloading(fake: FakeFramework) -> None:
    fake.evaluate_delay = 0.3
    in_flight_at_unload: list[int] = []
    unload = fake.selectors[("model", "unloadWithQoS:error:")]

    def recording_unload(model, qos, error):
        in_flight_at_unload.append(len(fake.in_flight))
        return unload(model, qos, error)

    fake.selectors[("model", "unloadWithQoS:error:")] = recording_unload
    k = ane_compile(program(), framework=fake)
    result: dict[str, np.ndarray] = {}
    caller = threading.Thread(target=lambda: result.update(k(x=X)))
    caller.start()
    while not fake.in_flight:
        time.sleep(0.001)
    k.close()  # returns only after the call in flight is done, and only then unloads
    assert result and in_flight_at_unload == [0]
    np.testing.assert_array_equal(result["y"], EXPECTED)
    caller.join()
    with pytest.raises(KernelClosed):
        k(x=X)
