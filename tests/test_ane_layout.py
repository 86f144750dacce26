"""I/O layout and binding read from the compiled model, against the recording stand-in.

The stand-in (``tests/ane_fake.py``) reports ``modelAttributes`` with padded row
strides and symbol arrays, and reads and writes surfaces with its own row
arithmetic by those rules. The backend must create surfaces with the reported
strides, bind by the reported symbols, and move values through strided views
exactly. This proves our side of the contract only: which rule the hardware
follows is for ``doctor --ladder`` on a Mac to find out.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from anekit import mil
from anekit.backends import budget, reference
from anekit.backends.ane import compile as ane_compile
from anekit.backends.ane import kernel
from anekit.backends.ane.device import prepare
from anekit.backends.ane.layout import TensorLayout, computed, plan
from anekit.backends.base import TensorSpec
from anekit.errors import CompileError
from anekit.mil.types import DType
from tests.ane_fake import REQUEST, FakeFramework

RNG = np.random.default_rng(5)


@pytest.fixture
def fake(tmp_path: Path) -> FakeFramework:
    return FakeFramework(tmp_path / "T")


@pytest.fixture(autouse=True)
def fresh_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "BUDGET", budget.CompileBudget())
    monkeypatch.setattr(kernel, "LOAD_RETRY_DELAY_S", 0.0)


def three_by_three() -> mil.Program:
    """Three inputs and outputs whose signature, alphabetical and size orders all differ.

    Signature: mid, big, small; alphabetical: big, mid, small; by size: small, mid, big.
    Each output is a distinct function of one input, so a swapped binding is visible.
    """
    b = mil.Builder()
    mid = b.input("mid", (1, 4, 1, 3), "fp16")
    big = b.input("big", (1, 4, 2, 41), "fp16")
    small = b.input("small", (1, 1, 1, 1), "fp16")
    b.output(b.mul(x=big, y=3.0), "b_big")  # outputs: b_big (largest), c_small, a_mid
    b.output(b.add(x=small, y=5.0), "c_small")
    b.output(b.sub(x=mid, y=7.0), "a_mid")
    return b.build()


def run_both_ways(k, program: mil.Program) -> None:
    """``k(...)`` and the zero-copy buffers both give the reference results exactly."""
    inputs = {v.name: RNG.standard_normal(v.shape).astype(np.float16) for v in program.inputs}
    want = reference.compile(program)(**inputs)
    got = k(**inputs)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    for name, value in inputs.items():
        k.input_buffer(name)[...] = value
    k.run()
    for name, value in want.items():
        np.testing.assert_array_equal(k.output_buffer(name), value, err_msg=name)


@pytest.mark.parametrize("attributes", ["alphabetical", "size"])
@pytest.mark.parametrize("row_align", [64, 128])
def test_surfaces_follow_the_reported_strides_and_requests_the_reported_symbols(
    fake: FakeFramework, attributes: str, row_align: int
) -> None:
    fake.attributes, fake.row_align = attributes, row_align
    program = three_by_three()
    with ane_compile(program, framework=fake, pack_inputs=False, canonical_io=False) as k:
        run_both_ways(k, program)
        (request, _) = fake.calls_to(REQUEST)[:2]
        for obj in request.args[0].items + request.args[2].items:
            props = obj.surface.properties
            row = -(-props["Width"] * 2 // row_align) * row_align
            assert props["BytesPerRow"] == row and props["AllocSize"] == props["Height"] * row
        order = {"alphabetical": ["big", "mid", "small"], "size": ["small", "mid", "big"]}
        signature = ["mid", "big", "small"]
        want = [order[attributes].index(n) for n in signature]
        # the arrays list surfaces in ascending request index (tmc), not in signature order
        assert [n.value for n in request.args[1].items] == [0, 1, 2]
        widths = {"big": 41, "mid": 3, "small": 1}
        by_index = [obj.surface.properties["Width"] for obj in request.args[0].items]
        assert by_index == [widths[n] for n in order[attributes]]
        assert k.layout.inputs["big"].source == "model attributes"
        row = 128  # 41 fp16 values are 82 bytes: one 128-byte row at either alignment
        assert k.layout.inputs["big"].strides == (8 * row, 2 * row, row, 2)
        assert [k.layout.inputs[n].index for n in signature] == want
        assert "binding: symbols" in k.layout.notes
    assert fake.violations == []


@pytest.mark.parametrize("binding", ["signature", "alphabetical", "size"])
def test_a_binding_rule_that_is_not_the_hardwares_gives_wrong_numbers(
    fake: FakeFramework, binding: str
) -> None:
    """The stand-in binds alphabetically: only that forced rule (or the symbols) is right."""
    program = three_by_three()
    options = dict(pack_inputs=False, canonical_io=False, binding=binding)
    with ane_compile(program, framework=fake, **options) as k:
        if binding == "alphabetical":
            run_both_ways(k, program)
        else:
            with pytest.raises(AssertionError):
                run_both_ways(k, program)


def test_plane_padding_is_honoured(fake: FakeFramework) -> None:
    fake.plane_pad = 64  # each channel's rows end 64 bytes before the next channel starts
    program = three_by_three()
    with ane_compile(program, framework=fake, pack_inputs=False, canonical_io=False) as k:
        run_both_ways(k, program)
        assert k.layout.inputs["big"].strides == (4 * 320, 320, 128, 2)
        surface = fake.calls_to(REQUEST)[0].args[0].items[0].surface  # "big": index 0 (a-z)
        assert surface.properties["AllocSize"] == 4 * (2 * 128 + 64)


def test_entries_matched_by_name_bind_by_their_symbol(fake: FakeFramework) -> None:
    fake.symbol_suffix = "@sym"  # Symbol differs from the MIL name; the arrays list symbols
    program = three_by_three()
    with ane_compile(program, framework=fake, pack_inputs=False, canonical_io=False) as k:
        run_both_ways(k, program)
        assert k.plan.binding == "symbols"


def test_without_attributes_rows_are_computed_and_said_so(fake: FakeFramework) -> None:
    fake.attributes = None  # the stand-in then reads 64-byte rows and binds by signature
    program = three_by_three()
    with ane_compile(program, framework=fake, pack_inputs=False, canonical_io=False) as k:
        run_both_ways(k, program)
        big = k.layout.inputs["big"]
        assert big.strides == (8 * 128, 2 * 128, 128, 2)  # 41 fp16 = 82 bytes -> 128
        assert big.source.startswith("computed: 64-byte rows")
        assert "reported no modelAttributes" in big.source
        assert any("signature order" in n for n in k.layout.notes)
    with pytest.raises(CompileError, match="layout='model' needs"):
        ane_compile(program, framework=fake, layout="model")
    with pytest.raises(CompileError, match="binding='symbols' needs"):
        ane_compile(program, framework=fake, binding="symbols")


@pytest.mark.parametrize("layout, row", [("dense", 82), ("pad64", 128), ("pad128", 128)])
def test_forced_layouts_compute_their_rows(fake: FakeFramework, layout: str, row: int) -> None:
    with ane_compile(three_by_three(), framework=fake, pack_inputs=False, layout=layout) as k:
        assert k.layout.inputs["big"].strides == (8 * row, 2 * row, row, 2)
        source = k.layout.inputs["big"].source
        assert source == f"computed: {layout} rows (layout={layout!r}); device input 'i2_big'"


def test_canonical_io_makes_every_order_agree(fake: FakeFramework) -> None:
    program = three_by_three()
    device = prepare(program, pack_inputs=False, canonical_io=True, max_dim=65536).program
    ins = [v.name for v in device.main.inputs]
    outs = [v.name for v in device.main.outputs]
    assert ins == ["i0_small", "i1_mid", "i2_big"] and ins == sorted(ins)
    assert outs == ["o0_b_big", "o1_a_mid", "o2_c_small"] and outs == sorted(outs)
    assert [v.type.nbytes for v in device.main.inputs] == [2, 24, 656]
    for attributes in ("alphabetical", "size", None):
        fake.attributes = attributes
        for binding in ("auto", "signature", "alphabetical", "size"):
            with ane_compile(program, framework=fake, pack_inputs=False, binding=binding) as k:
                run_both_ways(k, program)


def test_packed_input_views_are_strided_and_exact(fake: FakeFramework) -> None:
    b = mil.Builder()
    x = b.input("x", (1, 8, 1, 3), "fp16")
    w = b.input("w", (1, 8, 1, 5), "fp16")
    b.output(b.concat(values=[b.mul(x=x, y=2.0), w], axis=3), "y")
    program = b.build()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NumPy deprecation on the way (view.shape = ...)
        with ane_compile(program, framework=fake) as k:
            run_both_ways(k, program)
            assert k.layout.inputs["w"].strides == (8 * 64, 64, 64, 2)
            assert "device input 'i0_packed'" in k.layout.inputs["w"].source


def test_an_output_that_is_an_input_gets_its_own_name(fake: FakeFramework) -> None:
    b = mil.Builder()
    x = b.input("x", (1, 2, 1, 4), "fp16")
    b.output(x, "x")
    program = b.build()
    device = prepare(program, pack_inputs=True, canonical_io=True, max_dim=65536).program
    assert [v.name for v in device.main.outputs] == ["o0_x"]
    assert [op.op_type for op in device.ops] == ["identity"]
    with ane_compile(program, framework=fake) as k:
        run_both_ways(k, program)


# -- the layout arithmetic itself ----------------------------------------------------------------
def test_tensor_layout_splits_leading_axes_into_channels_then_rows() -> None:
    lay = TensorLayout(channels=6, height=4, width=5, itemsize=2, row_stride=64, plane_stride=320,
                       source="test")  # fmt: skip
    assert lay.strides((1, 2, 3, 4, 5)) == (1920, 960, 320, 64, 2)
    assert lay.strides((6, 4, 5)) == (320, 64, 2)
    with pytest.raises(CompileError, match="cannot be read as 6 channels of 4 rows"):
        lay.strides((5, 5, 5))
    assert lay.surface_properties() == {"Width": 5, "Height": 24, "BytesPerElement": 2,
                                        "BytesPerRow": 64, "AllocSize": 1920, "PixelFormat": 0}  # fmt: skip


def test_computed_layout_of_rank_0_and_fp32() -> None:
    assert computed(TensorSpec("s", (), DType.fp32), 64, "t").alloc_size == 64
    lay = computed(TensorSpec("v", (1, 8, 1, 1), DType.fp32), 64, "t")
    assert (lay.channels, lay.height, lay.row_stride, lay.alloc_size) == (8, 1, 64, 512)


@pytest.mark.parametrize("attrs", [None, {}])
def test_no_attributes_at_all_fall_back_to_computed_rows_saying_so(attrs) -> None:
    spec = TensorSpec("x", (1, 2, 1, 3), DType.fp16)
    got = plan([spec], [spec], attrs)
    assert "reported no modelAttributes" in got.inputs[0].source
    assert got.inputs[0].row_stride == 64 and got.notes
    with pytest.raises(CompileError, match="reported no modelAttributes"):
        plan([spec], [spec], attrs, layout="model")


@pytest.mark.parametrize(
    "attrs, why",
    [
        ({"NetworkStatusList": []}, "no NetworkStatusList[0]"),
        ({"NetworkStatusList": [{"LiveInputList": []}]}, "no LiveOutputList"),
        (
            {"NetworkStatusList": [{"LiveInputList": [{"Name": "x"}], "LiveOutputList": []}]},
            "no integer Channels",
        ),
    ],
)
def test_unusable_attributes_are_an_error_not_a_silent_fallback(attrs, why: str) -> None:
    """tmc aborts on a layout report it cannot read: computed strides could be wrong."""
    spec = TensorSpec("x", (1, 2, 1, 3), DType.fp16)
    with pytest.raises(CompileError, match=re.escape(why)):
        plan([spec], [spec], attrs)


def _entry(**fields: int) -> dict:
    entry = {"Name": "x", "Symbol": "x", "Channels": 2, "Height": 1, "Width": 3,
             "RowStride": 64, "PlaneStride": 64, "Type": "Float16"}  # fmt: skip
    return {**entry, **fields}


@pytest.mark.parametrize(
    "entry, why",
    [
        (_entry(RowStride=4, PlaneStride=4), "RowStride 4 / PlaneStride 4 are too small"),
        (_entry(RowStride=96, PlaneStride=96), "RowStride 96 is not a multiple of 64"),
        (_entry(Channels=3), "C x H x W = 3 x 1 x 3 is not 2 x 3"),
        ({**_entry(), "Name": "other", "Symbol": "other"}, "not ['x']"),
    ],
)
def test_a_reported_layout_that_does_not_fit_is_refused(entry: dict, why: str) -> None:
    spec = TensorSpec("x", (1, 2, 1, 3), DType.fp16)
    attrs = {"NetworkStatusList": [{"LiveInputList": [entry], "LiveOutputList": [entry]}]}
    for layout in ("auto", "model"):
        with pytest.raises(CompileError, match=re.escape(why)):
            plan([spec], [spec], attrs, layout=layout)
    assert plan([spec], [spec], attrs, layout="pad64").inputs[0].row_stride == 64
    with pytest.raises(ValueError, match="layout must be one of"):
        plan([spec], [spec], attrs, layout="sideways")


def test_no_array_shape_is_assigned_in_place() -> None:
    """``arr.shape = ...`` is deprecated in NumPy 2.5; views are made with reshape instead."""
    import ast

    root = Path(__file__).resolve().parent.parent / "anekit"
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "shape":
                    if not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                        found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []


def test_flat_packed_views_write_through_to_the_packed_surface(fake: FakeFramework) -> None:
    b = mil.Builder()
    x = b.input("x", (1, 2, 1, 3), "fp16")
    w = b.input("w", (1, 1, 1, 5), "fp16")  # lead dims differ: inputs are flattened
    b.output(b.mul(x=x, y=2.0), "y")
    b.output(b.add(x=w, y=1.0), "z")
    program = b.build()
    with ane_compile(program, framework=fake) as k:
        assert k.packing.segments[0].packed_shape == (1, 1, 1, 6)
        run_both_ways(k, program)
        k.input_buffer("x")[0, 1, 0, 2] = 9.0
        packed = k.input_buffer("x").surface.handle.buffer
        assert np.frombuffer(bytes(packed[:22]), np.float16)[5] == 9.0
