"""Weight compression that knows the chip: int8, W8A8 and 4/6-bit palettes, or ``auto``.

    import anekit
    small = anekit.compress(program, "lut4", chip="m4")            # a new Program
    result = anekit.compress_with_report(program, "auto", chip="m1", max_error=0.01)
    print("\\n".join(result.report.lines()))

``anekit.compress`` is the plain function :func:`compress` of this package. Schemes are
declared in :data:`SCHEMES`; which chips stream each stored encoding is data
(``anekit/hw/data/compression.json``).
"""

from __future__ import annotations

from anekit.compression.api import (
    Compressed,
    CompressState,
    compress,
    compress_with_report,
    weight_bytes,
)
from anekit.compression.layers import MIN_ELEMENTS, Layer, find_layers
from anekit.compression.report import CompressReport, LayerReport
from anekit.compression.schemes import AUTO, CHOICES, SCHEMES, Options, Scheme, get_scheme

__all__ = [
    "AUTO",
    "CHOICES",
    "MIN_ELEMENTS",
    "SCHEMES",
    "CompressReport",
    "CompressState",
    "Compressed",
    "Layer",
    "LayerReport",
    "Options",
    "Scheme",
    "compress",
    "compress_with_report",
    "find_layers",
    "get_scheme",
    "weight_bytes",
]
