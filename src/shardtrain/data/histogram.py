"""Histograms of numeric columns: bins fixed by the plan, counts merged across tasks.

Every numeric column of a dataset gets a histogram in its statistics, so that two datasets
(today's logs and those a served model was trained on) can be compared by distribution
(:mod:`shardtrain.data.drift`). It is computed in the sharding pass, by every task over its
own rows, and merged by ``finalize`` like the other statistics, so it must be:

* **mergeable**: every task of a run counts into the *same* bins, so a merge adds counts,
  exactly, in any order (the result does not depend on the number of workers either);
* **deterministic**: the bins are a function of the plan, which every worker builds alike;
* **bounded**: a fixed number of counters per column, whatever the input size.

So the bins are chosen once, when the run is planned, from the planning sample (the parsed
rows of the first source the schema is inferred from): equal-width bins spanning its 0.5 %
to 99.5 % quantiles, plus an underflow and an overflow bin for whatever the rest of the
data holds beyond them (the sample may not have seen every value; the column's exact min
and max are in its other statistics). The plan records them (:attr:`Plan.histograms
<shardtrain.data.sharding.plan.Plan.histograms>`) and every task reads them from there.

The width is a "round" decimal step (1, 2 or 5 times a power of ten, at least 1 for an
integer column, so each small integer gets a bin of its own) and the edges are multiples of
it. Two such steps always have a common multiple on the same scale (the larger step, or 10
times the power of ten where one is 2 and the other 5 times it), whose multiples are edges
of both histograms: re-binned into bins of that step, two datasets' histograms compare
exactly, with no assumption about how values spread inside a bin (see
:func:`shardtrain.data.drift.align`); only their outer bins are spread evenly. Quantile
edges would follow skewed columns more closely, but differ between any two samples.

Known costs: a column whose values mostly sit beyond the sample's range (input sorted by
that column, the first file unlike the rest) lands mostly in the outer bins, and a heavy
tail leaves most values in the first few bins; the comparison is then coarser, not wrong.

Bool columns need no sample: two bins, false and true.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain.kernels import arrow

#: Bins wanted between the sample's low and high quantiles; with steps of 1, 2 or 5 times a
#: power of ten there are between 2/5 of this and this many (plus the two outer bins).
TARGET_BINS = 50
#: The sample's quantiles the inner bins span.
LOW_QUANTILE, HIGH_QUANTILE = 0.005, 0.995
_MANTISSAS = (1, 2, 5, 10)


@dataclass(frozen=True)
class HistogramBins:
    """Equal-width bins on a decimal lattice: bin ``j`` (``0 <= j < bins``) is
    ``[(first + j) * step, (first + j + 1) * step)``, ``step = mantissa * 10**exponent``.

    Stored in the plan as ``[first, mantissa, exponent, bins]``.
    """

    first: int
    mantissa: int
    exponent: int
    bins: int

    @property
    def inverse_step(self) -> float:
        """``1 / step``: exact for steps below 1 (``10**-e / m`` with ``m`` 1, 2 or 5), the
        nearest float64 otherwise."""
        if self.exponent < 0:
            return 10 ** (-self.exponent) // self.mantissa * 1.0
        return 1.0 / (self.mantissa * 10**self.exponent)

    def edge(self, q: int) -> float:
        """The lattice point ``q * step``, the closest float64 to its decimal value."""
        if self.exponent < 0:
            return q * self.mantissa / 10 ** (-self.exponent)
        return float(q * self.mantissa * 10**self.exponent)

    @property
    def edges(self) -> tuple[float, ...]:
        """The ``bins + 1`` edges of the inner bins."""
        return tuple(self.edge(q) for q in range(self.first, self.first + self.bins + 1))

    def step_in(self, exponent: int) -> int:
        """The step in units of ``10**exponent`` (``exponent <= self.exponent``): an integer."""
        return self.mantissa * 10 ** (self.exponent - exponent)

    @classmethod
    def from_edges(cls, edges: Sequence[float]) -> HistogramBins | None:
        """The bins whose :attr:`edges` are exactly ``edges`` (a histogram read back from
        JSON keeps only its edges); None when they are not such a lattice."""
        if len(edges) < 2:
            return None
        try:
            raw = (edges[-1] - edges[0]) / (len(edges) - 1)
            if not (math.isfinite(raw) and raw > 0):
                return None
            exponent = math.floor(math.log10(raw))
            mantissa = round(raw / 10.0**exponent)
            if mantissa == 10:
                mantissa, exponent = 1, exponent + 1
            if mantissa not in _MANTISSAS:
                return None
            first = round(edges[0] * cls(0, mantissa, exponent, 1).inverse_step)
        except (OverflowError, ValueError):
            return None
        bins = cls(first, mantissa, exponent, len(edges) - 1)
        return bins if bins.edges == tuple(edges) else None

    def to_list(self) -> list[int]:
        return [self.first, self.mantissa, self.exponent, self.bins]

    @classmethod
    def from_list(cls, value: list[int]) -> HistogramBins:
        first, mantissa, exponent, bins = (int(v) for v in value)
        return cls(first, mantissa, exponent, bins)

    @classmethod
    def covering(
        cls, lo: float, hi: float, *, integer: bool = False, target: int = TARGET_BINS
    ) -> HistogramBins:
        """The bins of the roundest step that covers ``[lo, hi]`` with at most about
        ``target`` bins (a step of at least 1 when ``integer``)."""
        if hi <= lo:  # one value: a bin around it, one unit wide or as wide as the value
            half = 0.5 if integer else max(abs(lo), 1.0) / 2
            lo, hi = lo - half, hi + half
        raw = (hi - lo) / target
        exponent = math.floor(math.log10(raw))
        mantissa = next(m for m in _MANTISSAS if m * 10.0**exponent >= raw)
        if mantissa == 10:
            mantissa, exponent = 1, exponent + 1
        if integer and exponent < 0:
            mantissa, exponent = 1, 0
        inverse = cls(0, mantissa, exponent, 1).inverse_step
        first = math.floor(lo * inverse)
        last = math.floor(hi * inverse) + 1
        return cls(first, mantissa, exponent, max(1, last - first))


#: The bins of a bool column: [0, 1) holds false, [1, 2) true.
BOOL_BINS = HistogramBins(0, 1, 0, 2)


def bins_from_sample(values: pa.Array | pa.ChunkedArray, *, integer: bool) -> HistogramBins | None:
    """The bins of a numeric column from its values in the planning sample; None when the
    sample holds no finite value of it (the column then has no histogram)."""
    try:
        floats = arrow.to_numpy(pc.cast(values, pa.float64()).drop_null())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    floats = floats[np.isfinite(floats)]
    if floats.size == 0:
        return None
    lo, hi = np.quantile(floats, [LOW_QUANTILE, HIGH_QUANTILE])
    try:
        return HistogramBins.covering(float(lo), float(hi), integer=integer)
    except (OverflowError, ValueError):  # a range beyond float64 (values near its limits)
        return None


def plan_bins(columns: Mapping[str, str], sample: pa.Table | None) -> dict[str, HistogramBins]:
    """The bins of every ``int`` and ``float`` column of ``columns`` (name → schema type)
    that the planning ``sample`` has finite values of."""
    if sample is None:
        return {}
    out = {}
    for name, kind in columns.items():
        if kind in ("int", "float") and name in sample.column_names:
            bins = bins_from_sample(sample.column(name), integer=kind == "int")
            if bins is not None:
                out[name] = bins
    return out


@dataclass
class Histogram:
    """Counts of a column's finite values: ``counts[0]`` below ``edges[0]``, ``counts[j]``
    in ``[edges[j - 1], edges[j])``, ``counts[-1]`` at or above ``edges[-1]``.

    ``bins`` is set when the histogram counts raw values (in a task); one read back from
    JSON only merges and compares.
    """

    edges: tuple[float, ...]
    counts: np.ndarray
    bins: HistogramBins | None = None

    @classmethod
    def empty(cls, bins: HistogramBins) -> Histogram:
        return cls(bins.edges, np.zeros(bins.bins + 2, dtype=np.int64), bins)

    def update(self, values: pa.Array) -> None:
        """Count one contiguous numeric array (its nulls, NaN and ±inf are skipped)."""
        if self.bins is None:
            raise ValueError("a histogram read back from JSON cannot count values")
        # Imported here: a process that only reads statistics (a dataset's metadata) needs
        # no compiled kernel, nor numba's import.
        from shardtrain.kernels.histogram import add_counts

        add_counts(values, self.counts, first=self.bins.first, inverse_step=self.bins.inverse_step)

    def add_bools(self, false: int, true: int) -> None:
        """Count bool values (:data:`BOOL_BINS`)."""
        self.counts[1] += false
        self.counts[2] += true

    def compatible(self, other: Histogram) -> bool:
        """Whether ``other`` counts into the same bins (and so can be merged)."""
        return self.edges == other.edges

    def merge(self, other: Histogram) -> None:
        """Add ``other``'s counts (same edges: see :meth:`compatible`)."""
        self.counts += other.counts

    def copy(self) -> Histogram:
        return Histogram(self.edges, self.counts.copy(), self.bins)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def to_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "counts": [int(c) for c in self.counts]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Histogram:
        edges = tuple(float(e) for e in d["edges"])
        counts = np.asarray(d["counts"], dtype=np.int64)
        if counts.size != len(edges) + 1 or len(edges) < 2:
            raise ValueError("a histogram needs at least 2 edges and one count more than edges")
        return cls(edges, counts)
