"""The two pipelines: ``convert`` (any program -> what the ANE wants) and ``device`` (-> what the
ANE backend compiles). Each pass is a file of this package; this module only orders them.

:data:`CONVERT_PASSES` is the list ``from_torch`` runs, in order; ``passes=`` replaces it
(``passes=()`` keeps the program exactly as converted)::

    fold_constants   ops whose inputs are all constant become constants (fold.py)
    finite_masks     -inf (and below-fp16) additive masks on the way to a softmax become
                     MASK_MIN (-30000), the project's one mask value (masks.py)
    stable_forms     softplus, logsumexp and mish in forms the engine's exp saturation and
                     fp16 sums cannot overflow (N9, N10, N14) (stable.py)
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
    bool_logic       logical and/or/xor of bool tensors become select, add and a comparison
                     (the logical ops do not compile on the ANE) (logic.py)
    expand_attention on M1/M2, fused scaled_dot_product_attention (an ios18 op) written out as
                     matmul, softmax, matmul (attention.py)
    pad_contractions matmuls whose inner dimension breaks the chip's multiple (M1: 32) are
                     zero-padded to it (contraction.py)
    legacy_dialect   on M1/M2, the program rebuilt on ios16 op definitions, saved as
                     program(1.0) (dialect.py)

:func:`device` is the ANE backend's list: ``fold_constants`` (skipped when the program
already went through it: it runs once per path), ``pack_inputs`` (packing.py) and
``order_by_size`` (io_order.py).

Every pass is output-equivalent on the reference backend; each rule says which pattern it
rewrites (a table keyed by MIL op type, or a trait).
"""

from __future__ import annotations

from collections.abc import Sequence

from anekit.errors import ConversionError
from anekit.hw.chips import Chip, resolve
from anekit.mil.program import Program
from anekit.passes.attention import expand_attention
from anekit.passes.base import Pass
from anekit.passes.contraction import pad_contractions
from anekit.passes.dialect import legacy_dialect
from anekit.passes.fold import fold_constants
from anekit.passes.gather import gather_to_matmul
from anekit.passes.io_order import order_by_size
from anekit.passes.layout import ane_layout
from anekit.passes.logic import bool_logic
from anekit.passes.masks import finite_masks
from anekit.passes.packing import MAX_DIM, InputPacking, pack_inputs
from anekit.passes.precision import fp16
from anekit.passes.provenance import record
from anekit.passes.split import split_wide
from anekit.passes.stable import stable_forms

CONVERT_PASSES: tuple[Pass, ...] = (
    Pass("fold_constants", fold_constants, "ops whose inputs are all constant become constants"),
    Pass("finite_masks", finite_masks, "-inf masks become MASK_MIN (-30000)"),
    Pass("stable_forms", stable_forms, "softplus/logsumexp/mish in overflow-safe forms"),
    Pass("fp16", fp16, "fp32 inputs, constants and casts become fp16, without silent loss"),
    Pass("gather_to_matmul", gather_to_matmul, "embedding lookups become one-hot matmuls"),
    Pass("ane_layout", ane_layout, "linear/matmul with constant weights become 1x1 convs"),
    Pass("split_wide", split_wide, "convs over the chip's channel limit are split"),
    Pass("bool_logic", bool_logic, "logical and/or/xor become select, add and a comparison"),
    Pass("expand_attention", expand_attention, "M1/M2: fused attention as matmul/softmax/matmul"),
    Pass("pad_contractions", pad_contractions, "matmul inner dims padded to the chip's multiple"),
    Pass("legacy_dialect", legacy_dialect, "M1/M2: ios16 op definitions, saved as program(1.0)"),
)
PASSES: dict[str, Pass] = {p.name: p for p in CONVERT_PASSES}
# the passes that make any program (a compressed one too) satisfy one chip's rules
CHIP_PASSES = ("bool_logic", "expand_attention", "pad_contractions", "legacy_dialect")
DEVICE_PASSES = ("fold_constants", "pack_inputs", "order_by_size")  # in device()'s order


def resolve_passes(passes: Sequence[Pass | str] | None) -> tuple[Pass, ...]:
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


def chip_profile(chip: str | Chip | None) -> Chip:
    """The profile of ``chip`` (:func:`anekit.hw.chips.resolve`); an unknown name is a
    ConversionError listing the known ones."""
    try:
        return resolve(chip)
    except ValueError as e:
        raise ConversionError(str(e)) from None


def convert(
    program: Program, passes: Sequence[Pass | str] | None = None, chip: str | Chip | None = None
) -> Program:
    """The convert pipeline: ``passes`` (default: CONVERT_PASSES) in order for ``chip``.

    The result records the passes that ran (``Program.passes_run``), so the device
    pipeline does not fold the constants a second time, and, in its ``buildInfo``, what the
    passes chose (:mod:`anekit.passes.provenance`: ``anekit check`` shows it as facts).
    """
    profile = chip_profile(chip)
    ran, before = set(program.passes_run), program
    todo = resolve_passes(passes)
    for p in todo:
        program = p(program, profile)
        ran.add(p.name)
    program.passes_run = frozenset(ran)
    if todo:  # what the passes chose, for ``anekit check`` (provenance.py)
        record(program, layouts="ane_layout" in ran, before=before)
    return program


def for_chip(program: Program, chip: str | Chip) -> Program:
    """The chip-specific passes alone (``anekit compress --chip``): M1's contraction padding,
    M1/M2's dialect, what the ANE cannot run (logical ops)."""
    return convert(program, CHIP_PASSES, chip)


def device(
    program: Program, *, pack: bool = True, order: bool = True, max_dim: int = MAX_DIM
) -> tuple[Program, InputPacking | None]:
    """The device pipeline of the ANE backend: fold constants (once per path), pack the
    inputs, order I/O by size; returns the program and how its inputs were packed."""
    if "fold_constants" not in program.passes_run:
        program = fold_constants(program)
    program, packing = pack_inputs(program, max_dim=max_dim) if pack else (program, None)
    return (order_by_size(program) if order else program), packing
