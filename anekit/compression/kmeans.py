"""One-dimensional k-means over many groups at once: the palettes of LUT compression.

Each row of a ``[G, n]`` matrix is clustered into ``k`` values independently, all rows
in the same vectorised steps (Lloyd's algorithm). In one dimension a cluster is a run
of the sorted values: each row is sorted once, and an iteration only finds, for each
midpoint between neighbouring centroids, how many values lie at or below it, and takes
the clusters' means from prefix sums. That is ``G * k`` searches per iteration instead
of ``G * n``. Every row's search is done in one ``searchsorted`` over a single sorted
array: row ``g`` is mapped into its own interval ``[2g, 2g + 1]`` of the number line.

Deterministic: centroids start at the quantiles ``(i + 0.5) / k`` of each row; a
cluster left empty is re-seeded at a point of its row drawn from ``seed``.
"""

from __future__ import annotations

import numpy as np


def kmeans_1d(values: np.ndarray, k: int, *, iterations: int = 32, seed: int = 0) -> np.ndarray:
    """The ``k`` centroids ``[G, k]`` (ascending, float64) of each row of ``values [G, n]``.

    Stops early when no cluster changes; :func:`nearest` labels values with them.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"expected values [groups, n > 0], found shape {list(x.shape)}")
    if not np.isfinite(x).all():
        raise ValueError("values must be finite to be clustered")
    rng = np.random.default_rng(seed)
    xs = np.sort(x, axis=1)
    prefix = np.concatenate([np.zeros((len(xs), 1)), np.cumsum(xs, axis=1)], axis=1)
    keys, lo, span = _keys(xs)
    centroids = np.quantile(xs, (np.arange(k) + 0.5) / k, axis=1).T  # [G, k], ascending
    ends = None
    for _ in range(iterations):
        new = _cluster_ends(centroids, keys, lo, span)
        if ends is not None and np.array_equal(new, ends):
            break
        ends = new
        centroids = _means(xs, prefix, ends, centroids, rng)
    return centroids


def _keys(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sorted rows laid out one after another on the number line, row g in [2g, 2g + 1]."""
    lo, hi = xs[:, 0], xs[:, -1]
    span = np.where(hi > lo, hi - lo, 1.0)
    shift = 2.0 * np.arange(len(xs))
    return ((xs - lo[:, None]) / span[:, None] + shift[:, None]).ravel(), lo, span


def _cluster_ends(
    centroids: np.ndarray, keys: np.ndarray, lo: np.ndarray, span: np.ndarray
) -> np.ndarray:
    """``[G, k + 1]``: cluster j of row g holds its sorted values ``ends[g, j] .. ends[g, j + 1]``."""
    groups, k = centroids.shape
    n = len(keys) // groups
    mids = (centroids[:, 1:] + centroids[:, :-1]) / 2
    shift = 2.0 * np.arange(groups)
    edges = np.clip((mids - lo[:, None]) / span[:, None], -0.5, 1.5) + shift[:, None]
    found = np.searchsorted(keys, edges.ravel(), side="right").reshape(groups, k - 1)
    inner = found - n * np.arange(groups)[:, None]  # values of the row at or below each midpoint
    return np.concatenate([np.zeros((groups, 1), int), inner, np.full((groups, 1), n)], axis=1)


def nearest(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The index of the nearest of each row's ascending ``centroids [G, k]`` for every ``x [G, n]``.

    A value half way between two centroids goes to the lower one.
    """
    groups, k = centroids.shape
    lo = np.minimum(x.min(axis=1), centroids[:, 0])
    span = np.maximum(x.max(axis=1), centroids[:, -1]) - lo
    span = np.where(span > 0, span, 1.0)
    # row g lives in [2g, 2g + 1]: one sorted array holds every row's midpoints
    shift = 2.0 * np.arange(groups)
    mids = (centroids[:, 1:] + centroids[:, :-1]) / 2
    edges = ((mids - lo[:, None]) / span[:, None] + shift[:, None]).ravel()
    points = (x - lo[:, None]) / span[:, None] + shift[:, None]
    found = np.searchsorted(edges, points.ravel(), side="left").reshape(x.shape)
    return found - (k - 1) * np.arange(groups)[:, None]


def _means(
    xs: np.ndarray,
    prefix: np.ndarray,
    ends: np.ndarray,
    old: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Each cluster's mean (sorted per row); an empty cluster moves to a random value of its row."""
    rows = np.arange(len(xs))[:, None]
    counts = np.diff(ends, axis=1)
    sums = prefix[rows, ends[:, 1:]] - prefix[rows, ends[:, :-1]]
    means = np.where(counts > 0, sums / np.maximum(counts, 1), old)
    empty = np.argwhere(counts == 0)
    if len(empty):
        picks = rng.integers(0, xs.shape[1], len(empty))
        means[empty[:, 0], empty[:, 1]] = xs[empty[:, 0], picks]
    return np.sort(means, axis=1)
