"""The schema-less FlatBuffer walker and the E5 guesses, on buffers built with ``flatbuffers``."""

from __future__ import annotations

import pytest

from anekit.errors import InspectError
from anekit.inspect.e5 import E5_SCHEMA, read_e5
from anekit.inspect.flatbuf import (
    FbScalar,
    FbString,
    FbTable,
    FbVector,
    looks_like_flatbuffer,
    read_flatbuffer,
    render,
    to_plain,
)

flatbuffers = pytest.importorskip("flatbuffers")


def _strings(b, values):
    offsets = [b.CreateString(v) for v in values]
    b.StartVector(4, len(offsets), 4)
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _scalars(b, prepend, width, values):
    b.StartVector(width, len(values), width)
    for v in reversed(values):
        prepend(v)
    return b.EndVector()


def _tables(b, offsets):
    b.StartVector(4, len(offsets), 4)
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _rich_buffer(size_prefixed: bool = False) -> bytes:
    """A root table using every kind of field, with known content."""
    b = flatbuffers.Builder(0)
    names = _strings(b, ["conv_0", "relu_1", "out@output"])
    raw = b.CreateByteVector(bytes([1, 2, 3, 4, 5]))
    shorts = _scalars(b, b.PrependUint16, 2, [300, 400, 65000])
    ints = _scalars(b, b.PrependInt32, 4, [10, 20, 30000])
    longs = _scalars(b, b.PrependUint64, 8, [2**40, 7])
    hello = b.CreateString("hello")
    b.StartObject(2)
    b.PrependUint16Slot(0, 7, 0)
    b.PrependUOffsetTRelativeSlot(1, hello, 0)
    child = b.EndObject()
    kids = []
    for i in range(2):
        b.StartObject(1)
        b.PrependUint64Slot(0, 1000 + i, 0)
        kids.append(b.EndObject())
    kid_vec = _tables(b, kids)
    b.StartObject(9)
    b.PrependUint32Slot(0, 4, 0)  # a small number in the last slot, next to a child object
    b.PrependUOffsetTRelativeSlot(1, names, 0)
    b.PrependUOffsetTRelativeSlot(2, child, 0)
    b.PrependUint8Slot(3, 200, 0)
    b.PrependUOffsetTRelativeSlot(4, raw, 0)
    b.PrependUOffsetTRelativeSlot(5, ints, 0)
    b.PrependUOffsetTRelativeSlot(6, kid_vec, 0)
    b.PrependUOffsetTRelativeSlot(7, shorts, 0)
    b.PrependUOffsetTRelativeSlot(8, longs, 0)
    root = b.EndObject()
    if size_prefixed:
        b.FinishSizePrefixed(root, file_identifier=b"ANEK")
    else:
        b.Finish(root, file_identifier=b"ANEK")
    return bytes(b.Output())


EXPECTED = {
    "f0": 4,
    "f1": ["conv_0", "relu_1", "out@output"],
    "f2": {"f0": 7, "f1": "hello"},
    "f3": 200,
    "f4": [1, 2, 3, 4, 5],
    "f5": [10, 20, 30000],
    "f6": [{"f0": 1000}, {"f0": 1001}],
    "f7": [300, 400, 65000],
    "f8": [2**40, 7],
}


@pytest.mark.parametrize("size_prefixed", [False, True])
def test_recovers_tables_vectors_strings_and_scalars(size_prefixed):
    fb = read_flatbuffer(_rich_buffer(size_prefixed))
    assert to_plain(fb) == EXPECTED
    assert fb.identifier == "ANEK" and fb.size_prefixed is size_prefixed


def test_vector_element_widths_are_recovered():
    fields = read_flatbuffer(_rich_buffer()).root.fields
    widths = {slot: fields[slot].width for slot in (4, 5, 7, 8)}
    assert widths == {4: 1, 5: 4, 7: 2, 8: 8}
    assert [fields[6].kind, fields[1].kind] == ["tables", "strings"]


def test_every_node_offset_points_at_its_bytes():
    data = _rich_buffer()
    fb = read_flatbuffer(data)
    for slot in (0, 3):
        node = fb.root.fields[slot]
        assert isinstance(node, FbScalar)
        assert int.from_bytes(data[node.offset : node.offset + node.width], "little") == node.value
    hello = fb.root.fields[2].fields[1]
    assert isinstance(hello, FbString)
    assert data[hello.offset + 4 : hello.offset + 9] == b"hello"


def test_signed_scalars_read_back_through_signed():
    b = flatbuffers.Builder(0)
    b.StartObject(2)
    b.PrependInt16Slot(0, -5, 0)
    b.PrependInt16Slot(1, 12, 0)
    b.Finish(b.EndObject())
    fields = read_flatbuffer(bytes(b.Output())).root.fields
    assert sorted(f.signed() for f in fields.values()) == [-5, 12]


def test_nested_tables_three_deep():
    b = flatbuffers.Builder(0)
    inner = None
    for depth in range(3):
        label = b.CreateString(f"level{depth}")
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, label, 0)
        if inner is not None:
            b.PrependUOffsetTRelativeSlot(1, inner, 0)
        inner = b.EndObject()
    b.Finish(inner)
    assert to_plain(read_flatbuffer(bytes(b.Output()))) == {
        "f0": "level2",
        "f1": {"f0": "level1", "f1": {"f0": "level0"}},
    }


def test_render_lists_paths_and_values():
    text = "\n".join(render(read_flatbuffer(_rich_buffer())))
    assert "root.f1[2]: string 'out@output'" in text
    assert "root.f2.f1: string 'hello'" in text
    assert "root.f5: vector of 3 u32 [10, 20, 30000]" in text


def test_a_buffer_without_a_root_table_names_the_offset():
    with pytest.raises(InspectError, match="no table") as err:
        read_flatbuffer(b"\x40\x00\x00\x00" + bytes(12), file="bad.e5")
    assert err.value.offset == 0 and err.value.file == "bad.e5"


def test_looks_like_flatbuffer():
    assert looks_like_flatbuffer(_rich_buffer())
    assert not looks_like_flatbuffer(b"program(1.3)\n{\n}\n")
    assert not looks_like_flatbuffer(b"\xce\xfa\xef\xbe" + bytes(60))
    assert not looks_like_flatbuffer(b"")


def _e5_like() -> bytes:
    """A buffer shaped after the one public description of E5 (ANE_NOTES section 6).

    It checks the labelling rules, not Apple's real layout, which is unknown.
    """
    b = flatbuffers.Builder(0)
    symbols = _strings(b, ["x", "y@output"])
    sections = []
    for op, size in (("Cast", 64), ("AneInference", 2048), ("Cast", 64)):
        name = b.CreateString(op)
        b.StartObject(2)
        b.PrependUOffsetTRelativeSlot(0, name, 0)
        b.PrependUint32Slot(1, size, 0)
        sections.append(b.EndObject())
    section_vec = _tables(b, sections)
    build = b.CreateString("coremlc 3505.4.1")
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(0, symbols, 0)
    b.PrependUOffsetTRelativeSlot(1, build, 0)
    b.PrependUOffsetTRelativeSlot(2, section_vec, 0)
    b.PrependUint32Slot(3, 4, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_e5_labels_are_guesses_on_the_described_fields():
    e5 = read_e5(_e5_like())
    labels = {path: label.split("?")[0] for path, label in e5.labels.items()}
    assert labels == {
        "root.f0": "symbol_names",
        "root.f1": "build_info",
        "root.f2": "sections",
        "root.f2[0].f0": "op_type",
        "root.f2[1].f0": "op_type",
        "root.f2[2].f0": "op_type",
        "root.f3": "format_version",
    }
    assert all("(guess:" in label for label in e5.labels.values())
    assert e5.op_types == ("Cast", "AneInference", "Cast")
    assert ("root.f0[1]", "y@output") in e5.strings
    assert all(g.confidence == "guess" and g.source for g in E5_SCHEMA)


def test_walker_types_are_the_documented_node_classes():
    fb = read_flatbuffer(_rich_buffer())
    assert isinstance(fb.root, FbTable)
    assert isinstance(fb.root.fields[6], FbVector)
    assert all(isinstance(t, FbTable) for t in fb.root.fields[6].items)
