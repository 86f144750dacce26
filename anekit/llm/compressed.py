"""Compressed LLM weights: decoder layers compiled as segments with constexpr weights.

``load(..., compress=SCHEME)`` trades the dynamic-weight kernels (one block program for
every layer, weights passed as fp16 inputs) for *segments*: programs of several
consecutive layers whose weights are compiled in and stored compressed by
``anekit.compress``. That is where the saving is real on the ANE: a constexpr weight
stays compressed in DRAM and is decompressed as it streams, on the chips that stream
its encoding (``anekit/hw/data/compression.json``), while a weight *input* crosses as
fp16 on every call. Decompressing inside the program from compressed inputs was the
other way; it was not taken: a LUT lookup from a runtime index tensor has no ANE
primitive (it would be a gather or a one-hot matmul 16-64x the weight's work), and an
int8 input would need per-layer runtime scales and a mid-graph conversion the notes
call doubtful (ANE_NOTES 2.4).

The price is compiles: each segment is compiled once per token width (the prefill chunk,
and each decode cache bucket it reaches). :func:`plan_segments` packs the layers into
the fewest segments whose stored weights stay under ``SEGMENT_BYTES`` (half the ~2 GB
per-program ceiling), and refuses a plan that could exceed the compile budget.

``compress="fp16"`` compiles the same segments with fp16 constants: weights compiled in,
nothing compressed (the reference point for what compression adds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from anekit.backends.budget import DEFAULT_LIMIT
from anekit.compression import SCHEMES
from anekit.compression.schemes import Options
from anekit.errors import UsageError
from anekit.hw.chips import Chip
from anekit.hw.compression import streams
from anekit.llm import kernels as K
from anekit.llm.config import LlmConfig

FP16 = "fp16"  # compile the weights in, uncompressed
CHOICES = (*SCHEMES, FP16)
SEGMENT_BYTES = 1.0e9  # stored weights per segment: half the ~2 GB per-program ceiling
MIN_ELEMENTS = 4096  # as anekit.compress: norms and biases stay fp16
WEIGHT_AXIS = 2  # block weights are [1, 1, out, in]: output channels on axis 2


def check_scheme(scheme: str, config: LlmConfig | None = None) -> str:
    """``scheme`` if an LLM (of ``config``) can be loaded with it; UsageError says why not."""
    if config is not None and config.experts and scheme != FP16:
        raise UsageError(
            f"compress={scheme!r} is not supported for mixtures of experts "
            f"({config.architecture}): the experts' stacked weights are not quantized per "
            f"expert yet; load without compress (or with {FP16!r})"
        )
    if scheme in CHOICES:
        return scheme
    if scheme == "auto":
        raise UsageError(
            "compress='auto' is not offered for language models: a segment is compiled once per "
            "token width, and every width must decode the same weights, which per-program "
            f"choices do not promise; choose one of {', '.join(CHOICES)}"
        )
    raise UsageError(f"unknown compression scheme {scheme!r}; expected one of {', '.join(CHOICES)}")


def layer_bytes(config: LlmConfig, scheme: str) -> int:
    """Stored bytes of one decoder layer's weights under ``scheme``."""
    total = 0
    for shape in K.block_weight_shapes(config).values():
        total += weight_bytes(shape, scheme)
    return total


def weight_bytes(shape: tuple[int, ...], scheme: str) -> int:
    """Stored bytes of one fp16 weight of ``shape`` under ``scheme`` (small ones stay fp16)."""
    dense = 2 * math.prod(shape)
    if scheme == FP16 or math.prod(shape) < MIN_ELEMENTS:
        return dense
    s = SCHEMES[scheme]
    granularity = s.granularity(Options(), "ios18")
    return s.stored_bytes(shape, WEIGHT_AXIS, 2, granularity, Options())


def plan_segments(config: LlmConfig, scheme: str, widths: int) -> list[range]:
    """The layers of each segment: the fewest segments with stored weights under SEGMENT_BYTES.

    ``widths`` is how many shapes each segment may be compiled for (the prefill chunk and
    every decode cache bucket). Raises UsageError when compiling every segment for each,
    plus the head for two token widths, could exceed the compile budget.
    """
    per_layer = max(layer_bytes(config, scheme), 1)
    size = max(1, min(config.n_layers, int(SEGMENT_BYTES // per_layer)))
    count = math.ceil(config.n_layers / size)
    size = math.ceil(config.n_layers / count)  # near-equal segments
    segments = [range(i, min(i + size, config.n_layers)) for i in range(0, config.n_layers, size)]
    compiles = len(segments) * widths + 2
    if compiles > DEFAULT_LIMIT:
        raise UsageError(
            f"{len(segments)} segments of {size} layers, each compiled for {widths} shapes, may "
            f"need {compiles} compiles, over the budget of {DEFAULT_LIMIT} per process; load "
            "with a smaller max_seq, or without compress"
        )
    return segments


def streamed_scheme(scheme: str, chip: Chip) -> str:
    """What ``scheme``'s weights stream as on ``chip``: itself where the chip streams its
    encoding compressed, else fp16 (a chip that folds it, e.g. M1 and int8, decompresses
    the weights at compile time and streams them dense)."""
    if scheme == FP16:
        return FP16
    s = SCHEMES[scheme]
    return scheme if streams(s.encoding(s.granularity(Options(), "ios18")), chip) else FP16


def head_bytes(config: LlmConfig, pieces: Sequence[int], scheme: str) -> int:
    """Stored bytes of the output head (its pieces and the final norm)."""
    d = config.dim
    return sum(weight_bytes((1, 1, rows, d), scheme) for rows in pieces) + 2 * d
