"""Exact, fast fp16 rounding and casts, shared by the reference backend, nn packing and kernel I/O.

Every function here gives bit for bit what NumPy's ``astype(np.float16)`` gives (round to
nearest, ties to even, overflow to inf, subnormals kept; any NaN stays a NaN, its payload
is not kept), without NumPy's scalar conversion loop, which costs about 5 ns per element
and 60 ns per fp16 subnormal. Two paths:

- PyTorch's vectorised float32 <-> float16 cast (F16C instructions), run on the NumPy
  memory through ``torch.from_numpy`` views, where PyTorch is importable;
- NumPy only: a magic add on the float32 grid. Adding ``M = 2**(e + 13)`` (``e`` the
  exponent of ``x``, at least -14) to ``x`` leaves exactly the bits an fp16 keeps,
  rounded to nearest-even by the float32 adder; subtracting ``M`` gives the rounded
  value. Subnormals need no special case (``e = -14`` fixes their quantum at 2**-24)
  and overflow is a multiply by 2**112 that reaches inf exactly when the rounded value
  is 2**16 or more.

Both are tested against NumPy on every fp16 value, tie and neighbour, on subnormal-heavy
and special values (``tests/test_fp16_rounding.py``), and on all 2**32 float32 bit patterns
when ``ANEKIT_SLOW_TESTS=1`` is set (a slow test). PyTorch is imported
lazily, the first time an array large enough to profit is rounded (``import anekit``
never imports it); :func:`use_torch` turns that path off or on.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

CHUNK = 1 << 14  # elements per NumPy pass: 64 KiB of float32 stays in the L2 cache
# Elements per PyTorch cast: at most PyTorch's grain size (32768), so a cast never opens a
# parallel region. Its OpenMP workers would spin against the caller's BLAS threads: on a
# busy 2-core machine an unpinned transformer forward took 10x longer.
TORCH_CHUNK = 1 << 15
# Below these sizes the per-call cost of the vectorised paths exceeds NumPy's own
# conversion (benchmarks/runtime.py, "rounding" rows).
TORCH_FROM = 1024
MAGIC_FROM = 2048

_EXPONENT = np.uint32(0x7F800000)
_MAGIC_SHIFT = np.float32(2.0**13)  # fp16 keeps 10 of float32's 23 mantissa bits
_MAGIC_MIN = np.float32(2.0**-1)  # 2**(-14 + 13): the quantum 2**-24 of fp16 subnormals
_MAGIC_MAX = np.float32(2.0**29)  # 2**(16 + 13): every |x| >= 2**16 overflows anyway
_UP = np.float32(2.0**112)  # 2**16 * 2**112 = 2**128 overflows float32; 65504 * 2**112 does not
_DOWN = np.float32(2.0**-112)

_torch_state: Any = None  # the torch module, False (off or not installed), None (not looked up)
_torch_lock = threading.Lock()


def use_torch(enabled: bool | None = None) -> bool:
    """Turn the PyTorch cast on (``True``: if importable), off (``False``), or just ask (``None``).

    Returns whether the PyTorch path is in use.
    """
    global _torch_state
    with _torch_lock:
        if enabled is False:
            _torch_state = False
        elif enabled is True or _torch_state is None:
            _torch_state = _import_torch()
    return _torch_state is not False


def _import_torch() -> Any:
    try:
        import torch
    except (ImportError, OSError):  # not installed, or a broken install: NumPy it is
        return False
    return torch


def _torch() -> Any:
    """The torch module if its path is on (importing it the first time), else None."""
    state = _torch_state
    if state is None:
        use_torch()
        state = _torch_state
    return state or None


def round_fp16(x: Any, out: np.ndarray | None = None) -> np.ndarray:
    """Round to the nearest fp16 value (ties to even), held in float32: ``x.astype(f16).astype(f32)``.

    Args:
        x (array_like): any real values; float64 rounds once, straight to fp16.
        out (ndarray): a float32 array of x's shape to write to (may be ``x`` itself).
            Default: a new array in x's memory order (as ``astype`` keeps it).
    Returns:
        ndarray: ``out``, or the new float32 array.
    """
    x = np.asarray(x)
    if out is None:
        out = np.empty_like(x, dtype=np.float32)
    elif out.dtype != np.float32 or out.shape != x.shape:
        raise ValueError(
            f"round_fp16: out must be float32 of shape {list(x.shape)}, found "
            f"{out.dtype}{list(out.shape)}"
        )
    if x.dtype != np.float32 or x.size < MAGIC_FROM or not out.flags.c_contiguous:
        with np.errstate(over="ignore"):  # overflow to inf is the result, not an error
            np.copyto(out, x.astype(np.float16))
        return out
    if out is not x:
        np.copyto(out, x)
    Rounder()(out)
    return out


def to_fp16(x: Any, out: np.ndarray | None = None) -> np.ndarray:
    """Cast to a float16 array, exactly as ``astype(np.float16)`` (overflow gives inf, silently).

    Args:
        x (array_like): any real values.
        out (ndarray): a float16 array of x's shape to write to (any strides). Default: new.
    """
    x = np.asarray(x)
    if out is None:
        out = np.empty(x.shape, np.float16)
    cast_into(out, x)
    return out


def cast_into(dst: np.ndarray, src: Any) -> None:
    """``dst[...] = src`` where ``dst`` is float16 or float32: exact, and fast for float32 sources.

    ``src`` must have ``dst``'s shape (no broadcasting: a wrong shape is an error, not
    a silent repeat). Overflow to fp16 inf is the modelled result and warns nothing.
    """
    src = np.asarray(src)
    if src.shape != dst.shape:
        raise ValueError(f"cast: expected shape {list(dst.shape)}, found {list(src.shape)}")
    torch = _torch() if src.size >= TORCH_FROM else None
    pair = (src.dtype, dst.dtype)
    if torch is not None and pair in _TORCH_PAIRS and _torchable(src) and _torchable(dst):
        _copy_in_chunks(torch.from_numpy(dst), torch.from_numpy(src))
    elif dst.dtype == np.float16 and src.dtype.itemsize > 2:
        with np.errstate(over="ignore"):  # overflow to inf is the result
            np.copyto(dst, src, casting="unsafe")
    else:
        np.copyto(dst, src, casting="unsafe")


_TORCH_PAIRS = {
    (np.dtype(np.float32), np.dtype(np.float16)),
    (np.dtype(np.float16), np.dtype(np.float32)),
    (np.dtype(np.float16), np.dtype(np.float16)),
    (np.dtype(np.float32), np.dtype(np.float32)),
}


def _copy_in_chunks(dst: Any, src: Any) -> None:
    """``dst.copy_(src)`` in pieces of at most TORCH_CHUNK elements (see TORCH_CHUNK)."""
    n = dst.numel()
    if n <= TORCH_CHUNK or dst.dim() == 0:
        dst.copy_(src)
    elif dst.is_contiguous() and src.is_contiguous():
        d, s = dst.view(-1), src.view(-1)
        for i in range(0, n, TORCH_CHUNK):
            d[i : i + TORCH_CHUNK].copy_(s[i : i + TORCH_CHUNK])
    elif dst.shape[0] == 1:
        _copy_in_chunks(dst[0], src[0])
    else:
        rows = max(1, TORCH_CHUNK // max(1, n // dst.shape[0]))
        for i in range(0, dst.shape[0], rows):
            _copy_in_chunks(dst[i : i + rows], src[i : i + rows])


def _torchable(a: np.ndarray) -> bool:
    """Whether torch.from_numpy takes this array (writable, aligned, no negative strides)."""
    return a.flags.writeable and a.flags.aligned and all(s >= 0 for s in a.strides)


class Rounder:
    """Rounds C-contiguous float32 arrays to fp16 values in place, with its own scratch memory.

    One per thread of evaluation (the scratch is not shared); the reference backend keeps
    one per evaluation state. Arrays are rounded ``CHUNK`` elements at a time, so the
    scratch stays small and every pass of the NumPy path runs in cache.
    """

    __slots__ = ("_magic", "_half", "_silenced")

    def __init__(self, *, silenced: bool = False) -> None:
        """``silenced``: the caller already ignores floating-point errors (``np.errstate``)."""
        self._silenced = silenced
        self._magic: np.ndarray | None = None  # float32 scratch of the NumPy path
        self._half: np.ndarray | None = None  # float16 scratch of the torch path

    def __call__(self, x: np.ndarray) -> None:
        """Round ``x`` (float32, C-contiguous) in place."""
        n = x.size
        flat = x.reshape(-1)
        torch = _torch() if n >= TORCH_FROM else None
        if torch is None and n < MAGIC_FROM:
            if self._silenced:
                np.copyto(flat, flat.astype(np.float16))
            else:
                with np.errstate(over="ignore"):
                    np.copyto(flat, flat.astype(np.float16))
            return
        if torch is not None:
            if self._half is None:
                self._half = np.empty(TORCH_CHUNK, np.float16)
            t = torch.from_numpy(flat)
            h = torch.from_numpy(self._half)
            if n <= TORCH_CHUNK:
                scratch = h[:n]
                scratch.copy_(t)
                t.copy_(scratch)
                return
            for i in range(0, n, TORCH_CHUNK):
                part = t[i : i + TORCH_CHUNK]
                scratch = h[: part.shape[0]]
                scratch.copy_(part)
                part.copy_(scratch)
            return
        step = CHUNK
        if self._magic is None:
            self._magic = np.empty(step, np.float32)
        if self._silenced:
            for i in range(0, n, step):
                part = flat[i : i + step]
                _magic_round(part, self._magic[: part.size])
            return
        with np.errstate(over="ignore", invalid="ignore"):
            for i in range(0, n, step):
                part = flat[i : i + step]
                _magic_round(part, self._magic[: part.size])


def _magic_round(x: np.ndarray, m: np.ndarray) -> None:
    """Round float32 ``x`` to fp16 values in place; ``m`` is float32 scratch of x's size.

    Ten NumPy passes, none allocating (see the module docstring for why it is exact).
    """
    np.multiply(x, _MAGIC_SHIFT, out=m)  # exponent of x plus 13 (inf and NaN give inf)
    bits = m.view(np.uint32)
    np.bitwise_and(bits, _EXPONENT, out=bits)  # |M| = 2**(e + 13), mantissa cleared
    np.maximum(m, _MAGIC_MIN, out=m)  # (np.clip's Python wrapper costs more than a pass)
    np.minimum(m, _MAGIC_MAX, out=m)
    np.copysign(m, x, out=m)  # M carries the sign of x, so x + M stays in M's binade
    np.add(x, m, out=x)  # the float32 adder rounds x to fp16 precision, ties to even
    np.subtract(x, m, out=x)  # exact: the rounded value
    np.multiply(x, _UP, out=x)  # rounded values >= 2**16 become inf, others scale exactly
    np.multiply(x, _DOWN, out=x)
    np.copysign(x, m, out=x)  # x - M gives +0 where x rounds to -0


FP16_MAX = 65504.0  # the largest finite fp16
SMALLEST_NORMAL = 2.0**-14  # fp16's smallest normal: below it a chip profile flushes to 0 (N12)

# float32 bit patterns of the fp16 storage model (magnitudes, sign cleared)
SIGN_BIT = np.uint32(0x80000000)
MAGNITUDE = np.uint32(0x7FFFFFFF)
INF_BITS = np.uint32(0x7F800000)
HALF_QUANTUM = np.uint32(0x1000)  # half of fp16's quantum on float32's mantissa (bit 12)
KEEP_BITS = np.uint32(0xFFFFE000)  # the sign, exponent and 10 mantissa bits fp16 keeps
OVERFLOW_BITS = np.uint32(0x477FF000)  # 65520: the smallest magnitude that rounds to inf
MIN_NORMAL_BITS = np.uint32(0x38800000)  # 2**-14, fp16's smallest normal
# 2**-14 - 2**-25: the smallest magnitude that rounds to fp16's smallest normal (a tie goes
# up under both tie rules); below it a value would be stored as a subnormal, i.e. flushed
FLUSH_BELOW_BITS = np.uint32(0x387FE000)
_SUBNORMAL_SCALE = 2.0**24  # fp16 subnormals are multiples of 2**-24


def round_fp16_away(x: Any) -> np.ndarray:
    """Round to the nearest fp16 value with ties away from zero, held in float32.

    As :func:`round_fp16` but a value halfway between two fp16 values goes to the larger
    magnitude (2049 -> 2050, 1024.5 -> 1025): the engine's reading (``anekit.hw.numerics``).
    Overflow gives inf, subnormals are kept, NaN stays NaN.
    """
    y = np.array(x, dtype=np.float32, order="C")
    u = y.view(np.uint32)
    m = np.bitwise_and(u, MAGNITUDE)
    nan = m > INF_BITS
    small = m < MIN_NORMAL_BITS
    r = np.bitwise_and(m + HALF_QUANTUM, KEEP_BITS)
    r[m >= OVERFLOW_BITS] = INF_BITS
    out = np.bitwise_or(r, np.bitwise_and(u, SIGN_BIT)).view(np.float32)
    if small.any():
        a = np.abs(y[small]).astype(np.float64)
        out[small] = np.copysign(np.floor(a * _SUBNORMAL_SCALE + 0.5) / _SUBNORMAL_SCALE, y[small])
    out[nan] = np.nan
    return out.reshape(np.shape(x))
