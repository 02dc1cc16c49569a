"""Column statistics computed in the same pass as sharding, mergeable across tasks and workers.

Each sharding task accumulates statistics over the rows it accepts; ``finalize`` merges the
tasks' partial statistics into the dataset's ``stats`` in ``metadata.json``. Merging is exact
and order-independent for counts, missing values, min and max; means and standard deviations
use Chan et al.'s pairwise update (numerically stable, no sum-of-squares cancellation).

Vocabularies of categorical columns are exact while a column has at most ``max_tracked``
distinct values per task; beyond that the rarest values are pruned and the column is marked
``approximate`` (its top values and their counts are then lower bounds). The trainer uses the
top-K vocabulary and the numeric means/standard deviations to build its preprocessing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Distinct values tracked per categorical column before pruning to the most frequent half.
MAX_TRACKED = 200_000

#: Values of each categorical column kept in a task's manifest (the merge is exact for
#: columns with fewer distinct values per task; beyond, the top values are lower bounds).
MANIFEST_TOP = 5_000


@dataclass
class NumericStats:
    """Count, missing, min, max, mean and standard deviation of a numeric (or bool) column."""

    count: int = 0
    missing: int = 0
    min: float = math.inf
    max: float = -math.inf
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the mean
    nan: int = 0  # NaN or ±inf values present in the data (not counted as missing)

    def update(self, values: pa.Array) -> None:
        """Add one batch of values (nulls count as missing)."""
        self.missing += values.null_count
        present = values.drop_null()
        if len(present) == 0:
            return
        arr = np.asarray(present.to_numpy(zero_copy_only=False), dtype=np.float64)
        finite = arr[np.isfinite(arr)]
        self.nan += int(arr.size - finite.size)  # NaN and ±inf: kept in the data, not in stats
        if finite.size == 0:
            return
        batch = NumericStats(
            count=int(finite.size),
            min=float(finite.min()),
            max=float(finite.max()),
            mean=float(finite.mean()),
            m2=float(((finite - finite.mean()) ** 2).sum()),
        )
        self.merge(batch, missing=False)

    def merge(self, other: NumericStats, missing: bool = True) -> None:
        """Fold ``other`` into this one (Chan et al.'s parallel variance)."""
        if missing:
            self.missing += other.missing
            self.nan += other.nan
        if other.count == 0:
            return
        n = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * other.count / n
        self.m2 += other.m2 + delta * delta * self.count * other.count / n
        self.count = n
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    @property
    def std(self) -> float:
        """Population standard deviation (0 for fewer than two values)."""
        return math.sqrt(self.m2 / self.count) if self.count > 1 else 0.0

    def to_dict(self) -> dict[str, Any]:
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
        )


@dataclass
class CategoricalStats:
    """Count, missing and value frequencies of a categorical (string) column.

    Frequencies are accumulated as Arrow ``value_counts`` of each batch and merged in Arrow
    (hash aggregation in C++), never value by value in Python: a column with a million
    distinct player ids costs a few milliseconds per batch, not seconds.
    """

    count: int = 0
    missing: int = 0
    approximate: bool = False
    _merged: pa.Table | None = field(default=None, repr=False)
    _pending: list[pa.Table] = field(default_factory=list, repr=False)

    def update(self, values: pa.Array) -> None:
        """Add one batch of values (nulls count as missing)."""
        self.missing += values.null_count
        present = values.drop_null()
        self.count += len(present)
        if len(present) == 0:
            return
        if not pa.types.is_string(present.type):
            present = pc.cast(present, pa.string())
        vc = pc.value_counts(present)
        self._pending.append(
            pa.table(
                {"value": vc.field("values"), "count": pc.cast(vc.field("counts"), pa.int64())}
            )
        )
        if len(self._pending) >= 32:
            self._compact()

    def merge(self, other: CategoricalStats) -> None:
        """Fold ``other`` into this one."""
        self.count += other.count
        self.missing += other.missing
        self.approximate |= other.approximate
        other._compact()
        if other._merged is not None:
            self._pending.append(other._merged)
            self._compact()

    def _compact(self) -> None:
        parts = ([self._merged] if self._merged is not None else []) + self._pending
        self._pending = []
        if not parts:
            return
        table = pa.concat_tables(parts).group_by("value").aggregate([("count", "sum")])
        table = table.rename_columns(["value", "count"])
        if table.num_rows > MAX_TRACKED:
            keep = pc.select_k_unstable(
                table, k=MAX_TRACKED // 2, sort_keys=[("count", "descending")]
            )
            table = table.take(keep)
            self.approximate = True
        self._merged = table

    @property
    def distinct(self) -> int:
        self._compact()
        return 0 if self._merged is None else self._merged.num_rows

    def top(self, k: int) -> list[tuple[str, int]]:
        """The ``k`` most frequent values with their counts (ties broken by value)."""
        self._compact()
        if self._merged is None:
            return []
        table = self._merged
        if table.num_rows > 4 * k:  # preselect in C++, then sort the few in Python
            table = table.take(
                pc.select_k_unstable(table, k=4 * k, sort_keys=[("count", "descending")])
            )
        items = zip(
            table.column("value").to_pylist(), table.column("count").to_pylist(), strict=True
        )
        return sorted(items, key=lambda kv: (-kv[1], kv[0]))[:k]

    @property
    def counts(self) -> dict[str, int]:
        """Every tracked value with its count."""
        self._compact()
        if self._merged is None:
            return {}
        return dict(
            zip(
                self._merged.column("value").to_pylist(),
                self._merged.column("count").to_pylist(),
                strict=True,
            )
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
        # Values dropped from the list (beyond its top) make later merges approximate.
        dropped = d.get("distinct", 0) > len(d["top"])
        stats = cls(
            count=d["count"],
            missing=d["missing"],
            approximate=d.get("approximate", False) or dropped,
        )
        if d["top"]:
            stats._merged = pa.table(
                {
                    "value": pa.array([t["value"] for t in d["top"]], pa.string()),
                    "count": pa.array([t["count"] for t in d["top"]], pa.int64()),
                }
            )
        return stats


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
            extent.update(np.asarray(values.to_numpy(), dtype=np.int64))
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

    def to_dict(self) -> dict[str, Any]:
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


def new_stats(column_type: str) -> ColumnStats:
    """Empty statistics for a column of the given schema type."""
    if column_type == "image":
        return ImageStats()
    return CategoricalStats() if column_type == "string" else NumericStats()


def stats_from_dict(d: dict[str, Any]) -> ColumnStats:
    """Inverse of ``to_dict`` for every kind."""
    if d["kind"] == "image":
        return ImageStats.from_dict(d)
    return (
        CategoricalStats.from_dict(d) if d["kind"] == "categorical" else NumericStats.from_dict(d)
    )


@dataclass
class LabelStats:
    """The exact distribution of label values (as strings: '0'/'1', 'true', class names)."""

    counts: dict[str, int] = field(default_factory=dict)
    missing: int = 0

    def update(self, values: pa.Array) -> None:
        self.missing += values.null_count
        present = values.drop_null()
        if len(present) == 0:
            return
        if pa.types.is_boolean(present.type):
            present = pc.cast(present, pa.int64())  # store bools as 0/1, as in the Examples
        vc = pc.value_counts(present)
        for value, n in zip(
            vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True
        ):
            key = str(value)
            self.counts[key] = self.counts.get(key, 0) + n

    def merge(self, other: LabelStats) -> None:
        self.missing += other.missing
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {"missing": self.missing, "counts": dict(sorted(self.counts.items()))}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabelStats:
        return cls(counts=dict(d["counts"]), missing=d["missing"])
