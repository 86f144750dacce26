"""The program the ANE compiles: inputs packed, I/O ordered by size and renamed by index.

Which request index reaches which tensor is contested (ANE_NOTES 2.4, 2.5): Orion
finds surfaces bind in alphabetical order of the MIL names, a maderix issue finds
sizes must ascend for inputs and descend for outputs, tmc reads the symbol arrays.
With ``canonical_io`` (the default) the device program orders its inputs by
ascending and its outputs by descending byte size, then renames them ``i0_<name>``,
``i1_<name>``, ... and ``o0_<name>``, ... so that signature order, alphabetical order
and size order coincide whichever rule the hardware follows. The kernel keeps the
program's own names; :class:`DeviceProgram` maps between the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from anekit.mil import passes
from anekit.mil.ops import registry
from anekit.mil.parser import parse
from anekit.mil.passes import Packing
from anekit.mil.program import Function, Operation, Program, Value
from anekit.mil.verify import check_function


@dataclass(frozen=True)
class DeviceProgram:
    """The compiled form of a program and how its I/O names map back to the program's."""

    program: Program
    packing: Packing | None  # host inputs packed into one device input (host names inside)
    input_names: dict[str, str]  # device input name -> host input name (or the packing's name)
    output_names: dict[str, str]  # device output name -> host output name


def prepare(program: Program, *, pack_inputs: bool, canonical_io: bool) -> DeviceProgram:
    """The device program for ``program`` (see the module docstring)."""
    device, packing = passes.pack_inputs(program) if pack_inputs else (program, None)
    if not canonical_io:
        ins = {v.name: v.name for v in device.main.inputs}
        return DeviceProgram(device, packing, ins, {v.name: v.name for v in device.main.outputs})
    device = passes.order_by_size(device)
    fn = device.main
    taken = _names(device)
    new_in = _prefixed("i", [v.name for v in fn.inputs], taken)
    new_out = _prefixed("o", [v.name for v in fn.outputs], taken | set(new_in.values()))
    renamed = rename_io(device, new_in, new_out)
    return DeviceProgram(
        renamed,
        packing,
        {new: old for old, new in new_in.items()},
        {new: old for old, new in new_out.items()},
    )


def _names(program: Program) -> set[str]:
    fn = program.main
    return {v.name for v in fn.inputs} | {v.name for op in fn.ops for v in op.outputs}


def _prefixed(letter: str, names: list[str], taken: set[str]) -> dict[str, str]:
    """``name -> f"{letter}{k}_{name}"`` with k zero-padded so text order is numeric order."""
    width = len(str(max(len(names) - 1, 0)))
    out = {}
    for k, name in enumerate(names):
        new = f"{letter}{k:0{width}d}_{name}"
        while new in taken:
            new += "_"
        taken = taken | {new}
        out[name] = new
    return out


def rename_io(program: Program, inputs: dict[str, str], outputs: dict[str, str]) -> Program:
    """``program`` with ``main``'s inputs and outputs renamed (old -> new); ops are unchanged.

    An output that is also an input, or returned under two names, gets an ``identity`` op
    so each interface name names one value.
    """
    # Parse a private copy so renaming its values cannot touch the caller's program.
    copy = parse(program.to_text(), weights=program.weight_files())
    fn = copy.main
    output_names = [outputs.get(v.name, v.name) for v in fn.outputs]  # before inputs change
    for v in fn.inputs:
        v.name = inputs.get(v.name, v.name)
    input_ids = {id(v) for v in fn.inputs}
    ops, returned = list(fn.ops), []
    for v, new in zip(fn.outputs, output_names):
        if id(v) in input_ids or any(r is v for r in returned):
            v = _identity(v, new, fn.opset)
            ops.append(v.producer)  # type: ignore[arg-type]
        else:
            v.name = new
        returned.append(v)
    main = Function(fn.name, fn.inputs, tuple(ops), tuple(returned), fn.opset)
    check_function(main)
    return Program(
        {**program.functions, fn.name: main}, version=program.version, build_info=program.build_info
    )


def _identity(v: Value, name: str, opset: str) -> Value:
    out = Value(name, v.type)
    out.producer = Operation(registry.get("identity", opset), {"x": v}, (out,), {"name": name})
    return out
