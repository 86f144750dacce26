"""One-dimensional k-means over many groups at once: the palettes of LUT compression.

Each row of a ``[G, n]`` matrix is clustered into ``k`` values independently (Lloyd's
algorithm). In one dimension a cluster is a run of the sorted values, so a row is reduced
once to its distinct sorted values and their counts (an fp16 row has at most 65,536, however
long it is), and an iteration only finds, for each midpoint between neighbouring centroids,
how many values lie at or below it, and takes the clusters' means from prefix sums of
count x value. Every row's search is done in one ``searchsorted`` over a single sorted
array: row ``g`` is mapped into its own interval ``[2g, 2g + 1]`` of the number line.

Memory: rows are clustered (and labelled, :func:`nearest`) in chunks of about
:data:`CHUNK_ELEMENTS` values, so the extra memory is a small multiple of one chunk plus the
distinct values, not of the whole weight (it was about 20x the weight's bytes: an 8192 x
8192 fp16 weight needed 2.7 GB).

Deterministic: centroids start at the quantiles ``(i + 0.5) / k`` of each row; a cluster
left empty is re-seeded at a point of its row drawn from ``seed`` (one generator, drawn
from chunk after chunk).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

#: values clustered or labelled at once (a chunk of whole rows; a longer row is one chunk)
CHUNK_ELEMENTS = 1 << 20


def kmeans_1d(values: np.ndarray, k: int, *, iterations: int = 32, seed: int = 0) -> np.ndarray:
    """The ``k`` centroids ``[G, k]`` (ascending, float64) of each row of ``values [G, n]``.

    A chunk of rows stops early when none of its clusters changes; :func:`nearest` labels
    values with the centroids. ``values`` keeps its dtype (no float64 copy of the whole).
    """
    x = np.asarray(values)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"expected values [groups, n > 0], found shape {list(x.shape)}")
    if not all(np.isfinite(x[a:b]).all() for a, b in _row_chunks(*x.shape)):
        raise ValueError("values must be finite to be clustered")
    rng = np.random.default_rng(seed)
    out = np.empty((x.shape[0], k))
    for a, b in _row_chunks(*x.shape):
        out[a:b] = _Rows(x[a:b]).fit(k, iterations, rng)
    return out


def _row_chunks(groups: int, n: int) -> Iterator[tuple[int, int]]:
    step = max(1, CHUNK_ELEMENTS // max(n, 1))
    for a in range(0, groups, step):
        yield a, min(a + step, groups)


class _Rows:
    """A chunk of rows as their distinct sorted values, laid out one row after another.

    ``vals[i]`` is a distinct value of row ``row[i]`` with ``counts[i]`` copies; ``cum[i]``
    counts the values before it across the chunk (row g's start at ``g * n``), ``csum[i]``
    sums them (count x value), so a run of a row's sorted values is a difference of both.
    """

    def __init__(self, x: np.ndarray) -> None:
        groups, n = x.shape
        flat = np.sort(x, axis=1).ravel()
        new = np.empty(flat.size, bool)
        new[0] = True
        np.not_equal(flat[1:], flat[:-1], out=new[1:])
        new[::n] = True  # every row starts a run
        first = np.flatnonzero(new)
        del new
        self.vals = flat[first].astype(np.float64)
        del flat
        self.cum = np.append(first, groups * n)  # values before each distinct value, and the end
        counts = np.diff(self.cum)
        self.csum = np.concatenate([[0.0], np.cumsum(self.vals * counts)])
        self.row = first // n
        self.n, self.groups = n, groups
        starts = np.searchsorted(first, np.arange(groups) * n)
        self.lo = self.vals[starts]
        self.hi = self.vals[np.append(starts[1:], len(first)) - 1]
        self.span = np.where(self.hi > self.lo, self.hi - self.lo, 1.0)
        self.keys = (self.vals - self.lo[self.row]) / self.span[self.row] + 2.0 * self.row

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The sorted values at chunk positions (``g * n + i``: row g's i-th smallest)."""
        return self.vals[np.searchsorted(self.cum, positions, side="right") - 1]

    def quantiles(self, k: int) -> np.ndarray:
        """Each row's quantiles ``(i + 0.5) / k``, interpolated as ``np.quantile`` does."""
        h = (self.n - 1) * (np.arange(k) + 0.5) / k
        below = np.floor(h).astype(np.int64)
        t = h - below
        base = (np.arange(self.groups) * self.n)[:, None]
        a = self.at(base + below)
        b = self.at(base + np.minimum(below + 1, self.n - 1))
        return a + (b - a) * t

    def fit(self, k: int, iterations: int, rng: np.random.Generator) -> np.ndarray:
        centroids = self.quantiles(k)
        ends = None
        for _ in range(iterations):
            new = self._ends(centroids)
            if ends is not None and np.array_equal(new, ends):
                break
            ends = new
            centroids = self._means(ends, centroids, rng)
        return centroids

    def _ends(self, centroids: np.ndarray) -> np.ndarray:
        """``[G, k + 1]`` distinct-value indices: cluster j of row g is ``ends[g, j] .. ends[g, j + 1]``."""
        groups, k = centroids.shape
        mids = (centroids[:, 1:] + centroids[:, :-1]) / 2
        shift = 2.0 * np.arange(groups)
        edges = np.clip((mids - self.lo[:, None]) / self.span[:, None], -0.5, 1.5) + shift[:, None]
        found = np.searchsorted(self.keys, edges.ravel(), side="right").reshape(groups, k - 1)
        starts = np.searchsorted(self.keys, shift)[:, None]
        stops = np.searchsorted(self.keys, shift + 1.5)[:, None]
        return np.concatenate([starts, found, stops], axis=1)

    def _means(self, ends: np.ndarray, old: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Each cluster's mean (sorted per row); an empty cluster moves to a random value of its row."""
        counts = np.diff(self.cum[ends], axis=1)
        sums = np.diff(self.csum[ends], axis=1)
        means = np.where(counts > 0, sums / np.maximum(counts, 1), old)
        empty = np.argwhere(counts == 0)
        if len(empty):
            picks = rng.integers(0, self.n, len(empty))
            means[empty[:, 0], empty[:, 1]] = self.at(empty[:, 0] * self.n + picks)
        return np.sort(means, axis=1)


def nearest(x: np.ndarray, centroids: np.ndarray, dtype: type = np.intp) -> np.ndarray:
    """The index of the nearest of each row's ascending ``centroids [G, k]`` for every ``x [G, n]``.

    A value half way between two centroids goes to the lower one. Labels come as ``dtype``
    (``np.uint8`` for at most 256 centroids), computed a chunk of values at a time.
    """
    groups, n = x.shape
    k = centroids.shape[1]
    if k == 1:
        return np.zeros(x.shape, dtype)
    out = np.empty(x.shape, dtype)
    mids = (centroids[:, 1:] + centroids[:, :-1]) / 2
    cols = max(1, min(n, CHUNK_ELEMENTS))
    for a, b in _row_chunks(groups, n):
        for c in range(0, n, cols):
            part = x[a:b, c : c + cols].astype(np.float64)
            out[a:b, c : c + cols] = _nearest(part, mids[a:b], k)
    return out


def _nearest(x: np.ndarray, mids: np.ndarray, k: int) -> np.ndarray:
    groups = len(x)
    lo = np.minimum(x.min(axis=1), mids[:, 0])
    span = np.maximum(x.max(axis=1), mids[:, -1]) - lo
    span = np.where(span > 0, span, 1.0)
    # row g lives in [2g, 2g + 1]: one sorted array holds every row's midpoints
    shift = 2.0 * np.arange(groups)
    edges = ((mids - lo[:, None]) / span[:, None] + shift[:, None]).ravel()
    x -= lo[:, None]
    x /= span[:, None]
    x += shift[:, None]
    found = np.searchsorted(edges, x.ravel(), side="left").reshape(x.shape)
    return found - (k - 1) * np.arange(groups)[:, None]
