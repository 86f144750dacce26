"""ANE task descriptors: the register-write streams in an hwx ``__text`` section.

A task descriptor is a fixed header of ten u32 words followed by register
blocks. Each block is one header word, ``(count - 1) << 26 | address`` (the
address in the low 24 bits, per eiln/anecc's notes on the format), then
``count`` data words written to consecutive registers. Descriptors are chained:
header word 7 (``NextPointer``) holds the offset of the next one in ``__text``,
zero on the last.

For H13 (M1) the fields inside those words come from tinygrad's register map
(``data/aneregs.json``, MIT, see ``data/LICENSE.tinygrad``). Its positions are
byte offsets into a descriptor laid out the way the H13 compiler lays them out
(:data:`H13_LAYOUT`); we translate each to (block address, word, bit), so a
descriptor with blocks in another order still decodes.

Decoding splits every word into named fields plus the residual bits no field
covers; :func:`encode_task` puts them back together, byte for byte.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

from anekit.inspect._reader import ByteReader

__all__ = [
    "HEADER_WORDS",
    "H13_LAYOUT",
    "BLOCK_NAMES",
    "Field",
    "RegisterBlock",
    "TaskDescriptor",
    "DecodedTask",
    "h13_fields",
    "parse_tasks",
    "decode_task",
    "encode_task",
    "fields_at",
]

HEADER_WORDS = 10
HEADER = "header"  # block key of the ten header words
NEXT_POINTER_WORD = 7  # aneTD.Header[7].NextPointer in aneregs.json (byte 28, 32 bits)

# (register address, data words) of each block, in the order the H13 compiler
# emits them; observed in every descriptor of tests/data/hwx and in eiln/anecc's
# table of the seven streams.
H13_LAYOUT: tuple[tuple[int, int], ...] = (
    (0x1F800, 62),
    (0x00000, 16),
    (0x13800, 28),
    (0x04800, 18),
    (0x08800, 4),
    (0x0C800, 5),
    (0x17800, 7),
)

# Block names: tinygrad's aneregs.json, except 0x8800, which it leaves unnamed
# and eiln/anecc's notes call "Planar".
BLOCK_NAMES: dict[int, str] = {
    0x1F800: "KernelDMASrc",
    0x00000: "Common",
    0x13800: "TileDMASrc",
    0x04800: "L2",
    0x08800: "Planar",
    0x0C800: "NE",
    0x17800: "TileDMADst",
}


@dataclass(frozen=True)
class Field:
    """One named bit field: ``width`` bits at ``bit`` of data word ``word`` of ``block``."""

    name: str
    block: int | str  # register address of the block, or "header"
    word: int
    bit: int
    width: int

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.bit


@dataclass(frozen=True)
class RegisterBlock:
    """``words`` written to consecutive registers from ``address`` (raw header word kept)."""

    header_word: int
    words: tuple[int, ...]

    @property
    def address(self) -> int:
        return self.header_word & 0xFFFFFF

    @property
    def name(self) -> str:
        return BLOCK_NAMES.get(self.address, f"block_{self.address:05x}")


@dataclass(frozen=True)
class TaskDescriptor:
    """One task descriptor as stored: header words, register blocks, zero padding after."""

    offset: int  # in __text
    header: tuple[int, ...]
    blocks: tuple[RegisterBlock, ...]
    padding: int = 0

    @property
    def size(self) -> int:
        """Bytes up to the end of the last block (without padding)."""
        return 4 * (len(self.header) + sum(1 + len(b.words) for b in self.blocks))

    def to_bytes(self) -> bytes:
        """Serialise exactly as stored, padding included."""
        words = list(self.header)
        for block in self.blocks:
            words.append(block.header_word)
            words.extend(block.words)
        return b"".join(w.to_bytes(4, "little") for w in words) + bytes(self.padding)

    def locate(self, offset: int) -> tuple[int | str, int] | None:
        """(block key, data word) of the byte at ``offset`` from this descriptor's start."""
        if offset < 4 * len(self.header):
            return HEADER, offset // 4
        pos = 4 * len(self.header)
        seen: set[int] = set()
        for block in self.blocks:
            start = pos + 4
            if start <= offset < start + 4 * len(block.words):
                # Fields decode from the first block of an address; a repeat has none.
                return None if block.address in seen else (block.address, (offset - start) // 4)
            seen.add(block.address)
            pos = start + 4 * len(block.words)
        return None

    def word_groups(self) -> dict[int | str, tuple[int, ...]]:
        """Words by block key ("header" or register address); a repeated block keeps its first."""
        groups: dict[int | str, tuple[int, ...]] = {HEADER: self.header}
        for block in self.blocks:
            groups.setdefault(block.address, block.words)
        return groups


@dataclass(frozen=True)
class DecodedTask:
    """A descriptor split into named field values and the bits no field covers."""

    fields: dict[str, int]
    residual: TaskDescriptor  # the descriptor with every field's bits cleared


def _layout_position(byte: int) -> tuple[int | str, int]:
    """Map a byte offset in an H13-layout descriptor to (block key, data word)."""
    if byte < 4 * HEADER_WORDS:
        return HEADER, byte // 4
    pos = 4 * HEADER_WORDS
    for address, count in H13_LAYOUT:
        start = pos + 4  # skip the block's header word
        if start <= byte < start + 4 * count:
            return address, (byte - start) // 4
        pos = start + 4 * count
    raise ValueError(f"aneregs.json: byte offset {byte} is not inside a register block")


@cache
def h13_fields() -> tuple[Field, ...]:
    """The H13 register field map, translated from aneregs.json's byte offsets."""
    text = resources.files("anekit.inspect").joinpath("data/aneregs.json").read_text("utf-8")
    fields = []
    for name, (byte, bit, width) in json.loads(text):
        block, word = _layout_position(byte)
        fields.append(Field(name, block, word, bit + 8 * (byte % 4), width))
    return tuple(fields)


def _parse_one(reader: ByteReader, start: int, offset: int, end: int) -> TaskDescriptor:
    """Parse the descriptor at __text+``offset``; its blocks end where only zeros remain."""
    pos = start + offset + 4 * HEADER_WORDS
    header = reader.words(start + offset, HEADER_WORDS, "task descriptor header")
    # Where the trailing zeros begin, found once: asking "only zeros left?" at every block
    # rescans the rest of the descriptor each time, quadratic in its size.
    content_end = pos + len(reader.data[pos:end].rstrip(b"\0"))
    blocks = []
    while pos < content_end:
        word = reader.u32(pos, "register block header")
        count = (word >> 26) + 1
        if pos + 4 + 4 * count > end:
            raise reader.error(
                f"register block declares {count} words, which run past the end of its "
                f"task descriptor at 0x{end:x}",
                pos,
            )
        blocks.append(RegisterBlock(word, reader.words(pos + 4, count, "register block")))
        pos += 4 + 4 * count
    return TaskDescriptor(offset, header, tuple(blocks), padding=end - pos)


def parse_tasks(
    data: bytes, *, start: int = 0, size: int | None = None, file: str | None = None
) -> list[TaskDescriptor]:
    """Split the H13-style ``__text`` at ``data[start:start + size]`` into its descriptor chain."""
    reader = ByteReader(data, file=file)
    size = len(data) - start if size is None else size
    reader.need(start, size, "__text section")
    tasks: list[TaskDescriptor] = []
    offset = 0
    while True:
        if size - offset < 4 * HEADER_WORDS:
            raise reader.error(
                f"expected a {4 * HEADER_WORDS}-byte task descriptor header at __text+0x{offset:x}, "
                f"but __text is {size} bytes",
                start + offset,
            )
        nxt = reader.u32(start + offset + 4 * NEXT_POINTER_WORD)
        if nxt and not offset + 4 * HEADER_WORDS <= nxt <= size - 4 * HEADER_WORDS:
            raise reader.error(
                f"task descriptor at __text+0x{offset:x} points to a next one at __text+0x{nxt:x}; "
                f"expected an offset after it and inside __text ({size} bytes)",
                start + offset + 4 * NEXT_POINTER_WORD,
            )
        tasks.append(_parse_one(reader, start, offset, start + (nxt or size)))
        if not nxt:
            return tasks
        offset = nxt


def decode_task(task: TaskDescriptor, fields: tuple[Field, ...] | None = None) -> DecodedTask:
    """Split ``task`` into field values (H13 map by default) and the residual bits."""
    fields = h13_fields() if fields is None else fields
    groups = {key: list(words) for key, words in task.word_groups().items()}
    values: dict[str, int] = {}
    for field in fields:
        words = groups.get(field.block)
        if words is None or field.word >= len(words):
            continue  # this descriptor does not write that register
        values[field.name] = (words[field.word] >> field.bit) & ((1 << field.width) - 1)
        words[field.word] &= ~field.mask & 0xFFFFFFFF
    return DecodedTask(values, _with_groups(task, groups))


def encode_task(decoded: DecodedTask, fields: tuple[Field, ...] | None = None) -> bytes:
    """Rebuild a descriptor's bytes from field values and residual bits."""
    fields = h13_fields() if fields is None else fields
    by_name = {f.name: f for f in fields}
    groups = {key: list(words) for key, words in decoded.residual.word_groups().items()}
    for name, value in decoded.fields.items():
        field = by_name.get(name)
        if field is None:
            raise ValueError(f"unknown task descriptor field {name!r}")
        if not 0 <= value < (1 << field.width):
            raise ValueError(f"field {name} is {field.width} bits wide; value {value} does not fit")
        words = groups.get(field.block)
        if words is None or field.word >= len(words):
            raise ValueError(f"field {name} lies in a register block this descriptor lacks")
        words[field.word] |= value << field.bit
    return _with_groups(decoded.residual, groups).to_bytes()


def _with_groups(task: TaskDescriptor, groups: dict[int | str, list[int]]) -> TaskDescriptor:
    """Return ``task`` with the words of its header and (first-of-address) blocks replaced."""
    seen: set[int] = set()
    blocks = []
    for block in task.blocks:
        if block.address in seen:
            blocks.append(block)
            continue
        seen.add(block.address)
        blocks.append(RegisterBlock(block.header_word, tuple(groups[block.address])))
    return replace(task, header=tuple(groups[HEADER]), blocks=tuple(blocks))


def fields_at(
    task: TaskDescriptor, offset: int, fields: tuple[Field, ...] | None = None
) -> list[str]:
    """Names of the fields in the word at ``offset`` from the descriptor's start."""
    where = task.locate(offset)
    fields = h13_fields() if fields is None else fields
    return [f.name for f in fields if where is not None and (f.block, f.word) == where]
