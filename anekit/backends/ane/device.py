"""The program the ANE compiles: inputs packed, I/O ordered by size and renamed by index.

Which request index reaches which tensor is contested (ANE_NOTES 2.4, 2.5): Orion
finds surfaces bind in alphabetical order of the MIL names, a maderix issue finds
sizes must ascend for inputs and descend for outputs, tmc reads the symbol arrays.
With ``canonical_io`` (the default) the device program orders its inputs by
ascending and its outputs by descending byte size, then renames them ``i0_<name>``,
``i1_<name>``, ... and ``o0_<name>``, ... so that signature order, alphabetical order
and size order coincide whichever rule the hardware follows. Whether the compiler
names an output by its variable or by its op's ``name`` attribute is a hypothesis too
(the ``load`` rung of ``doctor --ladder`` records which): by default the producing op
is renamed with its variable, so both readings agree. The kernel keeps the
program's own names; :class:`DeviceProgram` maps between the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from anekit import passes
from anekit.mil.program import Program
from anekit.mil.rewrite import rename_io
from anekit.passes import InputPacking


@dataclass(frozen=True)
class DeviceProgram:
    """The compiled form of a program and how its I/O names map back to the program's."""

    program: Program
    packing: InputPacking | None  # host inputs packed into one device input (host names inside)
    input_names: dict[str, str]  # device input name -> host input name (or the packing's name)
    output_names: dict[str, str]  # device output name -> host output name


def prepare(
    program: Program,
    *,
    pack_inputs: bool,
    canonical_io: bool,
    max_dim: int,
    op_names: str = "match",
) -> DeviceProgram:
    """The device program for ``program`` (see the module docstring).

    ``max_dim`` is the chip's dimension limit: packing never builds a longer axis.
    ``op_names``: whether renamed outputs' ops take the new names too (``"match"``, so a
    compiler binding by op name agrees) or keep theirs (``"keep"``); see ``rename_io``.
    """
    device, packing = passes.device(program, pack=pack_inputs, order=canonical_io, max_dim=max_dim)
    fn = device.main
    if not canonical_io:
        ins = {v.name: v.name for v in fn.inputs}
        return DeviceProgram(device, packing, ins, {v.name: v.name for v in fn.outputs})
    taken = _names(device)
    new_in = _prefixed("i", [v.name for v in fn.inputs], taken)
    new_out = _prefixed("o", [v.name for v in fn.outputs], taken | set(new_in.values()))
    renamed = rename_io(device, new_in, new_out, op_names=op_names)
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
