"""The hwx reader on real H13 programs (tests/data/hwx, from tinygrad, MIT).

Expected values come from reading the files by hand (hexdump and strings) or
from a second, independent part of the same file: the stabs strings against the
register fields of the task descriptors, the weight symbols against the
coefficient DMA registers that the relocations point at.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from anekit.errors import InspectError
from anekit.inspect.hwx import load_hwx, read_hwx
from anekit.inspect.tasks import (
    DecodedTask,
    decode_task,
    encode_task,
    fields_at,
    h13_fields,
    parse_tasks,
)

DATA = Path(__file__).parent / "data" / "hwx"
FILES = sorted(p.name for p in DATA.iterdir() if p.name != "LICENSE.tinygrad")

# name -> (role, NCHW shape), read from each file's stabs strings by hand.
TENSORS = {
    "conv.hwx": {"image": ("input", (1, 3, 1, 1)), "probs@output": ("output", (1, 3, 1, 1))},
    "model.hwx.golden": {
        "image": ("input", (1, 3, 1, 1)),
        "probs@output": ("output", (1, 3, 1, 1)),
    },
    "gemm.hwx": {"image": ("input", (1, 512, 1, 1)), "probs@output": ("output", (1, 512, 1, 1))},
    "relu.hwx": {"image": ("input", (1, 1, 1, 77)), "probs@output": ("output", (1, 1, 1, 77))},
    "sigmoid.hwx": {"image": ("input", (1, 1, 1, 77)), "probs@output": ("output", (1, 1, 1, 77))},
    "sum.hwx": {
        "image2": ("input", (1, 64, 1, 1)),
        "image": ("input", (1, 64, 1, 1)),
        "probs@output": ("output", (1, 64, 1, 1)),
    },
    "concat.hwx": {
        "input_1": ("input", (1, 16, 1, 1)),
        "input_0": ("input", (1, 16384, 1, 1)),
        "output@output": ("output", (1, 16400, 1, 1)),
    },
}

# name -> weight symbol sizes. gemm is 512x512 fp16 = 524288 bytes in 16 slices.
WEIGHT_SIZES = {
    "conv.hwx": [64] * 3,
    "model.hwx.golden": [64] * 3,
    "gemm.hwx": [512 * 512 * 2 // 16] * 16,
    "sigmoid.hwx": [128],
    "relu.hwx": [],
    "sum.hwx": [],
    "concat.hwx": [],
}


def _round_up(x: int, m: int) -> int:
    return (x + m - 1) // m * m


@pytest.fixture(scope="module", params=FILES)
def hwx(request):
    return load_hwx(DATA / request.param)


def _raw(hwx) -> bytes:
    return Path(hwx.file).read_bytes()


def test_the_test_files_are_all_here():
    assert set(FILES) == set(TENSORS)
    assert (DATA / "LICENSE.tinygrad").read_text().startswith("Copyright (c) 2024, the tiny corp")


def test_generation_matches_cpusubtype_and_compiler_target(hwx):
    raw = _raw(hwx)
    assert struct.unpack_from("<III", raw) == (0xBEEFFACE, 0x80, 4)  # cpusubtype 4 is H13
    assert hwx.generation == "H13"
    target = re.search(rb"\n\t-t (\w+)\n", raw).group(1).decode()
    assert hwx.compiler.target == target == "h13"


def test_compiler_version(hwx):
    raw = _raw(hwx)
    name, version = re.search(rb"\n(zin_ane_compiler) (v[\d.]+)\n", raw).groups()
    assert (hwx.compiler.name, hwx.compiler.version) == (name.decode(), version.decode())
    assert hwx.compiler.version == "v4.2.1"
    assert "--memcache-size=4194304" in hwx.compiler.options


def test_tensor_names_roles_and_shapes(hwx):
    expected = TENSORS[Path(hwx.file).name]
    assert {t.name: (t.role, t.shape) for t in hwx.tensors} == expected
    for t in hwx.tensors:
        assert t.role == ("output" if t.name.endswith("@output") else "input")
        assert t.layout == "nchw" and t.dtype == "float16"


def test_tensor_strides_follow_the_64_byte_row_rule(hwx):
    # eiln/anecc: row stride = round_up(W * 2, 64), plane = round_up(row * H, 64).
    for t in hwx.tensors:
        n, c, h, w = t.shape
        row = _round_up(w * 2, 64)
        plane = _round_up(row * h, 64)
        assert t.strides == (c * plane, plane, row, 2)
        assert t.size == n * c * plane
        assert t.allocation >= t.size and t.allocation % 0x4000 == 0


def test_weight_symbols_count_and_sizes(hwx):
    assert [w.size for w in hwx.weights] == WEIGHT_SIZES[Path(hwx.file).name]
    raw = _raw(hwx)
    for w in hwx.weights:
        assert w.section == "__TEXT,__const"
        assert w.file_offset + w.size <= len(raw)
    if hwx.weights:
        const = next(s for seg in hwx.macho.segments for s in seg.sections if s.name == "__const")
        assert sum(w.size for w in hwx.weights) == const.size


def test_relocated_coefficient_registers_point_at_the_weights(hwx):
    # Each relocation patches a KernelDMASrc.CoeffBaseAddr[i] word with the __const
    # base; the word's Addr field (64-byte units) is the weight's offset and
    # CoeffBfrSize[i] its size.
    by_offset = {w.offset: w.size for w in hwx.weights}
    assert len(hwx.relocations) == len(hwx.weights)
    task = hwx.tasks[0]
    fields = decode_task(task).fields
    for rel in hwx.relocations:
        assert not rel.extern and rel.symbolnum == 2  # section 2 is __TEXT,__const
        (name,) = fields_at(task, rel.address)
        i = int(re.fullmatch(r"aneRegs\.KernelDMASrc\.CoeffBaseAddr\[(\d+)\]\.Addr", name).group(1))
        offset = fields[name] << 6
        size = fields[f"aneRegs.KernelDMASrc.CoeffBfrSize[{i}].MemBfrSize"] << 6
        assert by_offset[offset] == size


def test_task_fields_agree_with_the_tensor_stabs(hwx):
    inputs = [t for t in hwx.tensors if t.role == "input"]
    (output,) = [t for t in hwx.tensors if t.role == "output"]
    for task in hwx.tasks:
        f = decode_task(task).fields
        cin = f["aneRegs.Common.Cin.Cin"]
        src = next(t for t in inputs if t.shape[1] == cin)  # sum.hwx has two alike
        assert (f["aneRegs.Common.InDim.Hin"], f["aneRegs.Common.InDim.Win"]) == src.shape[2:]
        assert f["aneRegs.Common.OutDim.Wout"] == output.shape[3]
        # DMA strides are in 64-byte units: depth = batch, plane = channel, row = height.
        src_strides = [
            f[f"aneRegs.TileDMASrc.{k}"] << 6
            for k in ("DepthStride.Stride", "PlaneStride.PlaneStride", "RowStride.Stride")
        ]
        assert src_strides == list(src.strides[:3])
        dst_strides = [
            f[f"aneRegs.TileDMADst.{k}"] << 6
            for k in ("DepthStride.DepthStride", "PlaneStride.PlaneStride", "RowStride.RowStride")
        ]
        assert dst_strides == list(output.strides[:3])


def test_task_chain_header_fields(hwx):
    tasks = hwx.tasks
    for i, task in enumerate(tasks):
        f = decode_task(task).fields
        assert f["aneTD.Header[0].TID"] == i
        assert f["aneTD.Header[0].EON"] == (i == len(tasks) - 1)  # end of network
        nxt = tasks[i + 1] if i + 1 < len(tasks) else None
        # NextSize is the next descriptor's length in words, minus one.
        assert f["aneTD.Header[1].NextSize"] == (nxt.size // 4 - 1 if nxt else 0)
        assert f["aneTD.Header[7].NextPointer"] == (nxt.offset if nxt else 0)


def test_concat_has_two_tasks_one_per_input():
    h = load_hwx(DATA / "concat.hwx")
    assert [t.offset for t in h.tasks] == [0, 0x300]
    cins = [decode_task(t).fields["aneRegs.Common.Cin.Cin"] for t in h.tasks]
    assert sorted(cins) == [16, 16384] and sum(cins) == 16400


def test_decode_encode_round_trips_every_task_exactly(hwx):
    raw = _raw(hwx)
    for task in hwx.tasks:
        start = hwx.text.offset + task.offset
        stored = raw[start : start + task.size + task.padding]
        assert task.to_bytes() == stored
        assert encode_task(decode_task(task)) == stored


def test_decoded_fields_read_the_bits_tinygrad_documents():
    # tinygrad's ANE_Struct (a second source, independent of aneregs.json) puts
    # InputChannels at u32 0x134, InputWidth at u16 0x128 and
    # OutputChannels at u32 0x138 of a descriptor.
    raw = (DATA / "relu.hwx").read_bytes()
    h = read_hwx(raw)
    f = decode_task(h.tasks[0]).fields
    text = raw[h.text.offset :]
    assert f["aneRegs.Common.Cin.Cin"] == struct.unpack_from("<I", text, 0x134)[0] == 1
    assert f["aneRegs.Common.Cout.Cout"] == struct.unpack_from("<I", text, 0x138)[0] == 1
    assert f["aneRegs.Common.InDim.Win"] == struct.unpack_from("<H", text, 0x128)[0] == 77


def test_editing_a_field_changes_only_its_bits():
    h = load_hwx(DATA / "conv.hwx")
    task = h.tasks[0]
    decoded = decode_task(task)
    edited = DecodedTask(decoded.fields | {"aneRegs.Common.Cin.Cin": 0x1ABCD}, decoded.residual)
    before, after = task.to_bytes(), encode_task(edited)
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    assert changed and all(0x134 <= i < 0x137 for i in changed)
    assert struct.unpack_from("<I", after, 0x134)[0] & 0x1FFFF == 0x1ABCD
    redecoded = decode_task(parse_tasks(after)[0]).fields
    assert redecoded == edited.fields


def test_encode_rejects_a_value_wider_than_its_field():
    decoded = decode_task(load_hwx(DATA / "conv.hwx").tasks[0])
    too_wide = DecodedTask(decoded.fields | {"aneRegs.Common.ConvCfg.Kw": 32}, decoded.residual)
    with pytest.raises(ValueError, match="5 bits wide"):
        encode_task(too_wide)


def test_field_map_fields_are_disjoint_and_fit_in_words():
    seen: dict[tuple, int] = {}
    for f in h13_fields():
        assert 0 < f.width and f.bit + f.width <= 32
        key = (f.block, f.word)
        assert seen.get(key, 0) & f.mask == 0, f"{f.name} overlaps another field"
        seen[key] = seen.get(key, 0) | f.mask
    assert len(h13_fields()) == 258


def test_unknown_generation_shows_raw_words():
    raw = bytearray((DATA / "conv.hwx").read_bytes())
    struct.pack_into("<I", raw, 8, 7)  # cpusubtype 7: H16
    h = read_hwx(bytes(raw))
    assert h.generation == "H16" and h.tasks == ()
    expected = struct.unpack_from(f"<{h.text.size // 4}I", raw, h.text.offset)
    assert h.raw_text == expected
    struct.pack_into("<I", raw, 8, 99)
    assert read_hwx(bytes(raw)).generation is None


def test_macho_magic_variant_is_read_too():
    raw = bytearray((DATA / "sum.hwx").read_bytes())
    struct.pack_into("<I", raw, 0, 0xFEEDFACF)
    assert [t.name for t in read_hwx(bytes(raw)).tensors] == ["image2", "image", "probs@output"]


def test_wrong_magic_names_offset_zero():
    raw = bytearray((DATA / "conv.hwx").read_bytes())
    raw[0] ^= 0xFF
    with pytest.raises(InspectError, match="0xbeefface") as err:
        read_hwx(bytes(raw), file="x.hwx")
    assert err.value.offset == 0 and str(err.value).startswith("x.hwx @ 0x0:")


def test_backwards_next_pointer_is_rejected():
    raw = bytearray((DATA / "concat.hwx").read_bytes())
    text = 0x4000
    struct.pack_into("<I", raw, text + 0x300 + 28, 0x10)  # task 1 points back into task 0
    with pytest.raises(InspectError, match="points to a next one") as err:
        read_hwx(bytes(raw))
    assert err.value.offset == text + 0x300 + 28


def test_register_block_running_past_its_task_is_rejected():
    raw = bytearray((DATA / "conv.hwx").read_bytes())
    block_header = 0x4000 + 0x254  # the last block (TileDMADst)
    struct.pack_into("<I", raw, block_header, 0x3F << 26 | 0x17800)  # claims 64 words
    with pytest.raises(InspectError, match="run past the end") as err:
        read_hwx(bytes(raw))
    assert err.value.offset == block_header
