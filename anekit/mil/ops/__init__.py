"""The op registry and every op family; importing this package registers all ops."""

from anekit.mil.ops import (  # noqa: F401  (each module registers its ops on import)
    attention,
    conv,
    core,
    elementwise,
    linear,
    norm,
    pool,
    quant,
    reduction,
    registry,
    shape,
)

__all__ = ["registry"]
