"""Read compiled ANE programs (``.hwx``): a Mach-O-like container of task descriptors and weights.

Layout (ANE_NOTES section 6; tinygrad's extra/accel/ane; eiln/anecc): a 64-bit
Mach-O header with magic 0xBEEFFACE, cputype 0x80 and the ANE generation in
cpusubtype, then load commands. ``__TEXT,__text`` holds the task descriptors
(:mod:`anekit.inspect.tasks`), ``__TEXT,__const`` the weights, named by
symbols. Each I/O tensor is a zero-file-size ``__FVMLIB`` segment named by an
``LC_LOADFVMLIB`` command; its NCHW sizes and byte strides are in a stabs
string of the symbol table. ``LC_IDENT`` carries the compiler's command line.
Everything is read through bounds-checked helpers: malformed input raises
:class:`~anekit.errors.InspectError` naming the offset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from anekit.inspect import tasks as _tasks
from anekit.inspect._reader import ByteReader, fixed_name

__all__ = [
    "HWX_MAGIC",
    "GENERATIONS",
    "Section",
    "Segment",
    "LoadCommand",
    "Symbol",
    "Relocation",
    "ThreadState",
    "Compiler",
    "Tensor",
    "Weight",
    "Hwx",
    "read_hwx",
    "load_hwx",
]

HWX_MAGIC = 0xBEEFFACE
MACHO64_MAGIC = 0xFEEDFACF  # what `xxd`-patched hwx files carry so Mach-O tools read them
ANE_CPUTYPE = 0x80
HEADER_SIZE = 32

# cpusubtype -> ANE generation (compiler arch name), ANE_NOTES section 6.
GENERATIONS: dict[int, str] = {4: "H13", 5: "H14", 6: "H15", 7: "H16", 9: "H17"}

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

# Segment initprot -> tensor role, as eiln/anecc tells source, destination and
# intermediate buffers apart; the "@output" name suffix agrees on every test file.
ROLES = {1: "input", 2: "output", 3: "intermediate"}

_STAB_AXIS = re.compile(r"ar\d+;(-?\d+);(-?\d+);(?:\d+=)?s(\d+)([a-z])")
_STAB_TYPEDEF = re.compile(r"^([A-Za-z_][\w]*):t(\d+)=r")


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
class Compiler:
    """LC_IDENT: the compiler's name, version, target and options."""

    text: str
    name: str | None
    version: str | None
    target: str | None
    options: tuple[str, ...]


@dataclass(frozen=True)
class Tensor:
    """An I/O tensor: shape and byte strides in the stab's axis order (``layout``)."""

    name: str
    role: str
    address: int
    size: int  # bytes the tensor occupies
    allocation: int  # bytes of its segment
    layout: str | None
    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    dtype: str | None
    stab: str | None


@dataclass(frozen=True)
class Weight:
    name: str
    section: str
    address: int
    offset: int  # inside its section
    file_offset: int
    size: int  # up to the next symbol or the section's end


@dataclass(frozen=True)
class Hwx:
    """Everything read from one hwx file."""

    file: str | None
    magic: int
    cputype: int
    cpusubtype: int
    filetype: int
    flags: int
    commands: tuple[LoadCommand, ...]
    segments: tuple[Segment, ...]
    symbols: tuple[Symbol, ...]
    threads: tuple[ThreadState, ...]
    compiler: Compiler | None
    tensors: tuple[Tensor, ...]
    weights: tuple[Weight, ...]
    text: Section
    relocations: tuple[Relocation, ...]
    tasks: tuple[_tasks.TaskDescriptor, ...] = field(default=())
    raw_text: tuple[int, ...] = field(default=())  # __text words, for generations we cannot decode

    @property
    def generation(self) -> str | None:
        return _generation(self.cputype, self.cpusubtype)

    def sections(self) -> list[Section]:
        return [s for seg in self.segments for s in seg.sections]


def _generation(cputype: int, cpusubtype: int) -> str | None:
    return GENERATIONS.get(cpusubtype) if cputype == ANE_CPUTYPE else None


def load_hwx(path: str | Path) -> Hwx:
    """Read the hwx file at ``path``."""
    path = Path(path)
    return read_hwx(path.read_bytes(), file=str(path))


def read_hwx(data: bytes, *, file: str | None = None) -> Hwx:
    """Parse an hwx image; raise InspectError (with the offset) if it is malformed."""
    r = ByteReader(data, file=file)
    if len(r) < HEADER_SIZE:
        raise r.error(f"expected a {HEADER_SIZE}-byte hwx header, found {len(r)} bytes", 0)
    magic, cputype, cpusubtype, filetype, ncmds, sizeofcmds, flags = r.words(0, 7, "header")
    if magic not in (HWX_MAGIC, MACHO64_MAGIC):
        raise r.error(f"expected hwx magic 0x{HWX_MAGIC:08x}, found 0x{magic:08x}", 0)
    r.need(HEADER_SIZE, sizeofcmds, "load commands (sizeofcmds)")
    commands = _load_commands(r, ncmds, HEADER_SIZE + sizeofcmds)
    segments = _segments(r, commands)
    sections = [s for seg in segments for s in seg.sections]
    for section in sections:
        if section.offset:
            r.need(section.offset, section.size, f"section {section.segment},{section.name}")
    symbols = _symbols(r, commands)
    text = _find_section(r, sections, "__TEXT", "__text")
    relocations = _relocations(r, text)
    if _generation(cputype, cpusubtype) == "H13":
        task_list = _tasks.parse_tasks(r.data, start=text.offset, size=text.size, file=file)
        raw: tuple[int, ...] = ()
    else:
        task_list, raw = [], r.words(text.offset, text.size // 4, "__text")
    return Hwx(
        file=file,
        magic=magic,
        cputype=cputype,
        cpusubtype=cpusubtype,
        filetype=filetype,
        flags=flags,
        commands=commands,
        segments=segments,
        symbols=symbols,
        threads=tuple(_thread(r, c) for c in commands if c.cmd in (LC_THREAD, LC_UNIXTHREAD)),
        compiler=next((_ident(r, c) for c in commands if c.cmd == LC_IDENT), None),
        tensors=_tensors(r, commands, segments, symbols),
        weights=_weights(r, sections, symbols),
        text=text,
        relocations=relocations,
        tasks=tuple(task_list),
        raw_text=raw,
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
            )
        )
    return Segment(
        name, vmaddr, vmsize, fileoff, filesize, maxprot, initprot, flags, tuple(sections)
    )


def _find_section(r: ByteReader, sections: list[Section], segment: str, name: str) -> Section:
    for section in sections:
        if section.segment == segment and section.name == name:
            if not section.offset and section.size:
                raise r.error(f"section {segment},{name} has no bytes in the file", 0)
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


def _relocations(r: ByteReader, text: Section) -> tuple[Relocation, ...]:
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


def _ident(r: ByteReader, c: LoadCommand) -> Compiler:
    text = r.raw(c.offset + 8, c.size - 8, "LC_IDENT").split(b"\0", 1)[0]
    lines = [ln.strip() for ln in text.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    name = version = target = None
    options = []
    for line in lines[1:]:  # lines[0] is the ident format, "ANEC v1"
        if line.startswith("-t "):
            target = line[3:].strip()
        elif line.startswith("-"):
            options.append(line)
        elif name is None:
            name, _, version = line.partition(" ")
    return Compiler(
        text.decode("utf-8", errors="replace"), name, version or None, target, tuple(options)
    )


def _stab_types(symbols: tuple[Symbol, ...]) -> dict[int, str]:
    """Scalar type numbers declared by stabs such as ``float16:t5=r1;2;0``."""
    types = {}
    for s in symbols:
        m = _STAB_TYPEDEF.match(s.name) if s.is_stab else None
        if m:
            types[int(m.group(2))] = m.group(1)
    return types


def _parse_tensor_stab(stab: str, types: dict[int, str]):
    """Axis letters, extents, byte strides and element type of a tensor stab.

    ``image:t11=ar1;0;1;12=s192n:ar1;0;3;13=s64c:...:5`` is a nest of arrays, one
    per axis: ``ar1;LOW;HIGH;`` then ``s<stride><axis>``; the trailing number is
    the element type. The extent is read as HIGH - LOW (LOW is 0 in every file
    seen; eiln/anecc reads HIGH as the size too).
    """
    body = stab.split(":t", 1)[1].split("=", 1)[1] if ":t" in stab and "=" in stab else ""
    parts = body.split(":")
    axes = [_STAB_AXIS.fullmatch(p) for p in parts[:-1]]
    if not parts[:-1] or not all(axes) or not parts[-1].isdigit():
        return None, None, None, None
    layout = "".join(m.group(4) for m in axes)
    shape = tuple(int(m.group(2)) - int(m.group(1)) for m in axes)
    strides = tuple(int(m.group(3)) for m in axes)
    return layout, shape, strides, types.get(int(parts[-1]))


def _tensors(
    r: ByteReader,
    commands: tuple[LoadCommand, ...],
    segments: tuple[Segment, ...],
    symbols: tuple[Symbol, ...],
) -> tuple[Tensor, ...]:
    types = _stab_types(symbols)
    stabs = {s.name.split(":t", 1)[0]: s.name for s in symbols if s.is_stab and ":t" in s.name}
    tensors = []
    for c in commands:
        if c.cmd != LC_LOADFVMLIB:
            continue
        if c.size < 20:
            raise r.error(f"LC_LOADFVMLIB cmdsize {c.size} is below 20", c.offset)
        name_offset, _minor, header_addr = r.words(c.offset + 8, 3, "LC_LOADFVMLIB fields")
        if not 20 <= name_offset < c.size:
            raise r.error(
                f"LC_LOADFVMLIB name offset {name_offset} lies outside the command (20..{c.size})",
                c.offset + 8,
            )
        name = r.cstring(c.offset + name_offset, c.offset + c.size, "LC_LOADFVMLIB name")
        segment = next((s for s in segments if s.vmaddr == header_addr), None)
        if segment is None:
            raise r.error(
                f"tensor {name!r} names address 0x{header_addr:x}; no segment starts there",
                c.offset + 16,
            )
        stab = stabs.get(name)
        layout, shape, strides, dtype = _parse_tensor_stab(stab, types) if stab else (None,) * 4
        tensors.append(
            Tensor(
                name=name,
                role=ROLES.get(segment.initprot, "unknown"),
                address=header_addr,
                size=sum(s.size for s in segment.sections),
                allocation=segment.vmsize,
                layout=layout,
                shape=shape,
                strides=strides,
                dtype=dtype,
                stab=stab,
            )
        )
    return tuple(tensors)


def _weights(
    r: ByteReader, sections: list[Section], symbols: tuple[Symbol, ...]
) -> tuple[Weight, ...]:
    """Defined symbols in __TEXT,__const; each extends to the next one or the section end."""
    weights = []
    for section in sections:
        if (section.segment, section.name) != ("__TEXT", "__const"):
            continue
        inside = sorted(
            (
                s
                for s in symbols
                if not s.is_stab and s.type & N_TYPE == N_SECT and s.sect == section.index
            ),
            key=lambda s: s.value,
        )
        end = section.addr + section.size
        for sym, nxt in zip(inside, [*(s.value for s in inside[1:]), end]):
            if not section.addr <= sym.value <= end:
                raise r.error(
                    f"weight symbol {sym.name!r} at 0x{sym.value:x} lies outside "
                    f"__TEXT,__const (0x{section.addr:x}..0x{end:x})",
                    sym.entry + 8,
                )
            weights.append(
                Weight(
                    name=sym.name,
                    section=f"{section.segment},{section.name}",
                    address=sym.value,
                    offset=sym.value - section.addr,
                    file_offset=section.offset + sym.value - section.addr,
                    size=min(nxt, end) - sym.value,
                )
            )
    return tuple(weights)
