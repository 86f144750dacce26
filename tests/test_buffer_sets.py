"""Buffer sets on the reference backend: several bindable sets of memory for one compiled program.

The reference executor reads a set's inputs in place (they are held in its own form,
fp16 values as float32) through read-only views, and copies only the outputs out of
its evaluation buffers. These tests count the conversions a run makes, check that a
run never writes a set's inputs, and that buffers bound into other sets (``share=``)
are one memory.
"""

from __future__ import annotations

import numpy as np
import pytest

import anekit
from anekit import fp16, mil
from anekit.backends.base import Buffer, BufferSet
from anekit.errors import UsageError

pytestmark = pytest.mark.usefixtures("ieee_numerics")  # IEEE fp16 semantics

RNG = np.random.default_rng(5)
SHAPE = (1, 4, 1, 8)


def gated(op: str = "mul") -> mil.Program:
    """``y = relu(x) <op> w + 1``: ``x`` dies at relu, whose output may take over its buffer."""
    b = mil.Builder()
    x = b.input("x", SHAPE, "fp16")
    w = b.input("w", SHAPE, "fp16")
    r = b.relu(x=x)
    combined = b.mul(x=r, y=w) if op == "mul" else b.add(x=r, y=w)
    b.output(b.add(x=combined, y=1.0), "y")
    return b.build()


def values() -> np.ndarray:
    return RNG.standard_normal(SHAPE).astype(np.float16)


def expected(op: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The fp16 result computed in NumPy: every op rounds to fp16."""
    r = np.maximum(x.astype(np.float32), 0).astype(np.float16).astype(np.float32)
    w32 = w.astype(np.float32)
    c = (r * w32 if op == "mul" else r + w32).astype(np.float16).astype(np.float32)
    return (c + 1).astype(np.float16)


@pytest.fixture
def kernel():
    with anekit.compile(gated(), backend="reference") as k:
        yield k


def test_sets_hold_independent_inputs_and_give_what_calls_give(kernel) -> None:
    a, b = kernel.buffers(), kernel.buffers()
    xa, wa, xb, wb = values(), values(), values(), values()
    a.write("x", xa)
    a.write("w", wa)
    b.write("x", xb)
    b.write("w", wb)
    kernel.run(a)
    b.run()
    np.testing.assert_array_equal(a.output("y"), expected("mul", xa, wa))
    np.testing.assert_array_equal(b.output("y"), expected("mul", xb, wb))
    np.testing.assert_array_equal(a.output("y"), kernel(x=xa, w=wa)["y"])
    # the executor's own form: fp16 values held as float32; compact sets hold 2 bytes
    assert a.input("x").dtype == np.float32 and a.output("y").dtype == np.float32
    c = kernel.buffers(compact=True)
    assert c.input("x").dtype == np.float16 and c.output("y").dtype == np.float16
    c.write("x", xa)
    c.write("w", wa)
    kernel.run(c)
    np.testing.assert_array_equal(c.output("y"), expected("mul", xa, wa))
    # the primary buffers behind input_buffer/run() are a set of their own
    assert kernel.input_buffer("x").dtype == np.float16 and not kernel.input_buffer("x").any()


def test_a_run_reads_inputs_in_place_and_never_writes_them(kernel, monkeypatch) -> None:
    bs, compact = kernel.buffers(), kernel.buffers(compact=True)
    x, w = values(), values()
    for s in (bs, compact):
        s.write("x", x)
        s.write("w", w)
    casts: list[tuple[int, ...]] = []
    cast = fp16.cast_into

    def counting(dst: np.ndarray, src: np.ndarray) -> None:
        casts.append(dst.shape)
        cast(dst, src)

    monkeypatch.setattr(fp16, "cast_into", counting)
    kernel.run(bs)
    assert len(casts) == 1, "a run copied an input: only the output should be copied out"
    casts.clear()
    kernel.run(compact)
    assert len(casts) == 3, "a compact set converts its two inputs and its output"
    np.testing.assert_array_equal(bs.input("x"), x.astype(np.float32))  # relu did not write x
    # read in place on every run: a new value written into the set is what the next run sees
    bs.input("w")[...] = 2.0
    kernel.run(bs)
    np.testing.assert_array_equal(bs.output("y"), expected("mul", x, np.full(SHAPE, 2, np.float16)))


def test_shared_buffers_are_one_memory_across_sets_and_kernels(kernel) -> None:
    with anekit.compile(gated("add"), backend="reference") as other:
        home = kernel.buffers()
        guest = other.buffers(share={"w": home.buffer("w")})
        assert guest.shared == frozenset({"w"}) and guest.input("w") is home.input("w")
        x, w = values(), values()
        home.write("w", w)  # written once, read by both programs
        home.write("x", x)
        guest.write("x", x)
        kernel.run(home)
        other.run(guest)
        np.testing.assert_array_equal(home.output("y"), expected("mul", x, w))
        np.testing.assert_array_equal(guest.output("y"), expected("add", x, w))
        # an output read as the next program's input: chained without a copy
        chained = kernel.buffers(share={"x": guest.buffer("y", output=True), "w": home.buffer("w")})
        kernel.run(chained)
        np.testing.assert_array_equal(
            chained.output("y"), expected("mul", guest.output("y").astype(np.float16), w)
        )


def test_submit_runs_sets_concurrently_and_returns_them(kernel) -> None:
    sets = [kernel.buffers() for _ in range(6)]
    inputs = [(values(), values()) for _ in sets]
    for s, (x, w) in zip(sets, inputs):
        s.write("x", x)
        s.write("w", w)
    futures = [kernel.submit(s) for s in sets]
    for s, f, (x, w) in zip(sets, futures, inputs):
        assert f.result() is s
        np.testing.assert_array_equal(s.output("y"), expected("mul", x, w))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda k, bs: k.buffers(share={"z": bs.buffer("x")}),
            r"no input 'z'; inputs: \['w', 'x'\]",
        ),
        (lambda k, bs: k.buffers(share={"x": bs.input("x")}), "must be bound to a Buffer"),
        (
            lambda k, bs: k.buffers(
                share={"x": Buffer(k.spec("x"), np.zeros(SHAPE, np.float16), None, "isolated")}
            ),
            "cannot bind a buffer of kind 'isolated'",
        ),
        (lambda k, bs: bs.write("x", np.full(SHAPE, 70000.0)), "input 'x': value 70000.0"),
        (lambda k, bs: k.submit(bs, x=values()), "a buffer set or input arrays, not both"),
    ],
)
def test_bad_sets_and_bindings_are_usage_errors(kernel, make, message) -> None:
    with pytest.raises(UsageError, match=message):
        make(kernel, kernel.buffers())


def test_a_buffer_of_another_shape_or_kernel_is_refused(kernel) -> None:
    b = mil.Builder()
    b.output(b.mul(x=b.input("x", (1, 4, 1, 4), "fp16"), y=2.0), "y")
    with anekit.compile(b.build(), backend="reference") as small:
        with pytest.raises(UsageError, match=r"input x: fp16\[1, 4, 1, 8\] cannot bind buffer x"):
            kernel.buffers(share={"x": small.buffers().buffer("x")})
        with pytest.raises(UsageError, match="a buffer set of another kernel"):
            kernel.run(small.buffers())
    assert isinstance(kernel.buffers(), BufferSet)
    with pytest.raises(KeyError, match=r"no output 'x'; outputs: \['y'\]"):
        kernel.buffers().output("x")


class NumpyKernel(anekit.backends.Kernel):
    """A backend that implements only ``evaluate``: it gets the default host-array sets."""

    backend = "numpy-test"

    def evaluate(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x, w = (inputs[n].astype(np.float32) for n in ("x", "w"))
        return {"y": expected("mul", x.astype(np.float16), w.astype(np.float16))}


def test_a_backend_with_only_evaluate_gets_host_buffer_sets(kernel) -> None:
    first, second = NumpyKernel(gated()), NumpyKernel(gated())
    x, w = values(), values()
    first.input_buffer("x")[...] = x
    first.input_buffer("w")[...] = w
    first.run()
    want = expected("mul", x, w)
    np.testing.assert_array_equal(first.output_buffer("y"), want)
    head = first.buffers()
    head.write("x", x)
    head.write("w", w)
    tail = second.buffers({"x": head.buffer("y", output=True), "w": head.buffer("w")})
    assert tail.shared == {"x", "w"} and tail.input("w") is head.input("w")  # one memory
    head.run()
    tail.run()
    np.testing.assert_array_equal(tail.output("y"), expected("mul", want, w))
    foreign = kernel.buffers().buffer("w")  # a reference buffer, in the executor's form
    with pytest.raises(UsageError, match="NumpyKernel binds host arrays only, not a 'reference'"):
        second.buffers({"w": foreign})
    own = second.buffers({"w": foreign}, strict=False)
    assert own.shared == frozenset() and own.input("w") is not foreign.array
