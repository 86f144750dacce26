"""Pooling (avg_pool, max_pool, l2_pool) and upsampling (nearest neighbor, bilinear).

Parameter names, defaults and shape rules follow coremltools' ``iOS15/pool.py``,
``iOS15/image_resizing.py`` and ``iOS16/image_resizing.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from anekit.mil.ops.common import BOOL, FP, INT32, STRING, flops_cost, numel, require
from anekit.mil.ops.conv import (
    PAD_TYPES,
    PAD_TYPES_IOS15,
    int_vector,
    per_spatial_dim,
    spatial_out,
    spatial_pads,
    window_out,
    window_view,
)
from anekit.mil.ops.ranges import RangeFn, averaged, passes, root_sum_square
from anekit.mil.ops.registry import Args, CostFn, OpDef, Param, const_ints, param, register
from anekit.mil.ops.traits import EXACT
from anekit.mil.types import DType, TensorType

SCALE_DTYPES = frozenset({DType.fp32, DType.int32})
# bilinear: two 1-D interpolations a + t * (b - a) per output element
BILINEAR_FLOPS_PER_ELEMENT = 6.0


# -- pooling -------------------------------------------------------------------------------
def _pool_infer(
    op: str, pad_types: Sequence[str], max_spatial: int
) -> Callable[[Args], TensorType]:
    def infer(a: Args) -> TensorType:
        x = a.x
        nsp = x.rank - 2
        require(
            nsp <= max_spatial,
            op,
            "x",
            lambda: (
                f"expected at most {max_spatial} spatial dims (rank {max_spatial + 2}), "
                f"found {list(x.shape)}"
            ),
        )
        kernel = int_vector(op, a, "kernel_sizes", nsp, 1)
        ceil_mode = bool(a.const("ceil_mode"))
        if ceil_mode:  # coremltools' restrictions (iOS15/pool.py)
            require(nsp <= 2, op, "ceil_mode", lambda: f"needs 1 or 2 spatial dims, found {nsp}")
            require(
                a.const("pad_type") != "same", op, "ceil_mode", "must be false with pad_type same"
            )
            pad = const_ints(a.const("pad"))
            require(
                pad[0::2] == pad[1::2],
                op,
                "pad",
                lambda: f"ceil_mode needs symmetric padding (before == after), found {pad}",
            )
        out = window_out(op, a, kernel, [1] * nsp, pad_types, ceil_mode)
        return TensorType(x.dtype, (*x.shape[:2], *out))

    return infer


class _Geometry(NamedTuple):
    """Where a pooling op's windows lie: kernel, strides, (before, after) pads, output sizes."""

    kernel: list[int]
    strides: list[int]
    pads: list[tuple[int, int]]
    out: list[int]

    @classmethod
    def of(cls, x: np.ndarray, kernel_sizes, pad_type: str, strides, pad, ceil_mode) -> _Geometry:
        kernel, steps = const_ints(kernel_sizes), const_ints(strides)
        unit = [1] * len(kernel)
        pads = spatial_pads(pad_type, x.shape[2:], kernel, steps, unit, const_ints(pad))
        return cls(
            kernel, steps, pads, spatial_out(x.shape[2:], pads, kernel, steps, unit, ceil_mode)
        )

    def window_sums(self, x: np.ndarray, pads: list[tuple[int, int]] | None = None) -> np.ndarray:
        """The sum of each window of x ([N, C, *out]); positions outside x count 0."""
        view = self.windows(x, 0.0, self.pads if pads is None else pads)
        return view.sum(axis=self.taps, dtype=np.float32)

    def windows(self, x: np.ndarray, fill: float, pads: list[tuple[int, int]]) -> np.ndarray:
        unit = [1] * len(self.kernel)
        return window_view(x, pads, self.out, self.kernel, self.strides, unit, fill)

    @property
    def taps(self) -> tuple[int, ...]:
        """The trailing window axes of a [N, C, *out, *kernel] view."""
        return tuple(range(-len(self.kernel), 0))


def _avg_pool_reference(
    x, kernel_sizes, pad_type, strides, pad, ceil_mode=False, exclude_padding_from_average=False
):
    g = _Geometry.of(x, kernel_sizes, pad_type, strides, pad, bool(ceil_mode))
    # The divisor counts the window positions inside the input, plus its padding unless
    # excluded; positions of the ceil_mode overhang never count (as torch's avg_pool2d).
    region = np.ones((1, 1, *x.shape[2:]), dtype=np.float32)
    if bool(exclude_padding_from_average):
        counts = g.window_sums(region)
    else:
        padded = np.pad(region, [(0, 0), (0, 0), *g.pads], constant_values=1.0)
        counts = g.window_sums(padded, [(0, 0)] * len(g.pads))
    return g.window_sums(x) / counts


def _max_pool_reference(x, kernel_sizes, pad_type, strides, pad, ceil_mode=False):
    g = _Geometry.of(x, kernel_sizes, pad_type, strides, pad, bool(ceil_mode))
    return g.windows(x, -np.inf, g.pads).max(axis=g.taps)


def _l2_pool_reference(x, kernel_sizes, pad_type, strides, pad, ceil_mode=False):
    g = _Geometry.of(x, kernel_sizes, pad_type, strides, pad, bool(ceil_mode))
    return np.sqrt(g.window_sums(np.square(x, dtype=np.float32)))


_POOL_PARAMS = (
    param("kernel_sizes", INT32, ranks=(1,), const=True),
    param("strides", INT32, ranks=(1,), const=True, default=per_spatial_dim(1)),
    param("pad_type", STRING, ranks=(0,), const=True),
    param("pad", INT32, ranks=(1,), const=True, default=per_spatial_dim(0, 2)),
    param("ceil_mode", BOOL, ranks=(0,), const=True, default=False),
)

_POOL_ARGS_DOC = """
    kernel_sizes (const tensor<int32, [S]>): window size per spatial dim.
    strides (const tensor<int32, [S]>): Default: all 1.
    pad_type (const string): valid, same (odd extra padding after), custom (use ``pad``)
        or same_lower (odd extra before; iOS16+). Required.
    pad (const tensor<int32, [2S]>): before/after padding per spatial dim (custom). Default: 0.
    ceil_mode (const bool): round the output size up, as PyTorch; 1 or 2 spatial dims,
        symmetric padding, not with pad_type same. Default: false."""

_POOL_RETURNS_DOC = """
Returns:
    tensor<T, [N, C, *D_out]>: ``D_out[i] = floor((D_in[i] + pad_before + pad_after
    - kernel_sizes[i]) / strides[i]) + 1``; ceil_mode rounds up, then drops a last window
    that would start in the trailing padding.
"""


def _pool(
    name: str,
    summary: str,
    reference: Callable[..., np.ndarray],
    max_spatial: int,
    extra: tuple[Param, ...] = (),
    extra_doc: str = "",
    *,
    ranges: RangeFn,
) -> None:
    """Register a pooling op for iOS15 and its iOS16 version (which accepts same_lower)."""
    ranks = tuple(range(3, max_spatial + 3))
    doc = (
        f"{summary}\n\nArgs:\n    x (tensor<T, [N, C, *D_in]>): rank {ranks[0]} to {ranks[-1]}."
        f"{_POOL_ARGS_DOC}{extra_doc}\n{_POOL_RETURNS_DOC}"
    )
    first = register(
        OpDef(
            name=name,
            params=(param("x", FP, ranks=ranks, domain="T"), *extra, *_POOL_PARAMS),
            infer=_pool_infer(name, PAD_TYPES_IOS15, max_spatial),
            reference=reference,
            ranges=ranges,
            # one operation per window position of every output element
            cost=flops_cost(
                lambda a, outs: (
                    (outs[0].numel or 0) * numel(tuple(const_ints(a.const("kernel_sizes"))))
                )
            ),
            doc=doc,
        )
    )
    register(
        first.evolve(
            since="ios16",
            infer=_pool_infer(name, PAD_TYPES, max_spatial),
            doc=doc + "\niOS16: accepts pad_type same_lower.\n",
        )
    )


_pool(
    "avg_pool",
    "Average of each window.",
    _avg_pool_reference,
    3,
    (param("exclude_padding_from_average", BOOL, ranks=(0,), const=True, default=False),),
    "\n    exclude_padding_from_average (const bool): divide by the count of input positions "
    "only\n        (padding excluded). Default: false.",
    ranges=averaged,
)
_pool(
    "max_pool",
    "Maximum of each window (padding never wins).",
    _max_pool_reference,
    3,
    ranges=passes("x"),
)
_pool(
    "l2_pool",
    "Square root of the sum of squares of each window.",
    _l2_pool_reference,
    2,
    ranges=root_sum_square,
)


# -- upsampling ----------------------------------------------------------------------------
def _out_size(size: int, scale) -> int:
    """floor(scale * size) computed in the scale's own dtype, as coremltools does."""
    scale = np.asarray(scale)
    return int(np.floor(scale * scale.dtype.type(size)))


def _scaled_size(op: str, a: Args, name: str, size: int) -> int:
    scale = a.const(name)
    require(bool(scale > 0), op, name, lambda: f"expected a positive scale, found {scale}")
    out = _out_size(size, scale)
    require(out > 0, op, name, lambda: f"scale {scale} gives an empty output for size {size}")
    return out


def _upsample_infer(op: str) -> Callable[[Args], TensorType]:
    def infer(a: Args) -> TensorType:
        x = a.x
        require(x.rank >= 3, op, "x", lambda: f"expected rank >= 3, found {list(x.shape)}")
        height = _scaled_size(op, a, "scale_factor_height", x.shape[-2])
        width = _scaled_size(op, a, "scale_factor_width", x.shape[-1])
        return TensorType(x.dtype, (*x.shape[:-2], height, width))

    return infer


def _bilinear_infer_ios16(a: Args) -> TensorType:
    half = a.const("half_pixel_centers")
    require(
        not (bool(a.const("align_corners")) and half is not None and bool(half)),
        "upsample_bilinear",
        "half_pixel_centers",
        "align_corners and half_pixel_centers cannot both be true",
    )
    return _upsample_infer("upsample_bilinear")(a)


def _nearest_reference(x, scale_factor_height, scale_factor_width):
    # source index floor(dst * in / out), as Core ML (coremltools' value inference and
    # its tests): the sizes' ratio, not the scale given (they differ for fractional scales)
    for axis, scale in ((-2, scale_factor_height), (-1, scale_factor_width)):
        size = x.shape[axis]
        out = _out_size(size, scale)
        src = (np.arange(out, dtype=np.int64) * size) // out
        x = np.take(x, np.minimum(src, size - 1), axis=axis)
    return x


def _bilinear_sources(size: int, out: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """Source coordinate of each output position (coremltools' grid, scale from the sizes)."""
    i = np.arange(out, dtype=np.float64)
    if align_corners:
        src = i * ((size - 1) / (out - 1)) if out > 1 else np.zeros(out)
    elif half_pixel:
        src = (i + 0.5) * (size / out) - 0.5
    else:
        src = i * (size / out)
    return np.clip(src, 0, size - 1)


def _bilinear_reference(
    x, scale_factor_height, scale_factor_width, align_corners=True, half_pixel_centers=None
):
    align = bool(align_corners)
    half = not align if half_pixel_centers is None else bool(half_pixel_centers)
    x = np.asarray(x, dtype=np.float32)
    for axis, scale in ((-2, scale_factor_height), (-1, scale_factor_width)):
        size = x.shape[axis]
        src = _bilinear_sources(size, _out_size(size, scale), align, half)
        lo = np.floor(src).astype(np.int64)
        hi = np.minimum(lo + 1, size - 1)
        frac = (src - lo).astype(np.float32).reshape((-1,) + (1,) * (-axis - 1))
        a, b = np.take(x, lo, axis=axis), np.take(x, hi, axis=axis)
        x = a + (b - a) * frac
    return x


_SCALE_PARAMS = (
    param("scale_factor_height", SCALE_DTYPES, ranks=(0,), const=True, default=1, domain="U"),
    param("scale_factor_width", SCALE_DTYPES, ranks=(0,), const=True, default=1, domain="U"),
)
_SCALE_DOC = """
    scale_factor_height (const U): scale of dim -2, int32 or fp32 (fractional). Default: 1.
    scale_factor_width (const U): scale of dim -1, same dtype as the height's. Default: 1."""


def _upsample_cost(per_element: float) -> CostFn:
    return flops_cost(lambda a, outs: per_element * (outs[0].numel or 0))


register(
    OpDef(
        name="upsample_nearest_neighbor",
        params=(param("x", FP, domain="T"), *_SCALE_PARAMS),
        infer=_upsample_infer("upsample_nearest_neighbor"),
        reference=_nearest_reference,
        ranges=passes("x"),  # copies of x's elements
        cost=_upsample_cost(0.0),
        traits=frozenset({EXACT}),
        doc=f"""Upsample the last two dims by repeating the nearest input element.

Args:
    x (tensor<T, [*D, H1, W1]>): rank >= 3.{_SCALE_DOC}
Returns:
    tensor<T, [*D, H2, W2]>: ``H2 = floor(H1 * scale_factor_height)``, likewise W2; output
    position i reads input ``floor(i * H1 / H2)`` (the sizes' ratio, as Core ML).
""",
    )
)

_BILINEAR_DOC = f"""Upsample the last two dims by bilinear interpolation.

The sampling grid uses the ratio of the input and output sizes (torch's
``recompute_scale_factor=True``), clamped to the input.

Args:
    x (tensor<T, [*D, H1, W1]>): rank >= 3.{_SCALE_DOC}
    align_corners (const bool): true: ``src = i * (in - 1) / (out - 1)``; false:
        ``src = (i + 0.5) * in / out - 0.5``. Default: true.
Returns:
    tensor<T, [*D, H2, W2]>: ``H2 = floor(H1 * scale_factor_height)``, likewise W2.
"""

_bilinear_ios15 = register(
    OpDef(
        name="upsample_bilinear",
        params=(
            param("x", FP, domain="T"),
            *_SCALE_PARAMS,
            param("align_corners", BOOL, ranks=(0,), const=True, default=True),
        ),
        infer=_upsample_infer("upsample_bilinear"),
        reference=_bilinear_reference,
        ranges=passes("x"),  # weights in [0, 1] summing to 1: inside x's interval
        cost=_upsample_cost(BILINEAR_FLOPS_PER_ELEMENT),
        doc=_BILINEAR_DOC,
    )
)
register(
    _bilinear_ios15.evolve(
        since="ios16",
        params=(
            *_bilinear_ios15.params,
            param("half_pixel_centers", BOOL, ranks=(0,), const=True, optional=True),
        ),
        infer=_bilinear_infer_ios16,
        doc=_BILINEAR_DOC
        + """
iOS16: half_pixel_centers (const bool, optional, default ``not align_corners``); with both
false, ``src = i * in / out``; both true is rejected.
""",
    )
)
