"""Chip profiles, the ANE compatibility checker and the cost model."""

from __future__ import annotations

from anekit.hw.chips import Chip, chips, default_chip, get_chip

__all__ = ["Chip", "chips", "default_chip", "get_chip"]
