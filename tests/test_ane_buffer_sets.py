"""Buffer sets of the ANE backend, against the recording stand-in (``tests/ane_fake.py``).

Each set is a slot of its own: its surfaces and its ``_ANERequest`` are made once,
and a run dispatches that request with no host copy, since the set's views are the
surfaces' memory. A buffer bound into another set (``share=``) is the same IOSurface
in both requests. These prove our side of the contract only (which surfaces reach
which request, what the host writes, lock balance), never what the framework does
with a surface that several requests name.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.backends import budget, reference
from anekit.backends.ane import compile as ane_compile
from anekit.backends.ane import kernel
from anekit.errors import UsageError
from tests.ane_fake import REQUEST, FakeFramework, count_surface_writes

EVALUATE = "evaluateWithQoS:options:request:error:"
RNG = np.random.default_rng(3)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeFramework:
    """The stand-in, with a fresh compile budget and no pause before a load retry."""
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    monkeypatch.setattr(kernel, "LOAD_RETRY_DELAY_S", 0.0)
    return FakeFramework(tmp_path / "T")


def weighted(op: str = "mul") -> mil.Program:
    """``y = x <op> w + b``: an activation, a weight and a bias, all inputs."""
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 16), "fp16")
    w = b.input("w", (1, 4, 8, 16), "fp16")
    bias = b.input("b", (1, 4, 1, 1), "fp16")
    combined = b.mul(x=x, y=w) if op == "mul" else b.sub(x=w, y=x)
    b.output(b.add(x=combined, y=bias), "y")
    return b.build()


def fill(bs, program: mil.Program) -> dict[str, np.ndarray]:
    values = {}
    for v in program.main.inputs:
        values[v.name] = RNG.standard_normal(v.shape).astype(np.float16)
        bs.input(v.name)[...] = values[v.name]
    return values


def evaluated_surfaces(fake: FakeFramework) -> list:
    request = fake.calls_to(EVALUATE)[-1].args[2]
    return [o.surface for o in request.inputs.items + request.outputs.items]


def test_a_set_makes_its_surfaces_and_request_once_and_runs_them_without_copies(
    fake: FakeFramework, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = weighted()
    with ane_compile(program, framework=fake, pack_inputs=False) as k:
        made, requests = len(fake.surfaces), len(fake.calls_to(REQUEST))
        bs = k.buffers()
        assert len(fake.surfaces) == made + 4 and len(fake.calls_to(REQUEST)) == requests + 1
        values = fill(bs, program)
        writes = count_surface_writes(monkeypatch)
        for _ in range(5):
            k.run(bs)
        assert writes.bytes == 0, "a run copied into the surfaces"
        assert len(fake.surfaces) == made + 4 and len(fake.calls_to(REQUEST)) == requests + 1
        np.testing.assert_array_equal(bs.output("y"), reference.compile(program)(**values)["y"])
        # the request that ran is the one whose surfaces the set's views are
        surfaces = evaluated_surfaces(fake)
        for name in ("x", "w", "b"):
            assert any(np.shares_memory(bs.input(name), np.frombuffer(s.buffer, np.uint8))
                       for s in surfaces), name  # fmt: skip
        assert np.shares_memory(bs.output("y"), np.frombuffer(surfaces[-1].buffer, np.uint8))
    assert fake.violations == []


def test_a_packed_kernel_has_sets_but_cannot_bind_shared_buffers(fake: FakeFramework) -> None:
    program = weighted()
    with ane_compile(program, framework=fake) as k:  # inputs packed into one surface
        bs = k.buffers()
        values = fill(bs, program)
        k.run(bs)
        np.testing.assert_array_equal(bs.output("y"), reference.compile(program)(**values)["y"])
        assert bs.buffer("w").memory is None
        with pytest.raises(UsageError, match="pack_inputs=False"):
            k.buffers(share={"w": bs.buffer("w")})


def test_one_surface_serves_the_requests_of_two_kernels(fake: FakeFramework) -> None:
    first, second = weighted("mul"), weighted("sub")
    fake.evaluate_delay = 0.002
    k1 = ane_compile(first, framework=fake, pack_inputs=False)
    k2 = ane_compile(second, framework=fake, pack_inputs=False)
    home = k1.buffers()
    guest = k2.buffers(share={"w": home.buffer("w"), "b": home.buffer("b")})
    values = fill(home, first)
    guest.input("x")[...] = x2 = RNG.standard_normal((1, 4, 1, 16)).astype(np.float16)
    shared = home.buffer("w").memory.handle
    assert guest.buffer("w").memory.handle is shared and guest.shared == {"w", "b"}
    k2.run(guest)
    assert any(s is shared for s in evaluated_surfaces(fake)), "guest's request lacks the surface"
    want2 = reference.compile(second)(**{**values, "x": x2})["y"]
    np.testing.assert_array_equal(guest.output("y"), want2)
    # both requests in flight at once: the shared surface stays unlocked until both are done
    threads = [threading.Thread(target=lambda k=k, s=s: [k.run(s) for _ in range(20)])
               for k, s in ((k1, home), (k2, guest))]  # fmt: skip
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert fake.violations == [] and fake.max_in_flight == 2
    k1.close()
    assert shared.locks == 1, "closing one kernel unlocked a surface another still holds"
    k2.run(guest)
    np.testing.assert_array_equal(guest.output("y"), want2)
    k2.close()
    assert all(s.locks == 0 for s in fake.surfaces), "a surface stayed locked after both closed"


def test_a_surface_laid_out_otherwise_cannot_be_bound(fake: FakeFramework) -> None:
    k1 = ane_compile(weighted(), framework=fake, pack_inputs=False)
    fake.row_align = 128  # the second model reads rows at 128-byte strides (as reported on M5)
    k2 = ane_compile(weighted("sub"), framework=fake, pack_inputs=False)
    with k1, k2:
        home = k1.buffers()
        with pytest.raises(UsageError, match="input 'w' is read as 4x8 rows .* 128-byte rows"):
            k2.buffers(share={"w": home.buffer("w")})
        loose = k2.buffers(share={"w": home.buffer("w"), "b": home.buffer("b")}, strict=False)
        assert loose.shared == frozenset(), "a surface of another geometry was bound"
        assert not np.shares_memory(loose.input("w"), home.input("w"))
        with pytest.raises(UsageError, match="needs a whole IOSurface"):
            k2.buffers(share={"w": reference.compile(weighted()).buffers().buffer("w")})
