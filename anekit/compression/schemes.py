"""The compression schemes, declared once: what each stores, in which MIL form, from which opset.

A scheme is a pass over a program's layers (``anekit.compression.layers``): it encodes
every chosen weight (``anekit.compression.encode``) and the program is rebuilt with the
weight decoded by a constexpr op (``anekit.compression.rewrite``); ``w8a8`` also inserts
``quantize``/``dequantize`` on the activations its layers read. ``accuracy`` orders the
schemes from the most accurate (0) down: the fallback ladder of ``auto`` and of the
accuracy gate steps up it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from anekit.compression import encode
from anekit.compression.encode import Encoded
from anekit.compression.layers import Layer
from anekit.errors import UsageError
from anekit.mil.ops.registry import OPSETS, Encoding

DEFAULT_GROUP_SIZE = 16  # coremltools: groups of 8 or 16 keep accuracy and speed
DEFAULT_BLOCK_SIZE = 32


@dataclass(frozen=True)
class Options:
    """How a scheme encodes: granularity (None: the finest the program's opset has), sizes, seed."""

    granularity: str | None = None
    group_size: int = DEFAULT_GROUP_SIZE
    block_size: int = DEFAULT_BLOCK_SIZE
    seed: int = 0


@dataclass(frozen=True)
class Form:
    """One granularity of a scheme: the constexpr encoding it stores and the opset it needs."""

    encoding: str
    opset: str


@dataclass(frozen=True)
class Scheme:
    """One compression scheme (see the module docstring).

    Attributes:
        name: what users write (``--scheme``, ``compress=``).
        summary: one line for help and reports.
        bits: bits of one stored weight element.
        forms: granularity -> its form, the finest first.
        accuracy: 0 for the most accurate scheme, larger for coarser ones.
        activations: int8 activations too (W8A8).
        encoder: ``(layer, granularity, options) -> Encoded``.
    """

    name: str
    summary: str
    bits: int
    forms: dict[str, Form]
    accuracy: int
    encoder: Callable[[Layer, str, Options], Encoded]
    activations: bool = False

    def granularity(self, options: Options, opset: str) -> str:
        """The granularity to use in a program of ``opset``; UsageError if it is not there."""
        if options.granularity is None:
            for name, form in self.forms.items():
                if _at_least(opset, form.opset):
                    return name
            raise UsageError(
                f"{self.name} needs opset {min(f.opset for f in self.forms.values())} or later; "
                f"the program is {opset}"
            )
        form = self.forms.get(options.granularity)
        if form is None:
            raise UsageError(
                f"{self.name} has no granularity {options.granularity!r}; expected one of "
                f"{', '.join(self.forms)}"
            )
        if not _at_least(opset, form.opset):
            raise UsageError(
                f"{self.name} {options.granularity} needs opset {form.opset} or later; the "
                f"program is {opset} (choose another granularity)"
            )
        return options.granularity

    def encoding(self, granularity: str) -> Encoding:
        """The encoding the constexpr op of this granularity declares."""
        return Encoding(self.forms[granularity].encoding, self.bits)

    def encode(self, layer: Layer, granularity: str, options: Options) -> Encoded:
        return self.encoder(layer, granularity, options)

    def stored_bytes(
        self, shape: tuple[int, ...], axis: int, itemsize: int, granularity: str, options: Options
    ) -> int:
        """Bytes a weight of ``shape`` (output channels on ``axis``) takes stored, predicted."""
        n, channels = math.prod(shape), shape[axis]
        packed = -(-n * self.bits // 8)
        if self.forms[granularity].encoding == "lut":
            group = encode.group_of(channels, options.group_size)
            tables = 1 if granularity == "per_tensor" else channels // group
            return packed + tables * (1 << self.bits) * itemsize
        scales = {"per_tensor": 1, "per_channel": channels}.get(granularity)
        return packed + itemsize * (scales if scales is not None else n // options.block_size)


def _at_least(opset: str, needed: str) -> bool:
    return OPSETS.index(opset) >= OPSETS.index(needed)


def _int8(layer: Layer, granularity: str, options: Options) -> Encoded:
    return encode.affine_int8(layer.array, layer.axis, granularity, options.block_size)


def _lut(bits: int) -> Callable[[Layer, str, Options], Encoded]:
    def encoder(layer: Layer, granularity: str, options: Options) -> Encoded:
        return encode.palette(
            layer.array,
            layer.axis,
            bits,
            granularity,
            group_size=options.group_size,
            seed=options.seed,
        )

    return encoder


_INT8_FORMS = {
    "per_channel": Form("affine", "ios16"),
    "per_block": Form("blockwise", "ios18"),
    "per_tensor": Form("affine", "ios16"),
}
_LUT_FORMS = {"per_grouped_channel": Form("lut", "ios18"), "per_tensor": Form("lut", "ios16")}
# quantize/dequantize, which W8A8 puts on the activations, exist from iOS17
_W8A8_FORMS = {
    "per_channel": Form("affine", "ios17"),
    "per_block": Form("blockwise", "ios18"),
    "per_tensor": Form("affine", "ios17"),
}

SCHEMES: dict[str, Scheme] = {
    s.name: s
    for s in (
        Scheme(
            "int8",
            "int8 weights, a scale per output channel (weight only)",
            8,
            _INT8_FORMS,
            0,
            _int8,
        ),
        Scheme(
            "w8a8",
            "int8 weights and int8 activations into each layer (quantize/dequantize)",
            8,
            _W8A8_FORMS,
            1,
            _int8,
            activations=True,
        ),
        Scheme(
            "lut6",
            "6-bit palettes (k-means) per group of output channels",
            6,
            _LUT_FORMS,
            2,
            _lut(6),
        ),
        Scheme(
            "lut4",
            "4-bit palettes (k-means) per group of output channels",
            4,
            _LUT_FORMS,
            3,
            _lut(4),
        ),
    )
}
AUTO = "auto"
CHOICES = (*SCHEMES, AUTO)


def get_scheme(name: str) -> Scheme:
    """A scheme by name; UsageError lists the names."""
    scheme = SCHEMES.get(name)
    if scheme is None:
        raise UsageError(
            f"unknown compression scheme {name!r}; expected one of {', '.join(CHOICES)}"
        )
    return scheme
