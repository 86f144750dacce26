"""Activations: relu, relu6, sigmoid, silu, softplus, softsign, gelu, leaky_relu, elu,
sigmoid_hard, scaled_tanh, linear_activation and prelu.

Names, parameters, dtypes and defaults follow coremltools' iOS15 ``activation.py`` (read at
commit e0e2f42; the iOS17 changes are in :mod:`.elementwise17`). Each is an elementwise
unary op declared with :func:`.elementwise.unary`; the references compute in the input's
precision (fp16 arrives as float32) and follow NumPy where MIL says nothing more.
"""

from __future__ import annotations

import numpy as np

from anekit.mil.ops import device, npmath
from anekit.mil.ops.common import FP, STRING, TRANSCENDENTAL, require
from anekit.mil.ops.elementwise import REQUIRED, unary
from anekit.mil.ops.npmath import GELU_MODES, channel_vector, sigmoid
from anekit.mil.ops.ranges import GELU as GELU_BOUND
from anekit.mil.ops.ranges import SILU, bounded, monotone, softplus_bound
from anekit.mil.ops.ranges_math import (
    SOFTSIGN,
    affine,
    exponential_linear,
    hard_sigmoid,
    leaky,
    scaled_tanh,
)
from anekit.mil.ops.registry import Args, Ufunc, param
from anekit.mil.ops.traits import ACTIVATION, UNARY

_T = TRANSCENDENTAL


# -- checks of const values -----------------------------------------------------------------
def _check_gelu_mode(a: Args) -> None:
    mode = a.const("mode")
    require(
        mode in GELU_MODES,
        "gelu",
        "mode",
        lambda: f"expected one of {sorted(GELU_MODES)}, found {mode!r}",
    )


def _check_prelu(a: Args) -> None:
    x, alpha = a.x, np.asarray(a.const("alpha"))
    require(
        x.rank in (3, 4, 5), "prelu", "x", lambda: f"expected rank 3, 4 or 5, found rank {x.rank}"
    )
    channels = x.shape[1]
    require(
        not isinstance(channels, int) or alpha.shape == (channels,),
        "prelu",
        "alpha",
        lambda: (
            f"expected one value per channel (shape [{channels}]), found shape {list(alpha.shape)}"
        ),
    )
    # coremltools' prelu.type_inference: ranks 3 and 5 need a single shared slope (tolerance 1e-5).
    require(
        x.rank == 4 or alpha.size == 0 or bool(np.all(np.abs(alpha - alpha.flat[0]) <= 1e-5)),
        "prelu",
        "alpha",
        lambda: f"rank {x.rank} inputs need equal alpha values, found {alpha.tolist()}",
    )


# -- activations ----------------------------------------------------------------------------
_ACT = (UNARY, ACTIVATION)
_ALPHA = ("alpha", "slope, scale or multiplier (see the formula).", REQUIRED)
_BETA = ("beta", "offset or inner scale (see the formula).", REQUIRED)

unary(
    "relu",
    lambda x: np.maximum(x, 0),
    "Return max(x, 0).",
    traits=_ACT,
    ranges=monotone(lambda v: max(v, 0.0)),
    ufunc=Ufunc(into=npmath.relu_into),
)
unary(
    "relu6",
    lambda x: np.minimum(np.maximum(x, 0), 6),
    "Return min(max(x, 0), 6).",
    traits=_ACT,
    flops=2,
    ufunc=Ufunc(into=npmath.relu6_into),
    ranges=monotone(lambda v: min(max(v, 0.0), 6.0)),
)
unary(
    "sigmoid",
    sigmoid,
    "Return 1 / (1 + exp(-x)).",
    traits=_ACT,
    flops=2 + _T,
    ranges=bounded(0.0, 1.0),
    ufunc=Ufunc(into=npmath.sigmoid_into),
)
unary(
    "silu",
    lambda x: x * sigmoid(x),
    "Return x * sigmoid(x) (swish).",
    traits=_ACT,
    flops=3 + _T,
    ranges=SILU,
    ufunc=Ufunc(into=npmath.silu_into, inplace=False),
)
unary(
    "softplus",
    lambda x: np.logaddexp(0, x),
    "Return log(1 + exp(x)).",
    traits=_ACT,
    flops=1 + 2 * _T,
    numerics=device.SOFTPLUS_EXP_CLIFF,
    ranges=softplus_bound,
)
unary(
    "softsign",
    lambda x: x / (1 + np.abs(x)),
    "Return x / (1 + |x|).",
    traits=_ACT,
    flops=3,
    ufunc=Ufunc(into=npmath.softsign_into, inplace=False),
    ranges=SOFTSIGN,
)
GELU = unary(
    "gelu",
    lambda x, mode: GELU_MODES[mode](x),
    "Return the GELU of x: EXACT 0.5x(1 + erf(x/sqrt 2)); TANH_APPROXIMATION "
    "0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))); SIGMOID_APPROXIMATION x sigmoid(1.702x).",
    extra=(
        (
            param("mode", STRING, ranks=(0,), const=True, default="EXACT"),
            "mode (const string): EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION. "
            "Default: EXACT.",
        ),
    ),
    check=_check_gelu_mode,
    traits=_ACT,
    flops=4 + _T,
    ranges=GELU_BOUND,
)
LEAKY_RELU = unary(
    "leaky_relu",
    lambda x, alpha: np.where(x < 0, alpha * x, x),
    "Return x if x >= 0, else alpha * x.",
    attrs=(_ALPHA,),
    traits=_ACT,
    flops=3,  # compare, multiply, select
    ranges=leaky,
)
ELU = unary(
    "elu",
    lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(x)),
    "Return x if x > 0, else alpha * (exp(x) - 1).",
    attrs=(_ALPHA,),
    traits=_ACT,
    flops=4 + _T,  # compare, exp, subtract, multiply, select
    ranges=exponential_linear,
)
SIGMOID_HARD = unary(
    "sigmoid_hard",
    lambda x, alpha, beta: np.minimum(np.maximum(alpha * x + beta, 0), 1),
    "Return min(max(alpha * x + beta, 0), 1).",
    attrs=(_ALPHA, _BETA),
    traits=_ACT,
    flops=4,
    ufunc=Ufunc(into=npmath.sigmoid_hard_into),
    ranges=hard_sigmoid,
)
SCALED_TANH = unary(
    "scaled_tanh",
    lambda x, alpha, beta: alpha * np.tanh(beta * x),
    "Return alpha * tanh(beta * x).",
    attrs=(_ALPHA, _BETA),
    traits=_ACT,
    flops=2 + _T,
    ufunc=Ufunc(into=npmath.scaled_tanh_into),
    ranges=scaled_tanh,
)
LINEAR_ACTIVATION = unary(
    "linear_activation",
    lambda x, alpha, beta: alpha * x + beta,
    "Return alpha * x + beta.",
    attrs=(_ALPHA, _BETA),
    traits=_ACT,
    flops=2,
    ufunc=Ufunc(into=npmath.linear_into),
    ranges=affine,
)
PRELU = unary(
    "prelu",
    lambda x, alpha: np.where(x > 0, x, channel_vector(alpha, x.ndim) * x),
    "Return x if x > 0, else alpha[c] * x, with one slope per channel (axis 1).",
    extra=(
        (
            param("alpha", FP, ranks=(1,), const=True, domain="T"),
            "alpha (const tensor<T, [C]>): one slope per channel; ranks 3 and 5 need equal "
            "values (coremltools).",
        ),
    ),
    check=_check_prelu,
    traits=_ACT,
    flops=3,  # compare, multiply, select
    ranges=leaky,
)
