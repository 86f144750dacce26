"""Sub-byte tensors (uint1..uint6, int4): packed in weight files, parsed, printed, decoded.

The expected bytes are written here from coremltools' MILBlob sources
(mlmodel/src/MILBlob/SubByteTypes.cpp: element i at bit i * n, least significant bit
first; StorageWriter.cpp: padding_size_in_bits = 8 - (n * bits) % 8), not taken from
the module under test.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from anekit import mil
from anekit.errors import MilTypeError, WeightFileError
from anekit.mil.blob import read_blob, read_records, read_tensor, write_blob_file
from anekit.mil.types import DType, TensorType


def record(f: bytes, at: int = 64) -> tuple[int, int, int, int, int]:
    """sentinel, dtype code, size, data offset, padding bits of the record at ``at``."""
    return struct.unpack_from("<IIQQQ", f, at)


@pytest.mark.parametrize(
    ("values", "bits", "code", "data", "padding"),
    [
        ([1, 2, 3], 4, 11, bytes([0x21, 0x03]), 4),  # uint4: two per byte, low nibble first
        ([63, 1], 6, 13, bytes([0x7F, 0x00]), 4),  # uint6: the second straddles the bytes
        ([1, 0, 1, 1, 0, 0, 0, 0, 1], 1, 9, bytes([0x0D, 0x01]), 7),  # uint1
        ([3, 0, 2, 1], 2, 10, bytes([0x63]), 0),  # uint2: exactly one byte, no padding
        ([7, 5, 1], 3, 12, bytes([0x6F, 0x00]), 7),  # uint3: 111 101 001 -> 0b01101111
        ([-1, 7, -8], 4, 8, bytes([0x7F, 0x08]), 4),  # int4 in two's complement
    ],
)
def test_sub_byte_layout_matches_coremltools(values, bits, code, data, padding) -> None:
    dtype = np.int8 if code == 8 else np.uint8
    array = np.array(values, dtype=dtype)
    f = write_blob_file([array], bits=[bits])
    sentinel, found_code, size, data_offset, found_padding = record(f)
    assert (sentinel, found_code, size, found_padding) == (0xDEADBEEF, code, len(data), padding)
    assert f[data_offset : data_offset + size] == data
    assert len(f) == data_offset + size  # the file ends after the data, as coremltools' does
    back = read_blob(f, 64)
    assert back.dtype == dtype and back.tolist() == values
    rec = read_records(f)[0]
    assert (rec.bits, rec.padding_bits, rec.count) == (bits, padding, len(values))


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 6])
def test_sub_byte_round_trip_of_random_tensors(bits: int) -> None:
    rng = np.random.default_rng(bits)
    arrays = [rng.integers(0, 1 << bits, size=n).astype(np.uint8) for n in (1, 7, 64, 1001)]
    f = write_blob_file([*arrays, np.arange(3, dtype=np.float16)], bits=[bits] * 4 + [None])
    for rec, a in zip(read_records(f), arrays):
        assert np.array_equal(read_blob(f, rec.offset), a)
        assert rec.size == -(-a.size * bits // 8)


def test_values_outside_the_sub_byte_range_are_refused() -> None:
    with pytest.raises(ValueError, match=r"array 0: value 16 is outside the uint4 range \[0, 15\]"):
        write_blob_file([np.array([3, 16], np.uint8)], bits=[4])
    with pytest.raises(ValueError, match=r"value -9 is outside the int4 range \[-8, 7\]"):
        write_blob_file([np.array([-9], np.int8)], bits=[4])
    with pytest.raises(TypeError, match="5-bit elements held as uint8 cannot be stored"):
        write_blob_file([np.array([1], np.uint8)], bits=[5])


def test_a_sub_byte_record_must_hold_whole_elements() -> None:
    f = bytearray(write_blob_file([np.array([1, 2, 3], np.uint8)], bits=[4]))
    struct.pack_into("<Q", f, 64 + 24, 9)  # padding bits beyond the last byte
    with pytest.raises(WeightFileError, match="uint4 blob of 2 bytes with 9 padding bits"):
        read_records(bytes(f))
    struct.pack_into("<QQQ", f, 64 + 8, 2, 128, 3)  # 13 bits do not make 6-bit elements
    struct.pack_into("<I", f, 64 + 4, 13)
    with pytest.raises(WeightFileError, match="whole number of 6-bit elements"):
        read_records(bytes(f))


def test_declared_and_stored_sub_byte_types_must_agree() -> None:
    f = write_blob_file([np.array([1, 2, 3, 4], np.uint8)], bits=[4])
    assert read_tensor(f, 64, np.dtype(np.uint8), (2, 2), bits=4).tolist() == [[1, 2], [3, 4]]
    with pytest.raises(WeightFileError, match="expected the declared dtype uint8, found uint4"):
        read_tensor(f, 64, np.dtype(np.uint8), (4,))
    with pytest.raises(WeightFileError, match="expected the declared dtype uint6, found uint4"):
        read_tensor(f, 64, np.dtype(np.uint8), (4,), bits=6)


def test_types_size_sub_byte_tensors_in_bits() -> None:
    assert TensorType(DType.uint4, (3, 5)).nbytes == 8  # 60 bits
    assert TensorType(DType.uint6, (4,)).nbytes == 3
    assert TensorType(DType.fp16, (3,)).nbytes == 6
    assert DType.int4.int_range == (-8, 7) and DType.uint3.int_range == (0, 7)
    assert DType.uint4.packed_bits == 4 and DType.uint8.packed_bits is None


def lut_program(indices: np.ndarray, table: np.ndarray, dtype: str) -> mil.Program:
    """A program whose weight is ``constexpr_lut_to_dense`` of sub-byte indices, read by a conv."""
    b = mil.Builder()
    x = b.input("x", (1, indices.shape[1], 1, 8), "fp16")
    idx = b.weight("idx", indices, dtype=dtype)
    w = b.constexpr_lut_to_dense(indices=idx, lut=b.weight("lut", table), name="w")
    b.output(b.conv(x=x, weight=w), "y")
    return b.build()


def test_lut_with_uint4_indices_round_trips_and_decodes() -> None:
    rng = np.random.default_rng(0)
    indices = rng.integers(0, 16, size=(8, 4, 1, 1)).astype(np.uint8)
    table = rng.standard_normal((2, 1, 1, 1, 16, 1)).astype(np.float16)  # 2 groups of 4 rows
    program = lut_program(indices, table, "uint4")
    text = program.to_text()
    assert "tensor<uint4, [8, 4, 1, 1]> idx = const()" in text
    files = program.weight_files()
    assert record(files["@model_path/weights/idx.bin"])[1:3] == (11, 16)  # uint4, 32 elements
    back = mil.parse(text, weights=files)
    assert back == program
    x = rng.standard_normal((1, 4, 1, 8)).astype(np.float16)
    import anekit

    y = anekit.compile(back, backend="reference")(x=x)["y"]
    dense = np.stack([table[i // 4, 0, 0, 0, indices[i, :, 0, 0], 0] for i in range(8)])
    expected = (dense.astype(np.float32) @ x[0, :, 0, :].astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(y[0, :, 0, :], expected)


def test_builder_weights_of_sub_byte_dtypes_are_range_checked() -> None:
    b = mil.Builder()
    assert b.weight("ok", np.array([0, 15]), dtype="uint4").type == TensorType(DType.uint4, (2,))
    with pytest.raises(
        ValueError,
        match=r"weight 'bad': values do not fit in int4 .*out of range for int4 \(-8\.\.7\)",
    ):
        b.weight("bad", np.array([8]), dtype="int4")


def test_lut_table_size_must_match_the_index_width() -> None:
    indices = np.zeros((8, 4, 1, 1), np.uint8)
    with pytest.raises(MilTypeError, match="uint6 indices address 64 entries, found 16"):
        lut_program(indices, np.zeros((2, 1, 1, 1, 16, 1), np.float16), "uint6")
