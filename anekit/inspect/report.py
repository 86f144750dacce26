"""Recognise a file's format and describe it: a JSON-ready dict and readable lines.

Formats and how each is recognised:

- ``hwx``: u32 magic 0xBEEFFACE (or 0xFEEDFACF with ANE cputype 0x80);
- ``weight.bin``: MILBlob v2, u32 version 2 at byte 4 and the record sentinel
  0xDEADBEEF at byte 64;
- ``mil``: UTF-8 text whose first statement is ``program(``;
- ``e5``: a FlatBuffer in a file named ``*.e5`` (no E5 magic is known);
- ``flatbuffer``: any other buffer whose root offset reaches a plausible table.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from anekit.errors import InspectError
from anekit.inspect import tasks as _tasks
from anekit.inspect.e5 import read_e5
from anekit.inspect.flatbuf import looks_like_flatbuffer, read_flatbuffer, render, to_plain
from anekit.inspect.hwx import ANE_CPUTYPE, HWX_MAGIC, MACHO64_MAGIC, Hwx, read_hwx, read_input

__all__ = ["FORMATS", "detect_format", "describe", "describe_file"]

FORMATS = ("hwx", "weight.bin", "mil", "e5", "flatbuffer")
BLOB_SENTINEL = 0xDEADBEEF


def detect_format(data: bytes, name: str = "") -> str:
    """The format of ``data`` (one of :data:`FORMATS`); InspectError if none fits."""
    head = struct.unpack_from("<II", data) if len(data) >= 8 else (None, None)
    if head[0] == HWX_MAGIC or head == (MACHO64_MAGIC, ANE_CPUTYPE):
        return "hwx"
    if len(data) >= 68 and head[1] == 2 and struct.unpack_from("<I", data, 64)[0] == BLOB_SENTINEL:
        return "weight.bin"
    if _is_mil_text(data):
        return "mil"
    if looks_like_flatbuffer(data):
        return "e5" if name.endswith(".e5") else "flatbuffer"
    raise InspectError(
        "unrecognised format: expected an hwx program (magic 0xbeefface), a weight.bin "
        "(MILBlob v2), MIL text (program(...)), or a FlatBuffer/E5 descriptor; "
        f"found {len(data)} bytes starting {data[:8].hex() or '(empty)'}",
        offset=0,
        file=name or None,
    )


def _is_mil_text(data: bytes) -> bool:
    try:
        text = data[:4096].decode("utf-8-sig")  # the BOM some editors write is not text
    except UnicodeDecodeError:
        return False
    lines = (ln.strip() for ln in text.splitlines())
    first = next((ln for ln in lines if ln and not ln.startswith("//")), "")
    return first.startswith("program(")


def describe_file(path: str | Path) -> tuple[dict, list[str]]:
    """Read ``path`` and describe it: (JSON-ready dict, readable lines)."""
    return describe(read_input(path), str(path))


def describe(data: bytes, name: str) -> tuple[dict, list[str]]:
    """Describe ``data`` (named ``name`` in messages): (JSON-ready dict, readable lines)."""
    fmt = detect_format(data, name)
    if fmt == "hwx":
        hwx = read_hwx(data, file=name)
        return _hwx_json(hwx), _hwx_lines(hwx)
    if fmt == "weight.bin":
        return _weights_bin(data, name)
    if fmt == "mil":
        return _mil(data, name)
    if fmt == "e5":
        e5 = read_e5(data, file=name)
        info = {"format": "e5", "file": name, "identifier": e5.flatbuffer.identifier}
        info |= {
            "labels": e5.labels,
            "op_types": list(e5.op_types),
            "root": to_plain(e5.flatbuffer),
        }
        head = f"{name}: E5 descriptor (FlatBuffer, {len(data)} bytes; field labels are guesses)"
        return info, [head, *render(e5.flatbuffer, e5.labels)]
    fb = read_flatbuffer(data, file=name)
    info = {"format": "flatbuffer", "file": name, "identifier": fb.identifier}
    head = f"{name}: FlatBuffer ({len(data)} bytes, identifier {fb.identifier or 'none'})"
    return info | {"root": to_plain(fb)}, [head, *render(fb)]


# ---- hwx ----


def _task_json(task: _tasks.TaskDescriptor) -> dict:
    return {
        "offset": task.offset,
        "size": task.size,
        "padding": task.padding,
        "header": list(task.header),
        "blocks": [
            {"address": b.address, "name": b.name, "words": list(b.words)} for b in task.blocks
        ],
        "fields": _tasks.decode_task(task).fields,
    }


def _relocation_target(hwx: Hwx, address: int) -> tuple[int | None, list[str]]:
    """The task holding __text+``address`` and the fields of that word."""
    for i, task in enumerate(hwx.tasks):
        if task.offset <= address < task.offset + task.size:
            return i, _tasks.fields_at(task, address - task.offset)
    return None, []


def _hwx_json(hwx: Hwx) -> dict:
    m = hwx.macho
    if hwx.tasks:
        task_list = [_task_json(t) for t in hwx.tasks]
    else:
        task_list = [{"offset": 0, "size": hwx.text.size, "words": list(hwx.raw_text)}]
    relocations = []
    for rel in hwx.relocations:
        task, names = _relocation_target(hwx, rel.address)
        kind = "symbol" if rel.extern else "section"
        relocations.append(
            {"address": rel.address, kind: rel.symbolnum, "task": task, "fields": names}
        )
    return {
        "format": "hwx",
        "file": hwx.file,
        "magic": f"0x{m.magic:08x}",
        "cputype": m.cputype,
        "cpusubtype": m.cpusubtype,
        "generation": hwx.generation,
        "compiler": None if hwx.compiler is None else asdict(hwx.compiler),
        "load_commands": [{"cmd": c.name, "offset": c.offset, "size": c.size} for c in m.commands],
        "segments": [asdict(seg) for seg in m.segments],
        "threads": [asdict(t) for t in m.threads],
        "tensors": [asdict(t) for t in hwx.tensors],
        "weights": [asdict(w) for w in hwx.weights],
        "relocations": relocations,
        "tasks": task_list,
    }


def _short(name: str) -> str:
    """aneRegs.Common.InDim.Win -> InDim.Win; aneTD.Header[0].TID -> TID."""
    parts = name.split(".")
    return ".".join(parts[2:]) if parts[0] == "aneRegs" else parts[-1]


def _task_lines(i: int, task: _tasks.TaskDescriptor) -> list[str]:
    fields = _tasks.decode_task(task).fields
    lines = [
        f"  task {i} @__text+0x{task.offset:x}: {task.size} bytes, {len(task.blocks)} register "
        f"blocks, {task.padding} bytes of padding"
    ]
    groups = [("Header", "aneTD.")] + [(b.name, f"aneRegs.{b.name}.") for b in task.blocks]
    for title, prefix in groups:
        shown = [f"{_short(k)}={v}" for k, v in fields.items() if k.startswith(prefix) and v]
        if shown:
            lines.append(f"    {title}: " + " ".join(shown))
    return lines


def _hwx_lines(hwx: Hwx) -> list[str]:
    m, c = hwx.macho, hwx.compiler
    lines = [
        f"{hwx.file}: hwx (compiled ANE program), generation {hwx.generation or 'unknown'} "
        f"(cputype 0x{m.cputype:x}, cpusubtype {m.cpusubtype})",
        "compiler: "
        + (
            f"{c.name} {c.version}, target {c.target}, {len(c.options)} options"
            if c
            else "no LC_IDENT"
        ),
        "load commands: "
        + ", ".join(f"{n} x{k}" for n, k in Counter(cmd.name for cmd in m.commands).items()),
        "segments:",
    ]
    for seg in m.segments:
        lines.append(
            f"  {seg.name:<12} vm 0x{seg.vmaddr:x}+0x{seg.vmsize:x} file 0x{seg.fileoff:x}+0x{seg.filesize:x}"
        )
        for s in seg.sections:
            lines.append(
                f"    {s.name:<10} 0x{s.addr:x} size 0x{s.size:x} file@0x{s.offset:x} kind 0x{s.kind:02x}"
            )
    lines.append("tensors:")
    for t in hwx.tensors:
        shape = f"{t.layout} {t.shape} strides {t.strides}" if t.shape else "shape unknown"
        lines.append(
            f"  {t.role:<7} {t.name:<16} {t.dtype or '?'} {shape}, {t.size} bytes @0x{t.address:x}"
        )
    total = sum(w.size for w in hwx.weights)
    lines.append(f"weights: {len(hwx.weights)} symbols, {total} bytes")
    lines += [f"  {w.name}  +0x{w.offset:x}  {w.size} bytes" for w in hwx.weights]
    lines.append(f"relocations: {len(hwx.relocations)}")
    for rel in hwx.relocations:
        task, names = _relocation_target(hwx, rel.address)
        target = f"symbol {rel.symbolnum}" if rel.extern else f"section {rel.symbolnum}"
        where = (
            f" (task {task}: {', '.join(names) or 'no known field'})" if task is not None else ""
        )
        lines.append(f"  __text+0x{rel.address:x}{where} += {target}")
    if hwx.tasks:
        lines.append(f"tasks: {len(hwx.tasks)} descriptors, fields from the H13 register map")
        for i, task in enumerate(hwx.tasks):
            lines += _task_lines(i, task)
    else:
        lines.append(
            f"tasks: no register map for this generation; __text is {len(hwx.raw_text)} raw words"
        )
    return lines


# ---- formats other modules read ----


def _weights_bin(data: bytes, name: str) -> tuple[dict, list[str]]:
    from anekit.mil.blob import read_records  # lazy: inspect works without the MIL toolchain

    records = read_records(data, file=name)
    rows = [
        {"offset": r.offset, "dtype": str(r.dtype), "data_offset": r.data_offset, "size": r.size}
        for r in records
    ]
    lines = [f"{name}: weight.bin (MILBlob v2), {len(records)} blobs"]
    lines += [
        f"  record @{r['offset']}: {r['dtype']}, {r['size']} bytes at {r['data_offset']}"
        for r in rows
    ]
    return {"format": "weight.bin", "file": name, "records": rows}, lines


def _mil(data: bytes, name: str) -> tuple[dict, list[str]]:
    from anekit.mil.loading import load_bytes  # lazy: inspect works without the MIL toolchain

    program = load_bytes(data, name)
    functions = {}
    lines = [f"{name}: MIL text, {len(program.functions)} functions"]
    for fname, fn in program.functions.items():
        counts = Counter(op.op_type for op in fn.ops)
        functions[fname] = {"ops": len(fn.ops), "op_types": dict(counts)}
        summary = ", ".join(f"{op} x{n}" for op, n in counts.most_common())
        lines.append(f"  {fname}: {len(fn.ops)} ops ({summary})")
    return {"format": "mil", "file": name, "functions": functions}, lines
