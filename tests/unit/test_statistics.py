"""Column statistics: numeric moments and categorical counts against NumPy / Counter references.

The kernels read Arrow buffers directly (validity bitmaps, array offsets, bit-packed bools,
string offsets), so the inputs here deliberately include nulls, sliced arrays whose offset is
not a multiple of 8, several chunks, NaN/±inf and empty or all-null batches.
"""

from __future__ import annotations

import collections
import itertools
import json
import math

import numpy as np
import pyarrow as pa
import pytest

from shardtrain.data import statistics
from shardtrain.data.statistics import (
    MANIFEST_TOP,
    CategoricalStats,
    NumericStats,
    new_stats,
    stats_from_dict,
)

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _chunked(array: pa.Array, rng: np.random.Generator) -> pa.ChunkedArray:
    """``array`` as a ChunkedArray of random slices (odd offsets, some empty chunks)."""
    cuts = np.sort(rng.integers(0, len(array) + 1, size=5))
    bounds = [0, *cuts.tolist(), len(array)]
    return pa.chunked_array(
        [array.slice(a, b - a) for a, b in itertools.pairwise(bounds)], type=array.type
    )


def _reference(values: list) -> dict:
    """Exact-as-possible statistics of a list of Python numbers/None (fsum, two passes)."""
    present = [float(v) for v in values if v is not None]
    finite = [x for x in present if math.isfinite(x)]
    out = {
        "count": len(finite),
        "missing": sum(v is None for v in values),
        "nan": len(present) - len(finite),
    }
    if finite:
        mean = math.fsum(finite) / len(finite)
        m2 = math.fsum((x - mean) ** 2 for x in finite)
        out.update(min=min(finite), max=max(finite), mean=mean, m2=m2)
    return out


def _assert_matches(stats: NumericStats, ref: dict, rtol: float = 1e-9) -> None:
    d = stats.to_dict()
    assert (d["count"], d["missing"], d["nan"]) == (ref["count"], ref["missing"], ref["nan"])
    if ref["count"] == 0:
        assert d["min"] is None and d["max"] is None and d["mean"] is None
        return
    assert d["min"] == ref["min"] and d["max"] == ref["max"]
    scale = max(abs(ref["min"]), abs(ref["max"]), 1e-300)
    assert d["mean"] == pytest.approx(ref["mean"], rel=rtol, abs=rtol * scale * 1e-6)
    assert stats.m2 == pytest.approx(ref["m2"], rel=rtol, abs=1e-12)


def _random_strings(rng: np.random.Generator, n: int, distinct: int) -> list[str | None]:
    """``n`` values drawn from ``distinct`` strings of 0-40 characters (some multi-byte,
    some differing only after the 16th byte or by trailing NULs), ~5% nulls."""
    alphabet = [*"abcxyz019-_", "é", "ß", "€", "🙂", "\x00"]
    pool = set()
    while len(pool) < distinct:
        length = int(rng.choice([0, 1, 3, 7, 8, 9, 15, 16, 17, 24, 40]))
        pool.add("".join(rng.choice(alphabet, size=length)))
    pool = sorted(pool)
    weights = rng.random(len(pool)) ** 3 + 1e-3  # skewed, like real categories
    picks = rng.choice(len(pool), size=n, p=weights / weights.sum())
    nulls = rng.random(n) < 0.05
    return [None if null else pool[i] for i, null in zip(picks, nulls, strict=True)]


def _counter(values: list[str | None]) -> collections.Counter:
    return collections.Counter(v for v in values if v is not None)


# --------------------------------------------------------------------------------------------
# NumericStats
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arrow_type", [pa.float32(), pa.float64(), pa.int64(), pa.int32(), pa.uint8(), pa.int16()]
)
def test_numeric_matches_reference_with_nulls_and_chunks(arrow_type):
    rng = np.random.default_rng(1)
    n = 5003
    if pa.types.is_floating(arrow_type):
        raw = rng.normal(50, 20, n).astype(arrow_type.to_pandas_dtype())
        raw[rng.random(n) < 0.01] = np.nan
        raw[rng.random(n) < 0.005] = np.inf
        raw[rng.random(n) < 0.005] = -np.inf
    else:
        info = np.iinfo(arrow_type.to_pandas_dtype())
        raw = rng.integers(max(info.min, -1000), min(info.max, 1000), n).astype(
            arrow_type.to_pandas_dtype()
        )
    mask = rng.random(n) < 0.07
    array = pa.array(raw, type=arrow_type, mask=mask)
    values = array.to_pylist()

    stats = NumericStats()
    stats.update(_chunked(array, rng))
    _assert_matches(stats, _reference(values))

    sliced = array.slice(13, 4000)  # offset not a multiple of 8, plain Array
    stats = NumericStats()
    stats.update(sliced)
    _assert_matches(stats, _reference(values[13:4013]))


def test_numeric_bools_are_exact():
    rng = np.random.default_rng(2)
    raw = rng.random(1001) < 0.3
    mask = rng.random(1001) < 0.1
    array = pa.array(raw, mask=mask)
    for chunked in (array, _chunked(array, rng), array.slice(5, 990)):
        expect = [v for v in chunked.to_pylist()]
        stats = NumericStats()
        stats.update(chunked)
        trues = sum(v is True for v in expect)
        valid = sum(v is not None for v in expect)
        assert (stats.count, stats.missing, stats.nan) == (valid, len(expect) - valid, 0)
        assert (stats.min, stats.max) == (0.0, 1.0)
        # Exact within a chunk (closed form); chunks are then combined by Chan's update.
        rel = 0 if isinstance(chunked, pa.Array) else 1e-12
        assert stats.mean == pytest.approx(trues / valid, rel=rel)
        assert stats.m2 == pytest.approx(trues * (valid - trues) / valid, rel=rel)
    stats = NumericStats()
    stats.update(pa.array([True, True, None]))
    assert (stats.min, stats.max, stats.mean, stats.std) == (1.0, 1.0, 1.0, 0.0)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(1e9 + np.random.default_rng(3).normal(0, 1, 20000), id="large-offset"),
        pytest.param(
            np.concatenate(([1e12], np.random.default_rng(4).normal(0, 1e-3, 9999))),
            id="outlier-first",
        ),
        pytest.param(
            np.array([3.4e38, -3.4e38, 1.0, 3.4028235e38, -1e-45, 0.0] * 50, np.float32),
            id="float32-extremes",
        ),
        pytest.param(
            np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, -1, 1] * 40),
            id="int64-extremes",
        ),
        pytest.param(np.full(10000, 0.1, np.float32), id="constant"),
        pytest.param(np.array([42.5]), id="single"),
    ],
)
def test_numeric_is_numerically_sound(raw):
    array = pa.array(raw)
    stats = NumericStats()
    stats.update(_chunked(array, np.random.default_rng(5)))
    ref = _reference(array.to_pylist())
    _assert_matches(stats, ref, rtol=1e-9)
    if raw.size > 1 and len(set(raw.tolist())) == 1:
        assert stats.std == 0.0 and stats.mean == ref["mean"]


@pytest.mark.parametrize(
    "array",
    [
        pa.array([], pa.float32()),
        pa.array([None, None, None], pa.float32()),
        pa.array([np.nan, np.inf, -np.inf, None], pa.float32()),
        pa.nulls(17, pa.int64()),
        pa.chunked_array([], pa.float32()),
        pa.array([None] * 9, pa.bool_()),
    ],
)
def test_numeric_degenerate_batches(array):
    stats = NumericStats()
    stats.update(array)
    ref = _reference(array.to_pylist())
    _assert_matches(stats, ref)
    assert stats.to_dict()["std"] is None
    assert NumericStats.from_dict(json.loads(json.dumps(stats.to_dict()))) == stats


def test_numeric_other_types_are_cast():
    for array in (
        pa.array(np.array([1.5, None, 2.5], dtype=object), pa.float16()),
        pa.array([1, 2, None, 4], pa.decimal128(10, 2)),
    ):
        stats = NumericStats()
        stats.update(array)
        _assert_matches(stats, _reference(array.to_pylist()))


def test_numeric_merge_is_order_independent():
    rng = np.random.default_rng(6)
    parts = []
    for i in range(6):
        raw = rng.normal(10.0**i, 1 + i, rng.integers(0, 3000)).astype(np.float32)
        parts.append(pa.array(raw, mask=rng.random(raw.size) < 0.1))
    results = []
    for order in itertools.islice(itertools.permutations(range(6)), 0, None, 97):
        total = NumericStats()
        for i in order:
            part = NumericStats()
            part.update(parts[i])
            total.merge(NumericStats.from_dict(json.loads(json.dumps(part.to_dict()))))
        results.append(total)
    ref = _reference([v for p in parts for v in p.to_pylist()])
    for total in results:
        _assert_matches(total, ref, rtol=1e-9)
        assert (total.count, total.missing, total.min, total.max) == (
            results[0].count,
            results[0].missing,
            results[0].min,
            results[0].max,
        )


# --------------------------------------------------------------------------------------------
# CategoricalStats
# --------------------------------------------------------------------------------------------


def test_categorical_counts_match_counter():
    rng = np.random.default_rng(7)
    values = _random_strings(rng, 20000, distinct=3000)  # grows the table several times
    array = pa.array(values, pa.string())
    stats = CategoricalStats()
    for start in range(0, len(values), 4096):  # blocks, each a ChunkedArray of slices
        stats.update(_chunked(array.slice(start, 4096), rng))
    expect = _counter(values)
    assert stats.counts == dict(expect)
    assert stats.count == sum(expect.values())
    assert stats.missing == values.count(None)
    assert stats.distinct == len(expect) and not stats.approximate


def test_categorical_values_that_share_a_prefix_or_padding_stay_distinct():
    tricky = [
        "",
        "\x00",
        "\x00\x00",
        "ab",
        "ab\x00",
        "ab\x00\x00\x00\x00\x00\x00",  # same first word as "ab" once zero-padded
        "abcdefgh",
        "abcdefgh\x00",
        "x" * 16,
        "x" * 16 + "a",  # differ only after the inline 16 bytes
        "x" * 16 + "b",
        "x" * 17 + "a",
        "x" * 300,
        "x" * 300 + "\x00",
    ]
    rng = np.random.default_rng(8)
    values = [tricky[i] for i in rng.integers(0, len(tricky), 5000)]
    stats = CategoricalStats()
    stats.update(pa.array(values))
    # The last values of a buffer are read byte by byte: end the batch on each value.
    for value in tricky:
        stats.update(pa.array(["zz", value]))
    expect = _counter(values) + collections.Counter(tricky) + collections.Counter({"zz": 14})
    assert stats.counts == dict(expect)


def test_categorical_other_string_layouts():
    values = ["b", None, "a", "b", "é", "a", "b"]
    expect = {"b": 3, "a": 2, "é": 1}
    for array in (
        pa.array(values, pa.large_string()),
        pa.array(values).dictionary_encode(),
        pa.chunked_array([pa.array(values[:3]), pa.array(values[3:])]),
    ):
        stats = CategoricalStats()
        stats.update(array)
        assert stats.counts == expect and (stats.count, stats.missing) == (6, 1)
    stats = CategoricalStats()
    stats.update(pa.array([3, 1, 3, None]))  # non-strings are counted by their text
    assert stats.counts == {"3": 2, "1": 1}


def test_categorical_empty_and_all_null():
    stats = CategoricalStats()
    for array in (pa.array([], pa.string()), pa.array([None, None], pa.string())):
        stats.update(array)
    stats.update(pa.chunked_array([], pa.string()))
    assert stats.to_dict() == {
        "kind": "categorical",
        "count": 0,
        "missing": 2,
        "distinct": 0,
        "approximate": False,
        "top": [],
    }
    assert stats_from_dict(stats.to_dict()).to_dict() == stats.to_dict()


def test_categorical_top_orders_by_count_then_value():
    stats = CategoricalStats()
    stats.update(pa.array(["b", "c", "a", "c", "b", "d", "é", "e", "z"]))
    assert stats.top(10) == [
        ("b", 2),
        ("c", 2),
        ("a", 1),
        ("d", 1),
        ("e", 1),
        ("z", 1),
        ("é", 1),
    ]
    assert stats.top(3) == [("b", 2), ("c", 2), ("a", 1)]
    assert stats.top(0) == []
    d = stats.to_dict(2)
    assert d["top"] == [{"value": "b", "count": 2}, {"value": "c", "count": 2}]
    assert d["distinct"] == 7


def test_categorical_merge_is_exact_and_order_independent():
    rng = np.random.default_rng(9)
    parts = [_random_strings(rng, int(rng.integers(0, 3000)), distinct=400) for _ in range(5)]
    stats = []
    for part in parts:
        s = CategoricalStats()
        s.update(pa.array(part, pa.string()))
        stats.append(s)
    expect = sum((_counter(p) for p in parts), collections.Counter())
    results = set()
    for order in itertools.permutations(range(5)):
        # As in finalize: each task's manifest entry, round-tripped through JSON.
        total = new_stats("string")
        for i in order:
            total.merge(stats_from_dict(json.loads(json.dumps(stats[i].to_dict(MANIFEST_TOP)))))
        assert total.counts == dict(expect)
        results.add(json.dumps(total.to_dict(50)))
        direct = CategoricalStats()
        for i in order:
            direct.merge(stats[i])  # live objects too
        assert direct.counts == dict(expect)
    assert len(results) == 1
    assert not json.loads(results.pop())["approximate"]


def test_categorical_merge_with_itself_doubles():
    stats = CategoricalStats()
    stats.update(pa.array(["a", "b", "a", None]))
    stats.merge(stats)
    assert stats.counts == {"a": 4, "b": 2} and (stats.count, stats.missing) == (6, 2)


def test_categorical_top_list_beyond_manifest_makes_merges_approximate():
    stats = CategoricalStats()
    stats.update(pa.array([f"v{i}" for i in range(10)] + ["v0"]))
    d = stats.to_dict(3)
    assert d["distinct"] == 10 and not d["approximate"]
    assert stats_from_dict(d).approximate


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(statistics, "MAX_TRACKED", 8)


def test_categorical_exact_up_to_max_tracked(small_limit):
    stats = CategoricalStats()
    values = [f"v{i}" for i in range(8)] * 3
    stats.update(pa.array(values))
    assert not stats.approximate and stats.distinct == 8
    stats.update(pa.array(["new"]))  # the 9th distinct value
    assert stats.approximate and stats.distinct <= 8


def test_categorical_prune_keeps_frequent_values_deterministically(small_limit):
    rng = np.random.default_rng(10)
    heavy = ["h1", "h2", "h3"]
    values = []
    for i in range(2000):
        values.append(heavy[i % 3] if rng.random() < 0.5 else f"rare{rng.integers(0, 500)}")
    truth = _counter(values)
    outcomes = set()
    for block in (1, 7, 64, 2000):  # block sizes must not change the outcome
        stats = CategoricalStats()
        array = pa.array(values)
        for start in range(0, len(values), block):
            stats.update(array.slice(start, block))
        d = stats.to_dict()
        assert d["approximate"] and d["distinct"] <= 8
        assert d["count"] == len(values)
        top = {t["value"]: t["count"] for t in d["top"]}
        assert set(heavy) <= set(top)
        assert all(0 < n <= truth[v] for v, n in top.items())  # lower bounds
        assert [t["value"] for t in d["top"][:3]] == sorted(heavy, key=lambda v: -top[v])
        outcomes.add(json.dumps(d))
    assert len(outcomes) == 1
    # Memory stays bounded by the limit, however many distinct values went through.
    assert stats._values.entries.shape[0] <= 8 and stats._values.slots.size <= 32


def test_categorical_prune_in_merge(small_limit):
    total = CategoricalStats()
    for task in range(4):
        part = CategoricalStats()
        part.update(pa.array([f"t{task}-{i}" for i in range(6)] + ["common"] * (task + 1)))
        total.merge(stats_from_dict(part.to_dict(MANIFEST_TOP)))
    assert total.approximate and total.distinct <= 8
    assert total.top(1) == [("common", 10)]


def test_categorical_byte_budget_prunes_long_values(monkeypatch):
    monkeypatch.setattr(statistics, "_MAX_TRACKED_BYTES", 4096)
    stats = CategoricalStats()
    stats.update(pa.array(["short"] * 50))
    stats.update(pa.array([f"{i:04d}" + "x" * 196 for i in range(100)]))  # 20 kB of values
    assert stats.approximate
    assert stats._values.offsets[stats._values.size] <= 4096
    assert stats.top(1) == [("short", 50)]
    stats.update(pa.array(["y" * 10000]))  # a value longer than the budget is still counted
    assert stats.counts["y" * 10000] == 1


def test_categorical_growth_is_exact_past_initial_capacity():
    values = [f"p{i:08d}" for i in range(70000)] * 2
    stats = CategoricalStats()
    stats.update(pa.array(values))
    assert stats.distinct == 70000 and not stats.approximate
    assert set(stats.counts.values()) == {2}
    assert stats.top(2) == [("p00000000", 2), ("p00000001", 2)]


@pytest.mark.parametrize(
    "values, type",
    [
        ([0, 1, 1, None, 0, 1], pa.int64()),
        ([-3, 7, 7, -3, None, 2], pa.int32()),
        ([0, 1 << 20, 5, 5], pa.int64()),  # a range too wide for bincount: value_counts
        ([True, False, None, True], pa.bool_()),
        (["cat", "dog", None, "cat"], pa.string()),
    ],
)
def test_label_stats_count_every_class_exactly(values, type):
    """Labels are counted by value (as strings, bools as 0/1), nulls as missing, whether
    the counting goes through bincount (class ids) or value_counts; sliced arrays too."""
    array = pa.array([None, *values, "x" if type == pa.string() else None], type).slice(
        1, len(values)
    )
    stats = statistics.LabelStats()
    stats.update(array)
    stats.update(array.slice(1))
    want = collections.Counter()
    for v in [*values, *values[1:]]:
        if v is not None:
            want[str(int(v)) if isinstance(v, bool) else str(v)] += 1
    assert stats.counts == dict(want)
    assert stats.missing == 2 * values.count(None) - (values[0] is None)


def test_a_regression_label_keeps_its_moments_and_stops_counting_values():
    """A float label with more distinct values than any classifier has classes: the counts
    are dropped (a task's memory must not grow with its rows), the mean and standard
    deviation are exact and merge across tasks; a few values are still counted exactly."""
    rng = np.random.default_rng(5)
    values = rng.normal(40.0, 7.0, 5000)
    parts = []
    for chunk in np.array_split(values, 3):
        s = statistics.LabelStats()
        s.update(pa.chunked_array([pa.array(chunk[:100]), pa.array(chunk[100:])]))
        parts.append(statistics.LabelStats.from_dict(s.to_dict()))
    merged = statistics.LabelStats()
    for p in parts:
        merged.merge(p)
    d = merged.to_dict()
    assert d["counts"] == {} and d["many_values"] is True
    assert d["numeric"]["count"] == 5000
    assert d["numeric"]["mean"] == pytest.approx(values.mean(), rel=1e-12)
    assert d["numeric"]["std"] == pytest.approx(values.std(), rel=1e-9)
    assert (d["numeric"]["min"], d["numeric"]["max"]) == (values.min(), values.max())

    few = statistics.LabelStats()
    few.update(pa.array([1.5, 2.5, 2.5, None]))
    assert few.to_dict()["counts"] == {"1.5": 1, "2.5": 2} and not few.many_values
    assert few.to_dict()["numeric"]["mean"] == pytest.approx(6.5 / 3)
    few.merge(merged)  # one task saw many values: the merge has too many to count
    assert few.many_values and few.counts == {} and few.numeric.count == 5003
    growing = statistics.LabelStats()  # many values arriving a few per batch
    for start in range(0, 1500, 100):
        growing.update(pa.array(np.arange(start, start + 100, dtype=np.int64)))
    assert growing.many_values and growing.numeric.count == 1500
    names = statistics.LabelStats()
    names.update(pa.array(["a", "b"]))
    assert "numeric" not in names.to_dict()  # a string label has no moments
