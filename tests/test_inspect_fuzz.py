"""Malformed input: truncated and mutated hwx files and FlatBuffers raise only InspectError."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anekit.errors import InspectError
from anekit.inspect.flatbuf import read_flatbuffer, render, to_plain
from anekit.inspect.hwx import read_hwx
from anekit.inspect.report import describe
from tests.fuzz_harness import flatbuffer_seed

DATA = Path(__file__).parent / "data" / "hwx"
CONV = (DATA / "conv.hwx").read_bytes()
CONCAT = (DATA / "concat.hwx").read_bytes()


def _parse_or_inspect_error(data: bytes):
    """Parse; an InspectError must name an offset. Anything else fails the test."""
    try:
        return read_hwx(data, file="fuzz.hwx")
    except InspectError as err:
        assert err.offset is not None, str(err)
        assert "fuzz.hwx @ 0x" in str(err)
        return None


def _needed(data: bytes) -> int:
    """The file length the reader needs: the end of the last section stored in the file."""
    full = read_hwx(data)
    return max(s.offset + s.size for seg in full.macho.segments for s in seg.sections if s.offset)


@pytest.mark.parametrize("data", [CONV, CONCAT], ids=["conv", "concat"])
def test_every_prefix_fails_cleanly_until_the_last_section_is_whole(data):
    needed = _needed(data)
    full = read_hwx(data)
    lengths = [*range(0, 0x1200), *range(0x1200, needed + 64, 29), needed - 1, needed]
    for n in lengths:
        parsed = _parse_or_inspect_error(data[:n])
        assert (parsed is not None) == (n >= needed), n
        if parsed is not None:
            assert parsed.tensors == full.tensors and parsed.tasks == full.tasks


# Most structure sits in the first 0x1200 bytes (header, load commands, symbols,
# strings, relocations) and in __text at 0x4000; mutate there mostly.
_positions = st.one_of(
    st.integers(0, 0x11FF), st.integers(0x4000, 0x4273), st.integers(0, len(CONV) - 1)
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_positions, st.integers(0, 255)), min_size=1, max_size=12))
def test_byte_mutations_raise_only_inspect_error(edits):
    data = bytearray(CONV)
    for pos, value in edits:
        data[pos] = value
    _parse_or_inspect_error(bytes(data))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=256))
def test_arbitrary_bytes_after_the_magic(tail):
    _parse_or_inspect_error(b"\xce\xfa\xef\xbe" + tail)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_describe_any_bytes_raises_only_anekit_errors(data):
    try:
        describe(data, "any.bin")
    except InspectError as err:
        assert err.offset is not None


def _sample_flatbuffer() -> bytes:
    pytest.importorskip("flatbuffers")
    return flatbuffer_seed()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_flatbuffer_mutations_raise_only_inspect_error(data):
    buf = bytearray(_sample_flatbuffer())
    for pos, value in data.draw(
        st.lists(st.tuples(st.integers(0, len(buf) - 1), st.integers(0, 255)), max_size=8)
    ):
        buf[pos] = value
    cut = data.draw(st.integers(0, len(buf)))
    try:
        fb = read_flatbuffer(bytes(buf[:cut]))
    except InspectError as err:
        assert err.offset is not None
        return
    to_plain(fb)
    render(fb)
