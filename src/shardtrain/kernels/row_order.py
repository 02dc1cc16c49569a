"""The order in which a batch's rows are written: grouped by shard, scrambled inside each.

:func:`shard_order` gives the permutation ``np.lexsort((keys, slots))`` gives -- rows by
slot (their shard), then by a 64-bit key, then by position -- with a compiled LSD radix sort:
a stable counting sort by each 11-bit digit of the key, least significant first, then by the
slot. NumPy's ``lexsort`` (a merge sort of two keys) costs several times as much on a batch
of a few ten thousand rows, and the sharder sorts every batch.
"""

from __future__ import annotations

import numba
import numpy as np

from shardtrain.kernels.native import kernel_input

__all__ = ["shard_order"]

_DIGIT_BITS = 11
_DIGITS = -(-64 // _DIGIT_BITS)  # 6 digits cover a uint64


@numba.njit(cache=True, nogil=True)
def _shard_order(slots, keys, num_slots, order, spare):
    """Radix-sort ``0..n-1`` into ``order`` by (slot, key, position); ``spare`` is scratch of
    the same size."""
    n = keys.shape[0]
    radix = 1 << _DIGIT_BITS
    mask = np.uint64(radix - 1)
    counts = np.zeros((_DIGITS, radix), dtype=np.int64)
    for i in range(n):
        k = keys[i]
        for d in range(_DIGITS):
            counts[d, np.int64((k >> np.uint64(d * _DIGIT_BITS)) & mask)] += 1
    src = spare
    dst = order
    for i in range(n):
        src[i] = i
    for d in range(_DIGITS):
        row = counts[d]
        if row.max() == n:  # one value of this digit for every row: nothing moves
            continue
        total = 0
        for v in range(radix):
            c = row[v]
            row[v] = total
            total += c
        shift = np.uint64(d * _DIGIT_BITS)
        for i in range(n):
            r = src[i]
            v = np.int64((keys[r] >> shift) & mask)
            dst[row[v]] = r
            row[v] += 1
        src, dst = dst, src
    starts = np.zeros(num_slots + 1, dtype=np.int64)
    for i in range(n):
        starts[slots[i] + 1] += 1
    for s in range(num_slots):
        starts[s + 1] += starts[s]
    for i in range(n):
        r = src[i]
        s = slots[r]
        dst[starts[s]] = r
        starts[s] += 1
    return dst is order


def shard_order(slots: np.ndarray, keys: np.ndarray, num_slots: int) -> np.ndarray:
    """Row positions sorted by ``slots`` (int64 in ``[0, num_slots)``), then ``keys``
    (uint64), then position: ``np.lexsort((keys, slots))``."""
    slots = kernel_input(slots, np.int64)
    keys = kernel_input(keys, np.uint64)
    if len(slots) != len(keys):
        raise ValueError(f"{len(slots)} slots for {len(keys)} keys")
    if len(slots) and (slots.min() < 0 or slots.max() >= num_slots):
        raise ValueError(f"slots must be in [0, {num_slots})")
    order = np.empty(len(keys), dtype=np.int64)
    spare = np.empty(len(keys), dtype=np.int64)
    return order if _shard_order(slots, keys, num_slots, order, spare) else spare
