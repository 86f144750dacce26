"""A schema-less FlatBuffer reader: recover tables, vectors, strings and scalars by heuristics.

The wire format is public (flatbuffers.dev, "Internals"): a buffer starts with
a u32 offset to the root table (after an optional u32 size prefix), optionally
followed by a 4-byte file identifier. A table starts with an i32 back to its
vtable; the vtable is u16 vtable size, u16 table size, then one u16 offset per
field slot (0 when absent). Offsets to strings, vectors and tables are u32,
relative to where they are stored, and always point forward. A string is a u32
length, the bytes and a NUL; a vector a u32 count and the elements.

Without a schema a field's type is unknown. The walker guesses:

- a field's width is the widest aligned 1, 2, 4 or 8 bytes within the gap to
  the next field whose remaining bytes are zero (padding is zero, so the
  unsigned value is right even when the width is not); anything else is a
  struct, shown as raw bytes;
- a 4-aligned 4-byte field is an offset when it points forward, past its own
  table, at something that parses as a string (valid UTF-8, printable, NUL at
  the right place), else a table (sane vtable), else a vector; when a table or
  vector is claimed by several fields, all but the one farthest from it are
  taken to be numbers (sharing is rare; small numbers look like offsets);
- a vector's elements are tables or strings if every element offset parses so,
  else scalars whose width is the smallest that fills the space up to the next
  known object (less than 4 bytes left over). Empty vectors and empty strings
  look the same and are reported as empty.

Every node carries its offset, so a reader can check a guess against the bytes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from anekit.inspect._reader import ByteReader

__all__ = [
    "FbScalar",
    "FbBytes",
    "FbString",
    "FbVector",
    "FbTable",
    "FbUnknown",
    "FlatBuffer",
    "read_flatbuffer",
    "looks_like_flatbuffer",
    "to_plain",
    "render",
    "walk",
]

MAX_DEPTH = 64
MAX_CHECKED_ELEMENTS = 1 << 16  # vectors longer than this are not probed element by element


@dataclass
class FbScalar:
    """An inline number of ``width`` bytes, read unsigned little-endian."""

    offset: int
    width: int
    value: int

    def signed(self) -> int:
        """The value as two's complement of its width."""
        bits = 8 * self.width
        return self.value - (1 << bits) if self.value >> (bits - 1) else self.value


@dataclass
class FbBytes:
    """An inline run wider than 8 bytes: a struct, shown raw."""

    offset: int
    data: bytes


@dataclass
class FbString:
    offset: int
    value: str


@dataclass
class FbVector:
    """``length`` elements; ``kind`` is tables, strings, scalars or empty."""

    offset: int
    length: int
    kind: str
    items: list = field(default_factory=list)
    width: int | None = None  # element width, for scalars


@dataclass
class FbTable:
    offset: int
    vtable: int
    inline_size: int
    fields: dict[int, object] = field(default_factory=dict)  # slot -> node


@dataclass
class FbUnknown:
    """A field not followed (nested too deep, or shown earlier); ``reason`` says why."""

    offset: int
    reason: str


@dataclass
class FlatBuffer:
    root: FbTable
    identifier: str | None
    size_prefixed: bool
    size: int


def read_flatbuffer(data: bytes, *, file: str | None = None) -> FlatBuffer:
    """Walk ``data`` from its root table; InspectError if the root itself is not a table."""
    r = ByteReader(data, file=file)
    size_prefixed = len(r) >= 8 and r.u32(0) == len(r) - 4 and _table_at(r, 4 + r.u32(4))
    base = 4 if size_prefixed else 0
    root = r.u32(base, "root table offset") + base
    if not _table_at(r, root):
        raise r.error(
            f"root offset points to 0x{root:x}, where there is no table with a valid vtable "
            f"(buffer is {len(r)} bytes)",
            base,
        )
    forced: set[int] = set()
    while True:
        walker = _Walker(r, forced)
        table = walker.table(root, 0)
        demote = walker.doubtful_claims() - forced
        if not demote:
            break
        forced |= demote
    walker.resolve_scalar_vectors()
    ident = r.data[base + 4 : base + 8]
    printable = len(ident) == 4 and all(0x20 < b < 0x7F for b in ident)
    return FlatBuffer(table, ident.decode("ascii") if printable else None, size_prefixed, len(r))


def looks_like_flatbuffer(data: bytes) -> bool:
    """True if ``data`` starts with an offset to a table with a plausible vtable."""
    r = ByteReader(data)
    if len(r) < 8:
        return False
    if r.u32(0) == len(r) - 4 and _table_at(r, 4 + r.u32(4)):
        return True
    return _table_at(r, r.u32(0))


def _table_at(r: ByteReader, t: int) -> bool:
    """Whether a table with a well-formed vtable starts at ``t``."""
    if t % 4 or t < 4 or t + 4 > len(r):
        return False
    vt = t - r.i32(t)
    if vt % 2 or vt < 0 or vt + 4 > len(r):
        return False
    vt_size, t_size = r.u16(vt), r.u16(vt + 2)
    if vt_size < 4 or vt_size % 2 or vt + vt_size > len(r) or t_size < 4 or t + t_size > len(r):
        return False
    if vt < t + t_size and t < vt + vt_size:
        return False  # a vtable never overlaps its table's inline data
    slots = (r.u16(vt + 4 + 2 * i) for i in range((vt_size - 4) // 2))
    return all(s == 0 or 4 <= s < t_size for s in slots)


def _string_at(r: ByteReader, s: int) -> str | None:
    """The string at ``s`` if a non-empty, printable, NUL-terminated UTF-8 string is there."""
    if s % 4 or s + 4 > len(r):
        return None
    n = r.u32(s)
    if n == 0 or s + 4 + n >= len(r) or r.data[s + 4 + n] != 0:
        return None
    try:
        text = r.data[s + 4 : s + 4 + n].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if all(c.isprintable() or c in "\t\n\r" for c in text) else None


class _Walker:
    """One pass over the object graph, then scalar-vector widths from the objects found."""

    def __init__(self, r: ByteReader, scalars: set[int]) -> None:
        self.r = r
        self.scalars = scalars  # field positions known to hold numbers, not offsets
        self.claims: dict[int, list[tuple[int, int]]] = {}  # target -> [(distance, field)]
        self.starts: set[int] = {len(r)}
        self.pending: list[FbVector] = []
        self.visited: set[int] = set()  # tables and vectors already walked
        self.strings: dict[int, FbString] = {}

    def table(self, t: int, depth: int) -> FbTable | FbUnknown:
        r = self.r
        if t in self.visited:
            # Shared subtrees are shown once, which also bounds the walk on hostile input.
            return FbUnknown(t, f"table at 0x{t:x} shown earlier")
        self.visited.add(t)
        vt = t - r.i32(t)
        vt_size, t_size = r.u16(vt), r.u16(vt + 2)
        self.starts.update((t, vt))
        slots = {i: r.u16(vt + 4 + 2 * i) for i in range((vt_size - 4) // 2)}
        present = sorted((off, slot) for slot, off in slots.items() if off)
        node = FbTable(t, vt, t_size)
        for k, (off, slot) in enumerate(present):
            gap = max((present[k + 1][0] if k + 1 < len(present) else t_size) - off, 1)
            node.fields[slot] = self.field(t + off, gap, t + t_size, depth)
        node.fields = dict(sorted(node.fields.items()))
        return node

    def field(self, p: int, gap: int, table_end: int, depth: int):
        r = self.r
        if gap >= 4 and p % 4 == 0 and p not in self.scalars and not any(r.data[p + 4 : p + gap]):
            target = p + r.u32(p)
            if target >= table_end:
                node = self.reference(target, depth)
                if node is not None:
                    if not isinstance(node, FbString):
                        self.claims.setdefault(target, []).append((target - p, p))
                    return node
        width = next(w for w in (8, 4, 2, 1) if w <= gap and p % w == 0)
        if any(r.data[p + width : p + gap]):
            return FbBytes(p, r.raw(p, gap, "inline struct"))
        return FbScalar(p, width, int.from_bytes(r.raw(p, width, "scalar"), "little"))

    def doubtful_claims(self) -> set[int]:
        """Fields that claim a table or vector another field claims from farther away.

        Sharing a table or vector is rare in real buffers, while a small number
        in a table's last slots can look like an offset to whatever follows the
        table. So of several claimants, all but the farthest are numbers.
        """
        doubtful = set()
        for claimants in self.claims.values():
            doubtful.update(p for _, p in sorted(claimants)[:-1])
        return doubtful

    def reference(self, target: int, depth: int):
        """The object at ``target`` (string, table or vector), or None if nothing fits."""
        if target % 4 or target + 4 > len(self.r):
            return None
        if depth >= MAX_DEPTH:
            return FbUnknown(target, f"nesting deeper than {MAX_DEPTH} levels")
        string = self.string(target)
        if string is not None:
            return string
        if _table_at(self.r, target):
            return self.table(target, depth + 1)
        return self.vector(target, depth)

    def string(self, s: int) -> FbString | None:
        if s not in self.strings:
            text = _string_at(self.r, s)
            if text is None:
                return None
            self.strings[s] = FbString(s, text)
            self.starts.add(s)
        return self.strings[s]

    def vector(self, q: int, depth: int) -> FbVector | FbUnknown | None:
        r = self.r
        n = r.u32(q)
        if q + 4 + n > len(r):
            return None
        if q in self.visited:
            return FbUnknown(q, f"vector at 0x{q:x} shown earlier")
        self.visited.add(q)
        self.starts.add(q)
        if n == 0:
            return FbVector(q, 0, "empty")
        if n <= MAX_CHECKED_ELEMENTS and q + 4 + 4 * n <= len(r):
            elems = [q + 4 + 4 * i for i in range(n)]
            targets = [e + r.u32(e) for e in elems]
            if all(t > e for t, e in zip(targets, elems, strict=True)):
                if all(_string_at(r, t) is not None for t in targets):
                    return FbVector(q, n, "strings", [self.string(t) for t in targets])
                if all(_table_at(r, t) for t in targets):
                    items = [self.table(t, depth + 1) for t in targets]
                    return FbVector(q, n, "tables", items)
        vec = FbVector(q, n, "scalars")
        self.pending.append(vec)
        return vec

    def resolve_scalar_vectors(self) -> None:
        """Pick each scalar vector's element width from the room before the next object."""
        starts = sorted(self.starts)
        for vec in self.pending:
            data = vec.offset + 4
            room = starts[bisect.bisect_right(starts, data - 1)] - data
            fits = [w for w in (1, 2, 4, 8) if data % w == 0 and 0 <= room - vec.length * w < 4]
            vec.width = fits[0] if fits else 1
            count = min(vec.length, (len(self.r) - data) // vec.width)
            raw = self.r.raw(data, count * vec.width, "vector elements")
            w = vec.width
            vec.items = [int.from_bytes(raw[i * w : (i + 1) * w], "little") for i in range(count)]


def walk(node, path: str = "root"):
    """Yield (path, node) for ``node`` and everything under it, paths like root.f2[0].f1."""
    if isinstance(node, FlatBuffer):
        yield from walk(node.root, path)
        return
    yield path, node
    if isinstance(node, FbTable):
        for slot, child in node.fields.items():
            yield from walk(child, f"{path}.f{slot}")
    elif isinstance(node, FbVector) and node.kind in ("tables", "strings"):
        for i, child in enumerate(node.items):
            yield from walk(child, f"{path}[{i}]")


def to_plain(node) -> object:
    """Convert a walked node to JSON-ready values: tables become {"f<slot>": ...} dicts."""
    if isinstance(node, FlatBuffer):
        return to_plain(node.root)
    if isinstance(node, FbTable):
        return {f"f{slot}": to_plain(v) for slot, v in node.fields.items()}
    if isinstance(node, FbVector):
        return [to_plain(v) for v in node.items]
    if isinstance(node, FbString):
        return node.value
    if isinstance(node, FbScalar):
        return node.value
    if isinstance(node, FbBytes):
        return node.data.hex()
    if isinstance(node, FbUnknown):
        return None
    return node  # vector scalars are plain ints already


def render(
    node, labels: dict[str, str] | None = None, path: str = "root", indent: str = ""
) -> list[str]:
    """Readable lines for a node tree; ``labels`` maps paths (root.f2[0]) to annotations."""
    labels = labels or {}
    note = f"  <- {labels[path]}" if path in labels else ""
    if isinstance(node, FlatBuffer):
        return render(node.root, labels, path, indent)
    if isinstance(node, FbTable):
        lines = [f"{indent}{path}: table @0x{node.offset:x} ({len(node.fields)} fields){note}"]
        for slot, child in node.fields.items():
            lines += render(child, labels, f"{path}.f{slot}", indent + "  ")
        return lines
    if isinstance(node, FbVector) and node.kind in ("tables", "strings"):
        lines = [f"{indent}{path}: vector of {node.length} {node.kind} @0x{node.offset:x}{note}"]
        for i, child in enumerate(node.items):
            lines += render(child, labels, f"{path}[{i}]", indent + "  ")
        return lines
    if isinstance(node, FbVector):
        shown = ", ".join(str(v) for v in node.items[:16]) + (", ..." if node.length > 16 else "")
        width = f" u{8 * node.width}" if node.width else ""
        return [f"{indent}{path}: vector of {node.length}{width} [{shown}]{note}"]
    if isinstance(node, FbString):
        return [f"{indent}{path}: string {node.value!r}{note}"]
    if isinstance(node, FbScalar):
        return [f"{indent}{path}: u{8 * node.width} {node.value}{note}"]
    if isinstance(node, FbBytes):
        return [f"{indent}{path}: {len(node.data)} bytes {node.data.hex()}{note}"]
    return [f"{indent}{path}: not followed ({node.reason}){note}"]
