"""Distances between two datasets' distributions of one column, from their statistics.

* Numeric columns: the **Jensen-Shannon divergence** between their histograms
  (:func:`js_divergence`), in bits: 0 for the same distribution, 1 for distributions with no
  value range in common. Symmetric and finite even where one histogram has an empty bin
  (unlike the Kullback-Leibler divergence it is built from).
* Categorical columns: the **L-infinity distance** between their value frequencies
  (:func:`linf_distance`): the largest change of any one value's share of the rows, e.g.
  0.12 when ``ios`` went from 40 % to 52 % of the non-missing values.

Both are what TensorFlow Data Validation uses for its drift and skew comparators.

Histograms of two datasets need not share their bins (each dataset's bins come from its own
planning sample, see :mod:`shardtrain.data.histogram`). Their edges are multiples of a
decimal step (1, 2 or 5 times a power of ten), so :func:`align` re-bins both into bins of
the smallest step that is a multiple of both: every bin of either histogram then lies
inside one new bin, and the comparison is exact -- a count column binned by 0.2 on one side
and 0.5 on the other is compared by whole units. Only the outer bins (values beyond the
planning sample's range, about 1 % of them) are spread evenly between the column's min and
the first edge, and the last edge and its max. Edges on no such lattice (histograms written
by something else) fall back to the union of both sets of edges, a bin split by the other's
edges giving each part a share of its count in proportion to its width (values assumed
spread evenly inside a bin, as TFDV assumes when it aligns histograms), every bin clipped
to the column's ``[min, max]`` so that a constant column stays a point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from shardtrain.data.histogram import Histogram, HistogramBins

__all__ = ["align", "histogram_js_divergence", "js_divergence", "linf_distance"]


def _outer_pieces(h: Histogram, lo: float, hi: float) -> list[tuple[float, float, int]]:
    """``(start, end, count)`` of the outer bins: from the column's min ``lo`` to the first
    edge, from the last edge to its max ``hi`` (a bin of zero width is a point)."""
    edges, counts = h.edges, h.counts
    out = []
    if counts[0]:
        out.append((min(lo, edges[0]), edges[0], int(counts[0])))
    if counts[-1]:
        out.append((edges[-1], max(hi, edges[-1]), int(counts[-1])))
    return out


def _pieces(h: Histogram, lo: float, hi: float) -> list[tuple[float, float, int]]:
    """``(start, end, count)`` of every non-empty bin, clipped to the column's ``[lo, hi]``
    (min and max; a bin of zero width is a point)."""
    edges, counts = h.edges, h.counts
    out = _outer_pieces(h, lo, hi)
    for j in range(1, len(edges)):
        if counts[j]:
            start, end = max(edges[j - 1], lo), min(edges[j], hi)
            if start > end:  # statistics that disagree with the histogram: keep the bin
                start, end = edges[j - 1], edges[j]
            out.append((start, end, int(counts[j])))
    return out


def _cdf(pieces: list[tuple[float, float, int]], points: np.ndarray) -> np.ndarray:
    """The count of values below each of ``points`` (values spread evenly in each piece;
    a point piece counts for points above it)."""
    out = np.zeros(points.size)
    for start, end, count in pieces:
        if end > start:
            out += count * np.clip((points - start) / (end - start), 0.0, 1.0)
        else:
            out += count * (points > start)
    return out


def _counts(pieces: list[tuple[float, float, int]], grid: np.ndarray, total: int) -> np.ndarray:
    """The counts of ``pieces`` between consecutive ``grid`` points (the last one inf)."""
    cdf = _cdf(pieces, grid)
    cdf[-1] = total
    return np.diff(cdf, prepend=0.0)


def _rebinned(
    a: Histogram,
    b: Histogram,
    lattices: tuple[HistogramBins, HistogramBins],
    ranges: tuple[tuple[float, float], tuple[float, float]],
) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` in bins of the least common multiple of their steps (see the module
    docstring): below the first common bin, the common bins, at or past the last one."""
    exponent = min(x.exponent for x in lattices)
    steps = [x.step_in(exponent) for x in lattices]
    common = math.lcm(*steps)
    cells = [
        [(q * step) // common for q in range(x.first, x.first + x.bins)]
        for x, step in zip(lattices, steps, strict=True)
    ]
    low = min(c[0] for c in cells)
    size = max(c[-1] for c in cells) - low + 1
    while common % 10 == 0:
        common, exponent = common // 10, exponent + 1
    grid = np.asarray([*HistogramBins(low, common, exponent, size).edges, math.inf])
    out = []
    for h, cell, (lo, hi) in zip((a, b), cells, ranges, strict=True):
        counts = _counts(_outer_pieces(h, lo, hi), grid, int(h.counts[0] + h.counts[-1]))
        np.add.at(counts, np.asarray(cell) - low + 1, h.counts[1:-1])
        out.append(counts)
    return out[0], out[1]


def align(
    a: Histogram, b: Histogram, *, a_range: tuple[float, float], b_range: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """The counts of ``a`` and ``b`` in common bins (see the module docstring), given the
    columns' ranges ``(min, max)``, as two float arrays of the same length."""
    if a.edges == b.edges:
        return a.counts.astype(np.float64), b.counts.astype(np.float64)
    la, lb = HistogramBins.from_edges(a.edges), HistogramBins.from_edges(b.edges)
    if la is not None and lb is not None:
        return _rebinned(a, b, (la, lb), (a_range, b_range))
    pa_, pb = _pieces(a, *a_range), _pieces(b, *b_range)
    grid = np.asarray([*sorted({x for p in (*pa_, *pb) for x in p[:2]}), math.inf])
    return _counts(pa_, grid, a.total), _counts(pb, grid, b.total)


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """The Jensen-Shannon divergence (base 2, in [0, 1]) between two count or probability
    vectors of the same length (each normalised to sum 1 first).

    Raises:
        ValueError: the lengths differ, or a vector has no mass.
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"vectors of different lengths: {p.size} and {q.size}")
    if p.sum() <= 0 or q.sum() <= 0:
        raise ValueError("a distribution with no mass")
    p = np.clip(p, 0.0, None) / p.sum()
    q = np.clip(q, 0.0, None) / q.sum()
    m = (p + q) / 2

    def kl(x: np.ndarray) -> float:
        mask = x > 0
        return float(np.sum(x[mask] * np.log2(x[mask] / m[mask])))

    return min(max((kl(p) + kl(q)) / 2, 0.0), 1.0)


def histogram_js_divergence(
    a: Histogram, b: Histogram, *, a_range: tuple[float, float], b_range: tuple[float, float]
) -> float:
    """:func:`js_divergence` between two histograms (:func:`align` first)."""
    p, q = align(a, b, a_range=a_range, b_range=b_range)
    return js_divergence(p, q)


def linf_distance(a: Mapping[str, int], b: Mapping[str, int], a_total: int, b_total: int) -> float:
    """The largest difference of any value's frequency between two value counts.

    ``a_total``/``b_total`` are the values counted (the non-missing rows), which may exceed
    the sum of the counts given: only the most frequent values are kept in the statistics,
    and a value absent from one side counts as frequency 0 there. A value kept on neither
    side is rarer on each than the rarest value kept there, so its own difference is
    smaller than that frequency: it matters only for columns with more distinct values than
    the statistics keep, whose values are all rare.
    """
    if a_total <= 0 or b_total <= 0:
        raise ValueError("value counts of no values")
    return max((abs(a.get(v, 0) / a_total - b.get(v, 0) / b_total) for v in {*a, *b}), default=0.0)
