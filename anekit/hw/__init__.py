"""Chip profiles, the ANE compatibility checker and the cost model.

from anekit.hw import chips, check, estimate
chips()                         # ["m1", ..., "m5-max"]
check(program, chip="m4")       # list[Diagnostic]; chip=None: this Mac's, else m4
estimate(program, chip="m4")    # Estimate: seconds, flops, bytes, per-op rows
"""

from __future__ import annotations

from anekit.hw.chips import Chip, chips, default_chip, get_chip, resolve
from anekit.hw.compat import Diagnostic, check
from anekit.hw.cost import Estimate, OpEstimate, estimate

__all__ = [
    "Chip",
    "Diagnostic",
    "Estimate",
    "OpEstimate",
    "check",
    "chips",
    "default_chip",
    "estimate",
    "get_chip",
    "resolve",
]
