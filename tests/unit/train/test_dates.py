"""Which string columns are read as time, decided from the statistics' top values."""

from __future__ import annotations

import pytest

from shardtrain.train.dates import date_stats


def top(*values, count=1):
    return {
        "kind": "categorical",
        "count": len(values) * count,
        "missing": 0,
        "distinct": len(values),
        "top": [{"value": v, "count": count} for v in values],
    }


@pytest.mark.parametrize(
    ("values", "with_time"),
    [
        (("2007-11-11", "2008-11-09", "2009-11-18"), False),
        (("2026-11-26T13:05:00Z", "2026-11-27T01:00:00+09:00"), True),
        (("2026-11-26 13:05", "2026-11-26 14:05:30.5"), True),
    ],
)
def test_iso_dates_and_timestamps(values, with_time):
    found = date_stats(top(*values))
    assert found is not None
    mean, std, timed = found
    assert std > 0 and timed is with_time
    assert 1.1e9 < mean < 1.9e9  # seconds since 1970


def test_mean_and_spread_weighted_by_counts():
    stats = top("1970-01-01", "1970-01-02")
    stats["top"][0]["count"] = 3
    mean, std, _ = date_stats(stats)
    assert mean == pytest.approx(86400 / 4)
    assert std == pytest.approx(86400 * (3 / 16) ** 0.5)


@pytest.mark.parametrize(
    "values",
    [
        ("2007-11-11",),  # one date: nothing to learn from (and constant)
        ("2007-11-11", "N1A1"),  # not all dates
        ("2007-13-11", "2007-11-11"),  # no month 13
        ("11/11/2007", "12/11/2007"),  # not ISO-8601
        ("20071111", "20071112"),  # basic format: read as what it is
    ],
)
def test_not_dates(values):
    assert date_stats(top(*values)) is None


def test_numeric_or_missing_statistics():
    assert date_stats(None) is None
    assert date_stats({"kind": "numeric", "count": 3}) is None
