"""Weight compression that knows the chip: int8, W8A8 and 4/6-bit palettes, or ``auto``.

    import anekit
    small = anekit.compress(program, "lut4", chip="m4")            # a new Program
    result = anekit.compress.compress_with_report(program, "auto", chip="m1", max_error=0.01)
    print("\\n".join(result.report.lines()))

The module itself is callable: ``anekit.compress(...)`` is :func:`compress` (the public
API names the function after the package, so the package answers to a call; nothing
else about it is unusual). Schemes are declared in :data:`SCHEMES`; which chips stream
each stored encoding is data (``anekit/hw/data/compression.json``).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from anekit.compress.api import (
    Compressed,
    CompressState,
    compress,
    compress_with_report,
    weight_bytes,
)
from anekit.compress.layers import MIN_ELEMENTS, Layer, find_layers
from anekit.compress.report import CompressReport, LayerReport
from anekit.compress.schemes import AUTO, CHOICES, SCHEMES, Options, Scheme, get_scheme

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


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`compress` (Python allows a module to set its class)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return compress(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
