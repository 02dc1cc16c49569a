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
planning sample, see :mod:`shardtrain.data.histogram`). :func:`align` puts both on the union
of their edges: a bin split by the other histogram's edges gives each part a share of its
count in proportion to its width (values assumed spread evenly inside a bin, as TFDV assumes
when it aligns histograms). Where both have the same edges -- the usual case for data of the
same kind, whose bins sit on the same decimal lattice -- nothing is split and the
comparison is exact. The outer bins span from the column's min to the first edge and from
the last edge to its max.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from shardtrain.data.histogram import Histogram

__all__ = ["align", "histogram_js_divergence", "js_divergence", "linf_distance"]


def _pieces(h: Histogram, lo: float, hi: float) -> list[tuple[float, float, int]]:
    """``(start, end, count)`` of every non-empty bin; the outer bins reach ``lo`` and
    ``hi`` (the column's min and max; a bin of zero width is a point)."""
    edges = h.edges
    counts = h.counts
    out = []
    if counts[0]:
        out.append((min(lo, edges[0]), edges[0], int(counts[0])))
    for j in range(1, len(edges)):
        if counts[j]:
            out.append((edges[j - 1], edges[j], int(counts[j])))
    if counts[-1]:
        out.append((edges[-1], max(hi, edges[-1]), int(counts[-1])))
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


def align(
    a: Histogram, b: Histogram, *, a_range: tuple[float, float], b_range: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """The counts of ``a`` and ``b`` on the union of their edges (and the columns' ranges
    ``(min, max)``), as two float arrays of the same length."""
    pa_, pb = _pieces(a, *a_range), _pieces(b, *b_range)
    points = sorted({x for p in (*pa_, *pb) for x in p[:2]})
    grid = np.asarray([*points, math.inf])
    ca, cb = _cdf(pa_, grid), _cdf(pb, grid)
    ca[-1], cb[-1] = a.total, b.total
    return np.diff(ca, prepend=0.0), np.diff(cb, prepend=0.0)


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
