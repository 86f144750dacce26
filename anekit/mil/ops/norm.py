"""Normalisations: layer_norm, batch_norm, instance_norm, l2_norm, local_response_norm.

Parameter names, defaults, dtype domains and shape rules follow coremltools'
op definitions (coremltools/converters/mil/mil/ops/defs/iOS15/normalization.py;
iOS17/normalization.py only lets the parameters other than ``x`` take their own
float dtype, domain "U"). References compute in fp32; epsilon is added to the
variance inside the square root.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from anekit.mil.ops.common import (
    FP,
    INT32,
    TRANSCENDENTAL,
    axes_indices,
    per_output_element,
    require,
)
from anekit.mil.ops.ranges import (
    affine_per_channel,
    response_normalized,
    standardized,
    unit_ball,
)
from anekit.mil.ops.registry import (
    Args,
    Cost,
    InferFn,
    OpDef,
    Param,
    param,
    register,
)
from anekit.mil.types import TensorType

# -- shared helpers --------------------------------------------------------------------------


def _x_param(ranks: tuple[int, ...] | None = None) -> Param:
    return param("x", FP, ranks=ranks, domain="T")


def _const_param(name: str, *, ranks: tuple[int, ...] | None = (1,), **kw: Any) -> Param:
    """A const float parameter sharing x's dtype (domain T; its own domain U from iOS17)."""
    return param(name, FP, ranks=ranks, const=True, domain="T", **kw)


def _epsilon(default: float) -> Param:
    return _const_param("epsilon", ranks=(0,), default=default)


def _register_with_ios17_domain(opdef: OpDef) -> None:
    """Register ``opdef`` for iOS15 and, for iOS17, with every T parameter but x in domain U."""
    register(opdef)
    params = tuple(
        dataclasses.replace(p, domain="U") if p.domain == "T" and p.name != "x" else p
        for p in opdef.params
    )
    note = (
        "\n        iOS17: the parameters other than ``x`` may be fp16 or fp32 independently of x.\n"
    )
    register(opdef.evolve(since="ios17", params=params, doc=opdef.doc + note))


def _require_shape(a: Args, name: str, expected: tuple) -> None:
    value = getattr(a, name)
    if value is None:
        return
    require(
        tuple(value.shape) == tuple(expected),
        a.opdef.name,
        name,
        lambda: (
            f"expected shape {list(expected)} (from x {list(a.x.shape)}), found {list(value.shape)}"
        ),
    )


def _require_rank_at_least(a: Args, rank: int) -> None:
    require(
        a.x.rank >= rank,
        a.opdef.name,
        "x",
        lambda: f"expected rank >= {rank}, found rank {a.x.rank} {a.x.type}",
    )


def _infer_channel_params(names: tuple[str, ...]) -> InferFn:
    """Infer for ops whose ``names`` parameters are per-channel vectors of length x.shape[1]."""

    def infer(a: Args) -> TensorType:
        for name in names:
            _require_shape(a, name, (a.x.shape[1],))
        return a.x.type

    return infer


def _normalize(x: np.ndarray, axes: tuple[int, ...], epsilon: np.ndarray) -> np.ndarray:
    """(x - mean) / sqrt(var + epsilon) over ``axes``, with the population variance."""
    centered = x - np.mean(x, axis=axes, keepdims=True)
    variance = np.mean(np.square(centered), axis=axes, keepdims=True)
    return centered / np.sqrt(variance + epsilon)


def _scale_shift(
    y: np.ndarray, shape: list[int], gamma: np.ndarray | None, beta: np.ndarray | None
) -> np.ndarray:
    """``y * gamma + beta`` with gamma and beta reshaped to broadcast as ``shape``."""
    if gamma is not None:
        y = y * np.reshape(gamma, shape)
    if beta is not None:
        y = y + np.reshape(beta, shape)
    return y


def _channel_shape(x: np.ndarray) -> list[int]:
    return [1, x.shape[1]] + [1] * (x.ndim - 2)


# -- layer_norm ----------------------------------------------------------------------------------


def _infer_layer_norm(a: Args) -> TensorType:
    axes = sorted(axes_indices("layer_norm", "axes", a.const("axes"), a.x.rank))
    normalized = tuple(a.x.shape[i] for i in axes)
    for name in ("gamma", "beta"):
        _require_shape(a, name, normalized)
    return a.x.type


def _normalized_count(a: Args) -> Any:
    """How many elements layer_norm normalises together (the product of x's dims at axes)."""
    axes = [int(v) % a.x.rank for v in np.ravel(a.const("axes"))]
    dims = [a.x.shape[i] for i in axes]
    return math.prod(dims) if all(isinstance(d, int) for d in dims) else None


def _layer_norm(
    x: np.ndarray,
    axes: np.ndarray,
    epsilon: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
) -> np.ndarray:
    ax = tuple(sorted(int(v) % x.ndim for v in np.ravel(axes)))
    shape = [d if i in ax else 1 for i, d in enumerate(x.shape)]
    return _scale_shift(_normalize(x, ax, epsilon), shape, gamma, beta)


_register_with_ios17_domain(
    OpDef(
        name="layer_norm",
        params=(
            _x_param(),
            param(
                "axes",
                INT32,
                ranks=(1,),
                const=True,
                default=lambda a: np.arange(a.x.rank, dtype=np.int32),
            ),
            _const_param("gamma", ranks=None, optional=True),
            _const_param("beta", ranks=None, optional=True),
            _epsilon(1e-5),
        ),
        infer=_infer_layer_norm,
        shape_only=frozenset({"gamma", "beta"}),
        reference=_layer_norm,
        ranges=standardized(_normalized_count),
        flush_sensitive=frozenset({"epsilon"}),  # a variance of 0 leaves eps alone under the rsqrt
        # mean, subtract, square, sum, scale by 1/std, gamma, beta
        cost=per_output_element(7),
        doc="""``gamma * (x - mean) / sqrt(var + epsilon) + beta`` over ``axes``.

        Args:
            x (tensor<T, [*]>): T is fp16 or fp32.
            axes (const tensor<int32, [K]>): the axes to normalise over, negative ones count
                from the end; no axis twice. Default: every axis.
            gamma (const tensor<T, [*]>): scale, shape ``x.shape`` at ``axes`` (in axis
                order). Default: ones.
            beta (const tensor<T, [*]>): offset, same shape as gamma. Default: zeros.
            epsilon (const T): added to the (population) variance. Default: 1e-5.
        Returns:
            tensor<T, [*]>: same shape as ``x``.
        """,
    )
)


# -- batch_norm ----------------------------------------------------------------------------------


def _batch_norm(
    x: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    epsilon: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
) -> np.ndarray:
    shape = _channel_shape(x)
    y = (x - np.reshape(mean, shape)) / np.sqrt(np.reshape(variance, shape) + epsilon)
    return _scale_shift(y, shape, gamma, beta)


_register_with_ios17_domain(
    OpDef(
        name="batch_norm",
        params=(
            _x_param(ranks=(3, 4, 5)),
            _const_param("mean"),
            _const_param("variance"),
            _const_param("gamma", optional=True),
            _const_param("beta", optional=True),
            _epsilon(1e-5),
        ),
        infer=_infer_channel_params(("mean", "variance", "gamma", "beta")),
        shape_only=frozenset({"mean", "variance", "gamma", "beta"}),
        reference=_batch_norm,
        ranges=affine_per_channel,
        # the statistics are constants: subtract, scale, shift
        cost=per_output_element(3),
        doc="""``gamma * (x - mean) / sqrt(variance + epsilon) + beta`` per channel (axis 1).

        Args:
            x (tensor<T, [n, C, *D]>): rank 3 to 5; T is fp16 or fp32.
            mean (const tensor<T, [C]>): per-channel mean.
            variance (const tensor<T, [C]>): per-channel variance.
            gamma (const tensor<T, [C]>): scale. Default: ones.
            beta (const tensor<T, [C]>): offset. Default: zeros.
            epsilon (const T): added to the variance. Default: 1e-5.
        Returns:
            tensor<T, [n, C, *D]>: same shape as ``x``.
        """,
    )
)


# -- instance_norm -------------------------------------------------------------------------------


def _spatial_count(a: Args) -> Any:
    """How many elements instance_norm normalises together (x's spatial dims)."""
    dims = a.x.shape[2:]
    return math.prod(dims) if all(isinstance(d, int) for d in dims) else None


def _instance_norm(
    x: np.ndarray,
    epsilon: np.ndarray,
    gamma: np.ndarray | None = None,
    beta: np.ndarray | None = None,
) -> np.ndarray:
    y = _normalize(x, tuple(range(2, x.ndim)), epsilon)
    return _scale_shift(y, _channel_shape(x), gamma, beta)


_register_with_ios17_domain(
    OpDef(
        name="instance_norm",
        params=(
            _x_param(ranks=(3, 4)),
            _const_param("gamma", optional=True),
            _const_param("beta", optional=True),
            _epsilon(1e-5),
        ),
        infer=_infer_channel_params(("gamma", "beta")),
        shape_only=frozenset({"gamma", "beta"}),
        reference=_instance_norm,
        ranges=standardized(_spatial_count),
        # as layer_norm: mean, subtract, square, sum, scale, gamma, beta
        cost=per_output_element(7),
        doc="""Normalise each (sample, channel) over the spatial axes, then scale and shift.

        ``gamma * (x - mean) / sqrt(var + epsilon) + beta`` with mean and population
        variance taken over axes 2 and later.

        Args:
            x (tensor<T, [n, C, *D]>): rank 3 or 4; T is fp16 or fp32.
            gamma (const tensor<T, [C]>): scale. Default: ones.
            beta (const tensor<T, [C]>): offset. Default: zeros.
            epsilon (const T): added to the variance. Default: 1e-5.
        Returns:
            tensor<T, [n, C, *D]>: same shape as ``x``.
        """,
    )
)


# -- l2_norm -------------------------------------------------------------------------------------


def _infer_l2_norm(a: Args) -> TensorType:
    _require_rank_at_least(a, 3)
    return a.x.type


def _l2_norm(x: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.sum(np.square(x), axis=(-3, -2, -1), keepdims=True) + epsilon)


_register_with_ios17_domain(
    OpDef(
        name="l2_norm",
        params=(_x_param(), _epsilon(1e-6)),
        infer=_infer_l2_norm,
        reference=_l2_norm,
        ranges=unit_ball,
        # square, sum, scale
        cost=per_output_element(3),
        doc="""Divide ``x`` by ``sqrt(sum(x**2) + epsilon)`` over its last three axes.

        The leading axes (all but the last three) are batch axes, normalised separately.

        Args:
            x (tensor<T, [*B, D1, D2, D3]>): rank >= 3; T is fp16 or fp32.
            epsilon (const T): added to the sum of squares. Default: 1e-6.
        Returns:
            tensor<T, [*B, D1, D2, D3]>: same shape as ``x``.
        """,
    )
)


# -- local_response_norm -------------------------------------------------------------------------


def _infer_local_response_norm(a: Args) -> TensorType:
    size = int(a.const("size"))
    require(size >= 1, "local_response_norm", "size", lambda: f"expected size >= 1, found {size}")
    return a.x.type


def _local_response_norm(
    x: np.ndarray, size: np.ndarray, alpha: np.ndarray, beta: np.ndarray, k: np.ndarray
) -> np.ndarray:
    # Channels are axis -3 (the NeuralNetwork LRN layer's convention; coremltools' rank-3 smoke
    # test values agree). Channel c sums squares over channels [c - size // 2, c + (size - 1) // 2],
    # zero padded: the window Apple documents for MPSCNNCrossChannelNormalization.
    n, channels = int(size), x.shape[-3]
    pad = [(0, 0)] * x.ndim
    pad[-3] = (n // 2, (n - 1) // 2)
    padded = np.pad(np.square(x), pad)
    window = sum(padded[..., i : i + channels, :, :] for i in range(n))
    return x / np.power(k + alpha / n * window, beta)


def _local_response_norm_cost(a: Args, outs: tuple[TensorType, ...]) -> Cost:
    # square, a window of `size` adds, scale, add k, power, divide
    return per_output_element(int(a.const("size")) + 4 + TRANSCENDENTAL)(a, outs)


_register_with_ios17_domain(
    OpDef(
        name="local_response_norm",
        params=(
            # Rank 5 runs in coremltools' own tests (tests/iOS14/test_normalization.py,
            # TestNormalizationLocalResponseNorm) although its docstring says 3 or 4.
            _x_param(ranks=(3, 4, 5)),
            param("size", INT32, ranks=(0,), const=True),
            _const_param("alpha", ranks=(0,), default=1e-4),
            _const_param("beta", ranks=(0,), default=0.75),
            _const_param("k", ranks=(0,), default=1.0),
        ),
        infer=_infer_local_response_norm,
        reference=_local_response_norm,
        ranges=response_normalized,
        cost=_local_response_norm_cost,
        doc="""``x / (k + alpha / size * sum(x**2 over neighbouring channels)) ** beta``.

        Channels are axis -3; axes before it are batch axes. Channel c sums over channels
        ``c - size // 2`` to ``c + (size - 1) // 2``, missing channels counting as zero.

        Args:
            x (tensor<T, [*B, C, H, W]>): rank 3 to 5; T is fp16 or fp32.
            size (const int32): the number of channels in the window, >= 1.
            alpha (const T): scale. Default: 1e-4.
            beta (const T): exponent. Default: 0.75.
            k (const T): additive term. Default: 1.0.
        Returns:
            tensor<T, [*B, C, H, W]>: same shape as ``x``.
        """,
    )
)
