"""Histograms in the numeric statistics: bins from the planning sample, counts merged across
tasks in any order, statistics without histograms still read."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

from shardtrain.data.histogram import (
    BOOL_BINS,
    Histogram,
    HistogramBins,
    bins_from_sample,
    plan_bins,
)
from shardtrain.data.statistics import NumericStats, new_stats, stats_from_dict


def test_bins_are_round_steps_covering_the_range():
    bins = HistogramBins.covering(3.2, 97.1)
    assert (bins.mantissa, bins.exponent) == (2, 0)  # 93.9 / 50 → a step of 2
    assert bins.edges[0] <= 3.2 and bins.edges[-1] > 97.1
    assert bins.edges[:3] == (2.0, 4.0, 6.0) and bins.bins <= 50
    small = HistogramBins.covering(0.12, 0.71)
    assert (small.mantissa, small.exponent) == (2, -2)
    assert small.edges[:3] == (0.12, 0.14, 0.16)  # the decimal values, not 0.12000000000000001
    # Integers never get bins narrower than 1: each small integer has its own bin.
    assert HistogramBins.covering(1, 5, integer=True).edges == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    # One value: a bin around it.
    one = HistogramBins.covering(7.0, 7.0)
    assert one.edges[0] <= 7.0 < one.edges[-1]
    assert HistogramBins.from_list(bins.to_list()) == bins


def test_bins_from_the_sample_skip_columns_without_finite_values():
    rng = np.random.default_rng(0)
    sample = pa.table(
        {
            "x": rng.normal(50, 10, 1000),
            "n": pa.array(rng.integers(0, 4, 1000)),
            "empty": pa.array([None] * 1000, type=pa.float64()),
            "nan": pa.array([float("nan")] * 1000),
            "s": pa.array(["a"] * 1000),
        }
    )
    kinds = {"x": "float", "n": "int", "empty": "float", "nan": "float", "s": "string", "y": "int"}
    bins = plan_bins(kinds, sample)
    assert set(bins) == {"x", "n"}
    assert bins["x"].edges[0] <= np.quantile(sample["x"], 0.005)
    assert bins["n"].edges == (0.0, 1.0, 2.0, 3.0, 4.0)
    assert plan_bins(kinds, None) == {}
    assert bins_from_sample(pa.array(["x", "1"]), integer=False) is None


def _task_stats(values: np.ndarray, bins: HistogramBins) -> NumericStats:
    stats = NumericStats.with_bins(bins)
    stats.update(pa.array(values, mask=np.isnan(values)))
    return stats


def test_merging_task_histograms_is_exact_and_order_independent():
    rng = np.random.default_rng(5)
    bins = HistogramBins.covering(-30.0, 30.0)
    values = rng.normal(0, 12, 10_000)
    values[rng.random(values.size) < 0.05] = np.nan
    parts = np.array_split(values, 5)
    whole = _task_stats(values, bins).histogram
    assert whole is not None and whole.total == np.count_nonzero(~np.isnan(values))
    assert whole.counts[0] > 0 and whole.counts[-1] > 0  # beyond the bins: the outer ones
    results = set()
    for order in itertools.permutations(range(5)):
        merged = new_stats("float")  # what finalize starts from: no bins
        for i in order:
            # Through the manifest's JSON, as finalize reads the tasks.
            merged.merge(stats_from_dict(_task_stats(parts[i], bins).to_dict()))
        results.add(tuple(merged.to_dict()["histogram"]["counts"]))
    assert results == {tuple(whole.counts.tolist())}


def test_a_part_without_histogram_leaves_none_and_empty_parts_do_not_matter():
    bins = HistogramBins.covering(0.0, 10.0)
    with_hist = _task_stats(np.array([1.0, 2.0]), bins)
    old = NumericStats()
    old.update(pa.array([3.0]))  # an older task manifest: no histogram
    merged = new_stats("float")
    merged.merge(with_hist)
    merged.merge(old)
    assert merged.histogram is None and "histogram" not in merged.to_dict()
    empty_old = NumericStats(missing=4)  # no values: nothing the histogram misses
    merged = new_stats("float")
    merged.merge(with_hist)
    merged.merge(empty_old)
    assert merged.histogram is not None and merged.histogram.total == 2
    other_bins = _task_stats(np.array([1.0]), HistogramBins.covering(0.0, 1000.0))
    merged.merge(other_bins)
    assert merged.histogram is None


def test_bools_count_false_and_true():
    stats = new_stats("bool")
    stats.update(pa.array([True, None, False, True]))
    assert isinstance(stats, NumericStats) and stats.histogram is not None
    assert stats.histogram.edges == BOOL_BINS.edges
    assert stats.histogram.counts.tolist() == [0, 1, 2, 0]


def test_statistics_written_before_histograms_still_load():
    old = {"kind": "numeric", "count": 3, "missing": 0, "nan": 0, "min": 1.0, "max": 3.0,
           "mean": 2.0, "std": 0.816496580927726, "m2": 2.0}  # fmt: skip
    stats = stats_from_dict(old)
    assert isinstance(stats, NumericStats) and stats.histogram is None
    assert stats.to_dict() == old
    with pytest.raises(ValueError, match="one count more than edges"):
        Histogram.from_dict({"edges": [0.0, 1.0], "counts": [1, 2]})


def test_same_input_same_bytes():
    bins = HistogramBins.covering(0.0, 1.0)
    a = _task_stats(np.linspace(-0.5, 1.5, 999), bins).to_dict()
    b = _task_stats(np.linspace(-0.5, 1.5, 999), bins).to_dict()
    assert a == b and a["histogram"]["counts"][0] > 0
