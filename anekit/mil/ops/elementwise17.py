"""The iOS17 changes of the elementwise ops (``ops/defs/iOS17/elementwise_unary.py``,
``activation.py`` in coremltools, read at commit e0e2f42): constant attributes in their own
float type domain, and clip's required ``alpha < beta``."""

from __future__ import annotations

import dataclasses

from anekit.mil.ops.activation import (
    ELU,
    LEAKY_RELU,
    LINEAR_ACTIVATION,
    PRELU,
    SCALED_TANH,
    SIGMOID_HARD,
)
from anekit.mil.ops.common import FP, require
from anekit.mil.ops.elementwise import CLIP, INVERSE, LOG, RSQRT
from anekit.mil.ops.registry import Args, OpDef, register
from anekit.mil.types import TensorType


def _own_domain(opdef: OpDef, names: tuple[str, ...]) -> OpDef:
    """iOS17: the named const parameters may have a float dtype other than x's (domain U)."""
    params = tuple(
        dataclasses.replace(p, domain="U", dtypes=FP) if p.name in names else p
        for p in opdef.params
    )
    note = f"iOS17: {', '.join(names)} may be fp16 or fp32 whatever x's dtype (type domain U)."
    doc = opdef.doc.replace("\n\nArgs:", f"\n\n{note}\n\nArgs:", 1)
    return register(opdef.evolve(since="ios17", params=params, doc=doc))


def _check_clip_order(a: Args) -> None:
    alpha, beta = float(a.const("alpha")), float(a.const("beta"))
    require(
        alpha < beta,
        "clip",
        "beta",
        lambda: f"expected alpha < beta (iOS17), found {alpha} >= {beta}",
    )


# epsilon, alpha and beta may have a float dtype other than x's (type domain U).
for _opdef, _names in (
    (LOG, ("epsilon",)),
    (RSQRT, ("epsilon",)),
    (INVERSE, ("epsilon",)),
    (LEAKY_RELU, ("alpha",)),
    (ELU, ("alpha",)),
    (PRELU, ("alpha",)),
    (SIGMOID_HARD, ("alpha", "beta")),
    (SCALED_TANH, ("alpha", "beta")),
    (LINEAR_ACTIVATION, ("alpha", "beta")),
):
    _own_domain(_opdef, _names)


def _clip_strict_infer(a: Args) -> TensorType:
    _check_clip_order(a)
    return a.x.type


register(
    CLIP.evolve(
        since="ios17",
        infer=_clip_strict_infer,
        doc=CLIP.doc.replace(
            "(beta wins if alpha > beta; NaN propagates)",
            "(iOS17: alpha < beta is required; NaN propagates)",
        ),
    )
)
