"""Object lifetime in the ANE backend: autorelease pools, finalizers, close, work directories.

Against the recording stand-in (``tests/ane_fake.py``): these prove our side of
the contract only (that pools are entered, unload happens once, directories are
cleared or compared), not what the framework does with them.
"""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.backends import budget
from anekit.backends.ane import compile as ane_compile
from anekit.backends.ane import kernel, workdirs
from anekit.errors import CompileError, EvaluationError
from tests.ane_fake import FakeFramework, FakeNSError

DEAD_PID = 2**22 + 4321  # above Linux's and macOS's pid limits: no such process


@pytest.fixture
def fake(tmp_path: Path) -> FakeFramework:
    return FakeFramework(tmp_path / "T")


@pytest.fixture(autouse=True)
def fresh_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    monkeypatch.setattr(kernel, "LOAD_RETRY_DELAY_S", 0.0)


def program(weight: float = 0.5) -> mil.Program:
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 8), "fp16")
    w = b.weight("w", np.full((1, 4, 1, 8), weight, np.float16))
    b.output(b.mul(x=x, y=w), "y")
    return b.build()


X = np.ones((1, 4, 1, 8), np.float16)


# -- autorelease pools ---------------------------------------------------------------------------
def test_every_framework_call_runs_in_an_autorelease_pool_on_every_thread(
    fake: FakeFramework,
) -> None:
    with ane_compile(program(), framework=fake, stats=True) as k:
        k(x=X)
        k.run()
        futures = [k.submit(x=X) for _ in range(8)]
        [f.result() for f in futures]
        threads = [threading.Thread(target=k, kwargs={"x": X}) for _ in range(3)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    outside = [(c.receiver, c.selector) for c in fake.calls if c.pool_depth < 1]
    assert outside == []
    assert len(fake.calls_to("evaluateWithQoS:options:request:error:")) == 13
    assert fake.pools_entered >= 13 + 3  # one per evaluation, plus compile, slots and unload


def test_without_pools_no_call_is_in_one(fake: FakeFramework) -> None:
    """The switch the ladder's memory rung compares against; shows the check above can fail."""
    with ane_compile(program(), framework=fake, autorelease=False) as k:
        k(x=X)
    assert fake.pools_entered == 0 and all(c.pool_depth == 0 for c in fake.calls)


# -- performance statistics -----------------------------------------------------------------------
def test_stats_set_the_mask_before_compile_and_again_after_load(fake: FakeFramework) -> None:
    ane_compile(program(), framework=fake, stats=True).close()
    sequence = [(c.receiver, c.selector, c.args) for c in fake.calls]
    masks = [i for i, (_, sel, _) in enumerate(sequence) if sel == "setPerfStatsMask:"]
    compile_at = fake.selectors_called().index("compileWithQoS:options:error:")
    load_at = fake.selectors_called().index("loadWithQoS:options:error:")
    assert [sequence[i][0] for i in masks] == ["model", "model", "ane_model"]
    assert masks[0] < compile_at < load_at < masks[1]
    assert all(sequence[i][2] == (15,) for i in masks)
    fake.calls.clear()
    ane_compile(program(), framework=fake).close()
    assert fake.calls_to("setPerfStatsMask:") == []
    with ane_compile(program(), framework=fake, stats=True, stats_mask=0) as k:
        k.run()
    assert fake.calls_to("setPerfStatsMask:") == [] and fake.calls_to(
        "statsWithHardwareExecutionNS:"
    )
    ane_compile(program(), framework=fake, stats=True, stats_mask=3).close()
    assert {c.args for c in fake.calls_to("setPerfStatsMask:")} == {(3,)}
    with pytest.raises(ValueError, match="stats_mask"):
        ane_compile(program(), framework=fake, stats=True, stats_mask=-1)


# -- close and finalizers -----------------------------------------------------------------------------
def test_a_kernel_never_closed_is_unloaded_when_collected(fake: FakeFramework) -> None:
    k = ane_compile(program(), framework=fake)
    workdir = k.workdir
    del k
    gc.collect()
    assert len(fake.calls_to("unloadWithQoS:error:")) == 1
    assert not workdir.exists() and all(s.locks == 0 for s in fake.surfaces)


def test_close_then_collect_unloads_once(fake: FakeFramework) -> None:
    k = ane_compile(program(), framework=fake)
    k.close()
    k.close()
    del k
    gc.collect()
    assert len(fake.calls_to("unloadWithQoS:error:")) == 1


def test_close_never_masks_the_exception_already_propagating(fake: FakeFramework) -> None:
    fake.unload_result = (False, FakeNSError("unload refused", error_code=5))
    with pytest.raises(ValueError, match="the caller's own error") as info:
        with ane_compile(program(), framework=fake) as k:
            workdir = k.workdir
            raise ValueError("the caller's own error")
    notes = getattr(info.value, "__notes__", [])
    if hasattr(info.value, "add_note"):
        assert any("EvaluationError: ANE unload failed: unload refused" in n for n in notes)
    assert not workdir.exists(), "a failed unload still releases the work directory"
    with pytest.raises(EvaluationError, match="unload refused") as closing:
        with ane_compile(program(), framework=fake):
            pass
    assert closing.value.code == 5


# -- work directories ---------------------------------------------------------------------------------
def test_a_directory_left_by_a_dead_process_is_cleared_before_writing(fake: FakeFramework) -> None:
    with ane_compile(program(), framework=fake) as k:
        workdir = k.workdir
    (workdir / "weights").mkdir(parents=True)
    (workdir / "weights" / "stale.bin").write_bytes(b"from a crashed run")
    (workdir / "model.mil").write_text("stale")
    dead = workdir.with_name(f"{workdir.name}.anekit-{DEAD_PID}")
    dead.touch()
    with ane_compile(program(), framework=fake) as k:
        k(x=X)
    assert set(fake.compile_snapshots[-1]) == {"model.mil", "weights/w.bin"}
    assert fake.compile_snapshots[-1]["model.mil"] != b"stale"
    assert not dead.exists() and not workdir.exists()


def test_a_directory_another_live_process_uses_is_shared_when_identical(
    fake: FakeFramework,
) -> None:
    with ane_compile(program(), framework=fake) as k:
        files = {str(p.relative_to(k.workdir)): p.read_bytes() for p in k.workdir.rglob("*.*")}
        workdir = k.workdir
    for name, data in files.items():
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_bytes(data)
    (workdir / "compiler-output").write_bytes(b"kept")  # written by the other process
    other = workdir.with_name(f"{workdir.name}.anekit-{os.getppid()}")
    other.touch()
    with ane_compile(program(), framework=fake):
        assert (workdir / "compiler-output").read_bytes() == b"kept", "a live user's dir cleared"
    assert workdir.is_dir(), "removed while another live process uses it"
    (workdir / "model.mil").write_text("changed by the other process")
    with pytest.raises(CompileError, match="model.mil differs"):
        ane_compile(program(), framework=fake)


def test_one_identifier_for_two_programs_raises_when_asked_to_verify(fake: FakeFramework) -> None:
    fake.hex_ignores_weights = True  # the identifier would then name both programs
    first = ane_compile(program(0.5), framework=fake, workdir_weights="verify")
    with pytest.raises(CompileError, match="names two different programs"):
        ane_compile(program(0.25), framework=fake, workdir_weights="verify")
    np.testing.assert_array_equal(first(x=X)["y"], X * np.float16(0.5))
    first.close()
    assert list(fake.tmp.iterdir()) == []


def test_an_identifier_blind_to_weights_shares_the_directory_rewriting_them(fake) -> None:
    """The default (what maderix and Orion do): weights written before every compile."""
    fake.hex_ignores_weights = True
    with ane_compile(program(0.5), framework=fake) as first:
        with ane_compile(program(0.25), framework=fake) as second:
            assert first.workdir == second.workdir
            assert fake.compile_snapshots[0] != fake.compile_snapshots[1]  # the compiler saw each
            np.testing.assert_array_equal(first(x=X)["y"], X * np.float16(0.5))
            np.testing.assert_array_equal(second(x=X)["y"], X * np.float16(0.25))
        with pytest.raises(CompileError, match="model.mil differs"):
            (first.workdir / "model.mil").write_text("another program")
            ane_compile(program(0.25), framework=fake)
    assert list(fake.tmp.iterdir()) == []


def test_weight_names_cannot_escape_the_work_directory(tmp_path: Path) -> None:
    with pytest.raises(CompileError, match="escapes the work directory"):
        workdirs.WorkDirs().acquire(tmp_path / "hex", {"weights/../../evil.bin": b"x"})
    assert not (tmp_path.parent / "evil.bin").exists()
