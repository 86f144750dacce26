"""The two pipelines: ``convert`` (any program -> what the ANE wants) and ``device`` (-> what the
ANE backend compiles). Each pass is a file of this package; this module only orders them.

:data:`CONVERT_PASSES` is the list ``from_torch`` runs, in order; ``passes=`` replaces it
(``passes=()`` keeps the program exactly as converted)::

    fold_constants   ops whose inputs are all constant become constants (fold.py)
    finite_masks     -inf (and below-fp16) additive masks on the way to a softmax become
                     -65504, the most negative finite fp16 (masks.py)
    fp16             fp32 inputs, constants and casts become fp16; a constant that would
                     overflow, or lose its significant values to zero, is a ConversionError
                     (precision.py)
    gather_to_matmul row lookups in a constant table (embeddings) become one-hot matmuls:
                     the one-op sweep found gather does not compile on the ANE (gather.py)
    ane_layout       linear / matmul with constant weights become 1x1 convs in the
                     [1, C, 1, S] layout; elementwise ops, norms and softmax over the
                     channel axis follow in that layout (layout.py)
    split_wide       convs with more channels than the chip allows are split and re-joined
                     (split.py)

:func:`device` is the ANE backend's list: ``fold_constants`` (skipped when the program
already went through it: it runs once per path), ``pack_inputs`` (packing.py) and
``order_by_size`` (io_order.py).

Every pass is output-equivalent on the reference backend; each rule says which pattern it
rewrites (a table keyed by MIL op type, or a trait).
"""

from __future__ import annotations

from collections.abc import Sequence

from anekit.errors import ConversionError
from anekit.hw import Chip, get_chip
from anekit.mil.program import Program
from anekit.passes.base import Pass
from anekit.passes.fold import fold_constants
from anekit.passes.gather import gather_to_matmul
from anekit.passes.io_order import order_by_size
from anekit.passes.layout import ane_layout
from anekit.passes.masks import finite_masks
from anekit.passes.packing import MAX_DIM, InputPacking, pack_inputs
from anekit.passes.precision import fp16
from anekit.passes.split import split_wide

CONVERT_PASSES: tuple[Pass, ...] = (
    Pass("fold_constants", fold_constants, "ops whose inputs are all constant become constants"),
    Pass("finite_masks", finite_masks, "-inf masks become -65504 (the most negative fp16)"),
    Pass("fp16", fp16, "fp32 inputs, constants and casts become fp16, without silent loss"),
    Pass("gather_to_matmul", gather_to_matmul, "embedding lookups become one-hot matmuls"),
    Pass("ane_layout", ane_layout, "linear/matmul with constant weights become 1x1 convs"),
    Pass("split_wide", split_wide, "convs over the chip's channel limit are split"),
)
PASSES: dict[str, Pass] = {p.name: p for p in CONVERT_PASSES}
DEVICE_PASSES = ("fold_constants", "pack_inputs", "order_by_size")  # in device()'s order


def resolve(passes: Sequence[Pass | str] | None) -> tuple[Pass, ...]:
    """Pass objects for ``passes`` (names or Pass; None: CONVERT_PASSES)."""
    if passes is None:
        return CONVERT_PASSES
    result = []
    for p in passes:
        if isinstance(p, Pass):
            result.append(p)
        elif p in PASSES:
            result.append(PASSES[p])
        else:
            raise ConversionError(f"unknown pass {p!r}; known passes: {', '.join(PASSES)}")
    return tuple(result)


def chip_profile(chip: str | Chip) -> Chip:
    """The profile of ``chip``; an unknown name is a ConversionError listing the known ones."""
    try:
        return get_chip(chip)
    except ValueError as e:
        raise ConversionError(str(e)) from None


def convert(
    program: Program, passes: Sequence[Pass | str] | None = None, chip: str | Chip = "m4"
) -> Program:
    """The convert pipeline: ``passes`` (default: CONVERT_PASSES) in order for ``chip``.

    The result records the passes that ran (``Program.passes_run``), so the device
    pipeline does not fold the constants a second time.
    """
    profile = chip_profile(chip)
    ran = set(program.passes_run)
    for p in resolve(passes):
        program = p(program, profile)
        ran.add(p.name)
    program.passes_run = frozenset(ran)
    return program


def device(
    program: Program, *, pack: bool = True, order: bool = True, max_dim: int = MAX_DIM
) -> tuple[Program, InputPacking | None]:
    """The device pipeline of the ANE backend: fold constants (once per path), pack the
    inputs, order I/O by size; returns the program and how its inputs were packed."""
    if "fold_constants" not in program.passes_run:
        program = fold_constants(program)
    program, packing = pack_inputs(program, max_dim=max_dim) if pack else (program, None)
    return (order_by_size(program) if order else program), packing
