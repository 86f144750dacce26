"""A bounds-checked reader for the Mach-O container that hwx files use.

Only what hwx files contain is read: the 64-bit header, load commands,
LC_SEGMENT_64 segments and sections, LC_SYMTAB (nlist_64 entries and their
strings), section relocations and LC_THREAD records. Field layouts follow
Apple's public <mach-o/loader.h>, <mach-o/nlist.h> and <mach-o/reloc.h>. Any
field that points outside the file or its command raises InspectError with
the offset.
"""

from __future__ import annotations

from dataclasses import dataclass

from anekit.inspect._reader import ByteReader, fixed_name

__all__ = [
    "HEADER_SIZE",
    "COMMAND_NAMES",
    "Section",
    "Segment",
    "LoadCommand",
    "Symbol",
    "Relocation",
    "ThreadState",
    "MachO",
    "read_macho",
    "find_section",
    "relocations",
]

HEADER_SIZE = 32
LC_SYMTAB, LC_THREAD, LC_UNIXTHREAD, LC_LOADFVMLIB, LC_IDENT, LC_SEGMENT_64 = 2, 4, 5, 6, 8, 0x19
COMMAND_NAMES = {
    LC_SYMTAB: "LC_SYMTAB",
    LC_THREAD: "LC_THREAD",
    LC_UNIXTHREAD: "LC_UNIXTHREAD",
    LC_LOADFVMLIB: "LC_LOADFVMLIB",
    0x7: "LC_IDFVMLIB",
    LC_IDENT: "LC_IDENT",
    0xB: "LC_DYSYMTAB",
    LC_SEGMENT_64: "LC_SEGMENT_64",
    0x1B: "LC_UUID",
}

SEGMENT_SIZE, SECTION_SIZE, NLIST_SIZE, RELOC_SIZE = 72, 80, 16, 8
N_STAB, N_TYPE, N_SECT = 0xE0, 0x0E, 0x0E


@dataclass(frozen=True)
class Section:
    segment: str
    name: str
    addr: int
    size: int
    offset: int  # file offset of its bytes, 0 when none are stored
    align: int  # log2
    reloff: int
    nreloc: int
    flags: int
    index: int  # 1-based, as symbols' n_sect count
    header: int  # file offset of this section's header

    @property
    def kind(self) -> int:
        """Low byte of flags: 0x28 text, 0x26 weights, 0x21 input, 0x23 output (observed)."""
        return self.flags & 0xFF


@dataclass(frozen=True)
class Segment:
    name: str
    vmaddr: int
    vmsize: int
    fileoff: int
    filesize: int
    maxprot: int
    initprot: int
    flags: int
    sections: tuple[Section, ...]


@dataclass(frozen=True)
class LoadCommand:
    cmd: int
    offset: int
    size: int

    @property
    def name(self) -> str:
        return COMMAND_NAMES.get(self.cmd, f"LC_0x{self.cmd:x}")


@dataclass(frozen=True)
class Symbol:
    entry: int  # file offset of its nlist entry
    name: str
    type: int
    sect: int
    desc: int
    value: int

    @property
    def is_stab(self) -> bool:
        return bool(self.type & N_STAB)


@dataclass(frozen=True)
class Relocation:
    """A word of ``__text`` the loader adjusts: ``address`` is its offset in the section."""

    address: int
    symbolnum: int  # a section index when not extern
    pcrel: bool
    length: int
    extern: bool
    type: int


@dataclass(frozen=True)
class ThreadState:
    """An LC_THREAD record: flavor, its state words, and the strings after them.

    What the words mean is not public; flavor 1 appears once per program and
    flavor 3 once per I/O tensor (eiln/anecc reads task size and count from the
    former). They are shown raw.
    """

    offset: int
    flavor: int
    words: tuple[int, ...]
    strings: tuple[str, ...]


@dataclass(frozen=True)
class MachO:
    """The container: header fields, load commands, segments, symbols, thread records."""

    magic: int
    cputype: int
    cpusubtype: int
    filetype: int
    flags: int
    commands: tuple[LoadCommand, ...]
    segments: tuple[Segment, ...]
    symbols: tuple[Symbol, ...]
    threads: tuple[ThreadState, ...]

    def sections(self) -> list[Section]:
        return [s for seg in self.segments for s in seg.sections]


def read_macho(r: ByteReader, magics: tuple[int, ...]) -> MachO:
    """Read the header and load commands; the magic must be one of ``magics``."""
    if len(r) < HEADER_SIZE:
        raise r.error(f"expected a {HEADER_SIZE}-byte Mach-O header, found {len(r)} bytes", 0)
    magic, cputype, cpusubtype, filetype, ncmds, sizeofcmds, flags = r.words(0, 7, "header")
    if magic not in magics:
        expected = " or ".join(f"0x{m:08x}" for m in magics)
        raise r.error(f"expected magic {expected}, found 0x{magic:08x}", 0)
    r.need(HEADER_SIZE, sizeofcmds, "load commands (sizeofcmds)")
    commands = _load_commands(r, ncmds, HEADER_SIZE + sizeofcmds)
    segments = _segments(r, commands)
    for section in (s for seg in segments for s in seg.sections):
        if section.offset:
            r.need(section.offset, section.size, f"section {section.segment},{section.name}")
    return MachO(
        magic=magic,
        cputype=cputype,
        cpusubtype=cpusubtype,
        filetype=filetype,
        flags=flags,
        commands=commands,
        segments=segments,
        symbols=_symbols(r, commands),
        threads=tuple(_thread(r, c) for c in commands if c.cmd in (LC_THREAD, LC_UNIXTHREAD)),
    )


def _load_commands(r: ByteReader, ncmds: int, end: int) -> tuple[LoadCommand, ...]:
    commands = []
    offset = HEADER_SIZE
    for i in range(ncmds):
        if offset + 8 > end:
            raise r.error(
                f"load command {i} of {ncmds} starts past sizeofcmds (ends 0x{end:x})", offset
            )
        cmd, size = r.words(offset, 2, "load command header")
        if size < 8 or offset + size > end:
            raise r.error(
                f"load command {i} ({COMMAND_NAMES.get(cmd, hex(cmd))}) has cmdsize {size}; "
                f"expected at least 8 and to end by 0x{end:x}",
                offset,
            )
        commands.append(LoadCommand(cmd, offset, size))
        offset += size
    return tuple(commands)


def _segments(r: ByteReader, commands: tuple[LoadCommand, ...]) -> tuple[Segment, ...]:
    """Read every LC_SEGMENT_64, numbering sections from 1 across segments as n_sect does."""
    segments: list[Segment] = []
    for c in commands:
        if c.cmd == LC_SEGMENT_64:
            segments.append(_segment(r, c, 1 + sum(len(s.sections) for s in segments)))
    return tuple(segments)


def _segment(r: ByteReader, c: LoadCommand, first_index: int) -> Segment:
    if c.size < SEGMENT_SIZE:
        raise r.error(f"LC_SEGMENT_64 cmdsize {c.size} is below {SEGMENT_SIZE}", c.offset)
    name = fixed_name(r.raw(c.offset + 8, 16, "segment name"))
    vmaddr, vmsize, fileoff, filesize = (r.u64(c.offset + 24 + 8 * i) for i in range(4))
    maxprot, initprot, nsects, flags = r.words(c.offset + 56, 4, "segment fields")
    if SEGMENT_SIZE + SECTION_SIZE * nsects > c.size:
        raise r.error(
            f"segment {name} declares {nsects} sections, which do not fit in cmdsize {c.size}",
            c.offset + 64,
        )
    sections = []
    for i in range(nsects):
        at = c.offset + SEGMENT_SIZE + SECTION_SIZE * i
        sections.append(
            Section(
                segment=fixed_name(r.raw(at + 16, 16, "section segname")),
                name=fixed_name(r.raw(at, 16, "section name")),
                addr=r.u64(at + 32),
                size=r.u64(at + 40),
                offset=r.u32(at + 48),
                align=r.u32(at + 52),
                reloff=r.u32(at + 56),
                nreloc=r.u32(at + 60),
                flags=r.u32(at + 64),
                index=first_index + i,
                header=at,
            )
        )
    return Segment(
        name, vmaddr, vmsize, fileoff, filesize, maxprot, initprot, flags, tuple(sections)
    )


def find_section(r: ByteReader, sections: list[Section], segment: str, name: str) -> Section:
    for section in sections:
        if section.segment == segment and section.name == name:
            if not section.offset and section.size:
                raise r.error(
                    f"section {segment},{name} has no bytes in the file (offset 0)",
                    section.header + 48,
                )
            return section
    raise r.error(f"expected a {segment},{name} section; found none", HEADER_SIZE)


def _symbols(r: ByteReader, commands: tuple[LoadCommand, ...]) -> tuple[Symbol, ...]:
    symtab = next((c for c in commands if c.cmd == LC_SYMTAB), None)
    if symtab is None:
        return ()
    if symtab.size < 24:
        raise r.error(f"LC_SYMTAB cmdsize {symtab.size} is below 24", symtab.offset)
    symoff, nsyms, stroff, strsize = r.words(symtab.offset + 8, 4, "LC_SYMTAB fields")
    r.need(symoff, NLIST_SIZE * nsyms, f"symbol table ({nsyms} entries)")
    r.need(stroff, strsize, "string table")
    symbols = []
    for i in range(nsyms):
        at = symoff + NLIST_SIZE * i
        strx = r.u32(at)
        if strx >= strsize:
            raise r.error(
                f"symbol {i} names string {strx}, past the {strsize}-byte string table", at
            )
        name = r.cstring(stroff + strx, stroff + strsize, f"name of symbol {i}")
        symbols.append(Symbol(at, name, r.u8(at + 4), r.u8(at + 5), r.u16(at + 6), r.u64(at + 8)))
    return tuple(symbols)


def relocations(r: ByteReader, text: Section) -> tuple[Relocation, ...]:
    r.need(text.reloff, RELOC_SIZE * text.nreloc, f"__text relocations ({text.nreloc} entries)")
    relocations = []
    for i in range(text.nreloc):
        address, info = r.words(text.reloff + RELOC_SIZE * i, 2, "relocation")
        relocations.append(
            Relocation(
                address=address,
                symbolnum=info & 0xFFFFFF,
                pcrel=bool(info >> 24 & 1),
                length=info >> 25 & 3,
                extern=bool(info >> 27 & 1),
                type=info >> 28,
            )
        )
    return tuple(relocations)


def _thread(r: ByteReader, c: LoadCommand) -> ThreadState:
    if c.size < 16:
        raise r.error(f"{c.name} cmdsize {c.size} is below 16", c.offset)
    flavor, count = r.words(c.offset + 8, 2, "thread flavor and count")
    if 16 + 4 * count > c.size:
        raise r.error(
            f"{c.name} flavor {flavor} declares {count} words, which do not fit in cmdsize {c.size}",
            c.offset + 12,
        )
    words = r.words(c.offset + 16, count, "thread state")
    tail = r.raw(c.offset + 16 + 4 * count, c.size - 16 - 4 * count, "thread strings")
    strings = tuple(s.decode("utf-8", errors="replace") for s in tail.split(b"\0") if s)
    return ThreadState(c.offset, flavor, words, strings)
