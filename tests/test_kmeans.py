"""The chunked k-means of LUT compression against a plain NumPy Lloyd's algorithm, and its memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from anekit.compression import kmeans
from anekit.compression.encode import palette
from anekit.compression.kmeans import kmeans_1d, nearest
from anekit.mil import blob


def reference_kmeans(x: np.ndarray, k: int, iterations: int = 32) -> np.ndarray:
    """Lloyd's algorithm row by row: quantile start, nearest centroid (ties to the lower), means."""
    out = []
    for row in x.astype(np.float64):
        c = np.quantile(row, (np.arange(k) + 0.5) / k)
        labels = None
        for _ in range(iterations):
            new = np.abs(row[:, None] - c[None, :]).argmin(axis=1)
            if labels is not None and np.array_equal(new, labels):
                break
            labels = new
            assert np.bincount(labels, minlength=k).min() > 0  # the data here leaves none empty
            c = np.sort(np.bincount(labels, row, k) / np.bincount(labels, minlength=k))
        out.append(c)
    return np.array(out)


def inertia(x: np.ndarray, c: np.ndarray) -> float:
    labels = nearest(x, c)
    return float(((x - np.take_along_axis(c, labels, axis=1)) ** 2).sum())


@pytest.mark.parametrize("chunk", [1 << 20, 700])  # one chunk; rows split over many chunks
def test_matches_numpy_reference(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(kmeans, "CHUNK_ELEMENTS", chunk)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((12, 300)) * rng.uniform(0.1, 3, (12, 1))).astype(np.float16)
    ref = reference_kmeans(x, 16)
    got = kmeans_1d(x, 16, seed=0)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)
    assert inertia(x.astype(np.float64), got) == pytest.approx(inertia(x.astype(np.float64), ref))
    labels = nearest(x, got, dtype=np.uint8)
    expected = np.abs(x.astype(np.float64)[..., None] - got[:, None, :]).argmin(axis=2)
    np.testing.assert_array_equal(labels, expected)


def test_repeated_values_and_one_long_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kmeans, "CHUNK_ELEMENTS", 256)
    rng = np.random.default_rng(3)
    x = rng.integers(-40, 40, (1, 5000)).astype(np.float16) / np.float16(8)
    np.testing.assert_allclose(kmeans_1d(x, 8), reference_kmeans(x, 8), rtol=1e-9, atol=1e-12)


def test_peak_memory_is_a_small_multiple_of_the_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    # chunks smaller than the weight, as a large weight meets the default chunks
    monkeypatch.setattr(kmeans, "CHUNK_ELEMENTS", 1 << 16)
    monkeypatch.setattr(blob, "_PACK_CHUNK", 1 << 16)
    w = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float16)
    for granularity in ("per_grouped_channel", "per_tensor"):
        tracemalloc.start()
        palette(w, 0, 4, granularity)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # before the chunking: 20x (grouped) and 31x (per tensor) the weight's bytes
        assert peak < 4 * w.nbytes, (granularity, peak / w.nbytes)
