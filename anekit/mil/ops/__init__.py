"""The op registry and every op family; importing this package registers all ops."""

from anekit.mil.ops import (  # noqa: F401  (each module registers its ops on import)
    activation,
    attention,
    constexpr,
    conv,
    core,
    elementwise,
    elementwise17,
    indexing,
    linear,
    norm,
    pool,
    quant,
    reduction,
    registry,
    shape,
    spatial,
)

__all__ = ["registry"]
