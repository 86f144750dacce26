"""I/O buffer layout and binding: read from the compiled model, or computed when it says nothing.

The ANE does not read tensors densely: each row (last axis) starts at a 64-byte
aligned stride (128 reported on M5), and channel planes may be padded further
(ANE_NOTES 2.5). After load, the compiled model's ``modelAttributes`` says so:
``NetworkStatusList[0]`` holds ``LiveInputList``/``LiveOutputList`` with ``Name``,
``Symbol``, ``Channels``, ``Height``, ``Width``, ``RowStride``, ``PlaneStride`` and
``Type`` per tensor, and ``ANEFModelDescription`` the input and output symbol arrays
that fix each tensor's request index (tmc/apple ``x/ane/compile.go``).

:func:`plan` turns that (or its absence) into a :class:`TensorLayout` per device
tensor and a request index per tensor. ``layout=`` and ``binding=`` switch the rules
(ANE_NOTES: do not hard-wire one side of a conflict):

- layout ``"auto"``: the model's attributes; only when it reports none at all, 64-byte
  rows computed here (and ``Kernel.layout`` says so). Attributes that are reported but
  cannot be matched to the program, or a ``RowStride`` that is not a multiple of 64, are
  a CompileError, as tmc's x/ane aborts: computed strides would be wrong for a tensor
  with several rows per channel. ``"model"``: the attributes or CompileError;
  ``"dense"``, ``"pad64"``, ``"pad128"``: computed rows of exactly that alignment
  (experiments: ``doctor --ladder`` tries each).
- binding ``"auto"``: the model's symbol arrays, else signature order; or force
  ``"symbols"``, ``"signature"``, ``"alphabetical"`` (Orion's finding) or ``"size"``
  (inputs ascending, outputs descending: a maderix issue's finding).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from anekit.backends.ane import facts
from anekit.backends.base import TensorSpec
from anekit.errors import CompileError

LAYOUTS = ("auto", "model", "dense", "pad64", "pad128")
BINDINGS = ("auto", "symbols", "signature", "alphabetical", "size")
_FORCED_ALIGNMENT = {"dense": 1, "pad64": 64, "pad128": 128}

# ``Type`` strings of LiveInputList entries and the element size each implies.
_TYPE_BYTES = {"Float16": 2, "Float32": 4, "Int8": 1, "UInt8": 1, "Int16": 2, "Int32": 4}
ROW_STRIDE_MULTIPLE = 64  # tmc's x/ane rejects a reported RowStride that is not one
INPUT_SYMBOLS_KEY = "kANEFModelInputSymbolsArrayKey"
OUTPUT_SYMBOLS_KEY = "kANEFModelOutputSymbolsArrayKey"


@dataclass(frozen=True)
class TensorLayout:
    """Where one device tensor's elements lie in its IOSurface: ``[C, H, W]`` rows and planes."""

    channels: int
    height: int
    width: int
    itemsize: int
    row_stride: int  # bytes from one row (W elements) to the next
    plane_stride: int  # bytes from one channel (H rows) to the next
    source: str

    @property
    def alloc_size(self) -> int:
        return self.channels * self.plane_stride

    def surface_properties(self) -> dict[str, int]:
        """``IOSurfaceCreate`` properties (``kIOSurface`` prefix dropped), as tmc's x/ane builds them."""
        return {
            "Width": self.width,
            "Height": self.channels * self.height,
            "BytesPerElement": self.itemsize,
            "BytesPerRow": self.row_stride,
            "AllocSize": self.alloc_size,
            "PixelFormat": 0,
        }

    def strides(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Byte strides of a ``shape`` view: the last axis is W, leading axes split into C then H."""
        if not shape:
            return ()
        lead = shape[:-1]
        for k in range(len(lead) + 1):
            if math.prod(lead[:k]) == self.channels and math.prod(lead[k:]) == self.height:
                out = [self.itemsize]
                step = self.row_stride
                for d in reversed(lead[k:]):
                    out.append(step)
                    step *= d
                step = self.plane_stride
                for d in reversed(lead[:k]):
                    out.append(step)
                    step *= d
                return tuple(reversed(out))
        raise CompileError(
            f"shape {list(shape)} cannot be read as {self.channels} channels of {self.height} rows"
        )


def computed(spec: TensorSpec, alignment: int, source: str) -> TensorLayout:
    """Rows of ``spec``'s last axis at ``alignment``-byte strides, no plane padding."""
    width = spec.shape[-1] if spec.shape else 1
    rows = math.prod(spec.shape[:-1]) if spec.shape else 1
    item = spec.dtype.itemsize
    row = -(-width * item // alignment) * alignment
    return TensorLayout(rows, 1, width, item, row, row, source)


# -- what the model reports ----------------------------------------------------------------------
@dataclass(frozen=True)
class Reported:
    """One ``LiveInputList``/``LiveOutputList`` entry."""

    name: str
    symbol: str
    channels: int
    height: int
    width: int
    row_stride: int
    plane_stride: int
    type: str


@dataclass(frozen=True)
class ModelIO:
    """The parts of ``modelAttributes`` that fix layout and binding."""

    inputs: tuple[Reported, ...]
    outputs: tuple[Reported, ...]
    input_symbols: tuple[str, ...] | None
    output_symbols: tuple[str, ...] | None


NO_ATTRIBUTES = "the compiled model reported no modelAttributes"


def parse_attributes(attrs: Any) -> ModelIO:
    """Read :class:`ModelIO` from plain ``modelAttributes``; CompileError says what is missing."""
    if not isinstance(attrs, Mapping) or not attrs:
        raise CompileError(NO_ATTRIBUTES)
    nets = attrs.get("NetworkStatusList")
    if not isinstance(nets, Sequence) or not nets or not isinstance(nets[0], Mapping):
        raise CompileError("modelAttributes has no NetworkStatusList[0]")
    lists = []
    for key in ("LiveInputList", "LiveOutputList"):
        entries = nets[0].get(key)
        if not isinstance(entries, Sequence) or not all(isinstance(e, Mapping) for e in entries):
            raise CompileError(f"modelAttributes NetworkStatusList[0] has no {key}")
        lists.append(tuple(_reported(e, key) for e in entries))
    desc = attrs.get("ANEFModelDescription")
    desc = desc if isinstance(desc, Mapping) else {}
    return ModelIO(lists[0], lists[1], _symbols(desc, INPUT_SYMBOLS_KEY),
                   _symbols(desc, OUTPUT_SYMBOLS_KEY))  # fmt: skip


def _reported(entry: Mapping[str, Any], key: str) -> Reported:
    def number(field: str) -> int:
        value = entry.get(field)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CompileError(f"a {key} entry has no integer {field} (found {value!r})")
        return value

    return Reported(
        name=str(entry.get("Name", "")),
        symbol=str(entry.get("Symbol", "")),
        channels=number("Channels"),
        height=number("Height"),
        width=number("Width"),
        row_stride=number("RowStride"),
        plane_stride=number("PlaneStride"),
        type=str(entry.get("Type", "")),
    )


def _symbols(desc: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    names = desc.get(key)
    if not isinstance(names, Sequence) or isinstance(names, str):
        return None
    return tuple(str(n) for n in names)


def _match(specs: Sequence[TensorSpec], entries: tuple[Reported, ...], kind: str) -> list[Reported]:
    """The reported entry of each spec: by Symbol, else Name; by position if neither names any."""
    by_key: dict[str, Reported] = {}
    for e in entries:
        for key in (e.symbol, e.name):
            if key:
                by_key.setdefault(key, e)
    found = [by_key.get(s.name) for s in specs]
    if all(e is not None for e in found):
        return found  # type: ignore[return-value]
    if len(entries) == len(specs) and not any(e.name or e.symbol for e in entries):
        return list(entries)
    missing = [s.name for s, e in zip(specs, found) if e is None]
    reported = [e.symbol or e.name for e in entries]
    raise CompileError(f"the model reports {kind}s {reported}, not {missing}")


def _from_reported(spec: TensorSpec, e: Reported) -> TensorLayout:
    item = _TYPE_BYTES.get(e.type, spec.dtype.itemsize)
    width = spec.shape[-1] if spec.shape else 1
    rows = math.prod(spec.shape[:-1]) if spec.shape else 1
    problems = []
    if item != spec.dtype.itemsize:
        problems.append(f"Type {e.type} is not {spec.dtype}")
    if e.width != width or e.channels * e.height != rows or min(e.channels, e.height) < 1:
        problems.append(
            f"C x H x W = {e.channels} x {e.height} x {e.width} is not {rows} x {width}"
        )
    if e.row_stride < width * item or e.plane_stride < e.height * e.row_stride:
        problems.append(f"RowStride {e.row_stride} / PlaneStride {e.plane_stride} are too small")
    if e.row_stride % ROW_STRIDE_MULTIPLE:
        problems.append(
            f"RowStride {e.row_stride} is not a multiple of {ROW_STRIDE_MULTIPLE} (tmc rejects it)"
        )
    if problems:
        raise CompileError(f"{spec.name}: the reported layout does not fit: {'; '.join(problems)}")
    layout = TensorLayout(e.channels, e.height, e.width, item, e.row_stride, e.plane_stride,
                          "model attributes")  # fmt: skip
    layout.strides(spec.shape)  # raises if the shape does not split into C and H
    return layout


# -- the plan ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IOPlan:
    """Per device input and output, in signature order: its layout and request index."""

    inputs: tuple[TensorLayout, ...]
    outputs: tuple[TensorLayout, ...]
    input_indices: tuple[int, ...]
    output_indices: tuple[int, ...]
    binding: str  # the rule the indices follow
    notes: tuple[str, ...]


def plan(
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    attrs: Any,
    *,
    layout: str = "auto",
    binding: str = "auto",
) -> IOPlan:
    """Layouts and request indices for the device tensors, from ``attrs`` (plain modelAttributes)."""
    check_choices(layout, binding)
    notes: list[str] = []
    try:
        io: ModelIO | None = parse_attributes(attrs)
    except CompileError as e:
        io, why = None, str(e)
    else:
        why = ""
    if layout in _FORCED_ALIGNMENT:
        align = _FORCED_ALIGNMENT[layout]
        source = f"computed: {layout} rows (layout={layout!r})"
        in_l = [computed(s, align, source) for s in inputs]
        out_l = [computed(s, align, source) for s in outputs]
    else:
        in_l, out_l = _reported_or_computed(inputs, outputs, io, why, layout, notes)
    in_idx, out_idx, rule = _indices(inputs, outputs, io, binding, notes)
    return IOPlan(tuple(in_l), tuple(out_l), in_idx, out_idx, rule, tuple(notes))


def check_choices(layout: str, binding: str) -> None:
    """ValueError for an unknown ``layout`` or ``binding`` (checked before anything compiles)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, found {layout!r}")
    if binding not in BINDINGS:
        raise ValueError(f"binding must be one of {BINDINGS}, found {binding!r}")


def _reported_or_computed(
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    io: ModelIO | None,
    why: str,
    layout: str,
    notes: list[str],
) -> tuple[list[TensorLayout], list[TensorLayout]]:
    if io is not None:
        try:
            in_e = _match(inputs, io.inputs, "input")
            out_e = _match(outputs, io.outputs, "output")
            return (
                [_from_reported(s, e) for s, e in zip(inputs, in_e)],
                [_from_reported(s, e) for s, e in zip(outputs, out_e)],
            )
        except CompileError as e:
            raise CompileError(
                f"layout={layout!r}: the compiled model's layout report cannot be used, and "
                f"computed strides could be wrong: {e}"
            ) from e
    if layout == "model" or why != NO_ATTRIBUTES:
        raise CompileError(f"layout={layout!r} needs the compiled model's layout: {why}")
    align = facts.value("row_alignment_bytes")
    source = f"computed: {align}-byte rows ({why})"
    notes.append(f"layout {source}")
    return [computed(s, align, source) for s in inputs], [
        computed(s, align, source) for s in outputs
    ]


def _indices(
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    io: ModelIO | None,
    binding: str,
    notes: list[str],
) -> tuple[tuple[int, ...], tuple[int, ...], str]:
    rule = binding
    if binding in ("auto", "symbols"):
        symbols = _symbol_indices(inputs, outputs, io)
        if symbols is not None:
            return symbols[0], symbols[1], "symbols"
        if binding == "symbols":
            raise CompileError("binding='symbols' needs the model's input and output symbol arrays")
        rule = "signature"
        notes.append("binding by signature order: the model reported no usable symbol arrays")
    return _by_rule(inputs, rule, ascending=True), _by_rule(outputs, rule, ascending=False), rule


def _symbol_indices(
    inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], io: ModelIO | None
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    if io is None or io.input_symbols is None or io.output_symbols is None:
        return None
    found = []
    for specs, symbols, entries in (
        (inputs, io.input_symbols, io.inputs),
        (outputs, io.output_symbols, io.outputs),
    ):
        position = {name: i for i, name in enumerate(symbols)}
        # an entry's Symbol is what the symbol array lists; its Name may be the MIL name
        alias = {e.name: e.symbol for e in entries if e.name and e.symbol}
        indices = [position.get(s.name, position.get(alias.get(s.name, ""), -1)) for s in specs]
        if -1 in indices or len(set(indices)) != len(indices):
            return None
        found.append(tuple(indices))
    return found[0], found[1]


def _by_rule(specs: Sequence[TensorSpec], rule: str, *, ascending: bool) -> tuple[int, ...]:
    """Request index of each spec when the device orders tensors by ``rule``."""
    order = list(range(len(specs)))
    if rule == "alphabetical":
        order.sort(key=lambda i: specs[i].name)
    elif rule == "size":
        order.sort(key=lambda i: specs[i].nbytes if ascending else -specs[i].nbytes)
    index = [0] * len(specs)
    for rank, i in enumerate(order):
        index[i] = rank
    return tuple(index)
