"""The compiled value-count hash table against ``collections.Counter``.

The kernel reads Arrow string buffers in place, eight bytes at a time, so the inputs include
sliced arrays (offsets not a multiple of 8), nulls, values that differ only after their first
16 bytes or by trailing NUL bytes, values at the very end of a buffer, weights, and limits
small enough to prune. How the statistics use the table is tested in
``tests/unit/data/test_statistics.py``.
"""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest

from shardtrain.kernels.value_counts import ValueCounts

UNLIMITED = {"max_values": 1 << 30, "max_bytes": 1 << 40}


def _counts(table: ValueCounts) -> dict[str, int]:
    t = table.table()
    return dict(zip(t.column("value").to_pylist(), t.column("count").to_pylist(), strict=True))


def _values(rng: np.random.Generator, n: int, distinct: int) -> list[str | None]:
    alphabet = [*"abz09-", "é", "🙂", "\x00"]
    pool = sorted(
        {"".join(rng.choice(alphabet, size=int(rng.integers(0, 30)))) for _ in range(distinct)}
    )
    picks = rng.integers(0, len(pool), n)
    return [None if rng.random() < 0.05 else pool[i] for i in picks]


def test_counts_match_counter_over_slices_and_string_layouts():
    rng = np.random.default_rng(1)
    values = _values(rng, 12000, 2500)
    for type in (pa.string(), pa.large_string()):
        table = ValueCounts(**UNLIMITED)
        array = pa.array(values, type)
        for start in range(0, len(values), 1237):  # odd offsets into one buffer
            table.add(array.slice(start, 1237))
        assert _counts(table) == dict(collections.Counter(v for v in values if v is not None))
        assert table.size == len(set(values) - {None}) and not table.pruned


def test_values_alike_in_their_first_words_stay_distinct():
    tricky = ["", "\x00", "ab", "ab\x00", "ab" + "\x00" * 6, "x" * 16, "x" * 16 + "a"]
    tricky += ["x" * 16 + "b", "x" * 17, "y" * 300, "y" * 300 + "\x00"]
    table = ValueCounts(**UNLIMITED)
    for value in tricky:  # each value last in its buffer: read byte by byte
        table.add(pa.array([value]))
    table.add(pa.array(tricky))
    assert _counts(table) == {v: 2 for v in tricky}


def test_weights_count_each_value_that_many_times():
    table = ValueCounts(**UNLIMITED)
    table.add(pa.array(["a", None, "b", "a"]).slice(1), np.array([5, 2, 7]))
    table.add(pa.array(["b"]), np.array([1], dtype=np.int32))
    assert _counts(table) == {"b": 3, "a": 7}
    with pytest.raises(ValueError, match="2 weights for 3 values"):
        table.add(pa.array(["a", "b", "c"]), np.array([1, 2]))


def test_other_types_are_counted_by_their_text():
    table = ValueCounts(**UNLIMITED)
    table.add(pa.array([3, 1, 3, None]))
    table.add(pa.array(["x", "y", "x"]).dictionary_encode())
    assert _counts(table) == {"3": 2, "1": 1, "x": 2, "y": 1}


def test_table_is_large_string_in_first_seen_order():
    table = ValueCounts(**UNLIMITED)
    table.add(pa.array(["b", "a", "b"]))
    t = table.table()
    assert t.schema == pa.schema([("value", pa.large_string()), ("count", pa.int64())])
    assert t.to_pylist() == [{"value": "b", "count": 2}, {"value": "a", "count": 1}]


def test_the_value_limit_prunes_to_the_most_frequent_half_whatever_the_blocks():
    values = [f"v{i % 3}" if i % 2 else f"rare{i}" for i in range(400)]
    outcomes = set()
    for block in (1, 5, 400):
        table = ValueCounts(max_values=8, max_bytes=1 << 20)
        array = pa.array(values)
        for start in range(0, len(values), block):
            table.add(array.slice(start, block))
        counts = _counts(table)
        assert table.pruned and table.size <= 8 and table.entries.shape[0] <= 8
        assert {"v0", "v1", "v2"} <= set(counts)
        truth = collections.Counter(values)
        assert all(0 < n <= truth[v] for v, n in counts.items())  # lower bounds
        outcomes.add(tuple(sorted(counts.items())))
    assert len(outcomes) == 1


def test_the_byte_limit_prunes_long_values_but_counts_a_longer_one():
    table = ValueCounts(max_values=1000, max_bytes=4096)
    table.add(pa.array(["short"] * 50))
    table.add(pa.array([f"{i:04d}" + "x" * 196 for i in range(100)]))
    assert table.pruned and table.offsets[table.size] <= 4096
    assert _counts(table)["short"] == 50
    table.add(pa.array(["y" * 10000]))
    assert _counts(table)["y" * 10000] == 1


def test_empty_and_all_null_arrays_add_nothing():
    table = ValueCounts(**UNLIMITED)
    table.add(pa.array([], pa.string()))
    table.add(pa.array([None, None], pa.string()))
    assert table.size == 0 and table.table().num_rows == 0


@pytest.mark.parametrize("type", [pa.string(), pa.large_string()])
def test_prefetching_large_tables_counts_as_hashing_inline(monkeypatch, type):
    """A table of many slots hashes each batch ahead and prefetches; a small one hashes
    inline. Both give the same table, entry for entry, through growth, pruning (ties kept
    by first sight), nulls, long values, weights and sliced arrays."""
    from shardtrain.kernels import value_counts

    rng = np.random.default_rng(7)
    ids = [
        f"id{v:07d}" + ("-long-suffix-past-16-bytes" if v % 7 == 0 else "") for v in range(60000)
    ]
    picks = rng.integers(0, len(ids), 150_000)
    values = pa.array([None if k % 29 == 0 else ids[k] for k in picks], type)

    def run() -> tuple[list, list, bool]:
        table = ValueCounts(max_values=40_000, max_bytes=1 << 30)
        for start in range(0, len(values), 9999):
            part = values.slice(start, 9999)
            weights = np.arange(len(part), dtype=np.int64) % 3 + 1 if start % 2 else None
            table.add(part, weights)
        t = table.table()
        return t.column("value").to_pylist(), t.column("count").to_pylist(), table.pruned

    prefetched = run()
    monkeypatch.setattr(value_counts, "_PREFETCH_SLOTS", 1 << 62)
    inline = run()
    assert prefetched[2] and prefetched == inline
