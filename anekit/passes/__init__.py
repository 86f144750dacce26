"""MIL -> MIL rewrites: the convert and device pipelines, each pass a module of its own.

A layer between ``hw`` (the chip limits passes respect) and ``backends`` (the ANE backend
runs the device pipeline); all of it is built on the one rewrite engine,
:mod:`anekit.mil.rewrite`. See :mod:`anekit.passes.pipelines` for the passes in order.
"""

from __future__ import annotations

from anekit.passes.attention import expand_attention
from anekit.passes.base import Pass
from anekit.passes.contraction import pad_contractions
from anekit.passes.dialect import legacy_dialect, save_dialect
from anekit.passes.fold import fold_constants
from anekit.passes.gather import gather_to_matmul
from anekit.passes.io_order import order_by_size
from anekit.passes.layout import ane_layout
from anekit.passes.logic import bool_logic
from anekit.passes.masks import finite_masks
from anekit.passes.packing import MAX_DIM, InputPacking, Segment, pack_inputs
from anekit.passes.pipelines import (
    CHIP_PASSES,
    CONVERT_PASSES,
    DEVICE_PASSES,
    PASSES,
    chip_profile,
    convert,
    device,
    for_chip,
    resolve_passes,
)
from anekit.passes.precision import fp16
from anekit.passes.split import split_wide
from anekit.passes.stable import stable_forms

__all__ = [
    "CHIP_PASSES",
    "CONVERT_PASSES",
    "DEVICE_PASSES",
    "MAX_DIM",
    "PASSES",
    "InputPacking",
    "Pass",
    "Segment",
    "ane_layout",
    "bool_logic",
    "chip_profile",
    "convert",
    "device",
    "expand_attention",
    "for_chip",
    "finite_masks",
    "fold_constants",
    "fp16",
    "gather_to_matmul",
    "legacy_dialect",
    "order_by_size",
    "pack_inputs",
    "pad_contractions",
    "resolve_passes",
    "save_dialect",
    "split_wide",
    "stable_forms",
]
