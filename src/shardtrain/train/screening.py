"""Columns that carry no signal, told from the dataset's statistics alone.

A practitioner leaves three kinds of column out of a model before training, and so does
:meth:`~shardtrain.train.features.FeatureSpec.from_metadata` (``--include COLUMN`` keeps
one anyway):

* **all missing**: not one value (numeric: not one finite value);
* **constant**: one value in every row and none missing (a column that is constant where
  present but sometimes missing is kept: whether it is missing may tell something);
* **ID-like**: a value per row, which a model can only memorise:

  - a string column of at least :data:`MIN_ID_ROWS` values whose distinct values number at
    least :data:`ID_DISTINCT_SHARE` of its non-missing values (exact counts), or, when the
    counts are approximate (too many distinct values to count exactly), whose
    ``top_k`` most frequent values together cover less than :data:`ID_TOP_COVERAGE` of
    them;
  - an int column of at least :data:`MIN_ID_ROWS` values, none missing, whose values span
    exactly as many integers as there are rows, with the mean and spread of each of those
    integers once (a row number: ``1..n`` in any order). The statistics hold no distinct
    count of numbers, so ids with gaps are not recognised.

Everything here reads the ``stats.columns`` entries of ``metadata.json``
(:mod:`shardtrain.data.statistics`): no pass over the data, no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shardtrain.data.report import fmt

#: ID-like rules apply to columns with at least this many non-missing values: on fewer, a
#: column of distinct values is as likely a small sample as an identifier.
MIN_ID_ROWS = 50
#: A string column is ID-like when its distinct values are at least this share of its values.
ID_DISTINCT_SHARE = 0.95
#: ... or, with approximate counts, when its top values cover less than this share of them.
ID_TOP_COVERAGE = 0.05


@dataclass(frozen=True)
class LeftOut:
    """A column left out of the features, and why.

    Attributes:
        column: the column's name.
        reason: ``all missing``, ``constant``, ``ID-like``, ``split key``, ``--exclude`` or
            ``not an image input`` (image datasets).
        detail: the figures behind the reason, for people (may be empty).
    """

    column: str
    reason: str
    detail: str = ""

    @property
    def automatic(self) -> bool:
        """Left out by a rule of this module (``--include`` can keep it)."""
        return self.reason in ("all missing", "constant", "ID-like")

    def describe(self) -> str:
        """``'constant (Anvers in all 344 rows)'``."""
        return f"{self.reason} ({self.detail})" if self.detail else self.reason


def no_signal(name: str, kind: str, stats: Mapping[str, Any] | None) -> LeftOut | None:
    """Why column ``name`` of schema type ``kind`` carries no signal, or None when it may.

    Args:
        name: the column's name.
        kind: its schema type (``int``, ``float``, ``bool``, ``string``).
        stats: its entry in ``metadata.json``'s ``stats.columns``; None or empty: no
            statistics (an older dataset), nothing is left out.
    """
    if not stats or "count" not in stats:
        return None
    count, missing = int(stats["count"]), int(stats.get("missing") or 0)
    missing += int(stats.get("nan") or 0)
    if count == 0:
        return LeftOut(name, "all missing", f"{fmt(missing)} missing values")
    if stats.get("kind") == "numeric":
        return _numeric(name, kind, stats, count, missing)
    if stats.get("kind") == "categorical":
        return _categorical(name, stats, count, missing)
    return None


def _numeric(
    name: str, kind: str, stats: Mapping[str, Any], count: int, missing: int
) -> LeftOut | None:
    lo, hi = stats.get("min"), stats.get("max")
    if lo is None or hi is None:
        return None
    if lo == hi and not missing:
        return LeftOut(name, "constant", f"{fmt(lo)} in all {fmt(count)} rows")
    if kind != "int" or missing or count < MIN_ID_ROWS:
        return None
    m2 = stats.get("m2")
    if m2 is None and isinstance(stats.get("std"), int | float):
        m2 = float(stats["std"]) ** 2 * count
    span = hi - lo + 1
    # 1..n once each: mean (lo + hi) / 2 and sum of squared deviations n (n^2 - 1) / 12.
    if span != count or m2 is None:
        return None
    mean = stats.get("mean")
    expected_m2 = count * (count * count - 1) / 12
    if mean is None or not math.isclose(mean, (lo + hi) / 2, rel_tol=1e-9, abs_tol=1e-6):
        return None
    if not math.isclose(float(m2), expected_m2, rel_tol=1e-6):
        return None
    return LeftOut(
        name,
        "ID-like",
        f"its {fmt(count)} values look like the integers {fmt(int(lo))}-{fmt(int(hi))}, each once",
    )


def _categorical(name: str, stats: Mapping[str, Any], count: int, missing: int) -> LeftOut | None:
    top = stats.get("top") or ()
    distinct = int(stats.get("distinct") or len(top))
    approximate = bool(stats.get("approximate"))
    if distinct == 1 and not missing and not approximate:
        value = str(top[0]["value"]) if top else "?"
        return LeftOut(name, "constant", f"{value!r} in all {fmt(count)} rows")
    if count < MIN_ID_ROWS:
        return None
    if not approximate and distinct >= ID_DISTINCT_SHARE * count:
        return LeftOut(
            name, "ID-like", f"{fmt(distinct)} distinct values in {fmt(count)} non-missing rows"
        )
    covered = sum(int(t.get("count") or 0) for t in top)
    if approximate and covered < ID_TOP_COVERAGE * count:
        return LeftOut(
            name,
            "ID-like",
            f"more than {fmt(distinct)} distinct values; the {len(top)} most frequent cover "
            f"{covered / count:.1%} of {fmt(count)} non-missing rows",
        )
    return None
