"""The distances between distributions on known vectors, and histograms aligned on the union
of their edges."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from shardtrain.data.drift import align, histogram_js_divergence, js_divergence, linf_distance
from shardtrain.data.histogram import Histogram, HistogramBins


def test_js_divergence_of_known_vectors():
    assert js_divergence([1, 2, 3], [2, 4, 6]) == 0.0  # counts are normalised
    assert js_divergence([1, 0], [0, 1]) == 1.0  # nothing in common: one bit
    # [1/2, 1/2] vs [1, 0]: H(m) - (H(p) + H(q)) / 2 with m = [3/4, 1/4].
    h_m = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert js_divergence([0.5, 0.5], [1, 0]) == pytest.approx(h_m - 0.5)
    assert js_divergence([0.5, 0.5], [1, 0]) == pytest.approx(0.311278, abs=1e-6)
    assert js_divergence([1, 0], [0.5, 0.5]) == js_divergence([0.5, 0.5], [1, 0])  # symmetric
    with pytest.raises(ValueError, match="different lengths"):
        js_divergence([1], [1, 2])
    with pytest.raises(ValueError, match="no mass"):
        js_divergence([0, 0], [1, 1])


def test_linf_distance_of_known_frequencies():
    a = {"ios": 40, "android": 50, "web": 10}
    b = {"ios": 52, "android": 48}
    assert linf_distance(a, b, 100, 100) == pytest.approx(0.12)
    assert linf_distance(a, a, 100, 100) == 0.0
    # Totals beyond the kept values: frequencies of all values counted, not of those kept.
    assert linf_distance({"x": 10}, {"x": 10}, 100, 50) == pytest.approx(0.1)
    assert linf_distance({"x": 1}, {"y": 1}, 1, 1) == 1.0


def _hist(edges, counts) -> Histogram:
    return Histogram(tuple(map(float, edges)), np.asarray(counts, dtype=np.int64))


def test_same_edges_compare_bin_by_bin():
    a = _hist([0, 1, 2], [0, 5, 5, 0])
    b = _hist([0, 1, 2], [0, 10, 0, 0])
    p, q = align(a, b, a_range=(0, 2), b_range=(0, 1))
    # Below the first edge, the two bins, at or past the last edge (a point: the max).
    assert p.tolist() == [0, 5, 5, 0] and q.tolist() == [0, 10, 0, 0]
    assert histogram_js_divergence(a, b, a_range=(0, 2), b_range=(0, 1)) == pytest.approx(
        js_divergence([1, 1], [1, 0])
    )
    assert histogram_js_divergence(a, a, a_range=(0, 2), b_range=(0, 2)) == 0.0


def test_steps_of_one_lattice_rebin_into_their_common_multiple():
    a = _hist([0, 2, 4], [0, 4, 4, 0])  # bins of 2
    b = _hist([0, 1, 2, 3, 4], [0, 2, 2, 2, 2, 0])  # bins of 1, the same spread
    p, q = align(a, b, a_range=(0, 4), b_range=(0, 4))
    assert p.tolist() == [0, 4, 4, 0] and q.tolist() == [0, 4, 4, 0]
    # Steps 0.2 and 0.5: bins of 1, which hold whole bins of both.
    c = _hist([0.0, 0.2, 0.4, 0.6, 0.8, 1.0], [0, 1, 0, 0, 0, 2, 0])
    d = _hist([0.5, 1.0, 1.5], [1, 0, 3, 0])
    p, q = align(c, d, a_range=(0.0, 0.8), b_range=(0.0, 1.2))
    # Below 0, [0, 1), [1, 2), at or past 2; d's underflow [0, 0.5) lies in [0, 1).
    assert p.tolist() == [0, 3, 0, 0] and q.tolist() == [0, 1, 3, 0]
    # Outer bins reach the columns' min and max; a shifted histogram is far away.
    far = _hist([0, 2, 4], [0, 0, 0, 8])
    assert histogram_js_divergence(a, far, a_range=(0, 4), b_range=(10, 20)) == 1.0


def _counted(values: np.ndarray, step: tuple[int, int]) -> Histogram:
    """``values`` counted into bins of ``step`` (mantissa, exponent) covering their range, as
    read back from JSON."""
    mantissa, exponent = step
    size = mantissa * 10.0**exponent
    first = math.floor(values.min() / size) - 1
    bins = HistogramBins(first, mantissa, exponent, math.ceil(values.max() / size) - first + 2)
    h = Histogram.empty(bins)
    h.update(pa.array(values))
    return Histogram.from_dict(h.to_dict())


def _js(x: np.ndarray, y: np.ndarray, steps) -> float:
    a, b = _counted(x, steps[0]), _counted(y, steps[1])
    ranges = {"a_range": (x.min(), x.max()), "b_range": (y.min(), y.max())}
    return histogram_js_divergence(a, b, **ranges)


def test_point_valued_data_in_bins_of_other_steps_is_not_drift():
    """Counts and constants binned by different steps (each dataset's own planning sample)
    compare as if binned alike: splitting a bin by width would move their mass."""
    rng = np.random.default_rng(3)
    x, y = rng.poisson(4.0, 20_000).astype(float), rng.poisson(4.4, 20_000).astype(float)
    same = _js(x, y, [(5, -1), (5, -1)])
    assert same < 0.02
    assert _js(x, y, [(2, -1), (5, -1)]) == pytest.approx(same, abs=1e-3)
    assert _js(x, y, [(1, -1), (1, 0)]) == pytest.approx(same, abs=1e-3)
    constant = np.full(1_000, 5.0)
    assert _js(constant, constant, [(1, -1), (2, -3)]) == 0.0


def test_edges_off_the_lattice_split_bins_by_width():
    a = _hist([0, 3, 6], [0, 4, 4, 0])  # bins of 3: not 1, 2 or 5 times a power of ten
    b = _hist([0, 1.5, 3, 4.5, 6], [0, 2, 2, 2, 2, 0])
    assert HistogramBins.from_edges(a.edges) is None
    p, q = align(a, b, a_range=(0, 6), b_range=(0, 6))
    assert p.tolist() == pytest.approx([0, 2, 2, 2, 2, 0]) and q.tolist() == [0, 2, 2, 2, 2, 0]
    # Bins clipped to the column's range: a constant column is a point on both sides.
    c = _hist([4.5, 6], [0, 10, 0])
    d = _hist([3, 6], [0, 10, 0])
    assert histogram_js_divergence(c, d, a_range=(5, 5), b_range=(5, 5)) == 0.0


def test_outer_bins_and_points():
    """An overflow bin whose max is its edge is a point; counts are kept whole."""
    a = _hist([0, 1], [2, 3, 4])
    b = _hist([0, 1], [0, 3, 4])
    p, q = align(a, b, a_range=(-1, 1), b_range=(0, 1))
    assert p.sum() == 9 and q.sum() == 7
    assert p.tolist() == [2, 3, 4] and q.tolist() == [0, 3, 4]
    c = _hist([0, 2], [2, 7, 0])  # the same values in a bin of 2, which holds a's point 1
    p, q = align(a, c, a_range=(-1, 1), b_range=(-1, 1))
    assert p.tolist() == [2, 7, 0] and q.tolist() == [2, 7, 0]
