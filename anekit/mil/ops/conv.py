"""Convolutions (conv, conv_transpose) and the sliding-window geometry they share with pool.py.

Parameter names, defaults and shape rules follow coremltools' ``iOS15/conv.py``,
``iOS17/conv.py`` and ``_utils.py`` (``aggregated_pad``, ``spatial_dimensions_out_shape``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from anekit.errors import MilTypeError
from anekit.mil.ops import device
from anekit.mil.ops.common import FP, INT32, STRING, flops_cost, mac_cost, numel, require
from anekit.mil.ops.ranges import contraction, transposed_contraction
from anekit.mil.ops.registry import Args, OpDef, const_ints, param, register
from anekit.mil.ops.traits import CONSTEXPR, CONV
from anekit.mil.types import TensorType

# coremltools rejects same_lower in the iOS15 opset (iOS15/conv.py, iOS15/pool.py).
PAD_TYPES_IOS15 = ("valid", "same", "custom")
PAD_TYPES = (*PAD_TYPES_IOS15, "same_lower")

Pads = list[tuple[int, int]]


# -- sliding-window geometry (shared with pool.py) ----------------------------------------
def spatial_pads(
    pad_type: str,
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pad: Sequence[int],
) -> Pads:
    """(before, after) padding of each spatial dim; same puts an odd extra after, same_lower before."""
    if pad_type == "custom":
        return [(int(pad[2 * i]), int(pad[2 * i + 1])) for i in range(len(sizes))]
    if pad_type == "valid":
        return [(0, 0)] * len(sizes)
    pads = []
    for n, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        # the total that makes out = ceil(n / s) (coremltools _utils.aggregated_pad)
        total = max(0, (math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n)
        small = total // 2
        pads.append((small, total - small) if pad_type == "same" else (total - small, small))
    return pads


def spatial_out(
    sizes: Sequence[int],
    pads: Pads,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    ceil_mode: bool = False,
) -> list[int]:
    """Output length of each spatial dim (coremltools' spatial_dimensions_out_shape)."""
    out = []
    for n, (before, after), k, s, d in zip(sizes, pads, kernel, strides, dilations, strict=True):
        span = n + before + after - ((k - 1) * d + 1)
        if not ceil_mode:
            out.append(span // s + 1)
            continue
        o = -(-span // s) + 1
        # a last window that would start inside the trailing padding is dropped
        if (o - 1) * s >= n + before and before + after > 0:
            o -= 1
        out.append(o)
    return out


def window_view(
    x: np.ndarray,
    pads: Pads,
    out: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    fill: float,
) -> np.ndarray:
    """A view of every window of ``x`` [N, C, *D]: shape [N, C, *out, *kernel].

    Positions outside ``x`` (padding, and the overhang of ceil_mode) read ``fill``.
    """
    spans = [
        (o - 1) * s + (k - 1) * d + 1
        for o, k, s, d in zip(out, kernel, strides, dilations, strict=True)
    ]
    widths = [
        (b, max(0, span - n - b)) for (b, _), span, n in zip(pads, spans, x.shape[2:], strict=True)
    ]
    if any(w != (0, 0) for w in widths):
        x = np.pad(x, [(0, 0), (0, 0), *widths], constant_values=fill)
    x = x[(slice(None), slice(None), *(slice(0, span) for span in spans))]
    nsp = len(kernel)
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    view = np.lib.stride_tricks.sliding_window_view(x, dilated, axis=tuple(range(2, 2 + nsp)))
    steps = (*(slice(None, None, s) for s in strides), *(slice(None, None, d) for d in dilations))
    return view[(slice(None), slice(None), *steps)]


def int_vector(op: str, a: Args, name: str, length: int, minimum: int) -> list[int]:
    """A const int vector parameter, checked for length and lower bound."""
    values = const_ints(a.const(name))
    require(
        len(values) == length,
        op,
        name,
        lambda: f"expected {length} values, found {len(values)}: {values}",
    )
    require(
        all(v >= minimum for v in values),
        op,
        name,
        lambda: f"expected values >= {minimum}, found {values}",
    )
    return values


def static_spatial(op: str, x: Any) -> list[int]:
    """The spatial dims of x [N, C, *D], which sliding-window ops need to know statically."""
    sizes = list(x.shape[2:])
    require(
        all(isinstance(d, int) for d in sizes),
        op,
        "x",
        lambda: f"expected static spatial dims, found shape {list(x.shape)}",
    )
    return sizes


def pad_type_of(op: str, a: Args, allowed: Sequence[str]) -> str:
    """The pad_type string, checked against the pad types this opset accepts."""
    pad_type = a.const("pad_type")
    if pad_type in PAD_TYPES and pad_type not in allowed:
        raise MilTypeError(
            f"pad_type {pad_type!r} needs opset ios16 or later (accepted here: {list(allowed)})",
            op=op,
            param="pad_type",
        )
    require(
        pad_type in allowed,
        op,
        "pad_type",
        lambda: f"expected one of {list(allowed)}, found {pad_type!r}",
    )
    return pad_type


def window_out(
    op: str,
    a: Args,
    kernel: Sequence[int],
    dilations: Sequence[int],
    pad_types: Sequence[str],
    ceil_mode: bool = False,
) -> list[int]:
    """Check the window parameters of a conv or pool and return its output spatial dims."""
    sizes = static_spatial(op, a.x)
    strides = int_vector(op, a, "strides", len(sizes), 1)
    pad = int_vector(op, a, "pad", 2 * len(sizes), 0)
    pad_type = pad_type_of(op, a, pad_types)
    pads = spatial_pads(pad_type, sizes, kernel, strides, dilations, pad)
    out = spatial_out(sizes, pads, kernel, strides, dilations, ceil_mode)
    require(
        all(o > 0 for o in out),
        op,
        "x",
        lambda: (
            f"output spatial dims {out} are empty: input {sizes}, kernel {list(kernel)}, "
            f"dilations {list(dilations)}, strides {strides}, pads {pads}"
        ),
    )
    return out


def per_spatial_dim(value: int, per_dim: int = 1) -> Callable[[Args], np.ndarray]:
    """Default of an int vector with ``per_dim`` entries per spatial dim (strides, dilations, pad)."""
    return lambda a: np.full(per_dim * max(a.x.rank - 2, 0), value, dtype=np.int32)


# -- conv ----------------------------------------------------------------------------------
def _weight_is_runtime(w: Any) -> bool:
    producer = w.producer
    return w.const is None and not (producer is not None and CONSTEXPR in producer.opdef.traits)


def _groups_of(op: str, a: Args) -> int:
    """The groups parameter, checked to be positive and to divide the input channels."""
    groups, c_in = int(a.const("groups")), a.x.shape[1]
    require(groups >= 1, op, "groups", lambda: f"expected groups >= 1, found {groups}")
    require(
        c_in % groups == 0,
        op,
        "groups",
        lambda: (
            f"input channels C_in = {c_in} (x {list(a.x.shape)}) are not divisible by groups = {groups}"
        ),
    )
    return groups


def _check_bias(op: str, a: Args, c_out: Any) -> None:
    """An optional bias holds one value per output channel."""
    if a.bias is not None:
        require(
            tuple(a.bias.shape) == (c_out,),
            op,
            "bias",
            lambda: f"expected shape [{c_out}] (C_out), found {list(a.bias.shape)}",
        )


def _conv_infer(pad_types: Sequence[str]) -> Callable[[Args], TensorType]:
    def infer(a: Args) -> TensorType:
        op, x, w = "conv", a.x, a.weight
        groups, c_in = _groups_of(op, a), x.shape[1]
        require(
            w.rank == x.rank and w.shape[1] == c_in // groups,
            op,
            "weight",
            lambda: (
                f"expected shape [C_out, C_in/groups = {c_in // groups}, *kernel] of rank {x.rank} "
                f"(x {list(x.shape)}, groups {groups}), found {list(w.shape)}"
            ),
        )
        c_out = w.shape[0]
        require(
            c_out % groups == 0,
            op,
            "weight",
            lambda: (
                f"output channels C_out = {c_out} (weight {list(w.shape)}) are not divisible by "
                f"groups = {groups}"
            ),
        )
        _check_bias(op, a, c_out)
        dilations = int_vector(op, a, "dilations", x.rank - 2, 1)
        require(
            not (_weight_is_runtime(w) and any(d > 1 for d in dilations)),
            op,
            "dilations",
            lambda: f"a runtime weight needs dilations of 1, found {dilations}",
        )
        out = window_out(op, a, w.shape[2:], dilations, pad_types)
        return TensorType(x.dtype, (x.shape[0], c_out, *out))

    return infer


def _conv_reference(
    x, weight, strides, pad_type, pad, dilations, groups, bias=None, matmul=np.matmul
):
    """NumPy conv: a matmul of the weight with the input's windows (im2col); 1x1 needs no copy."""
    kernel, strides, dilations = weight.shape[2:], const_ints(strides), const_ints(dilations)
    sizes, g = x.shape[2:], int(groups)
    pads = spatial_pads(pad_type, sizes, kernel, strides, dilations, const_ints(pad))
    out = spatial_out(sizes, pads, kernel, strides, dilations)
    n, c, nsp = x.shape[0], x.shape[1], len(kernel)
    taps = numel(tuple(kernel))
    if taps == 1 and set(strides) == {1} and not any(map(any, pads)):  # plain 1x1: x as it is
        windows = x
    else:
        windows = window_view(x, pads, out, kernel, strides, dilations, 0.0)
    if taps > 1:  # im2col: channel-major then kernel taps, as the weight is laid out
        windows = np.moveaxis(windows, range(2 + nsp, 2 + 2 * nsp), range(2, 2 + nsp))
    cols = windows.reshape(n, g, (c // g) * taps, -1)
    w = np.asarray(weight, dtype=np.float32).reshape(g, weight.shape[0] // g, -1)
    cols = np.asarray(cols, dtype=np.float32)
    # one image, one group (every transformer projection): a plain 2-D BLAS product is
    # about a quarter faster than NumPy's batched matmul over a batch of one
    y = w[0] @ cols[0, 0] if n == g == 1 and matmul is np.matmul else matmul(w, cols)
    y = y.reshape(n, weight.shape[0], *out)
    if bias is not None:
        y += np.asarray(bias, dtype=np.float32).reshape(-1, *([1] * nsp))
    return y


def _x_channels(a: Args) -> Any:
    return a.x.shape[1]


def _conv_contraction(a: Args) -> int:
    """Each output element sums (C_in / groups) * prod(kernel) products."""
    return numel(tuple(a.weight.shape[1:]))


_X = param("x", FP, ranks=(3, 4, 5), domain="T")
_BIAS = param("bias", FP, ranks=(1,), const=True, optional=True, domain="T")
# iOS17 (conv and conv_transpose): weight and bias take their own dtype and need not be const.
_OPERANDS_IOS17 = (
    _X,
    param("weight", FP, ranks=(3, 4, 5), domain="U"),
    param("bias", FP, ranks=(1,), optional=True, domain="U"),
)
_WINDOW_PARAMS = (
    param("strides", INT32, ranks=(1,), const=True, default=per_spatial_dim(1)),
    param("pad_type", STRING, ranks=(0,), const=True, default="valid"),
    param("pad", INT32, ranks=(1,), const=True, default=per_spatial_dim(0, 2)),
    param("dilations", INT32, ranks=(1,), const=True, default=per_spatial_dim(1)),
    param("groups", INT32, ranks=(0,), const=True, default=1),
)

_CONV_DOC = """Convolution over 1, 2 or 3 spatial dims.

Args:
    x (tensor<T, [N, C_in, *D_in]>): input, rank 3 to 5.
    weight (tensor<T, [C_out, C_in/groups, *K]>): filters; a runtime weight needs
        dilations of 1.
    bias (const tensor<T, [C_out]>): added per output channel. Optional.
    strides (const tensor<int32, [S]>): per spatial dim. Default: all 1.
    pad_type (const string): valid, same (odd extra padding after), custom (use ``pad``)
        or same_lower (odd extra before; iOS16+). Default: valid.
    pad (const tensor<int32, [2S]>): before/after padding of each spatial dim, used when
        pad_type is custom. Default: all 0.
    dilations (const tensor<int32, [S]>): per spatial dim. Default: all 1.
    groups (const int32): C_in and C_out are split into this many groups. Default: 1.
Returns:
    tensor<T, [N, C_out, *D_out]>: ``D_out[i] = floor((D_in[i] + pad_before + pad_after
    - (K[i] - 1) * dilations[i] - 1) / strides[i]) + 1``; same and same_lower give
    ``ceil(D_in[i] / strides[i])``.
"""

_conv_ios15 = register(
    OpDef(
        name="conv",
        params=(_X, param("weight", FP, ranks=(3, 4, 5), domain="T"), _BIAS, *_WINDOW_PARAMS),
        infer=_conv_infer(PAD_TYPES_IOS15),
        reference=_conv_reference,
        cost=mac_cost,
        contraction=_conv_contraction,
        in_channels=_x_channels,
        output_axis=lambda a, operand: 0 if operand == "weight" else None,  # [C_out, ...]
        traits=frozenset({CONV}),
        # the matmul datapath, assumed (N1); N3 under the precise profiles
        numerics=device.rounded_products(_conv_reference, "conv"),
        ranges=contraction("x", "weight", lambda a: tuple(range(1, a.weight.rank)), bias="bias"),
        shape_only=frozenset({"bias"}),
        doc=_CONV_DOC,
    )
)
_conv_ios16 = register(
    _conv_ios15.evolve(
        since="ios16",
        infer=_conv_infer(PAD_TYPES),
        doc=_CONV_DOC + "\niOS16: accepts pad_type same_lower.\n",
    )
)
register(
    _conv_ios16.evolve(
        since="ios17",
        params=(*_OPERANDS_IOS17, *_WINDOW_PARAMS),
        doc=_CONV_DOC + "\niOS17: weight and bias may have another dtype than x; bias may be "
        "a runtime value.\n",
    )
)


# -- conv_transpose ------------------------------------------------------------------------
def _transpose_geometry(
    sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pad_type: str,
    pad: Sequence[int],
    output_shape: Sequence[int] | None,
) -> tuple[list[int], list[int], list[int]]:
    """(full, out, before): the uncropped length, the output length and where the output starts.

    The output is the full transposed convolution cropped from ``before``; positions
    past its end (an output_shape larger than full) are zero, as torch's output_padding.
    """
    full = [
        (n - 1) * s + (k - 1) * d + 1
        for n, k, s, d in zip(sizes, kernel, strides, dilations, strict=True)
    ]
    nsp = len(sizes)
    if output_shape is not None:
        out = [int(v) for v in output_shape[2:]]
    elif pad_type == "custom":
        out = [f - pad[2 * i] - pad[2 * i + 1] for i, f in enumerate(full)]
    elif pad_type == "same":
        out = [n * s for n, s in zip(sizes, strides, strict=True)]
    else:
        out = list(full)
    if pad_type == "custom":
        before = [int(pad[2 * i]) for i in range(nsp)]
    elif pad_type == "same":  # TF's convention: the smaller half of the crop comes first
        before = [max(0, f - o) // 2 for f, o in zip(full, out, strict=True)]
    else:
        before = [0] * nsp
    return full, out, before


def _conv_transpose_infer(a: Args) -> TensorType:
    op, x, w = "conv_transpose", a.x, a.weight
    groups, c_in = _groups_of(op, a), x.shape[1]
    require(
        w.rank == x.rank and w.shape[0] == c_in,
        op,
        "weight",
        lambda: (
            f"expected shape [C_in = {c_in}, C_out/groups, *kernel] of rank {x.rank}, "
            f"found {list(w.shape)}"
        ),
    )
    c_out = w.shape[1] * groups
    _check_bias(op, a, c_out)
    sizes = static_spatial(op, x)
    nsp = len(sizes)
    strides = int_vector(op, a, "strides", nsp, 1)
    dilations = int_vector(op, a, "dilations", nsp, 1)
    pad = int_vector(op, a, "pad", 2 * nsp, 0)
    pad_type = pad_type_of(op, a, PAD_TYPES_IOS15)
    output_shape = a.const("output_shape")
    if output_shape is not None:
        given = const_ints(output_shape)
        require(
            len(given) == x.rank and given[:2] == [x.shape[0], c_out],
            op,
            "output_shape",
            lambda: (
                f"expected {x.rank} values starting [N, C_out] = [{x.shape[0]}, {c_out}], found {given}"
            ),
        )
        output_shape = given
    _, out, _ = _transpose_geometry(
        sizes, w.shape[2:], strides, dilations, pad_type, pad, output_shape
    )
    require(all(o > 0 for o in out), op, "pad", lambda: f"output spatial dims {out} are empty")
    return TensorType(x.dtype, (x.shape[0], c_out, *out))


def _conv_transpose_reference(
    x,
    weight,
    pad,
    pad_type,
    strides,
    dilations,
    groups,
    bias=None,
    output_shape=None,
    matmul=np.matmul,
):
    """NumPy transposed conv: weight^T times x gives every tap's contribution; add them in place."""
    n, c_in, sizes = x.shape[0], x.shape[1], x.shape[2:]
    g, kernel = int(groups), weight.shape[2:]
    strides, dilations = const_ints(strides), const_ints(dilations)
    full, out, before = _transpose_geometry(
        sizes,
        kernel,
        strides,
        dilations,
        pad_type,
        const_ints(pad),
        None if output_shape is None else const_ints(output_shape),
    )
    c_out = weight.shape[1] * g
    w = np.asarray(weight, dtype=np.float32).reshape(g, c_in // g, -1)
    cols = matmul(np.swapaxes(w, -1, -2), x.reshape(n, g, c_in // g, -1).astype(np.float32))
    cols = cols.reshape(n, c_out, *kernel, *sizes)
    acc = np.zeros((n, c_out, *full), dtype=np.float32)
    every = (slice(None), slice(None))
    for tap in np.ndindex(*kernel):
        dest = tuple(
            slice(t * d, t * d + (m - 1) * s + 1, s)
            for t, d, m, s in zip(tap, dilations, sizes, strides, strict=True)
        )
        acc[every + dest] += cols[every + tap]
    y = np.zeros((n, c_out, *out), dtype=np.float32)
    src = tuple(slice(b, min(b + o, f)) for b, o, f in zip(before, out, full, strict=True))
    dst = tuple(slice(0, max(0, min(o, f - b))) for b, o, f in zip(before, out, full, strict=True))
    y[every + dst] = acc[every + src]
    if bias is not None:
        y += np.asarray(bias, dtype=np.float32).reshape(-1, *([1] * len(kernel)))
    return y


_CONV_TRANSPOSE_DOC = """Transposed convolution (the gradient of conv with respect to its input).

Args:
    x (tensor<T, [N, C_in, *D_in]>): input, rank 3 to 5.
    weight (const tensor<T, [C_in, C_out/groups, *K]>): filters.
    bias (const tensor<T, [C_out]>): added per output channel. Optional.
    pad (const tensor<int32, [2S]>): before/after crop of each spatial dim (custom). Default: 0.
    output_shape (const tensor<int32, [rank]>): the full output shape [N, C_out, *D_out].
        Optional; positions beyond the uncropped result are zero.
    pad_type (const string): valid, same or custom. Default: valid.
    strides (const tensor<int32, [S]>): Default: all 1.
    dilations (const tensor<int32, [S]>): Default: all 1.
    groups (const int32): Default: 1.
Returns:
    tensor<T, [N, C_out, *D_out]>: output_shape if given, else with
    ``full = (D_in - 1) * strides + (K - 1) * dilations + 1``: valid ``full``, custom
    ``full - pad_before - pad_after``, same ``D_in * strides`` (crop split as TF, smaller
    half first).
"""

_conv_transpose_ios15 = register(
    OpDef(
        name="conv_transpose",
        params=(
            _X,
            param("weight", FP, ranks=(3, 4, 5), const=True, domain="T"),
            _BIAS,
            param("pad", INT32, ranks=(1,), const=True, default=per_spatial_dim(0, 2)),
            param("output_shape", INT32, ranks=(1,), const=True, optional=True),
            param("pad_type", STRING, ranks=(0,), const=True, default="valid"),
            param("strides", INT32, ranks=(1,), const=True, default=per_spatial_dim(1)),
            param("dilations", INT32, ranks=(1,), const=True, default=per_spatial_dim(1)),
            param("groups", INT32, ranks=(0,), const=True, default=1),
        ),
        infer=_conv_transpose_infer,
        reference=_conv_transpose_reference,
        cost=flops_cost(lambda a, outs: 2 * numel(a.x.shape) * numel(tuple(a.weight.shape[1:]))),
        in_channels=_x_channels,
        traits=frozenset({CONV}),
        # the matmul datapath, assumed (N1); N3 under the precise profiles (per tap, then
        # the taps are added in fp32)
        numerics=device.rounded_products(_conv_transpose_reference, "conv"),
        ranges=transposed_contraction,
        shape_only=frozenset({"weight", "bias"}),
        doc=_CONV_TRANSPOSE_DOC,
    )
)
register(
    _conv_transpose_ios15.evolve(
        since="ios17",
        params=(*_OPERANDS_IOS17, *_conv_transpose_ios15.params[3:]),
        doc=_CONV_TRANSPOSE_DOC + "\niOS17: weight and bias may have another dtype than x and "
        "need not be const.\n",
    )
)
