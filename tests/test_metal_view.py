"""``input_buffer(name).metal_buffer()``: an MTLBuffer over the same IOSurface memory, never a copy.

Against the recording stand-in (``tests/probe_fake.py``): the buffer is made over the
surface's own bytes (a write through the NumPy view is in the buffer's memory, and a
write into the buffer's memory is in the view), it spans the surface, and it reports
the tensor's offset, the layout's row stride and strides; a Metal that copied the memory
is refused. This proves our side only; ``test_ane_hw.py`` checks it against real Metal.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.backends import ane
from anekit.backends.ane import compile as ane_compile
from anekit.errors import BackendUnavailable, EvaluationError
from tests.ane_fixtures import fresh
from tests.probe_fake import ProbeFramework, surface_of


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ProbeFramework:
    return fresh(tmp_path, monkeypatch, ProbeFramework)


def unaligned() -> mil.Program:
    """Rows of 3 fp16 (6 bytes): the surface pads each row to 64 bytes."""
    b = mil.Builder()
    x = b.input("x", (1, 4, 1, 3), "fp16")
    b.output(b.mul(x=x, y=2.0), "y")
    return b.build()


def two_inputs() -> mil.Program:
    """Two inputs packed into one surface: the second starts part-way into it."""
    b = mil.Builder()
    a, c = b.input("a", (1, 8, 1, 16), "fp16"), b.input("c", (1, 8, 1, 32), "fp16")
    b.output(b.concat(values=(b.mul(x=a, y=2.0), c), axis=3), "y")
    return b.build()


def test_the_buffer_is_over_the_surface_memory_with_its_length_and_stride(fake) -> None:
    with ane_compile(unaligned(), framework=fake) as k:
        view = k.input_buffer("x")
        mb = view.metal_buffer()
        surface = surface_of(fake, mb.buffer)  # the buffer's memory IS this surface's bytes
        assert surface.properties["AllocSize"] == k.layout.inputs["x"].nbytes
        assert mb.length == len(surface.buffer) >= k.layout.inputs["x"].nbytes
        assert mb.row_stride == surface.properties["BytesPerRow"] == 64
        assert mb.strides == view.strides and mb.shape == (1, 4, 1, 3) and mb.offset == 0
        assert mb.dtype == "float16" and mb.buffer.device is fake.metal
        # host -> "GPU": a write through the view is in the buffer's memory, row by row
        view[...] = np.arange(12, dtype=np.float16).reshape(1, 4, 1, 3)
        rows = [np.frombuffer(mb.buffer.memory[r * 64 : r * 64 + 6], np.float16) for r in range(4)]
        assert np.array_equal(np.stack(rows).reshape(1, 4, 1, 3), view)
        # "GPU" -> host: a write into the buffer's memory is what the view reads
        mb.buffer.memory[64:66] = np.float16(-5).tobytes()
        assert view[0, 1, 0, 0] == -5
        # and what the device computes from: the evaluation reads the same bytes
        k.run()
        assert k.output_buffer("y")[0, 1, 0, 0] == -10


def test_an_output_buffer_has_its_own_surface(fake) -> None:
    with ane_compile(unaligned(), framework=fake) as k:
        x, y = k.input_buffer("x").metal_buffer(), k.output_buffer("y").metal_buffer()
        assert surface_of(fake, x.buffer) is not surface_of(fake, y.buffer)
        k.input_buffer("x")[...] = 1.5
        k.run()
        assert np.frombuffer(y.buffer.memory[:2], np.float16)[0] == 3.0


def test_a_packed_input_reports_where_it_starts_in_the_shared_surface(fake) -> None:
    with ane_compile(two_inputs(), framework=fake) as k:
        a, c = k.input_buffer("a").metal_buffer(), k.input_buffer("c").metal_buffer()
        assert surface_of(fake, a.buffer) is surface_of(fake, c.buffer)  # one packed surface
        assert a.offset == 0 and c.offset == 16 * 2  # c's columns follow a's 16 fp16 values
        assert c.strides == k.input_buffer("c").strides
        row = c.strides[1]
        k.input_buffer("c")[0, 3, 0, 5] = 7.0
        at = c.offset + 3 * row + 5 * 2
        assert np.frombuffer(c.buffer.memory[at : at + 2], np.float16)[0] == 7.0


def test_a_metal_that_copies_the_memory_is_refused(fake) -> None:
    fake.metal_copies = True
    with ane_compile(unaligned(), framework=fake) as k:
        with pytest.raises(EvaluationError, match="Metal copied it"):
            k.input_buffer("x").metal_buffer()


def test_an_array_not_on_a_surface_has_no_metal_buffer(fake) -> None:
    with ane_compile(unaligned(), framework=fake) as k:
        outputs = k(x=np.ones((1, 4, 1, 3), np.float16))  # copies out of the surface
        with pytest.raises(AttributeError):
            outputs["y"].metal_buffer()
        copy = k.input_buffer("x").copy()  # a SurfaceView copy owns new memory
        with pytest.raises(EvaluationError, match="not a view of this surface"):
            copy.metal_buffer()


def load_example():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "examples" / "metal_zero_copy.py"
    spec = importlib.util.spec_from_file_location("metal_zero_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_fences_only_when_the_probe_says_it_works(tmp_path) -> None:
    example = load_example()
    assert example.fence_works(None) is False

    def report(status: str, works: bool) -> str:
        path = tmp_path / f"{status}{works}.json"
        path.write_text(json.dumps({"experiments": [{"name": "shared-events", "status": status,
                                                      "observed": {"fence": {"fence_works": works}}}]}))  # fmt: skip
        return str(path)

    assert example.fence_works(report("pass", True)) is True
    assert example.fence_works(report("pass", False)) is False
    assert example.fence_works(report("skip", True)) is False
    if not ane.available()[0]:
        with pytest.raises(BackendUnavailable):
            example.main([])
