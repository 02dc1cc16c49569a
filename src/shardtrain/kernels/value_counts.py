"""Exact counts of distinct strings in a bounded, compiled hash table.

:class:`ValueCounts` counts the values of Arrow string arrays, block after block, in memory
proportional to the *distinct* values it tracks, never to the rows it has counted: the
categorical column statistics (:class:`shardtrain.data.statistics.CategoricalStats`) keep
one per column and task. Two limits bound it, the number of distinct values and their bytes;
a new value beyond either first prunes the table to its most frequent values, and
:attr:`ValueCounts.pruned` then says that the counts are lower bounds.

Example::

    counts = ValueCounts(max_values=200_000, max_bytes=32 << 20)
    counts.add(pa.array(["b", "a", None, "b"]))
    counts.table()  # value: ["b", "a"] (large_string), count: [2, 1]

The table
---------
Entry ``e`` is the value ``arena[offsets[e]:offsets[e + 1]]`` (Arrow's string layout, in
entry order, so :meth:`ValueCounts.table` hands the values to Arrow without a copy). Its
record ``entries[e]`` (four uint64 words, 32 bytes: half a cache line) holds its *tag* (a
64-bit hash with ``min(length, 255)`` in the low byte), its count and its first 16 bytes.
``slots`` (a power of two, at most half full) holds 0 for an empty slot, or ``e + 1`` in
the low 32 bits and the tag's low 32 bits in the high ones; a lookup probes linearly from
the slot given by the tag's top bits.

Why this layout: the table of a high-cardinality column (player ids) does not fit in the
CPU caches, and each array a lookup touches costs a cache miss. A slot rejects other values
by their tag bits without reading their records, and equal tags and first 16 bytes mean
equal values of up to 16 bytes (the length is in the tag), so a short value costs two cache
lines: its slot and its record. Longer values are then compared with the arena. Counts are
exact whatever the hashes. Memory: ~56 bytes per value (a record, an 8-byte offset, two
8-byte slots) plus its bytes, in arrays that grow by doubling up to the limits.

Nothing persists the hash, so it need not be stable across releases.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain.kernels import arrow
from shardtrain.kernels.native import kernel_input, load_u8, load_u64, prefetch

__all__ = ["ValueCounts"]

#: Multiplier of the table's hash (2**64 / golden ratio, odd: multiplying by it is a
#: bijection of 64-bit words). Slots are taken from the hash's high bits, which depend on
#: every input bit.
_K = np.uint64(0x9E3779B97F4A7C15)

# Columns of the entry records.
_TAG = 0  # the hash, with min(length, 255) in its low byte
_COUNT = 1
_WORD0 = 2  # bytes 0-7 of the value, little-endian, zero-padded
_WORD1 = 3  # bytes 8-15
_INLINE = 16  # values up to this long (two words) are compared from their record alone
_TAG_LENGTH = 0xFF  # the tag's low byte: min(length, 255)

# _count_values outcomes.
_DONE = 0  # every value was counted
_FULL = 1  # a new value needs an entry: grow the records, or prune at the value limit
_NO_ROOM = 2  # a new value's bytes do not fit the arena: grow it, or prune at the byte limit

_NO_BYTES = kernel_input(np.zeros(0, dtype=np.uint8), np.uint8)
_NO_WEIGHTS = kernel_input(np.zeros(0, dtype=np.int64), np.int64)
_NO_HASHES = np.zeros((0, 3), dtype=np.uint64)


class _Strings(NamedTuple):
    """The values to count, as :func:`_count_values` reads them (read-only arrays)."""

    data: np.ndarray  # uint8: the values' bytes
    value_offsets: np.ndarray  # int32 or int64: value i is data[value_offsets[i]:...[i + 1]]
    validity: np.ndarray  # uint8 Arrow validity bitmap (bit i), or empty: all valid
    weights: np.ndarray  # int64: value i counts weights[i - offset] times, or empty: once
    offset: int  # the array's offset: its values are i = offset, offset + 1, ...


class _Table(NamedTuple):
    """The hash table's arrays, as :func:`_count_values` writes them (see the module doc)."""

    slots: np.ndarray  # uint64[power of two]
    entries: np.ndarray  # uint64[capacity, 4]: tag, count, first two words
    offsets: np.ndarray  # int64[capacity + 1]: entry e is arena[offsets[e]:offsets[e + 1]]
    arena: np.ndarray  # uint8: the values' bytes


#: Values ahead of the one counted whose slot is prefetched, and (closer) whose record is.
_SLOT_AHEAD = 16
_RECORD_AHEAD = 8

#: Slots from which a table is hashed ahead and prefetched (:func:`_count_values`): below,
#: slots and records stay in the CPU caches, and hashing inline costs less.
_PREFETCH_SLOTS = 1 << 15


@numba.njit(cache=True, nogil=True, inline="always")
def _hash(src, n_bytes, a, b):
    """``(tag, word0, word1)`` of the value ``[a, b)`` of the ``n_bytes`` bytes at address
    ``src`` (integers only: no array, so no reference counting per call).

    Bytes are read eight at a time (one unaligned 8-byte load, see
    :mod:`shardtrain.kernels.native`), masked to the value's length. Values of up to 16
    bytes (at least 16 bytes before the buffer's end) take a path without loops or
    unpredictable branches; longer ones and the last few of the buffer take a loop that
    reads whole words where it can and single bytes at the end. Both hash the same words:
    the value's bytes zero-padded to at least two words, ``h = (h ^ word) * K`` from
    ``h = length``.
    """
    u0 = np.uint64(0)
    u8 = np.uint64(8)
    ones = ~u0
    length = b - a
    if length <= _INLINE and a + np.uint64(_INLINE) <= n_bytes:
        w0 = load_u64(src, a)
        w1 = load_u64(src, a + u8)
        r0 = min(length, u8)  # bytes of the value in each word
        r1 = length - r0
        w0 = w0 & (ones >> (np.uint64(64) - u8 * r0)) if r0 else u0
        w1 = w1 & (ones >> (np.uint64(64) - u8 * r1)) if r1 else u0
        h = ((length ^ w0) * _K ^ w1) * _K
    else:
        h = length
        w0 = u0
        w1 = u0
        p = a
        k = 0
        while p < b or k < 2:
            w = u0
            if p + u8 <= b or (p < b and b + u8 <= n_bytes):
                w = load_u64(src, p)
                if b - p < u8:
                    w &= ones >> (np.uint64(64) - u8 * (b - p))
            else:
                bits = u0
                for r in range(p, min(p + u8, b)):
                    w |= np.uint64(load_u8(src, r)) << bits
                    bits += u8
            if k == 0:
                w0 = w
            elif k == 1:
                w1 = w
            h = (h ^ w) * _K
            p += u8
            k += 1
    h ^= h >> np.uint64(29)
    return (h & ~np.uint64(_TAG_LENGTH)) | min(length, np.uint64(_TAG_LENGTH)), w0, w1


@numba.njit(cache=True, nogil=True)
def _hash_values(strings, hashes):
    """:func:`_hash` of every valid value ``i`` of ``strings`` into ``hashes[i - offset]``
    (uint64 ``[n, 3]``: tag, word0, word1; a null's row is left as it is: only prefetches,
    which may be of any slot, read it)."""
    data, value_offsets, validity, _, offset = strings
    has_nulls = validity.size > 0
    n_bytes = np.uint64(data.size)
    src = data.ctypes.data
    for i in range(offset, offset + hashes.shape[0]):
        if has_nulls and not (validity[i >> 3] >> (i & 7)) & 1:
            continue
        a = np.uint64(value_offsets[i])
        b = np.uint64(value_offsets[i + 1])
        tag, w0, w1 = _hash(src, n_bytes, a, b)
        hashes[i - offset, 0] = tag
        hashes[i - offset, 1] = w0
        hashes[i - offset, 2] = w1


@numba.njit(cache=True, nogil=True)
def _count_values(strings, hashes, start, stop, table, size, max_size):
    """Count the values ``start <= i < stop`` of ``strings`` (a :class:`_Strings`, hashed
    by :func:`_hash_values` into ``hashes``) into ``table`` (a :class:`_Table` of ``size``
    entries, at most ``max_size``).

    ``hashes`` empty: each value is hashed here (:func:`_hash`). Otherwise they were hashed
    beforehand, because the table of a high-cardinality column is out of the CPU caches,
    and a lookup's slot and record are each a cache miss whose latency the data-dependent
    probe cannot overlap with the next lookup's: the slot of the value :data:`_SLOT_AHEAD`
    places ahead is prefetched, and the record its first slot names :data:`_RECORD_AHEAD`
    places ahead, so that by the time a value is probed its lines are (mostly) in the
    cache. Prefetching changes no result. Everything is inline in this one function, and
    the arrays are unpacked from their tuples once: helpers taking the arrays would cost
    atomic reference-count updates per call (per value), more than the lookup.

    Returns ``(i, size, status)``: with ``_DONE``, every value was counted (``i == stop``);
    otherwise value ``i`` is new and needs an entry (``_FULL``) or arena space
    (``_NO_ROOM``) first, and the caller resumes from ``i`` once it has made room.
    """
    data, value_offsets, validity, weights, offset = strings
    slots, entries, offsets, arena = table
    has_nulls = validity.size > 0
    has_weights = weights.size > 0
    hashed = hashes.shape[0] > 0
    n_bytes = np.uint64(data.size)
    src = data.ctypes.data
    slot_lines = slots.ctypes.data
    record_lines = entries.ctypes.data
    mask = np.uint64(slots.size - 1)
    shift = np.uint64(64)
    while np.uint64(1) << (np.uint64(64) - shift) < np.uint64(slots.size):
        shift -= np.uint64(1)
    u0 = np.uint64(0)
    u1 = np.uint64(1)
    low32 = np.uint64(0xFFFFFFFF)
    for i in range(start, stop):
        if hashed and i + _SLOT_AHEAD < stop:
            prefetch(slot_lines, 8 * (hashes[i + _SLOT_AHEAD - offset, 0] >> shift))
        if hashed and i + _RECORD_AHEAD < stop:
            ahead = slots[hashes[i + _RECORD_AHEAD - offset, 0] >> shift]
            if ahead != u0:
                prefetch(record_lines, 32 * (np.int64(ahead & low32) - 1))
        if has_nulls and not (validity[i >> 3] >> (i & 7)) & 1:
            continue
        a = np.uint64(value_offsets[i])
        b = np.uint64(value_offsets[i + 1])
        length = b - a
        if hashed:
            tag = hashes[i - offset, 0]
            w0 = hashes[i - offset, 1]
            w1 = hashes[i - offset, 2]
        else:
            tag, w0, w1 = _hash(src, n_bytes, a, b)
        # Probe.
        s = tag >> shift
        e = -1
        while True:
            slot = slots[s]
            if slot == u0:
                break
            if slot >> np.uint64(32) == tag & low32:
                e = np.int64(slot & low32) - 1
                if (
                    entries[e, _TAG] == tag
                    and entries[e, _WORD0] == w0
                    and entries[e, _WORD1] == w1
                ):
                    if length <= _INLINE:
                        break
                    q = np.uint64(offsets[e])
                    if np.uint64(offsets[e + 1]) - q == length:
                        r = np.uint64(_INLINE)
                        while r < length and data[a + r] == arena[q + r]:
                            r += u1
                        if r == length:
                            break
                e = -1
            s = (s + u1) & mask
        weight = weights[i - offset] if has_weights else 1
        if e >= 0:
            entries[e, _COUNT] += np.uint64(weight)
            continue
        # A new value: slot s is free.
        if size >= entries.shape[0] or size >= max_size:
            return i, size, _FULL
        q = np.uint64(offsets[size])
        if q + length > np.uint64(arena.size):
            return i, size, _NO_ROOM
        for r in range(length):
            arena[q + r] = data[a + r]
        offsets[size + 1] = np.int64(q + length)
        entries[size, _TAG] = tag
        entries[size, _COUNT] = np.uint64(weight)
        entries[size, _WORD0] = w0
        entries[size, _WORD1] = w1
        slots[s] = (tag << np.uint64(32)) | np.uint64(size + 1)
        size += 1
    return stop, size, _DONE


@numba.njit(cache=True, nogil=True)
def _rehash(entries, size, slots):
    """Rebuild ``slots`` for entries ``0 <= e < size`` (after growing or pruning)."""
    slots[:] = 0
    mask = np.uint64(slots.size - 1)
    shift = np.uint64(64)
    while np.uint64(1) << (np.uint64(64) - shift) < np.uint64(slots.size):
        shift -= np.uint64(1)
    for e in range(size):
        tag = entries[e, _TAG]
        s = tag >> shift
        while slots[s] != 0:
            s = (s + np.uint64(1)) & mask
        slots[s] = (tag << np.uint64(32)) | np.uint64(e + 1)


@numba.njit(cache=True, nogil=True)
def _compact(keep, entries, offsets, arena):
    """Move entries ``keep`` (ascending) to the front, in place.

    Entry ``keep[j] >= j`` moves to ``j`` and its bytes move towards the arena's start, so
    copying front to back never overwrites anything still to be read.
    """
    pos = 0
    for j in range(keep.size):
        e = keep[j]
        a = offsets[e]
        b = offsets[e + 1]
        for c in range(4):
            entries[j, c] = entries[e, c]
        offsets[j] = pos
        for k in range(b - a):
            arena[pos + k] = arena[a + k]
        pos += b - a
    offsets[keep.size] = pos


def _records(capacity: int) -> np.ndarray:
    """Zeroed ``(capacity, 4)`` uint64 records starting on a 64-byte (cache line) boundary,
    so that no 32-byte record straddles two lines."""
    raw = np.zeros(capacity * 4 + 8, dtype=np.uint64)
    skip = (-raw.ctypes.data % 64) // 8
    return raw[skip : skip + capacity * 4].reshape(capacity, 4)


def _next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 1).bit_length()


def _strings(values: pa.Array, weights: np.ndarray) -> _Strings:
    """The buffers of a string or large_string array, read-only, for :func:`_count_values`.

    Read-only because numba compiles one specialisation per argument type and writeability is
    part of an array's type: Arrow buffers come out of ``np.frombuffer`` writeable or not,
    depending on who allocated them.
    """
    n = len(values)
    buffers = values.buffers()
    offset_type = np.int64 if pa.types.is_large_string(values.type) else np.int32
    value_offsets = np.frombuffer(buffers[1], dtype=offset_type, count=values.offset + n + 1)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else _NO_BYTES
    return _Strings(
        data=kernel_input(data, np.uint8),
        value_offsets=kernel_input(value_offsets, offset_type),
        validity=arrow.validity_bits(values),
        weights=kernel_input(weights, np.int64),
        offset=values.offset,
    )


class ValueCounts:
    """Exact counts of distinct strings, in memory bounded by two limits.

    A new value beyond ``max_values`` distinct values, or whose bytes would take the values
    beyond ``max_bytes``, first prunes the table to its most frequent half (see
    :meth:`_prune`), and :attr:`pruned` records that counts are no longer exact. A single
    value longer than ``max_bytes`` is still counted.

    Attributes:
        size: the distinct values tracked.
        pruned: whether values were dropped to stay within the limits (the counts of the
            others are then lower bounds).
        slots, entries, offsets, arena: the hash table (see the module docstring).
    """

    def __init__(self, max_values: int, max_bytes: int) -> None:
        """An empty table that tracks at most ``max_values`` distinct values (at least one)
        of at most ``max_bytes`` bytes together."""
        self.max_values = max(max_values, 1)
        self.max_bytes = max_bytes
        self.size = 0
        self.pruned = False
        self.slots = np.zeros(2, dtype=np.uint64)
        self.entries = _records(0)
        self.offsets = np.zeros(1, dtype=np.int64)
        self.arena = np.zeros(0, dtype=np.uint8)

    def add(self, values: pa.Array, weights: np.ndarray | None = None) -> None:
        """Count every valid value of an array (``weights[i]`` times, if given).

        Values of other types than string and large_string are counted by their text
        (``pyarrow.compute.cast`` to string).

        Raises:
            ValueError: ``weights`` is given and has another length than ``values``.
        """
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            values = pc.cast(values, pa.string())
        n = len(values)
        if n == values.null_count:
            return
        weights = _NO_WEIGHTS if weights is None else weights
        if len(weights) not in (0, n):
            raise ValueError(f"{len(weights)} weights for {n} values")
        strings = _strings(values, weights)
        hashes = _NO_HASHES
        if len(self.slots) >= _PREFETCH_SLOTS:
            hashes = np.empty((n, 3), dtype=np.uint64)  # a null's row: unused
            _hash_values(strings, hashes)
        i, stop = values.offset, values.offset + n
        while True:
            table = _Table(self.slots, self.entries, self.offsets, self.arena)
            i, self.size, status = _count_values(
                strings, hashes, i, stop, table, self.size, self.max_values
            )
            if status == _DONE:
                return
            if status == _FULL:
                if self.size < self.max_values:
                    self._grow_entries(min(max(2 * self.size, 64), self.max_values))
                else:
                    self._prune(self.max_values // 2)
            else:
                ends = strings.value_offsets
                need = int(self.offsets[self.size] + ends[i + 1] - ends[i])
                if need > self.max_bytes and self.size:
                    self._prune(self.size // 2)
                elif need > len(self.arena):
                    limit = max(self.max_bytes, need)
                    self._grow_arena(min(max(need, 2 * len(self.arena), 1024), limit))

    def table(self) -> pa.Table:
        """``value`` (large_string, a view of the arena) and ``count`` of every entry."""
        values = pa.Array.from_buffers(
            pa.large_string(),
            self.size,
            [None, pa.py_buffer(self.offsets[: self.size + 1]), pa.py_buffer(self.arena)],
        )
        counts = self.entries[: self.size, _COUNT].astype(np.int64)
        return pa.table({"value": values, "count": arrow.from_numpy(counts)})

    def _grow_entries(self, capacity: int) -> None:
        entries = _records(capacity)
        entries[: self.size] = self.entries[: self.size]
        self.entries = entries
        offsets = np.empty(capacity + 1, dtype=np.int64)
        offsets[: self.size + 1] = self.offsets[: self.size + 1]
        self.offsets = offsets
        self.slots = np.empty(_next_power_of_two(2 * capacity), dtype=np.uint64)
        _rehash(self.entries, self.size, self.slots)

    def _grow_arena(self, capacity: int) -> None:
        used = int(self.offsets[self.size])
        arena = np.empty(capacity, dtype=np.uint8)
        arena[:used] = self.arena[:used]
        self.arena = arena

    def _prune(self, keep: int) -> None:
        """Keep the ``keep`` most frequent values and mark counts inexact.

        Among values with the count at the cut, the ones seen first are kept. Like breaking
        the ties by value, that makes the result a function of the input alone (the prune
        happens at the same new value whatever the block sizes), but it needs no string
        sort. That matters because a column with more distinct values than ``max_values``
        prunes once per ``max_values / 2`` new values, and pruned values that come back are
        new again, so a high-cardinality column prunes again and again: this is O(n) NumPy,
        a partition of the counts, where Arrow's ``select_k`` on (count, value) sorts
        strings.
        """
        self.pruned = True
        keep = max(0, min(keep, self.size))
        counts = self.entries[: self.size, _COUNT]
        kept = np.zeros(self.size, dtype=bool)
        if keep:
            cut = np.partition(counts, self.size - keep)[self.size - keep]  # keep-th largest
            np.greater(counts, cut, out=kept)
            ties = np.flatnonzero(counts == cut)[: keep - int(np.count_nonzero(kept))]
            kept[ties] = True
        _compact(np.flatnonzero(kept), self.entries, self.offsets, self.arena)
        self.size = keep
        _rehash(self.entries, self.size, self.slots)
