"""Value counts merged in plain Python keep the compiled table's entries and limits
(:mod:`shardtrain.data.value_merge`)."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from shardtrain.data.statistics import CategoricalStats
from shardtrain.data.value_merge import ValueMerge
from shardtrain.kernels import arrow
from shardtrain.kernels.value_counts import ValueCounts


def _lists(rng: random.Random, n: int, alphabet: int) -> tuple[list[str], list[int]]:
    """``n`` values of a Zipf-ish vocabulary (some long, some not ASCII) and their weights."""
    words = [
        f"v{int(rng.paretovariate(1.2)) % alphabet}"
        + ("é" * rng.choice((0, 0, 3)))
        + ("x" * rng.choice((0, 0, 0, 20)))
        for _ in range(n)
    ]
    return words, [rng.choice((1, 1, 1, 2, 5)) for _ in range(n)]


def _table(counts) -> list[tuple[str, int]]:
    t = counts.table()
    return list(zip(t.column("value").to_pylist(), t.column("count").to_pylist(), strict=True))


@pytest.mark.parametrize(
    ("max_values", "max_bytes"), [(10_000, 1 << 20), (40, 1 << 20), (1_000, 300), (25, 200)]
)
@pytest.mark.parametrize("seed", range(6))
def test_the_same_table_as_the_compiled_one(seed, max_values, max_bytes):
    rng = random.Random(seed)
    compiled = ValueCounts(max_values=max_values, max_bytes=max_bytes)
    merged = ValueMerge(max_values=max_values, max_bytes=max_bytes)
    for _ in range(rng.randint(1, 12)):  # lists of counts, as summaries are merged
        values, counts = _lists(rng, rng.randint(0, 400), alphabet=rng.choice((30, 300, 3000)))
        compiled.add(arrow.strings(values, pa.large_string()), np.array(counts, dtype=np.int64))
        merged.add_lists(values, counts)
        assert (merged.size, merged.pruned) == (compiled.size, compiled.pruned)
        assert _table(merged) == _table(compiled)


@pytest.mark.parametrize(
    ("max_values", "max_bytes", "length"), [(25, 1 << 20, 3), (1_000, 200, 40)]
)
def test_each_limit_prunes_alike(max_values, max_bytes, length):
    values = [f"{i % 97:0{length}d}" for i in range(1_000)]  # 97 distinct, some more often
    counts = [1 + (i % 7) for i in range(1_000)]
    compiled = ValueCounts(max_values=max_values, max_bytes=max_bytes)
    merged = ValueMerge(max_values=max_values, max_bytes=max_bytes)
    compiled.add(arrow.strings(values, pa.large_string()), np.array(counts, dtype=np.int64))
    merged.add_lists(values, counts)
    assert merged.pruned and compiled.pruned
    assert _table(merged) == _table(compiled)


def test_categorical_statistics_merge_alike_in_python():
    rng = random.Random(7)
    parts = []
    for _ in range(20):
        stats = CategoricalStats()
        stats.update(pa.array(_lists(rng, 3_000, alphabet=5_000)[0] + [None]))
        parts.append(stats.to_columns(50) if rng.random() < 0.5 else stats.to_dict(50))
    compiled, python = CategoricalStats(), CategoricalStats.for_merging()
    for part in parts:
        compiled.merge_dict(part)
        python.merge_dict(part)
    assert python.to_dict(30) == compiled.to_dict(30)
    assert python.to_dict()["approximate"] and python.count == 20 * 3_000


@pytest.mark.parametrize(("make", "started"), [(".for_merging()", False), ("()", True)])
def test_merging_starts_no_compiled_kernel(make, started):
    """The point of it: a process that merges vocabularies does not start numba's compiler
    (a third of a second; its start-up imports numba.core.typing.cmathdecl, among others)."""
    code = (
        "import sys\n"
        "from shardtrain.data.statistics import CategoricalStats\n"
        f"s = CategoricalStats{make}\n"
        "s.merge_dict({'count': 3, 'missing': 0, 'values': ['a', 'b'], 'counts': [2, 1]})\n"
        "assert s.to_dict(1)['top'] == [{'value': 'a', 'count': 2}]\n"
        "print('numba.core.typing.cmathdecl' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(started)
