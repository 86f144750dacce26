"""The GGUF header reader on hostile bytes: every bad count, length and offset is a ModelError."""

from __future__ import annotations

import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from anekit.errors import ModelError  # noqa: E402
from anekit.llm.gguf_header import GGML_TYPES, parse_header, read_header  # noqa: E402


def s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, kind: int, payload: bytes) -> bytes:
    return s(key) + struct.pack("<I", kind) + payload


def tensor(name: str, dims: list[int], kind: int = 0, offset: int = 0) -> bytes:
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + (
        struct.pack("<IQ", kind, offset))  # fmt: skip


def header(kvs: list[bytes], tensors: list[bytes], *, n_kv=None, n_t=None, version=3) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_t is None else n_t,
                                 len(kvs) if n_kv is None else n_kv)  # fmt: skip
    return head + b"".join(kvs) + b"".join(tensors)


def with_data(body: bytes, data: bytes, alignment: int = 32) -> bytes:
    return body + b"\0" * (-len(body) % alignment) + data


def valid() -> bytes:
    kvs = [kv("general.architecture", 8, s("llama")), kv("general.alignment", 4, struct.pack("<I", 32)),
           kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + s("a") + s("b")),
           kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<2f", 0, -1))]  # fmt: skip
    tensors = [tensor("a", [4, 2], 0, 0), tensor("b", [32, 1], 8, 32)]
    return with_data(header(kvs, tensors), b"\1" * 32 + b"\2" * 34)


def test_valid_header_agrees_with_gguf_reader(tmp_path) -> None:
    data = valid()
    h = parse_header(data)
    assert h.metadata["tokenizer.ggml.tokens"] == ["a", "b"]
    assert h.metadata["tokenizer.ggml.scores"] == [0.0, -1.0]
    assert h.tensors["a"].shape == (2, 4) and h.tensors["b"].nbytes == 34
    path = tmp_path / "v.gguf"
    path.write_bytes(data)
    reader = gguf.GGUFReader(str(path))  # the package's own (unbounded) reader, as a reference
    assert {t.name: int(t.data_offset) for t in reader.tensors} == {
        n: t.offset for n, t in read_header(path).tensors.items()
    }


def test_type_sizes_agree_with_gguf() -> None:
    for kind, (name, block, nbytes) in GGML_TYPES.items():
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)] == (block, nbytes), name


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGML" + b"\0" * 20, "not a GGUF file"),
        (header([], [], version=1), "version 1"),
        (header([], [], n_kv=2**62), "key/value count"),
        (header([], [], n_t=2**40), "tensor count"),
        (header([b"\xff" * 8 + b"x" * 8], [], n_kv=1), "key 0 is 18446744073709551615 bytes long"),
        (header([s("key") + b"\x00\x00\x00"], [], n_kv=1), "type of 'key'"),
        (header([kv("k", 8, struct.pack("<Q", 2**20 + 1))], []), "more than 1048576"),
        (header([kv("k", 8, struct.pack("<Q", 100) + b"ab")], []), "needs 100 bytes, 2 remain"),
        (header([kv("k", 9, struct.pack("<IQ", 4, 2**50))], []), "length of array 'k'"),
        (header([kv("k", 9, struct.pack("<IQ", 9, 1))], []), "array element type 9"),
        (header([kv("k", 13, b"")], []), "value type 13"),
        (header([kv("k", 8, struct.pack("<Q", 2) + b"\xff\xfe")], []), "UTF-8"),
        (header([kv("k", 4, b"\0" * 4), kv("k", 4, b"\0" * 4)], []), "appears twice"),
        (header([kv("general.alignment", 4, struct.pack("<I", 24))], []), "not a power of two"),
        (header([], [tensor("t", [4], 0, 0)], n_t=1000), "cannot fit"),
        (with_data(header([], [tensor("t", [])]), b""), "0 dimensions"),
        (with_data(header([], [tensor("t", [1] * 5)]), b""), "5 dimensions"),
        (with_data(header([], [tensor("t", [0, 4])]), b""), "must all be >= 1"),
        (with_data(header([], [tensor("t", [2**32, 2**32])]), b""), "more than"),
        (with_data(header([], [tensor("t", [4], 99)]), b"\0" * 32), "ggml type 99"),
        (with_data(header([], [tensor("t", [33], 8)]), b"\0" * 64), "blocks of 32"),
        (with_data(header([], [tensor("t", [4], 0, 8)]), b"\0" * 64), "not a multiple of"),
        (with_data(header([], [tensor("t", [64], 0, 0)]), b"\0" * 16), "pass the end"),
        (
            with_data(header([], [tensor("a", [16], 0, 0), tensor("b", [16], 0, 32)]), b"\0" * 96),
            "overlaps",
        ),
        (
            with_data(header([], [tensor("a", [4], 0, 0), tensor("a", [4], 0, 32)]), b"\0" * 64),
            "appears twice",
        ),
    ],
)
def test_hostile_headers_refused(data: bytes, message: str) -> None:
    with pytest.raises(ModelError, match=message.replace("(", r"\(")):
        parse_header(data)


def test_every_truncation_refused() -> None:
    data = valid()
    for end in range(len(data) - 66):  # up to the end of the header: the data is then missing
        with pytest.raises(ModelError):
            parse_header(data[:end])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6))
def test_random_corruption_is_a_model_error_or_a_checked_header(edits) -> None:
    data = bytearray(valid())
    for at, byte in edits:
        data[at % len(data)] = byte
    try:
        h = parse_header(bytes(data))
    except ModelError:
        return
    for t in h.tensors.values():  # whatever parsed is in bounds
        assert t.offset % h.alignment == 0 and t.offset + t.nbytes <= len(data)


def test_files_refused_before_reading(tmp_path) -> None:
    with pytest.raises(ModelError, match="a directory"):
        read_header(tmp_path)
    empty = tmp_path / "e.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="empty file"):
        read_header(empty)
    assert np.dtype("<?").itemsize == 1
