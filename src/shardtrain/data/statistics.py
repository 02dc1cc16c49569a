"""Column statistics computed in the same pass as sharding, mergeable across tasks and workers.

Each sharding task accumulates statistics over the rows it accepts; ``finalize`` merges the
tasks' partial statistics into the dataset's ``stats`` in ``metadata.json``. Merging is exact
and order-independent for counts, missing values, min and max; means and standard deviations
use Chan et al.'s pairwise update (numerically stable, no sum-of-squares cancellation).
Numeric columns also get a histogram in bins the plan fixes (:mod:`shardtrain.data.histogram`:
every task counts into the same bins, so merging adds counts); statistics written before
histograms existed load without one.

Vocabularies of categorical columns are exact while a column has at most ``MAX_TRACKED``
distinct values per task (and they fit in ``_MAX_TRACKED_BYTES`` of UTF-8); beyond that the
rarest values are pruned and the column is marked ``approximate`` (its top values and their
counts are then lower bounds). The trainer uses the top-K vocabulary and the numeric
means/standard deviations to build its preprocessing.

Cost and memory
---------------
Statistics are updated for every column of every block, so they are on the sharder's hot
path, and a task runs for as long as its input lasts, so their memory must not grow with
it. Both kinds therefore work on the Arrow buffers directly, in compiled kernels that
allocate nothing per block:

* :class:`NumericStats` summarises each block's values with
  :func:`shardtrain.kernels.moments.moments` (count, extremes, mean, squared deviations)
  and folds the summaries together here; the same call counts them into its histogram
  (as :func:`shardtrain.kernels.histogram.add_counts` would).
* :class:`CategoricalStats` counts values in a :class:`shardtrain.kernels.value_counts.ValueCounts`
  hash table sized by the number of *distinct* values (bounded by ``MAX_TRACKED``), not by
  the number of rows.

Counting with Arrow instead (``value_counts`` per block, merged with ``group_by``) costs
more CPU, and each merge allocates large short-lived Arrow buffers whose pages the
allocator keeps resident afterwards, so the process grows with its input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain.data.histogram import BOOL_BINS, Histogram, HistogramBins
from shardtrain.data.task import MAX_CLASSES
from shardtrain.data.value_merge import ValueMerge
from shardtrain.kernels import arrow

if TYPE_CHECKING:
    from shardtrain.kernels.value_counts import ValueCounts

# The compiled kernels (shardtrain.kernels.moments, .value_counts) are imported where the
# statistics count values: a process that only reads or merges statistics (the pipeline's
# settle and finalize steps) then neither imports numba nor starts its compiler.

#: Distinct values tracked per categorical column before pruning to the most frequent half.
#: Memory per high-cardinality column is ~56 bytes plus the value's bytes per tracked value
#: (~13 MB at 200k nine-character ids), allocated as the column's distinct values appear.
#: The trade-off: counts stay exact up to this many distinct values per task, at that memory
#: per column, while the manifest only keeps the ``MANIFEST_TOP`` most frequent anyway.
MAX_TRACKED = 200_000

#: Values of each categorical column kept in a task's manifest (the merge is exact for
#: columns with fewer distinct values per task; beyond, the top values are lower bounds).
MANIFEST_TOP = 5_000

#: Distinct label values counted exactly (:class:`LabelStats`): as many as a classifier may
#: have classes; a label with more is a regression target (:mod:`shardtrain.data.task`).
MAX_LABEL_VALUES = MAX_CLASSES

#: Bytes of distinct values tracked per categorical column before pruning, whatever their
#: number: ``MAX_TRACKED`` bounds memory only for short values, and a free-text column of
#: 2 kB strings would otherwise hold 400 MB. 32 MiB is ~170 bytes per value at
#: ``MAX_TRACKED`` values, far more than category names or ids take.
_MAX_TRACKED_BYTES = 32 << 20


def _chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The non-empty contiguous arrays of ``values`` (``Table.column`` gives a ChunkedArray)."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    return [c for c in chunks if len(c)]


# --------------------------------------------------------------------------------------------
# Numeric columns
# --------------------------------------------------------------------------------------------


@dataclass
class NumericStats:
    """Count, missing, min, max, mean, standard deviation and histogram of a numeric (or
    bool) column.

    ``histogram`` is None for a column without bins (the planning sample had no value of
    it, the label's statistics, a dataset sharded before histograms existed).
    """

    count: int = 0
    missing: int = 0
    min: float = math.inf
    max: float = -math.inf
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the mean
    nan: int = 0  # NaN or ±inf values present in the data (not counted as missing)
    histogram: Histogram | None = field(default=None, compare=False)

    @classmethod
    def with_bins(cls, bins: HistogramBins | None) -> NumericStats:
        """Empty statistics that count values into ``bins`` (None: no histogram)."""
        return cls(histogram=Histogram.empty(bins) if bins is not None else None)

    def update_table(self, table: pa.Table, name: str) -> None:
        """Add the column ``name`` of one batch (every kind of statistics takes a batch so)."""
        self.update(table.column(name))

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        """Add one batch of values (nulls count as missing; NaN and ±inf count as ``nan``).

        Each contiguous chunk is summarised by :func:`~shardtrain.kernels.moments.moments`
        and folded in with :meth:`_fold`. Bools are bit-packed in Arrow; their statistics
        follow from the number of true values alone (mean ``t/n``, m2 ``t(n-t)/n``,
        exactly), which :func:`~shardtrain.kernels.moments.count_true` counts without
        unpacking them.
        """
        from shardtrain.kernels.moments import count_true, moments

        for chunk in _chunks(values):
            n = len(chunk)
            nulls = chunk.null_count
            self.missing += nulls
            if nulls == n:
                continue
            if pa.types.is_boolean(chunk.type):
                valid = n - nulls
                trues = count_true(chunk)
                if self.histogram is not None:
                    self.histogram.add_bools(valid - trues, trues)
                self._fold(
                    valid,
                    0.0 if trues < valid else 1.0,
                    1.0 if trues else 0.0,
                    trues / valid,
                    trues * (valid - trues) / valid,
                )
                continue
            if chunk.type not in arrow.NUMPY_TYPES:
                chunk = pc.cast(chunk, pa.float64())
            histogram = self.histogram
            if histogram is not None and histogram.bins is not None:
                bins = histogram.bins  # counted in the same pass as the moments
                summary = moments(
                    chunk, histogram.counts, first=bins.first, inverse_step=bins.inverse_step
                )
            else:
                summary = moments(chunk)
                if histogram is not None:
                    histogram.update(chunk)  # one read back from JSON: refuses to count
            self.nan += summary.nonfinite  # NaN and ±inf: kept in the data, not in the statistics
            self._fold(summary.finite, summary.min, summary.max, summary.mean, summary.m2)

    def merge(self, other: NumericStats, missing: bool = True) -> None:
        """Fold ``other`` into this one (Chan et al.'s parallel variance).

        Histograms add up when both have the same bins; empty statistics take ``other``'s.
        A part without a histogram (or with other bins) that holds values leaves the merged
        column without one: a histogram of some of the rows would misstate the column.
        """
        self._merge_histogram(other)
        self.merge_moments(other, missing)

    def merge_moments(self, other: NumericStats, missing: bool = True) -> None:
        """:meth:`merge` without the histograms: counts, extremes, mean and deviations."""
        if missing:
            self.missing += other.missing
            self.nan += other.nan
        self._fold(other.count, other.min, other.max, other.mean, other.m2)

    def _merge_histogram(self, other: NumericStats) -> None:
        mine, theirs = self.histogram, other.histogram
        if mine is None:
            if theirs is not None and self.count == self.nan == 0:
                self.histogram = theirs.copy()
        elif theirs is None or not mine.compatible(theirs):
            if other.count:
                self.histogram = None
        else:
            mine.merge(theirs)

    def _fold(self, count: int, lo: float, hi: float, mean: float, m2: float) -> None:
        """Chan et al.: combine two (count, mean, m2) summaries without revisiting values.

        ``delta**2 * n_a * n_b / n`` is the spread *between* the two means; both parts are
        sums of squares of deviations, so nothing cancels however large the means are.
        """
        if count == 0:
            return
        n = self.count + count
        delta = mean - self.mean
        self.mean += delta * count / n
        self.m2 += m2 + delta * delta * self.count * count / n
        self.count = n
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)

    @property
    def std(self) -> float:
        """Population standard deviation (0 for fewer than two values)."""
        return math.sqrt(self.m2 / self.count) if self.count > 1 else 0.0

    def to_dict(self, top_k: int | None = None) -> dict[str, Any]:
        """The statistics as JSON values (``top_k`` applies to categorical columns only)."""
        empty = self.count == 0
        return {
            "kind": "numeric",
            "count": self.count,
            "missing": self.missing,
            "nan": self.nan,
            "min": None if empty else self.min,
            "max": None if empty else self.max,
            "mean": None if empty else self.mean,
            "std": None if empty else self.std,
            "m2": self.m2,
            **({"histogram": self.histogram.to_dict()} if self.histogram is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NumericStats:
        empty = d["count"] == 0
        return cls(
            count=d["count"],
            missing=d["missing"],
            nan=d.get("nan", 0),
            min=math.inf if empty else d["min"],
            max=-math.inf if empty else d["max"],
            mean=0.0 if empty else d["mean"],
            m2=d["m2"],
            histogram=Histogram.from_dict(d["histogram"]) if d.get("histogram") else None,
        )


# --------------------------------------------------------------------------------------------
# Categorical columns
# --------------------------------------------------------------------------------------------

#: Frequency order of the vocabulary: most frequent first, ties by value (UTF-8 byte order,
#: which is code point order: the order of Python's ``sorted`` on ``str``).
_ORDER = [("count", "descending"), ("value", "ascending")]


def _value_counts() -> ValueCounts:
    """An empty hash table with the limits of this module, read when a column's statistics
    start (tests lower them)."""
    from shardtrain.kernels.value_counts import ValueCounts

    return ValueCounts(max_values=MAX_TRACKED, max_bytes=_MAX_TRACKED_BYTES)


@dataclass
class CategoricalStats:
    """Count, missing and value frequencies of a categorical (string) column.

    Frequencies live in a :class:`~shardtrain.kernels.value_counts.ValueCounts` hash table
    updated by one compiled pass over each batch's Arrow buffers, never value by value in
    Python and without per-batch Arrow tables, so memory is bounded by ``MAX_TRACKED``
    values whatever the input size. The table of a column with a handful of classes stays in
    the CPU caches; that of a high-cardinality column does not (parsing the next block
    evicts it), and a value then costs two memory accesses (slot, record), each a cache
    miss.

    The top values are ordered by count, ties broken by value, so ``to_dict`` is the same
    for the same input, whatever the order in which tasks are merged (unless pruned).
    """

    count: int = 0
    missing: int = 0
    approximate: bool = False
    _values: ValueCounts | ValueMerge = field(
        default_factory=_value_counts, repr=False, compare=False
    )

    @classmethod
    def for_merging(cls) -> CategoricalStats:
        """Empty statistics that only merge others (:meth:`merge_dict`), in plain Python
        (:class:`~shardtrain.data.value_merge.ValueMerge`: the same table, without the
        compiled kernel's start-up)."""
        return cls(_values=ValueMerge(max_values=MAX_TRACKED, max_bytes=_MAX_TRACKED_BYTES))

    def update_table(self, table: pa.Table, name: str) -> None:
        """Add the column ``name`` of one batch (every kind of statistics takes a batch so)."""
        self.update(table.column(name))

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        """Add one batch of values (nulls count as missing)."""
        assert not isinstance(self._values, ValueMerge), "statistics for merging count no blocks"
        for chunk in _chunks(values):
            self.missing += chunk.null_count
            self.count += len(chunk) - chunk.null_count
            self._values.add(chunk)
        self.approximate |= self._values.pruned

    def merge(self, other: CategoricalStats) -> None:
        """Fold ``other`` into this one (exact and order-independent unless pruning)."""
        self.count += other.count
        self.missing += other.missing
        assert not isinstance(self._values, ValueMerge), "statistics for merging take dicts"
        if other._values.size:
            table = other._values.table()  # views of other's arrays
            values, counts = table.column("value").chunk(0), arrow.to_numpy(table.column("count"))
            if other is self:  # counting into the arrays the views read: copy them first
                values, counts = arrow.strings(values.to_pylist(), pa.large_string()), counts.copy()
            self._values.add(values, counts)
        self.approximate |= other.approximate or self._values.pruned

    def merge_dict(self, d: dict[str, Any]) -> None:
        """Fold in statistics as :meth:`to_dict` or :meth:`to_columns` wrote them: what
        ``merge(from_dict(d))`` does (the same values counted in the same order), without
        first building a table of ``d``'s own."""
        self.count += d["count"]
        self.missing += d["missing"]
        values, counts = _top_lists(d)
        if not values:
            pass
        elif isinstance(self._values, ValueMerge):
            self._values.add_lists(values, counts)
        else:
            # Not pa.array(values): converting Python objects imports pandas, a quarter of
            # a second of a settle step's start-up.
            self._values.add(
                arrow.strings(values, pa.large_string()), np.asarray(counts, dtype=np.int64)
            )
        # Values dropped from the list (beyond its top) make the merge approximate.
        dropped = d.get("distinct", 0) > len(values)
        self.approximate |= d.get("approximate", False) or dropped or self._values.pruned

    def to_columns(self, top_k: int | None = None) -> dict[str, Any]:
        """:meth:`to_dict` with the top values as two lists, ``values`` and ``counts``,
        instead of a list of pairs: a third of the JSON, read back without a dict per value
        (worker summaries hold their merged vocabularies so, see
        :mod:`shardtrain.data.sharding.summary`)."""
        d = self.to_dict(top_k)
        top = d.pop("top")
        return {
            **d,
            "values": [t["value"] for t in top],
            "counts": [t["count"] for t in top],
        }

    @property
    def distinct(self) -> int:
        """Distinct values tracked (all of them, unless :attr:`approximate`)."""
        return self._values.size

    def top(self, k: int) -> list[tuple[str, int]]:
        """The ``k`` most frequent values with their counts (ties broken by value)."""
        if k <= 0 or self._values.size == 0:
            return []
        table = self._values.table()
        if k < table.num_rows:  # preselect in C++, then sort the few
            table = table.take(pc.select_k_unstable(table, k=k, sort_keys=_ORDER))
        table = table.take(pc.sort_indices(table, sort_keys=_ORDER))
        return list(
            zip(table.column("value").to_pylist(), table.column("count").to_pylist(), strict=True)
        )

    @property
    def counts(self) -> dict[str, int]:
        """Every tracked value with its count."""
        table = self._values.table()
        return dict(
            zip(table.column("value").to_pylist(), table.column("count").to_pylist(), strict=True)
        )

    def to_dict(self, top_k: int | None = None) -> dict[str, Any]:
        distinct = self.distinct
        items = self.top(top_k if top_k else max(distinct, 1))
        return {
            "kind": "categorical",
            "count": self.count,
            "missing": self.missing,
            "distinct": distinct,
            "approximate": self.approximate,
            "top": [{"value": v, "count": n} for v, n in items],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CategoricalStats:
        """Inverse of :meth:`to_dict` (and of :meth:`to_columns`)."""
        stats = cls()
        stats.merge_dict(d)
        return stats


def _top_lists(d: dict[str, Any]) -> tuple[list[str], list[int]]:
    """The top values and their counts of categorical statistics, as
    :meth:`~CategoricalStats.to_dict` (``top``: pairs) or :meth:`~CategoricalStats.to_columns`
    (two lists) wrote them."""
    if "values" in d:
        return d["values"], d["counts"]
    return [t["value"] for t in d["top"]], [t["count"] for t in d["top"]]


@dataclass
class _Extent:
    """Min, max and sum of one image dimension (exact; merged by adding sums)."""

    min: int | None = None
    max: int | None = None
    total: int = 0

    def update(self, values: np.ndarray) -> None:
        if values.size:
            lo, hi = int(values.min()), int(values.max())
            self.min = lo if self.min is None else min(self.min, lo)
            self.max = hi if self.max is None else max(self.max, hi)
            self.total += int(values.sum())

    def merge(self, other: _Extent) -> None:
        if other.min is not None and other.max is not None:
            self.min = other.min if self.min is None else min(self.min, other.min)
            self.max = other.max if self.max is None else max(self.max, other.max)
        self.total += other.total

    def to_dict(self, count: int) -> dict[str, Any]:
        return {"min": self.min, "max": self.max, "mean": self.total / count if count else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any], count: int) -> _Extent:
        mean = d.get("mean")
        total = round(mean * count) if mean is not None else 0  # integer sums: exact < 2**53
        return cls(min=d.get("min"), max=d.get("max"), total=total)


@dataclass
class ImageStats:
    """Count, height/width range and mean, formats and encoded bytes of an image column.

    Unlike the other kinds it is fed the whole batch (:meth:`update_table`): the sizes and
    formats live in the ``image/height``, ``image/width`` and ``image/format`` columns.
    """

    count: int = 0
    bytes: int = 0
    height: _Extent = field(default_factory=_Extent)
    width: _Extent = field(default_factory=_Extent)
    formats: dict[str, int] = field(default_factory=dict)

    def update_table(self, table: pa.Table, name: str) -> None:
        """Add the images of one batch (``name`` and its ``/height``, ``/width``, ``/format``)."""
        images = table.column(name)
        self.count += len(images) - images.null_count
        self.bytes += int(pc.sum(pc.binary_length(images)).as_py() or 0)
        for extent, column in ((self.height, "height"), (self.width, "width")):
            values = table.column(f"{name}/{column}").drop_null()
            extent.update(np.asarray(arrow.to_numpy(values), dtype=np.int64))
        vc = pc.value_counts(table.column(f"{name}/format").drop_null())
        for value, n in zip(
            vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True
        ):
            self.formats[value] = self.formats.get(value, 0) + n

    def merge(self, other: ImageStats) -> None:
        """Fold ``other`` into this one."""
        self.count += other.count
        self.bytes += other.bytes
        self.height.merge(other.height)
        self.width.merge(other.width)
        for value, n in other.formats.items():
            self.formats[value] = self.formats.get(value, 0) + n

    def to_dict(self, top_k: int | None = None) -> dict[str, Any]:
        """The statistics as JSON values (``top_k`` applies to categorical columns only)."""
        return {
            "kind": "image",
            "count": self.count,
            "height": self.height.to_dict(self.count),
            "width": self.width.to_dict(self.count),
            "formats": dict(sorted(self.formats.items())),
            "bytes": self.bytes,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ImageStats:
        return cls(
            count=d["count"],
            bytes=d["bytes"],
            height=_Extent.from_dict(d["height"], d["count"]),
            width=_Extent.from_dict(d["width"], d["count"]),
            formats=dict(d["formats"]),
        )


ColumnStats = NumericStats | CategoricalStats | ImageStats


def new_stats(column_type: str, bins: HistogramBins | None = None) -> ColumnStats:
    """Empty statistics for a column of the given schema type; a numeric column counts its
    values into ``bins`` (a bool column always into :data:`BOOL_BINS`)."""
    if column_type == "image":
        return ImageStats()
    if column_type == "string":
        return CategoricalStats()
    return NumericStats.with_bins(BOOL_BINS if column_type == "bool" else bins)


def stats_from_dict(d: dict[str, Any]) -> ColumnStats:
    """Inverse of ``to_dict`` for every kind."""
    if d["kind"] == "image":
        return ImageStats.from_dict(d)
    return (
        CategoricalStats.from_dict(d) if d["kind"] == "categorical" else NumericStats.from_dict(d)
    )


@dataclass
class LabelStats:
    """The label's distribution: the exact count of every value (as strings: '0'/'1', 'true',
    class names) while there are at most :data:`MAX_LABEL_VALUES` distinct ones, and for a
    numeric label its count, min, max, mean and standard deviation (what a regression
    standardises its target with), with a histogram when the plan gave the label ``bins``
    (a regression label's distribution is compared by it, :mod:`.validation`).

    A regression label (minutes played, spend) has as many distinct values as rows: past
    :data:`MAX_LABEL_VALUES` the counts are dropped and ``many_values`` is set, so a task's
    memory does not grow with its input. No classifier has that many classes
    (:mod:`shardtrain.data.task`).
    """

    counts: dict[str, int] = field(default_factory=dict)
    missing: int = 0
    many_values: bool = False
    numeric: NumericStats | None = None
    bins: HistogramBins | None = field(default=None, compare=False, repr=False)

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        self.missing += values.null_count
        present = values.drop_null()
        if len(present) == 0:
            return
        if pa.types.is_integer(present.type) or pa.types.is_floating(present.type):
            if self.numeric is None:
                self.numeric = NumericStats.with_bins(self.bins)
            self.numeric.update(present)
        if self.many_values:
            return
        if pa.types.is_boolean(present.type):
            present = pc.cast(present, pa.int64())  # store bools as 0/1, as in the Examples
        if pa.types.is_signed_integer(present.type):
            # Class ids: counted with bincount over their range (cheaper than value_counts).
            ids = arrow.to_numpy(present).astype(np.int64, copy=False)
            low, high = int(ids.min()), int(ids.max())
            if high - low < 1 << 16:
                counts = np.bincount(ids - low, minlength=1)
                for k in np.flatnonzero(counts).tolist():
                    key = str(low + k)
                    self.counts[key] = self.counts.get(key, 0) + int(counts[k])
                self._bound()
                return
        vc = pc.value_counts(present)
        if len(vc) > MAX_LABEL_VALUES:
            self._bound(len(vc))
            return
        for value, n in zip(
            vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True
        ):
            key = str(value)
            self.counts[key] = self.counts.get(key, 0) + n
        self._bound()

    def _bound(self, distinct: int = 0) -> None:
        """Drop the counts once there are more than :data:`MAX_LABEL_VALUES` values."""
        if max(distinct, len(self.counts)) > MAX_LABEL_VALUES:
            self.counts = {}
            self.many_values = True

    def merge(self, other: LabelStats) -> None:
        self.missing += other.missing
        if other.numeric is not None:
            if self.numeric is None:
                self.numeric = NumericStats()
            self.numeric.merge(other.numeric)
        self.many_values = self.many_values or other.many_values
        if self.many_values:
            self.counts = {}
            return
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        self._bound()

    def to_dict(self) -> dict[str, Any]:
        """``missing``, ``counts`` (empty with ``many_values``), and for a numeric label
        ``numeric`` (:meth:`NumericStats.to_dict`)."""
        out: dict[str, Any] = {"missing": self.missing, "counts": dict(sorted(self.counts.items()))}
        if self.many_values:
            out["many_values"] = True
        if self.numeric is not None:
            out["numeric"] = self.numeric.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabelStats:
        numeric = d.get("numeric")
        return cls(
            counts=dict(d["counts"]),
            missing=d["missing"],
            many_values=bool(d.get("many_values", False)),
            numeric=NumericStats.from_dict(numeric) if numeric else None,
        )
