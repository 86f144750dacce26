"""The trait vocabulary: every property a tool may ask of an op, declared once.

A tool never tests an op's name; it asks whether the op carries a trait (tinygrad's
``GroupOp`` sets are the model). Each trait below says what it promises and which
modules read it. ``register`` rejects a trait that is not declared here, and
``tests/test_ops_traits.py`` checks that every listed reader really reads its trait
(by name, or through one of the groups at the end of this file). A trait no tool reads
does not belong here: say it in the op's docstring instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Trait:
    """One declared trait: its name in ``OpDef.traits``, its promise, the modules that read it."""

    name: str
    meaning: str
    readers: tuple[str, ...]


VOCABULARY: dict[str, Trait] = {}


def _declare(name: str, readers: tuple[str, ...], meaning: str) -> str:
    VOCABULARY[name] = Trait(name, meaning, readers)
    return name


_COST = "anekit.hw.cost"
_OP_RULES = "anekit.hw.rules.ops"
_SIZE_RULES = "anekit.hw.rules.sizes"
_CHIP_RULES = "anekit.hw.rules.generations"
_WEIGHT_RULES = "anekit.hw.rules.compression"
_QUIRK_RULES = "anekit.hw.rules.quirks"
_REFERENCE = "anekit.backends.reference.planner"
_COMPRESS = ("anekit.compression.layers", "anekit.compression.auto")  # layers are MAC ops' weights

CONST = _declare(
    "const",
    (
        "anekit.mil.builder",
        "anekit.mil.parser",
        "anekit.mil.graph",
        _OP_RULES,
        _CHIP_RULES,
        _COST,
        _REFERENCE,
        "anekit.compression.layers",
        "anekit.passes.coreml",
    ),
    "the op is a constant: its one output is the value of its `val` argument",
)
CONSTEXPR = _declare(
    "constexpr",
    (
        "anekit.mil.ops.conv",
        "anekit.mil.graph",
        "anekit.passes.fold",
        "anekit.mil.verify",
        _OP_RULES,
        _CHIP_RULES,
        _WEIGHT_RULES,
        _QUIRK_RULES,
        _COST,
    ),
    "computed from constants when the device loads the program (decompression): known at "
    "compile time, and kept compressed in the weight file, so no pass expands it",
)
ATTRIBUTES = _declare(
    "attributes",
    ("anekit.mil.text", "anekit.mil.builder"),
    "every argument is a literal written in the attribute list `[...]`, not in `(...)`",
)
EXACT = _declare(
    "exact",
    (_REFERENCE,),
    "every float output element is a copy of an input element (or of a const), so storing it "
    "again in the same dtype changes nothing",
)
ELEMENTWISE = _declare(
    "elementwise",
    (_COST, "anekit.passes.coreml"),
    "each output element depends only on the input elements at the same (broadcast) position",
)
UNARY = _declare("unary", (_COST,), "an elementwise function of one tensor")
BINARY = _declare("binary", (_COST,), "an elementwise function of two broadcast tensors")
ACTIVATION = _declare("activation", (_COST,), "a nonlinearity applied after a conv or matmul")
COMPARISON = _declare("comparison", (_COST,), "an elementwise comparison giving bool")
CAST = _declare(
    "cast",
    (_OP_RULES, _CHIP_RULES, _COST),
    "converts the element type only; at the program's edge it runs outside the engine",
)
QUANTIZE = _declare(
    "quantize",
    (_COST,),
    "converts between floats and int8/uint8 with a scale and zero point (W8A8 edges)",
)
CONV = _declare(
    "conv",
    (_SIZE_RULES, _CHIP_RULES, _COST, *_COMPRESS),
    "a convolution: multiply-accumulates on the MAC array, channels on axis 1",
)
MATMUL = _declare(
    "matmul",
    (_SIZE_RULES, _COST, *_COMPRESS),
    "a matrix product: multiply-accumulates on the MAC array over `OpDef.contraction`",
)
MOVEMENT = _declare(
    "movement",
    ("anekit.passes.masks",),
    "rearranges, selects or repeats the elements of its tensor input(s) and computes nothing: "
    "what comes out is what went in, elsewhere",
)
REDUCTION = _declare(
    "reduction",
    ("anekit.passes.layout", _QUIRK_RULES),
    "combines `x`'s elements over the axes in `axes` into one per remaining position, keeping "
    "those axes with length 1 when `keep_dims`",
)
PROBABILITIES = _declare(
    "probabilities",
    ("anekit.passes.masks",),
    "turns scores into probabilities along an axis (softmax): an additive attention mask ends "
    "here, and any value at or below -65504 in it gives probability 0",
)
ATTENTION = _declare(
    "attention",
    (_CHIP_RULES, _QUIRK_RULES, _COST, *_COMPRESS),
    "fused scaled-dot-product attention (two matrix products around a softmax)",
)

# -- groups (tinygrad's GroupOp): sets of traits that tools ask for together --------------------
# known at compile time: a constant, or computed from constants when the program loads
COMPILE_TIME = frozenset({CONST, CONSTEXPR})
# multiply-accumulate work on the MAC array
MAC = frozenset({CONV, MATMUL, ATTENTION})
