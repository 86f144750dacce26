"""The engine's fp16 storage under a numerics profile, and the cliff events it counts.

Under a chip family's profile (:mod:`anekit.hw.numerics`) an op's fp32 result is stored
as the engine stores it, in this order: NaN replaced by the profile's value (N8);
magnitudes above the op's saturation (N1, N9; fp16's own overflow otherwise) become
+-inf; values that would round below 2^-14 become signed zeros (N12); the rest round
to fp16 with the profile's tie rule (ties away from zero: N4); +-inf outputs then take
the op's row of the non-finite table (N8). It works on the float32 bits, in place, a
cache-sized chunk at a time. Each evaluation counts, per op, the values saturated,
flushed and replaced: :class:`CliffEvents`, what the engine never reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anekit.fp16 import (
    FLUSH_BELOW_BITS,
    HALF_QUANTUM,
    INF_BITS,
    KEEP_BITS,
    MAGNITUDE,
    MIN_NORMAL_BITS,
    OVERFLOW_BITS,
    SIGN_BIT,
)
from anekit.mil.ops.registry import Numerics

SATURATED, FLUSHED, REPLACED = 0, 1, 2
CHUNK = 1 << 15  # elements per pass: the chunk and its scratch stay in the L2 cache
_NEG_INF_BITS = np.uint32(0xFF800000)
_EVEN_BIAS = np.uint32(0xFFF)
_SUBNORMAL_SCALE = np.float64(2.0**24)
_ONE, _ZERO = np.uint32(1), np.uint32(0)
_MIN_NORMAL_LESS_ONE = MIN_NORMAL_BITS - _ONE  # compared with magnitudes minus one
_FLUSH_BELOW_LESS_ONE = FLUSH_BELOW_BITS - _ONE


@dataclass(frozen=True)
class Storage:
    """How one op output is stored under a profile (planned once per output)."""

    inf_from: np.uint32  # magnitude bits at and above which the stored value is inf
    tie_even: bool
    flush: bool
    nan: float | None  # what NaN becomes (None: stays NaN)
    pos_inf: float | None  # what +inf becomes (None: stays)
    neg_inf: float | None
    # the largest magnitude minus one (int32) at and above which the common path stops
    top: np.int32 = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "top", np.int32(self.inf_from - _ONE))


def storage_for(op_type: str, numerics: Numerics | None, profile: Any) -> Storage:
    """The storage of an output of ``op_type`` (declaring ``numerics``) under ``profile``."""
    kind = numerics.saturates if numerics is not None else None
    limit = profile.saturation(kind) if kind else None
    inf_from = OVERFLOW_BITS
    if limit is not None:  # |s| > limit saturates: the next float32 above it is the first
        inf_from = min(OVERFLOW_BITS, np.uint32(np.float32(limit).view(np.uint32) + 1))
    table = profile.nonfinite_for(op_type)
    return Storage(
        inf_from=np.uint32(inf_from),
        tie_even=profile.tie == "even",
        flush=profile.flush_subnormals,
        nan=table.get("nan"),
        pos_inf=table.get("+inf"),
        neg_inf=table.get("-inf"),
    )


class DeviceRounder:
    """Stores float32 arrays as the engine would, in place; one per evaluation (its scratch)."""

    __slots__ = ("_m", "_t", "_b")

    def __init__(self) -> None:
        self._m = np.empty(CHUNK, np.uint32)
        self._t = np.empty(CHUNK, np.uint32)
        self._b = np.empty(CHUNK, np.bool_)

    def __call__(self, x: np.ndarray, st: Storage, counts: np.ndarray) -> None:
        """Store ``x`` (float32, C-contiguous) in place; add its events to ``counts``.

        The common case in six passes where no value is tiny: magnitudes minus one (a
        zero wraps to the top, so the unsigned minimum is the smallest non-zero magnitude
        and the signed maximum the largest: NaN and saturation show there), then the
        rounding itself. Tiny values (real activations have a few per chunk) cost two
        passes more and are fixed by index: flushed to a signed zero (N12) or, from
        2**-14 - 2**-25, rounded up to 2**-14. NaN, saturation, overflow, infinities and
        kept subnormals take the general path (:meth:`_chunk`).
        """
        flat = x.reshape(-1)
        n = flat.size
        if n > CHUNK:
            for i in range(0, n, CHUNK):
                self(flat[i : i + CHUNK], st, counts)
            return
        if not n:
            return
        m = self._m[:n]
        u = flat.view(np.uint32)
        np.bitwise_and(u, MAGNITUDE, out=m)
        np.subtract(m, _ONE, out=m)
        if m.view(np.int32).max() >= st.top or (
            m.min() < _MIN_NORMAL_LESS_ONE and not self._tiny(flat, m, st, counts)
        ):
            self._chunk(flat, st, counts)
        elif st.tie_even:
            self._round(u, True)
        else:
            np.add(u, HALF_QUANTUM, out=u)
            np.bitwise_and(u, KEEP_BITS, out=u)

    def _tiny(self, x: np.ndarray, m: np.ndarray, st: Storage, counts: np.ndarray) -> bool:
        """Flush ``x``'s tiny values (``m``: its magnitudes minus one) before rounding.

        False where the profile keeps subnormals (the general path rounds them).
        """
        if not st.flush:
            return False
        u, b = x.view(np.uint32), self._b[: x.size]
        np.less(m, _MIN_NORMAL_LESS_ONE, out=b)
        if np.count_nonzero(b) > x.size >> 6:  # many (small gradients): vectorised
            np.less(m, _FLUSH_BELOW_LESS_ONE, out=b)
            counts[FLUSHED] += np.count_nonzero(b)
            np.logical_not(b, out=b)
            np.multiply(x, b, out=x)  # x * 0 keeps the sign
            np.logical_and(b, m < _MIN_NORMAL_LESS_ONE, out=b)  # left to round up to 2**-14
        tiny = np.flatnonzero(b)
        if tiny.size:
            up = m[tiny] >= _FLUSH_BELOW_LESS_ONE
            counts[FLUSHED] += tiny.size - np.count_nonzero(up)
            u[tiny] = (u[tiny] & SIGN_BIT) | np.where(up, MIN_NORMAL_BITS, _ZERO)
        return True

    def _chunk(self, x: np.ndarray, st: Storage, counts: np.ndarray) -> None:
        n = x.size
        u = x.view(np.uint32)
        m, b = self._m[:n], self._b[:n]
        hi, lo = x.max(), x.min()  # NaN shows in both; the largest magnitude is one of them
        if st.nan is not None and np.isnan(hi):  # NaN: never comes out (N8)
            np.isnan(x, out=b)
            counts[REPLACED] += np.count_nonzero(b)
            np.copyto(x, np.float32(st.nan), where=b)
            hi, lo = x.max(), x.min()
        top = np.float32(max(abs(hi), abs(lo))).view(np.uint32)  # (a NaN kept compares False)
        np.bitwise_and(u, MAGNITUDE, out=m)
        if top >= st.inf_from:  # saturation (N1, N9) and fp16 overflow
            np.greater_equal(m, st.inf_from, out=b)
            b &= m < INF_BITS  # values already infinite (or NaN kept) are not new events
            counts[SATURATED] += np.count_nonzero(b)
            np.copyto(x, np.copysign(np.float32(np.inf), x), where=b)
            np.bitwise_and(u, MAGNITUDE, out=m)
        small = up = None
        if st.flush:  # N12: what would be stored as a subnormal becomes a signed zero
            np.greater_equal(m, FLUSH_BELOW_BITS, out=b)  # kept
            flushed = np.count_nonzero(m) - np.count_nonzero(b)  # zeros stay zeros: no event
            if flushed:
                counts[FLUSHED] += flushed
                np.multiply(x, b, out=x)  # x * 0 keeps the sign
            # [2**-14 - 2**-25, 2**-14) rounds up to 2**-14 (the bits below would keep 10
            # mantissa bits of the binade under it, a value fp16 does not have)
            up = np.flatnonzero(b & (m < MIN_NORMAL_BITS))
        else:
            small = np.flatnonzero(m < MIN_NORMAL_BITS)
            small_values = np.abs(x[small]).astype(np.float64) if small.size else None
        self._round(u, st.tie_even)  # on the signed bits: the magnitude rounds, the sign stays
        if up is not None and up.size:
            u[up] = (u[up] & SIGN_BIT) | MIN_NORMAL_BITS
        if small is not None and small.size:  # subnormals kept: fp16's quantum 2**-24 there
            q = small_values * _SUBNORMAL_SCALE
            q = np.rint(q) if st.tie_even else np.floor(q + 0.5)
            x[small] = np.copysign(q / _SUBNORMAL_SCALE, x[small])
        if top >= st.inf_from:
            self._table(x, u, st, counts)

    def _round(self, u: np.ndarray, tie_even: bool) -> None:
        """Round float32 bits to fp16's 10 mantissa bits (sign-magnitude: the sign is kept).

        No carry reaches the sign: the largest magnitude here is inf's (NaN was replaced).
        """
        if tie_even:
            t = self._t[: u.size]
            np.right_shift(u, 13, out=t)
            np.bitwise_and(t, 1, out=t)
            np.add(t, _EVEN_BIAS, out=t)
            np.add(u, t, out=u)
        else:
            np.add(u, HALF_QUANTUM, out=u)
        np.bitwise_and(u, KEEP_BITS, out=u)

    def _table(self, x: np.ndarray, u: np.ndarray, st: Storage, counts: np.ndarray) -> None:
        """N8: the op's row of the non-finite table for +inf and -inf outputs."""
        b = self._b[: x.size]
        for bits, value in ((INF_BITS, st.pos_inf), (_NEG_INF_BITS, st.neg_inf)):
            if value is None:
                continue
            np.equal(u, bits, out=b)
            k = np.count_nonzero(b)
            if k:
                counts[REPLACED] += k
                np.copyto(x, np.float32(value), where=b)


class StepStore:
    """One step's storage in one evaluation: the state's rounder and the step's event counts."""

    __slots__ = ("device", "counts")

    def __init__(self, device: DeviceRounder, counts: np.ndarray) -> None:
        self.device = device
        self.counts = counts

    def store(self, x: np.ndarray, st: Storage) -> None:
        self.device(x, st, self.counts)


@dataclass(frozen=True)
class CliffRow:
    """One op's cliff events in one evaluation (what the engine did that IEEE would not)."""

    name: str  # the op's (first) output name
    op_type: str
    line: int | None  # MIL source line
    saturated: int  # finite values stored as +-inf (N1, N9, fp16 overflow, N7)
    flushed: int  # non-zero values stored as zero (N12)
    replaced: int  # non-finite values replaced by the non-finite table (N8)

    @property
    def total(self) -> int:
        return self.saturated + self.flushed + self.replaced

    def describe(self) -> str:
        where = f" (MIL line {self.line})" if self.line else ""
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.saturated, "saturated to inf"),
                (self.flushed, "flushed to zero"),
                (self.replaced, "non-finite replaced"),
            )
            if n
        ]
        return f"op {self.op_type!r} {self.name!r}{where}: " + ", ".join(parts)


@dataclass(frozen=True)
class CliffEvents:
    """The cliff events of a kernel's last evaluation, in program order (``Kernel.events``)."""

    numerics: str  # the profile's name
    rows: tuple[CliffRow, ...]

    @property
    def first(self) -> CliffRow | None:
        """The first op (in program order) with an event, or None."""
        return self.rows[0] if self.rows else None

    @property
    def saturated(self) -> int:
        return sum(r.saturated for r in self.rows)

    @property
    def flushed(self) -> int:
        return sum(r.flushed for r in self.rows)

    @property
    def replaced(self) -> int:
        return sum(r.replaced for r in self.rows)

    @property
    def total(self) -> int:
        """Every event of the evaluation: saturated + flushed + replaced."""
        return self.saturated + self.flushed + self.replaced

    def __bool__(self) -> bool:
        return bool(self.rows)

    def summary(self) -> str:
        """One line: the totals and the first op (for warnings)."""
        if not self.rows:
            return f"no cliff events under numerics {self.numerics!r}"
        return (
            f"{self.saturated} saturated, {self.flushed} flushed, {self.replaced} replaced "
            f"in {len(self.rows)} ops under numerics {self.numerics!r}; first: "
            + self.first.describe()
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "numerics": self.numerics,
            "saturated": self.saturated,
            "flushed": self.flushed,
            "replaced": self.replaced,
            "rows": [r.__dict__ for r in self.rows],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CliffEvents:
        """The events ``as_dict`` wrote (an isolated kernel's worker sends them so)."""
        return cls(data["numerics"], tuple(CliffRow(**row) for row in data["rows"]))
