"""The checker's rules, as a table: (id, severity, which chips, check, evidence).

Each rule states one known ANE constraint and the public evidence for it. Where the
evidence conflicts, the rule is a warning that names both sides; nothing here
silently picks one. Op-level facts come from data: the ANEForge one-op sweep
(``data/mil_op_sweep.json``) and the ops ANE_NOTES section 3 saw working on M4.
"""

from __future__ import annotations

from anekit.hw.kinds import Severity
from anekit.hw.rules.base import Context, Finding, Rule, every_chip, legacy_chip
from anekit.hw.rules.compression import compression_findings
from anekit.hw.rules.generations import (
    legacy_dialect,
    legacy_fp32_cast,
    legacy_multi_blob,
    m3_conv_channels,
    sdpa_mask,
)
from anekit.hw.rules.io import multi_input, multi_input_order
from anekit.hw.rules.ops import (
    NOTES_M4_SOURCE,
    SWEEP_SOURCE,
    op_conflicting,
    op_incorrect,
    op_unsupported,
    op_unverified,
    preferred_spelling,
)
from anekit.hw.rules.quirks import (
    N6,
    N15,
    N17,
    blockwise_int,
    fused_scale_dropped,
    sdpa_window,
    zero_scale_after_reduce,
)
from anekit.hw.rules.ranges import (
    FP16,
    N1,
    N7,
    N12,
    N22,
    fp16_overflow,
    fp16_saturation,
    index_precision,
    slice_clamp,
    subnormal_flush,
)
from anekit.hw.rules.sizes import (
    conv_input_channels,
    dim_limits,
    dynamic_shapes,
    last_axis_padding,
    m1_matmul_k,
    program_bytes,
    program_memory,
    rank_limit,
    tensor_bytes,
    weights_ceiling,
    zero_size,
)

ERROR, WARNING, INFO = Severity  # the severities the table below gives, most serious first

__all__ = ["RULES", "Context", "Finding", "Rule", "program_memory"]

RULES: tuple[Rule, ...] = (
    Rule("dynamic-shape", ERROR, "every shape must be static", "ANE_NOTES section 1 (DMA fixed at compile time)",
         every_chip, dynamic_shapes),
    Rule("op-unsupported", ERROR, "op did not compile in the one-op sweep", SWEEP_SOURCE,
         every_chip, op_unsupported),
    Rule("op-conflicting-evidence", WARNING, "sweep and ANE_NOTES disagree on the op",
         f"{SWEEP_SOURCE}; {NOTES_M4_SOURCE}", every_chip, op_conflicting),
    Rule("op-incorrect", WARNING, "op compiled but was wrong in the one-op sweep", SWEEP_SOURCE,
         every_chip, op_incorrect),
    Rule("op-unverified", INFO, "no evidence the op's results are right on the ANE", SWEEP_SOURCE,
         every_chip, op_unverified),
    Rule("zero-size", ERROR, "a tensor has a zero-size dimension",
         "ANE_NOTES 2.5 (surface layout); coremltools' MILBlob reader refuses empty data; estimate: "
         "no published run of an empty tensor", every_chip, zero_size),
    Rule("rank-limit", ERROR, "a tensor's rank exceeds the compiler's limit",
         "ANEForge graph.py: ANECCompile rejects rank 6 and more", every_chip, rank_limit),
    Rule("tensor-bytes", ERROR, "a tensor is too large for the ANE's DMA addressing",
         "estimate: tinygrad's H13 register map (32-bit DMA offsets and strides)", every_chip,
         tensor_bytes),
    Rule("program-memory", ERROR, "the program needs more memory at once than the ANE addresses",
         "estimate: tinygrad's H13 register map (32-bit DMA offsets); ANE_NOTES 2.4 (~2 GB weights)",
         every_chip, program_bytes),
    Rule("dim-limit", ERROR, "a dimension exceeds the chip's limit",
         "ANE_NOTES 2.4 (65536, M4); ANEForge capabilities (16384 spatial through A15)", every_chip, dim_limits),
    Rule("conv-input-channels", ERROR, "too many conv input channels",
         "ANE_NOTES 2.4: 32000-input-channel conv rejected, 32000 output channels work", every_chip,
         conv_input_channels),
    Rule("sdpa-mask", ERROR, "scaled_dot_product_attention ignores attn_mask",
         "ANE_NOTES 2.4; maderix/ANE README (Limitations)", every_chip, sdpa_mask),
    Rule("weights-ceiling", ERROR, "weights over the per-program ceiling",
         "ANE_NOTES 2.4: ~2 GB of weights per program (e5rt path)", every_chip, weights_ceiling(True)),
    Rule("weights-near-ceiling", WARNING, "weights within 20% of the per-program ceiling",
         "ANE_NOTES 2.4: ~2 GB of weights per program (e5rt path)", every_chip, weights_ceiling(False)),
    Rule("multi-input-order", WARNING, "multiple inputs not ordered by size",
         "ANE_NOTES 2.4 (three reports disagree)", every_chip, multi_input_order),
    Rule("multi-input", INFO, "multiple inputs", "ANE_NOTES 2.4 (three reports disagree)",
         every_chip, multi_input),
    Rule("last-axis-padding", WARNING, "tiny last axis wastes memory",
         "ANE_NOTES section 1; Apple ml-ane-transformers (last axis padded to 64 bytes)", every_chip,
         last_axis_padding),
    Rule("preferred-spelling", INFO, "an op has a better-supported spelling", "ANE_NOTES 2.4",
         every_chip, preferred_spelling),
    Rule("m1-matmul-k", ERROR, "M1 matmul inner dimension must be a multiple of 32", "ANE_NOTES 2.4",
         lambda chip: chip.matmul_k_multiple > 1, m1_matmul_k),
    Rule("legacy-dialect", WARNING, "M1/M2 want program(1.0) / ios16",
         "ANE_NOTES 2.4; maderix/ANE cross-generation report (M1: program(1.3) partial)", legacy_chip,
         legacy_dialect),
    Rule("legacy-fp32-cast", WARNING, "fp32 casts may be unsupported on M1/M2", "ANE_NOTES 2.4",
         legacy_chip, legacy_fp32_cast),
    Rule("legacy-multi-blob", WARNING, "M1/M2 reject multi-blob weight files",
         "ANE_NOTES 2.4 and section 4; maderix/ANE report", legacy_chip, legacy_multi_blob),
    Rule("compression-folds", WARNING, "the chip folds this weight encoding to dense fp16",
         "data/compression.json (ANEForge per-family compressed-weight streaming)", every_chip,
         lambda ctx: compression_findings(ctx, "folds")),
    Rule("compression-unverified", INFO, "no evidence how the chip treats this weight encoding",
         "data/compression.json", every_chip, lambda ctx: compression_findings(ctx, None)),
    Rule("m3-conv-channels", WARNING, "only 512-channel convs reported to compile on M3",
         "maderix/ANE cross-generation report (M3 Pro); maderix/ANE issue #42 (M3 Ultra)",
         lambda chip: chip.generation == "H15", m3_conv_channels),
    # numerics catalogue rows that are compiler or engine bugs (docs/numerics.md)
    Rule("fused-scale-dropped", WARNING, "a scalar multiply after floor/ceil/round is dropped",
         N6, every_chip, fused_scale_dropped),
    Rule("zero-scale-after-reduce", WARNING, "a multiply by the scalar 0 after a reduction crashes "
         "the compiler", N6, every_chip, zero_scale_after_reduce),
    Rule("sdpa-window", WARNING, "fused attention is reliable only up to 2048 keys, not with both "
         "lengths >= 512, and applies one mask plane to every head", N15, every_chip, sdpa_window),
    Rule("blockwise-int", WARNING, "per-block integer weights come out wrong on the Neural Engine",
         N17, every_chip, blockwise_int),
    Rule("index-precision", WARNING, "an index over an axis longer than 2048 is inexact in fp16",
         N22, every_chip, index_precision),
    # range rules: silent unless the check was given input ranges or calibration data
    Rule("fp16-saturation", WARNING, "a matmul/linear output may exceed the family's saturation", N1,
         every_chip, fp16_saturation),
    Rule("fp16-overflow", WARNING, "a value may exceed fp16's 65504", FP16, every_chip, fp16_overflow),
    Rule("slice-clamp", WARNING, "a width-offset slice may clamp its values to inf", N7, every_chip,
         slice_clamp),
    Rule("subnormal-flush", WARNING, "a value below 2^-14 may be flushed to 0, then divided by",
         N12, every_chip, subnormal_flush),
)  # fmt: skip
