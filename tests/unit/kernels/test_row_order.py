"""The sharder's row order: the compiled radix sort is NumPy's lexsort, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from shardtrain.kernels.row_order import shard_order


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000, 40_000])
def test_shard_order_is_lexsort_by_slot_key_and_position(n):
    rng = np.random.default_rng(n)
    slots = rng.integers(0, 16, n)
    keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    if n >= 1000:
        keys[:300] = keys[300:600]  # equal keys: by position
        keys[700:800] = 5  # high digits all zero
    assert shard_order(slots, keys, 16).tolist() == np.lexsort((keys, slots)).tolist()


def test_shard_order_with_narrow_keys_and_unused_slots():
    rng = np.random.default_rng(1)
    slots = rng.integers(3, 5, 5000)
    keys = rng.integers(0, 1 << 12, 5000).astype(np.uint64)
    assert shard_order(slots, keys, 9).tolist() == np.lexsort((keys, slots)).tolist()


def test_shard_order_rejects_slots_out_of_range():
    with pytest.raises(ValueError, match=r"slots must be in \[0, 2\)"):
        shard_order(np.array([0, 2]), np.array([1, 2], dtype=np.uint64), 2)
    with pytest.raises(ValueError, match="2 slots for 1 keys"):
        shard_order(np.array([0, 1]), np.array([1], dtype=np.uint64), 2)
