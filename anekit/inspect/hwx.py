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

from anekit.config import read_limit
from anekit.errors import InspectError
from anekit.files import read_regular
from anekit.inspect import tasks as _tasks
from anekit.inspect._reader import ByteReader
from anekit.inspect.macho import (
    LC_IDENT,
    LC_LOADFVMLIB,
    N_SECT,
    N_TYPE,
    LoadCommand,
    MachO,
    Relocation,
    Section,
    Segment,
    Symbol,
    find_section,
    read_macho,
    relocations,
)

__all__ = [
    "HWX_MAGIC",
    "GENERATIONS",
    "Compiler",
    "Tensor",
    "Weight",
    "Hwx",
    "read_hwx",
    "load_hwx",
]

HWX_MAGIC = 0xBEEFFACE
MACHO64_MAGIC = 0xFEEDFACF  # hwx files patched with this magic so Mach-O tools read them
ANE_CPUTYPE = 0x80

# cpusubtype -> ANE generation (compiler arch name), ANE_NOTES section 6.
GENERATIONS: dict[int, str] = {4: "H13", 5: "H14", 6: "H15", 7: "H16", 9: "H17"}

# Segment initprot -> tensor role, as eiln/anecc tells source, destination and
# intermediate buffers apart; the "@output" name suffix agrees on every test file.
ROLES = {1: "input", 2: "output", 3: "intermediate"}

_STAB_AXIS = re.compile(r"ar\d+;(-?\d+);(-?\d+);(?:\d+=)?s(\d+)([a-z])")
_STAB_TYPEDEF = re.compile(r"^([A-Za-z_][\w]*):t(\d+)=r")


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
    macho: MachO
    compiler: Compiler | None
    tensors: tuple[Tensor, ...]
    weights: tuple[Weight, ...]
    text: Section
    relocations: tuple[Relocation, ...]
    tasks: tuple[_tasks.TaskDescriptor, ...] = field(default=())
    raw_text: tuple[int, ...] = field(default=())  # __text words, for generations we cannot decode

    @property
    def generation(self) -> str | None:
        return _generation(self.macho.cputype, self.macho.cpusubtype)


def _generation(cputype: int, cpusubtype: int) -> str | None:
    return GENERATIONS.get(cpusubtype) if cputype == ANE_CPUTYPE else None


def load_hwx(path: str | Path) -> Hwx:
    """Read the hwx file at ``path``."""
    path = Path(path)
    return read_hwx(read_input(path), file=str(path))


def read_input(path: str | Path) -> bytes:
    """The bytes of a file to inspect: a regular file of at most ``read_limit()`` bytes."""
    return read_regular(path, limit=read_limit(), what="a file to inspect", error=_error)


def _error(message: str, path: str) -> InspectError:
    return InspectError(message, file=path)


def read_hwx(data: bytes, *, file: str | None = None) -> Hwx:
    """Parse an hwx image; raise InspectError (with the offset) if it is malformed."""
    r = ByteReader(data, file=file)
    macho = read_macho(r, (HWX_MAGIC, MACHO64_MAGIC))
    sections = macho.sections()
    text = find_section(r, sections, "__TEXT", "__text")
    if _generation(macho.cputype, macho.cpusubtype) == "H13":
        task_list = _tasks.parse_tasks(r.data, start=text.offset, size=text.size, file=file)
        raw: tuple[int, ...] = ()
    else:
        task_list, raw = [], r.words(text.offset, text.size // 4, "__text")
    return Hwx(
        file=file,
        macho=macho,
        compiler=next((_ident(r, c) for c in macho.commands if c.cmd == LC_IDENT), None),
        tensors=_tensors(r, macho.commands, macho.segments, macho.symbols),
        weights=_weights(r, sections, macho.symbols),
        text=text,
        relocations=relocations(r, text),
        tasks=tuple(task_list),
        raw_text=raw,
    )


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
        for i, sym in enumerate(inside):
            nxt = inside[i + 1].value if i + 1 < len(inside) else end
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
