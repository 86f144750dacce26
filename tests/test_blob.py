"""MILBlob v2 weight files: byte layout, round trips, and every way a file can be wrong.

The expected layout is written here from coremltools' MILBlob sources
(mlmodel/src/MILBlob/Blob/StorageFormat.hpp, BlobDataType.hpp), not taken from the
module under test.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anekit.errors import WeightFileError
from anekit.mil.blob import (
    CODE_NAMES,
    DTYPE_TO_CODE,
    layout,
    read_blob,
    read_records,
    read_tensor,
    write_blob_file,
)

SENTINEL = 0xDEADBEEF
# BlobDataType codes (coremltools BlobDataType.hpp) and struct format characters.
CODES = {"float16": 1, "float32": 2, "uint8": 3, "int8": 4, "int16": 6, "uint16": 7}
CODES |= {"int32": 14, "uint32": 15}
STRUCT_CHAR = {"float16": "e", "float32": "f", "uint8": "B", "int8": "b", "int16": "h"}
STRUCT_CHAR |= {"uint16": "H", "int32": "i", "uint32": "I"}
DTYPES = [np.dtype(name) for name in CODES]
FILE = "weights/w.bin"


def sample(dtype: np.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values spread over the dtype's range, so byte-order or width mistakes show."""
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def le_bytes(array: np.ndarray) -> bytes:
    """C-order little-endian bytes of an array, packed element by element with struct."""
    values = array.ravel(order="C").tolist()
    return struct.pack(f"<{len(values)}{STRUCT_CHAR[array.dtype.name]}", *values)


def up64(n: int) -> int:
    return (n + 63) // 64 * 64


def expected_offsets(arrays: list[np.ndarray]) -> list[int]:
    """Record offsets per StorageFormat.hpp: header, then record+data pairs at 64-byte steps."""
    offsets, cursor = [], 64
    for a in arrays:
        offsets.append(cursor)
        cursor = up64(cursor + 64 + a.nbytes)
    return offsets


def check_file_bytes(f: bytes, arrays: list[np.ndarray]) -> None:
    """Check every header and record field of a written file, and its padding, by hand."""
    count, version = struct.unpack_from("<II", f, 0)
    assert (count, version) == (len(arrays), 2)
    assert f[8:64] == bytes(56)
    offsets = expected_offsets(arrays)
    for i, (a, rec) in enumerate(zip(arrays, offsets, strict=True)):
        sentinel, code, size, data_off = struct.unpack_from("<IIQQ", f, rec)
        assert sentinel == SENTINEL
        assert code == CODES[a.dtype.newbyteorder("=").name]
        assert size == a.size * a.dtype.itemsize
        assert data_off == rec + 64 and data_off % 64 == 0 and rec % 64 == 0
        assert f[rec + 24 : rec + 64] == bytes(40)  # padding_size_in_bits and reserved
        assert f[data_off : data_off + size] == le_bytes(a.astype(a.dtype.newbyteorder("=")))
        gap_end = offsets[i + 1] if i + 1 < len(arrays) else len(f)
        assert f[data_off + size : gap_end] == bytes(gap_end - data_off - size)
    last = arrays[-1] if arrays else None
    assert len(f) == (offsets[-1] + 64 + last.nbytes if last is not None else 64)


def raises(data: bytes, offset: int | None = None, **kw) -> WeightFileError:
    """The WeightFileError of reading `data` (whole file, or the blob at `offset`)."""
    with pytest.raises(WeightFileError) as info:
        if offset is None:
            read_records(data, file=FILE)
        elif kw:
            read_tensor(data, offset, kw["dtype"], kw["shape"], file=FILE)
        else:
            read_blob(data, offset, file=FILE)
    err = info.value
    assert err.file == FILE and err.offset is not None
    assert "expected" in err.message and FILE in str(err)
    return err


def patch(data: bytes, at: int, fmt: str, *values: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, *values)
    return bytes(out)


# ---- the code table ----------------------------------------------------------------------


def test_code_table_matches_coremltools() -> None:
    assert {d.name: c for d, c in DTYPE_TO_CODE.items()} == CODES
    assert CODE_NAMES[5] == "bf16" and CODE_NAMES[8] == "int4" and CODE_NAMES[13] == "uint6"
    assert sorted(CODE_NAMES) == list(range(1, 18))


# ---- writing and round trips -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1,), (5,), (2, 3, 4), (16,)])
def test_one_blob_fields_and_round_trip(dtype: np.dtype, shape: tuple[int, ...]) -> None:
    a = sample(dtype, shape)
    f = write_blob_file([a])
    check_file_bytes(f, [a])
    assert layout([a]) == [64]
    assert read_records(f) == read_records(f, file=FILE)
    (rec,) = read_records(f)
    assert (rec.offset, rec.dtype, rec.data_offset, rec.size) == (64, dtype, 128, a.nbytes)
    got = read_tensor(f, 64, dtype, shape)
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_array_equal(got, a)
    flat = read_blob(f, 64)
    assert flat.shape == (a.size,)
    np.testing.assert_array_equal(flat, a.ravel())


def test_many_blobs_of_every_dtype() -> None:
    # Sizes chosen so data ends exactly on, just before and just after a 64-byte boundary.
    shapes = [(64,), (3,), (8, 8), (1,), (65,), (2, 5, 7), (31,), (4, 16)]
    arrays = [
        sample(dtype, shape, seed=i)
        for i, (dtype, shape) in enumerate(zip(DTYPES * 2, shapes * 2, strict=True))
    ]
    f = write_blob_file(arrays)
    check_file_bytes(f, arrays)
    offsets = expected_offsets(arrays)
    assert layout(arrays) == offsets
    assert [r.offset for r in read_records(f)] == offsets
    for a, off in zip(arrays, offsets, strict=True):
        got = read_tensor(f, off, a.dtype, a.shape, file=FILE)
        np.testing.assert_array_equal(got, a)


def test_empty_list_is_a_header_only_file() -> None:
    f = write_blob_file([])
    assert f == struct.pack("<II", 0, 2) + bytes(56)
    assert layout([]) == [] and read_records(f) == []


def test_non_contiguous_and_big_endian_input_stored_as_c_order_little_endian() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    arrays = [
        np.asfortranarray(base),
        base[:, ::2],
        base.T,
        base.astype(">f4"),
        np.arange(10, dtype=">u2"),
    ]
    f = write_blob_file(arrays)
    check_file_bytes(f, arrays)
    for a, off in zip(arrays, layout(arrays), strict=True):
        got = read_tensor(f, off, a.dtype.newbyteorder("="), a.shape)
        assert got.dtype.isnative
        np.testing.assert_array_equal(got, a)


def test_read_blob_returns_an_independent_writable_copy() -> None:
    a = np.arange(8, dtype=np.int16)
    buf = bytearray(write_blob_file([a]))
    got = read_blob(buf, 64)
    buf[128:144] = bytes(16)
    np.testing.assert_array_equal(got, a)
    got[0] = 7  # writable
    assert read_blob(buf, 64)[0] == 0


def test_reads_a_file_built_by_hand_per_coremltools_example() -> None:
    # StorageFormat.hpp's example: records at 64 and 256, data at 128 and 320.
    a = np.linspace(-2, 2, 30, dtype=np.float32)
    b = np.array([1, -2, 3], dtype=np.int8)
    f = bytearray(struct.pack("<II", 2, 2) + bytes(56))
    f += struct.pack("<IIQQ", SENTINEL, 2, a.nbytes, 128) + bytes(40) + le_bytes(a)
    f += bytes(256 - len(f))
    f += struct.pack("<IIQQ", SENTINEL, 4, b.nbytes, 320) + bytes(40) + le_bytes(b)
    assert [r.offset for r in read_records(bytes(f))] == [64, 256]
    np.testing.assert_array_equal(read_blob(bytes(f), 64), a)
    np.testing.assert_array_equal(read_tensor(bytes(f), 256, np.int8, (3, 1)), b[:, None])


def test_trailing_alignment_padding_is_accepted_other_trailing_bytes_are_not() -> None:
    f = write_blob_file([np.ones(3, np.float16)])  # data ends at 134
    assert len(read_records(f + bytes(up64(len(f)) - len(f)))) == 1
    err = raises(f + bytes(up64(len(f)) - len(f) + 1))
    assert err.offset == 192 and "1 more bytes" in err.message


@pytest.mark.parametrize(
    "bad, error",
    [
        (np.zeros(3, np.float64), TypeError),
        (np.zeros(3, np.int64), TypeError),
        (np.zeros(3, np.bool_), TypeError),
        ([1.0, 2.0], TypeError),
        (np.zeros((0,), np.float16), ValueError),
        (np.zeros((3, 0), np.int8), ValueError),
    ],
)
def test_writer_rejects_what_milblob_cannot_hold(bad: object, error: type) -> None:
    # coremltools' reader refuses zero-size blobs (Span::Slice requires size > 0).
    arrays = [np.ones(2, np.float16), bad]
    with pytest.raises(error, match="array 1"):
        write_blob_file(arrays)
    with pytest.raises(error, match="array 1"):
        layout(arrays)


# ---- malformed files ---------------------------------------------------------------------


def two_blobs() -> tuple[bytes, list[np.ndarray]]:
    arrays = [np.arange(1, 6, dtype=np.float32), np.arange(1, 4, dtype=np.int16)]
    return write_blob_file(arrays), arrays


def test_every_truncation_is_reported() -> None:
    f, arrays = two_blobs()  # records at 64 and 192, data [128, 148) and [256, 262)
    assert len(f) == 262
    for n in range(len(f)):
        cut = f[:n]
        err = raises(cut)
        assert "truncated" in err.message
        assert err.offset == (0 if n < 64 else 64 if n < 148 else 192)
        if n < 64:
            assert "64-byte header" in err.message and f"found {n} bytes" in err.message
        elif n == 64 or 148 <= n <= 192:
            blobs = 0 if n == 64 else 1
            assert "expected 2 blobs" in err.message and f"found {blobs} " in err.message
        elif n < 128:
            assert f"found {n - 64} bytes" in err.message
        assert raises(cut, 192).offset == (0 if n < 64 else 192)
        if n < 148:
            assert raises(cut, 64).offset == (0 if n < 64 else 64)
        else:
            np.testing.assert_array_equal(read_blob(cut, 64), arrays[0])


def test_count_mismatch() -> None:
    f, _ = two_blobs()
    err = raises(patch(f, 0, "<I", 1))
    assert err.offset == 192 and "expected 1 blobs" in err.message
    assert "another blob record" in err.message
    err = raises(patch(f, 0, "<I", 3))
    assert err.offset == 320 and "expected 3 blobs" in err.message and "found 2" in err.message
    zero = patch(f, 0, "<I", 0)
    assert "header count 0" in raises(zero, 64).message


@pytest.mark.parametrize("version", [0, 1, 3, 0xFFFFFFFF])
def test_wrong_version(version: int) -> None:
    f, _ = two_blobs()
    for off in (None, 64):
        err = raises(patch(f, 4, "<I", version), off)
        assert err.offset == 0
        assert "version 2" in err.message and f"version {version}" in err.message


@pytest.mark.parametrize("sentinel", [0, 0xDEADBEEE, 0xEFBEADDE])
def test_wrong_sentinel(sentinel: int) -> None:
    f, _ = two_blobs()
    for bad_at, off in ((64, None), (64, 64), (192, None), (192, 192)):
        err = raises(patch(f, bad_at, "<I", sentinel), off)
        assert err.offset == bad_at
        assert "0xDEADBEEF" in err.message and f"0x{sentinel:08X}" in err.message


@pytest.mark.parametrize("code", [0, 18, 1000])
def test_unknown_dtype_code(code: int) -> None:
    f, _ = two_blobs()
    for off in (None, 64):
        err = raises(patch(f, 68, "<I", code), off)
        assert err.offset == 64 and f"unknown dtype code {code}" in err.message


@pytest.mark.parametrize("code", [5, 16, 17])  # bf16, fp8: sub-byte codes are read
def test_recognised_but_unsupported_dtype_code(code: int) -> None:
    f, _ = two_blobs()
    for off in (None, 64):
        err = raises(patch(f, 68, "<I", code), off)
        assert err.offset == 64
        assert f"unsupported dtype code {code} ({CODE_NAMES[code]})" in err.message
    assert "(bf16)" in raises(patch(f, 68, "<I", 5), 64).message


@pytest.mark.parametrize("size", [0, 1, 18, 22])
def test_size_not_a_positive_multiple_of_itemsize(size: int) -> None:
    f, _ = two_blobs()  # blob 0 is fp32: 20 bytes
    for off in (None, 64):
        err = raises(patch(f, 72, "<Q", size), off)
        assert (
            err.offset == 64 and "multiple of 4" in err.message and f"found {size}" in err.message
        )


@pytest.mark.parametrize(
    "data_offset, words",
    [
        (384, "truncated"),  # past the end of the 262-byte file
        (2**64 - 64, "truncated"),
        (256, "truncated"),  # 20 bytes from 256 run past the end
        (130, "multiple of 64"),
        (64, ">= 128"),  # would overlap its own record
        (0, ">= 128"),
    ],
)
def test_bad_data_offset(data_offset: int, words: str) -> None:
    f, _ = two_blobs()
    for off in (None, 64):
        err = raises(patch(f, 80, "<Q", data_offset), off)
        assert err.offset == 64 and words in err.message and str(data_offset) in err.message


@pytest.mark.parametrize("offset", [0, 32, 100, 128, 256, 320, 10**9, -64])
def test_offset_not_pointing_at_a_record(offset: int) -> None:
    f, _ = two_blobs()
    err = raises(f, offset)
    assert err.offset == offset
    if offset == 128:  # data, whose first word is not the sentinel
        assert "sentinel 0xDEADBEEF" in err.message
    elif offset < 64 or offset % 64:
        assert "multiple of 64" in err.message
    else:
        assert "truncated" in err.message


def test_declared_type_mismatch() -> None:
    f, _ = two_blobs()
    err = raises(f, 64, dtype=np.float16, shape=(5,))
    assert "declared dtype fp16" in err.message and "found fp32" in err.message
    err = raises(f, 64, dtype=np.int32, shape=(5,))
    assert "int32" in err.message and "fp32" in err.message
    err = raises(f, 64, dtype=np.float32, shape=(2, 3))
    assert err.offset == 64 and "(2, 3)" in err.message and "6 elements" in err.message
    assert "found 5" in err.message
    err = raises(f, 192, dtype=np.int16, shape=(1, 1))
    assert err.offset == 192 and "found 3" in err.message
    np.testing.assert_array_equal(read_tensor(f, 64, np.float32, (5, 1)).ravel(), [1, 2, 3, 4, 5])


# ---- fuzzing: bad input raises WeightFileError or reads, never anything else -------------


def read_everything(data: bytes, arrays: list[np.ndarray]) -> None:
    try:
        records = read_records(data, file=FILE)
    except WeightFileError as err:
        assert err.file == FILE and err.offset is not None
    else:
        for r in records:
            assert r.offset % 64 == 0 and r.data_offset % 64 == 0
            assert r.data_offset + r.size <= len(data) and r.size % r.dtype.itemsize == 0
    for off in [*range(0, min(len(data), 1024) + 64, 64), 1, len(data)]:
        try:
            read_blob(data, off, file=FILE)
        except WeightFileError as err:
            assert err.offset == off or err.offset == 0
    for a, off in zip(arrays, expected_offsets(arrays), strict=True):
        try:
            read_tensor(data, off, a.dtype, a.shape, file=FILE)
        except WeightFileError:
            pass


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    read_everything(data, [])


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_after_a_valid_header(tail: bytes) -> None:
    read_everything(struct.pack("<II", 2, 2) + bytes(56) + tail, [])


FIELDS = [(0, "<I"), (4, "<I"), (64, "<I"), (68, "<I"), (72, "<Q"), (80, "<Q")]
FIELDS += [(192, "<I"), (196, "<I"), (200, "<Q"), (208, "<Q")]


@FUZZ
@given(
    edits=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6),
    fields=st.lists(
        st.tuples(st.sampled_from(FIELDS), st.integers(0, 2**64 - 1), st.sampled_from([0, 1])),
        max_size=3,
    ),
    cut=st.integers(0, 400),
    extra=st.binary(max_size=80),
)
def test_mutated_valid_files(edits, fields, cut, extra) -> None:
    f, arrays = two_blobs()
    out = bytearray(f)
    for (at, fmt), value, small in fields:
        bits = 32 if fmt == "<I" else 64
        value = value % 300 if small else value % 2**bits  # small values hit real codes/offsets
        struct.pack_into(fmt, out, at, value)
    for at, byte in edits:
        if at < len(out):
            out[at] = byte
    read_everything(bytes(out[:cut]) + extra, arrays)
