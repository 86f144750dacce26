"""The reference backend plans its memory: huge tensors are a CompileError before any allocation,
buffers are shared by values whose lives do not overlap, and each evaluation in flight has its own.
"""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest

import anekit
from anekit import mil
from anekit.backends.reference import ReferenceKernel, default_memory_budget
from anekit.errors import CompileError


def filled(shape: list[int]) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1,), "fp32")
    big = b.fill(shape=shape, value=1.0, name="big")
    b.output(b.reduce_sum(x=b.add(x=big, y=x), axes=None), "y")
    return b.build()


@pytest.mark.parametrize(
    ("shape", "nbytes"),
    [([1, 65536, 1, 65536], 4 * 65536**2), ([2**20, 2**20, 2**20], 4 * 2**60)],
)
def test_a_huge_tensor_is_a_compile_error_naming_it_before_any_allocation(shape, nbytes) -> None:
    program = filled(shape)
    tracemalloc.start()
    try:
        with pytest.raises(CompileError) as info:
            anekit.compile(program, backend="reference")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert "tensor 'big'" in message and "op 'fill'" in message
    assert f"{nbytes:,} bytes" in message and "memory_budget" in message
    assert peak < 64 * 2**20  # nothing of the tensor's size was allocated


def test_the_planned_total_is_checked_against_the_budget() -> None:
    program = filled([1, 256, 1, 256])  # 256 KiB per tensor
    with pytest.raises(CompileError, match=r"needs [\d,]+ bytes .* of buffers at its peak"):
        anekit.compile(program, backend="reference", memory_budget=300 * 1024)
    with anekit.compile(program, backend="reference", memory_budget=2**20) as k:
        assert k.planned_bytes <= 2**20
        assert k(x=np.float32([1.0]))["y"] == 2.0 * 256 * 256
    with pytest.raises(ValueError, match="memory_budget must be a positive number of bytes"):
        anekit.compile(program, backend="reference", memory_budget=0)
    assert default_memory_budget() > 2**26


def chain(n: int, width: int = 4096) -> mil.Program:
    """``n`` elementwise ops in a row: each value dies at the next op."""
    b = mil.Builder()
    h = b.input("x", (1, width), "fp16")
    for i in range(n):
        h = b.mul(x=b.add(x=h, y=1.0, name=f"a{i}"), y=0.5, name=f"m{i}")
    b.output(h, "y")
    return b.build()


def test_buffers_are_reused_so_a_long_chain_needs_no_more_than_a_short_one() -> None:
    short, long = ReferenceKernel(chain(2)), ReferenceKernel(chain(50))
    assert long.plan.arenas == short.plan.arenas  # in place: input, and one buffer for the chain
    assert len(long.plan.arenas) <= 2
    x = np.random.default_rng(0).standard_normal((1, 4096)).astype(np.float16)
    want = x.astype(np.float32)
    for _ in range(50):
        want = ((want + 1).astype(np.float16).astype(np.float32) * 0.5).astype(np.float16)
        want = want.astype(np.float32)
    np.testing.assert_array_equal(long(x=x)["y"], want.astype(np.float16))


def test_views_keep_their_base_alive() -> None:
    """A reshape view of a value is read after the value's own last reader."""
    b = mil.Builder()
    x = b.input("x", (4, 8), "fp16")
    e = b.exp(x=x, name="e")
    view = b.reshape(x=e, shape=[8, 4], name="view")
    s = b.add(x=b.sqrt(x=e, name="s0"), y=1.0, name="s1")  # e's last direct reader
    for i in range(3):
        s = b.add(x=s, y=1.0, name=f"more{i}")  # buffers that could take e's place
    b.output(b.add(x=b.reshape(x=s, shape=[8, 4]), y=view), "y")
    program = b.build()
    x_in = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float16)
    with anekit.compile(program, backend="reference", numerics="ideal") as k:
        got = k(x=x_in)["y"]
    r = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    e_ = r(np.exp(x_in.astype(np.float32)))
    s_ = r(r(np.sqrt(e_)) + 1)
    for _ in range(3):
        s_ = r(s_ + 1)
    np.testing.assert_array_equal(got, (s_.reshape(8, 4) + e_.reshape(8, 4)).astype(np.float16))


def test_buffers_are_allocated_lazily_one_state_per_evaluation_in_flight() -> None:
    k = ReferenceKernel(chain(4, width=1 << 16))
    assert k._states == []  # nothing allocated at compile time
    x = np.random.default_rng(4).standard_normal((1, 1 << 16)).astype(np.float16)
    want = k(x=x)["y"]
    assert len(k._states) == 1
    barrier = threading.Barrier(4)
    results = []

    def worker() -> None:
        barrier.wait()
        for _ in range(20):
            results.append(k(x=x)["y"])

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, want) for r in results) and len(results) == 80
    assert 1 <= len(k._states) <= 4
    futures = [k.submit(x=x) for _ in range(16)]
    assert all(np.array_equal(f.result()["y"], want) for f in futures)
