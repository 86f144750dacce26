"""Ops that every program needs: ``const`` and ``identity``."""

from __future__ import annotations

import numpy as np

from anekit.mil.ops.ranges import passes
from anekit.mil.ops.registry import Cost, OpDef, param, register
from anekit.mil.ops.traits import ATTRIBUTES, CONST, EXACT

register(
    OpDef(
        name="const",
        params=(param("val", const=True),),
        infer=lambda a: a.val.type,
        reference=lambda val: val,
        cost=lambda a, outs: Cost(0.0, 0.0, 0.0),
        traits=frozenset({CONST, ATTRIBUTES}),
        shape_only=frozenset({"val"}),
        doc="""A compile-time constant.

        Args:
            val (const tensor<T, *>): the value, inline or a BLOBFILE in a weight file.
        Returns:
            tensor<T, *>: the value.
        """,
    )
)

register(
    OpDef(
        name="identity",
        params=(param("x"),),
        infer=lambda a: a.x.type,
        reference=lambda x: np.array(x, copy=True),
        cost=lambda a, outs: Cost(0.0, a.input_bytes(), outs[0].nbytes or 0),
        traits=frozenset({EXACT}),
        ranges=passes("x"),
        doc="""Return the input unchanged.

        Args:
            x (tensor<T, *>): any tensor.
        Returns:
            tensor<T, *>: ``x``.
        """,
    )
)
