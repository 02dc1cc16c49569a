"""Column statistics computed in the same pass as sharding, mergeable across tasks and workers.

Each sharding task accumulates statistics over the rows it accepts; ``finalize`` merges the
tasks' partial statistics into the dataset's ``stats`` in ``metadata.json``. Merging is exact
and order-independent for counts, missing values, min and max; means and standard deviations
use Chan et al.'s pairwise update (numerically stable, no sum-of-squares cancellation).

Vocabularies of categorical columns are exact while a column has at most ``MAX_TRACKED``
distinct values per task (and they fit in ``_MAX_TRACKED_BYTES`` of UTF-8); beyond that the
rarest values are pruned and the column is marked ``approximate`` (its top values and their
counts are then lower bounds). The trainer uses the top-K vocabulary and the numeric
means/standard deviations to build its preprocessing.

Cost and memory
---------------
Statistics are updated for every column of every ~4 MiB block, so they are on the sharder's
hot path, and a task runs for as long as its input lasts, so their memory must not grow with
it. Both kinds therefore work on the Arrow buffers directly, in numba kernels that allocate
nothing per block:

* :class:`NumericStats` reads the values buffer and the validity bitmap of each block in one
  compiled function (two passes over the ~17k values, which stay in the L2 cache) -- no
  ``drop_null``, ``to_numpy`` or ``isfinite`` temporaries.
* :class:`CategoricalStats` counts values in its own open-addressing hash table: flat NumPy
  arrays of records (hash, count, first bytes) and of the values' bytes, sized by the number
  of *distinct* values (bounded by ``MAX_TRACKED``), not by the number of rows.

Counting with Arrow instead (``value_counts`` per block, merged with ``group_by``) costs
more CPU, and each merge allocates large short-lived Arrow buffers whose pages the
allocator keeps resident afterwards, so the process grows with its input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain.data.task import MAX_CLASSES
from shardtrain.kernels import arrow
from shardtrain.kernels.native import load_u64

#: Distinct values tracked per categorical column before pruning to the most frequent half.
#: Memory per high-cardinality column is ~56 bytes plus the value's bytes per tracked value
#: (~13 MB at 200k nine-character ids), allocated as the column's distinct values appear.
#: The trade-off: counts stay exact up to this many distinct values per task, at that memory
#: per column, while the manifest only keeps the ``MANIFEST_TOP`` most frequent anyway.
MAX_TRACKED = 200_000

#: Values of each categorical column kept in a task's manifest (the merge is exact for
#: columns with fewer distinct values per task; beyond, the top values are lower bounds).
MANIFEST_TOP = 5_000

#: Distinct label values counted exactly (:class:`LabelStats`): as many as a classifier may
#: have classes; a label with more is a regression target (:mod:`shardtrain.data.task`).
MAX_LABEL_VALUES = MAX_CLASSES

#: Bytes of distinct values tracked per categorical column before pruning, whatever their
#: number: ``MAX_TRACKED`` bounds memory only for short values, and a free-text column of
#: 2 kB strings would otherwise hold 400 MB. 32 MiB is ~170 bytes per value at
#: ``MAX_TRACKED`` values, far more than category names or ids take.
_MAX_TRACKED_BYTES = 32 << 20


def _chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The non-empty contiguous arrays of ``values`` (``Table.column`` gives a ChunkedArray)."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    return [c for c in chunks if len(c)]


def _readonly(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array``.

    numba compiles one specialisation per argument type, and writeability is part of an
    array's type: Arrow buffers can come out of ``np.frombuffer`` writeable or not, depending
    on who allocated them. Passing every input read-only keeps one compile (and one cache
    entry) per dtype.
    """
    view = array.view()
    view.flags.writeable = False
    return view


def _bitmap(buffer: pa.Buffer | None, null_count: int) -> np.ndarray:
    """An Arrow validity bitmap as uint8, or an empty array when every value is valid."""
    if not null_count or buffer is None:
        return _ALL_VALID
    return _readonly(np.frombuffer(buffer, dtype=np.uint8))


_ALL_VALID = _readonly(np.zeros(0, dtype=np.uint8))
_EIGHT_VALID = 0xFF  # a validity bitmap byte whose eight values are all valid
_NO_BYTES = _readonly(np.zeros(0, dtype=np.uint8))
_NO_WEIGHTS = _readonly(np.zeros(0, dtype=np.int64))


# --------------------------------------------------------------------------------------------
# Numeric columns
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _moments(values, validity, offset, n):
    """Statistics of the valid, finite ``values[offset:offset + n]``, in float64.

    ``validity`` is the Arrow validity bitmap (bit ``offset + i``, least significant bit
    first), or empty when every value is valid. Returns ``(nonfinite, count, min, max, mean,
    m2)``: the number of NaN/±inf values (skipped) and the count, extremes, mean and sum of
    squared deviations of the others.

    Two passes: the first sums, the second sums squared deviations from that mean. The
    one-pass ``sum(x*x) - sum(x)**2 / n`` loses every significant digit when the mean is
    large against the spread (1e9 + noise), and Welford's update divides per value. The
    second pass also sums the deviations themselves, which would be exactly 0 if the mean
    were exact: ``mean + dev/n`` and ``m2 - dev**2/n`` correct for its rounding error (the
    "corrected two-pass algorithm", Chan, Golub & LeVeque 1983). A block is ~17k values, so
    the second pass reads from the L2 cache.

    Speed: a loop that adds each value to one float64 accumulator runs at the latency of a
    floating-point add (4 cycles), not at the CPU's throughput. So both passes take eight
    values at a time -- whenever the eight share one all-valid byte of the bitmap, i.e.
    almost always -- add them as a tree (independent adds, in parallel) and fold only the
    tree's result into two accumulators. Whether all eight are finite is one test: a sum
    is finite only if every term is (a NaN or ±inf term makes it NaN or ±inf; a finite sum
    that overflows merely sends the group to the one-value-at-a-time path, which counts
    each value on its own). That path handles nulls, non-finite values and the ragged ends.
    """
    has_nulls = validity.size > 0
    end = offset + n
    nonfinite = 0
    count = 0
    s0 = 0.0
    s1 = 0.0
    lo0 = np.inf
    lo1 = np.inf
    hi0 = -np.inf
    hi1 = -np.inf
    i = offset
    while i < end:
        if i & 7 == 0 and i + 8 <= end and (not has_nulls or validity[i >> 3] == _EIGHT_VALID):
            x0 = np.float64(values[i])
            x1 = np.float64(values[i + 1])
            x2 = np.float64(values[i + 2])
            x3 = np.float64(values[i + 3])
            x4 = np.float64(values[i + 4])
            x5 = np.float64(values[i + 5])
            x6 = np.float64(values[i + 6])
            x7 = np.float64(values[i + 7])
            a = (x0 + x1) + (x2 + x3)
            b = (x4 + x5) + (x6 + x7)
            if (a + b) - (a + b) == 0.0:  # all eight finite
                s0 += a
                s1 += b
                lo0 = min(lo0, min(min(x0, x1), min(x2, x3)))
                lo1 = min(lo1, min(min(x4, x5), min(x6, x7)))
                hi0 = max(hi0, max(max(x0, x1), max(x2, x3)))
                hi1 = max(hi1, max(max(x4, x5), max(x6, x7)))
                count += 8
                i += 8
                continue
        stop = min((i | 7) + 1, end)  # one at a time, to the next group boundary
        while i < stop:
            if not has_nulls or (validity[i >> 3] >> (i & 7)) & 1:
                x = np.float64(values[i])
                if math.isfinite(x):
                    count += 1
                    s0 += x
                    lo0 = min(lo0, x)
                    hi0 = max(hi0, x)
                else:
                    nonfinite += 1
            i += 1
    lo = min(lo0, lo1)
    hi = max(hi0, hi1)
    if count == 0:
        return nonfinite, 0, lo, hi, 0.0, 0.0
    mean = (s0 + s1) / count
    dev = 0.0
    q0 = 0.0
    q1 = 0.0
    i = offset
    while i < end:
        if i & 7 == 0 and i + 8 <= end and (not has_nulls or validity[i >> 3] == _EIGHT_VALID):
            d0 = np.float64(values[i]) - mean
            d1 = np.float64(values[i + 1]) - mean
            d2 = np.float64(values[i + 2]) - mean
            d3 = np.float64(values[i + 3]) - mean
            d4 = np.float64(values[i + 4]) - mean
            d5 = np.float64(values[i + 5]) - mean
            d6 = np.float64(values[i + 6]) - mean
            d7 = np.float64(values[i + 7]) - mean
            g = ((d0 + d1) + (d2 + d3)) + ((d4 + d5) + (d6 + d7))
            if g - g == 0.0:  # all eight finite, as in the first pass
                dev += g
                q0 += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)
                q1 += (d4 * d4 + d5 * d5) + (d6 * d6 + d7 * d7)
                i += 8
                continue
        stop = min((i | 7) + 1, end)
        while i < stop:
            if not has_nulls or (validity[i >> 3] >> (i & 7)) & 1:
                x = np.float64(values[i])
                if math.isfinite(x):
                    d = x - mean
                    dev += d
                    q0 += d * d
            i += 1
    mean = min(max(mean + dev / count, lo), hi)
    m2 = max((q0 + q1) - dev * dev / count, 0.0)
    return nonfinite, count, lo, hi, mean, m2


@numba.njit(cache=True, nogil=True)
def _count_true(bits, validity, offset, n):
    """The number of valid true values of a bit-packed Arrow bool array (bits ``offset`` to
    ``offset + n``), a byte (8 values) at a time where it can: ``bits & validity`` and a
    bitwise popcount. (``pyarrow.compute.sum`` gives the same, with a dispatch cost per call
    that is large against one block's work.)"""
    has_nulls = validity.size > 0
    trues = 0
    i = offset
    end = offset + n
    while i < end:
        if i & 7 == 0 and i + 8 <= end:
            v = np.int64(bits[i >> 3])
            if has_nulls:
                v &= validity[i >> 3]
            v = v - ((v >> 1) & 0x55)
            v = (v & 0x33) + ((v >> 2) & 0x33)
            trues += (v + (v >> 4)) & 0x0F
            i += 8
        else:
            if (bits[i >> 3] >> (i & 7)) & 1 and (
                not has_nulls or (validity[i >> 3] >> (i & 7)) & 1
            ):
                trues += 1
            i += 1
    return trues


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

    def update_table(self, table: pa.Table, name: str) -> None:
        """Add the column ``name`` of one batch (every kind of statistics takes a batch so)."""
        self.update(table.column(name))

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        """Add one batch of values (nulls count as missing; NaN and ±inf count as ``nan``).

        Each contiguous chunk is summarised by :func:`_moments` straight from its Arrow
        buffers and folded in with :meth:`_fold`. Bools are bit-packed in Arrow; their
        statistics follow from the number of true values alone (mean ``t/n``, m2
        ``t(n-t)/n``, exactly), which :func:`_count_true` counts without unpacking them.
        """
        for chunk in _chunks(values):
            n = len(chunk)
            nulls = chunk.null_count
            self.missing += nulls
            if nulls == n:
                continue
            buffers = chunk.buffers()
            if pa.types.is_boolean(chunk.type):
                valid = n - nulls
                bits = _readonly(np.frombuffer(buffers[1], dtype=np.uint8))
                trues = int(_count_true(bits, _bitmap(buffers[0], nulls), chunk.offset, n))
                self._fold(
                    valid,
                    0.0 if trues < valid else 1.0,
                    1.0 if trues else 0.0,
                    trues / valid,
                    trues * (valid - trues) / valid,
                )
                continue
            dtype = arrow.NUMPY_TYPES.get(chunk.type)
            if dtype is None:
                chunk = pc.cast(chunk, pa.float64())
                dtype = np.float64
                buffers = chunk.buffers()
            data = np.frombuffer(buffers[1], dtype=dtype, count=chunk.offset + n)
            nonfinite, count, lo, hi, mean, m2 = _moments(
                _readonly(data), _bitmap(buffers[0], nulls), chunk.offset, n
            )
            self.nan += nonfinite  # NaN and ±inf: kept in the data, not in the statistics
            self._fold(count, lo, hi, mean, m2)

    def merge(self, other: NumericStats, missing: bool = True) -> None:
        """Fold ``other`` into this one (Chan et al.'s parallel variance)."""
        if missing:
            self.missing += other.missing
            self.nan += other.nan
        self._fold(other.count, other.min, other.max, other.mean, other.m2)

    def _fold(self, count: int, lo: float, hi: float, mean: float, m2: float) -> None:
        """Chan et al.: combine two (count, mean, m2) summaries without revisiting values.

        ``delta**2 * n_a * n_b / n`` is the spread *between* the two means; both parts are
        sums of squares of deviations, so nothing cancels however large the means are.
        """
        if count == 0:
            return
        n = self.count + count
        delta = mean - self.mean
        self.mean += delta * count / n
        self.m2 += m2 + delta * delta * self.count * count / n
        self.count = n
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)

    @property
    def std(self) -> float:
        """Population standard deviation (0 for fewer than two values)."""
        return math.sqrt(self.m2 / self.count) if self.count > 1 else 0.0

    def to_dict(self, top_k: int | None = None) -> dict[str, Any]:
        """The statistics as JSON values (``top_k`` applies to categorical columns only)."""
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


# --------------------------------------------------------------------------------------------
# Categorical columns
# --------------------------------------------------------------------------------------------

#: Multiplier of the table's hash (2**64 / golden ratio, odd: multiplying by it is a
#: bijection of 64-bit words). The hash need not be stable across releases, since nothing
#: persists it; slots are taken from its high bits, which depend on every input bit.
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
_FULL = 1  # a new value needs an entry: grow the records, or prune at MAX_TRACKED
_NO_ROOM = 2  # a new value's bytes do not fit the arena: grow it, or prune at the budget

#: Frequency order of the vocabulary: most frequent first, ties by value (UTF-8 byte order,
#: which is code point order: the order of Python's ``sorted`` on ``str``).
_ORDER = [("count", "descending"), ("value", "ascending")]


@numba.njit(cache=True, nogil=True)
def _count_values(
    data,
    value_offsets,
    validity,
    offset,
    start,
    stop,
    weights,
    slots,
    entries,
    offsets,
    arena,
    size,
    max_size,
):
    """Count the strings ``start <= i < stop`` of an Arrow string array in the hash table.

    String ``i`` is ``data[value_offsets[i]:value_offsets[i + 1]]``, null when bit ``i`` of
    ``validity`` (if not empty) is clear; ``offset`` is the array's offset, and
    ``weights[i - offset]`` the string's count (1 when ``weights`` is empty).

    The table (see :class:`_ValueCounts`): entry ``e`` is the value ``arena[offsets[e]:
    offsets[e + 1]]``, whose record ``entries[e]`` (32 bytes, half a cache line) holds its
    tag (64-bit hash with the length in the low byte), count and first 16 bytes. ``slots``
    (a power of two, at most half full) holds 0 for empty or ``e + 1`` in the low 32 bits
    and the tag's low 32 bits in the high ones; a lookup probes linearly from the slot given
    by the tag's top bits.

    Why this layout: for a column of 200k player ids the table does not fit in the L2
    cache, and each array a lookup touches costs a cache miss. Here a slot rejects other
    values by their tag bits without reading their records, and tag and first 16 bytes
    equal means equal for values of up to 16 bytes (the length is in the tag), so a short
    value costs two cache lines: its slot and its record. Longer values are then compared
    with the arena. Counts are exact whatever the hashes.

    Bytes are read eight at a time (one unaligned 8-byte load through the address of
    ``data``, see :mod:`shardtrain.kernels.native`), masked to the value's length. Values of up to
    16 bytes (at least 16 bytes before the buffer's end) take a path without loops or
    unpredictable branches; longer ones and the last few of the buffer take a loop that
    reads whole words where it can and single bytes at the end. Both hash the same words:
    the value's bytes zero-padded to at least two words, ``h = (h ^ word) * K`` from
    ``h = length``. Everything is inline in this one function: helpers taking the arrays
    would cost atomic reference-count updates per call (per value), more than the lookup.

    Returns ``(i, size, status)``: with ``_DONE``, every value was counted (``i == stop``);
    otherwise value ``i`` is new and needs an entry (``_FULL``) or arena space
    (``_NO_ROOM``) first, and the caller resumes from ``i`` once it has made room.
    """
    has_nulls = validity.size > 0
    has_weights = weights.size > 0
    n_bytes = np.uint64(data.size)
    src = data.ctypes.data
    mask = np.uint64(slots.size - 1)
    shift = np.uint64(64)
    while np.uint64(1) << (np.uint64(64) - shift) < np.uint64(slots.size):
        shift -= np.uint64(1)
    u0 = np.uint64(0)
    u1 = np.uint64(1)
    u8 = np.uint64(8)
    ones = ~u0
    low32 = np.uint64(0xFFFFFFFF)
    for i in range(start, stop):
        if has_nulls and not (validity[i >> 3] >> (i & 7)) & 1:
            continue
        a = np.uint64(value_offsets[i])
        b = np.uint64(value_offsets[i + 1])
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
                        w |= np.uint64(data[r]) << bits
                        bits += u8
                if k == 0:
                    w0 = w
                elif k == 1:
                    w1 = w
                h = (h ^ w) * _K
                p += u8
                k += 1
        h ^= h >> np.uint64(29)
        tag = (h & ~np.uint64(_TAG_LENGTH)) | min(length, np.uint64(_TAG_LENGTH))
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


class _ValueCounts:
    """Exact counts of distinct strings in a bounded hash table (see :func:`_count_values`).

    Memory is proportional to the distinct values tracked, never to the rows counted:
    ~56 bytes per value (a 32-byte record, an 8-byte offset, two 8-byte slots) plus its
    bytes, in arrays that grow by doubling up to ``MAX_TRACKED`` values and
    ``_MAX_TRACKED_BYTES`` of values. A new value beyond either limit first prunes the
    table to its most frequent half (see :meth:`_prune`), and :attr:`pruned` records that
    counts are no longer exact. Both limits are read from the module at each call (tests
    lower them).

    The values are kept in Arrow's string layout (``offsets`` into ``arena``, in entry
    order), so :meth:`table` hands them to Arrow's sort and selection kernels without a copy.
    """

    def __init__(self) -> None:
        self.size = 0
        self.pruned = False
        self.slots = np.zeros(2, dtype=np.uint64)
        self.entries = _records(0)
        self.offsets = np.zeros(1, dtype=np.int64)
        self.arena = np.zeros(0, dtype=np.uint8)

    def add(self, values: pa.Array, weights: np.ndarray = _NO_WEIGHTS) -> None:
        """Count every valid value of a string array (``weights[i]`` times, if given)."""
        if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
            values = pc.cast(values, pa.string())
        n = len(values)
        if n == values.null_count:
            return
        buffers = values.buffers()
        offset_type = np.int64 if pa.types.is_large_string(values.type) else np.int32
        value_offsets = _readonly(
            np.frombuffer(buffers[1], dtype=offset_type, count=values.offset + n + 1)
        )
        data = _readonly(
            np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else _NO_BYTES
        )
        validity = _bitmap(buffers[0], values.null_count)
        weights = _readonly(np.ascontiguousarray(weights, dtype=np.int64))
        if len(weights) not in (0, n):
            raise ValueError(f"{len(weights)} weights for {n} values")
        max_tracked = max(MAX_TRACKED, 1)
        i, stop = values.offset, values.offset + n
        while True:
            i, self.size, status = _count_values(
                data,
                value_offsets,
                validity,
                values.offset,
                i,
                stop,
                weights,
                self.slots,
                self.entries,
                self.offsets,
                self.arena,
                self.size,
                max_tracked,
            )
            if status == _DONE:
                return
            if status == _FULL:
                if self.size < max_tracked:
                    self._grow_entries(min(max(2 * self.size, 64), max_tracked))
                else:
                    self._prune(max_tracked // 2)
            else:
                need = int(self.offsets[self.size] + value_offsets[i + 1] - value_offsets[i])
                if need > _MAX_TRACKED_BYTES and self.size:
                    self._prune(self.size // 2)
                elif need > len(self.arena):
                    limit = max(_MAX_TRACKED_BYTES, need)
                    self._grow_arena(min(max(need, 2 * len(self.arena), 1024), limit))

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
        sort. That matters because a column with more distinct values than ``MAX_TRACKED``
        prunes once per ``MAX_TRACKED / 2`` new values, and pruned values that come back are
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

    def table(self) -> pa.Table:
        """``value`` (large_string, a view of the arena) and ``count`` of every entry."""
        values = pa.Array.from_buffers(
            pa.large_string(),
            self.size,
            [None, pa.py_buffer(self.offsets[: self.size + 1]), pa.py_buffer(self.arena)],
        )
        counts = self.entries[: self.size, _COUNT].astype(np.int64)
        return pa.table({"value": values, "count": arrow.from_numpy(counts)})


def _next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 1).bit_length()


@dataclass
class CategoricalStats:
    """Count, missing and value frequencies of a categorical (string) column.

    Frequencies live in a :class:`_ValueCounts` hash table updated by one compiled pass over
    each batch's Arrow buffers, never value by value in Python and without per-batch Arrow
    tables, so memory is bounded by ``MAX_TRACKED`` values whatever the input size. The
    table of a column with a handful of classes stays in the CPU caches; that of a
    high-cardinality column does not (parsing the next block evicts it), and a value then
    costs two memory accesses (slot, record), each a cache miss.

    The top values are ordered by count, ties broken by value, so ``to_dict`` is the same
    for the same input, whatever the order in which tasks are merged (unless pruned).
    """

    count: int = 0
    missing: int = 0
    approximate: bool = False
    _values: _ValueCounts = field(default_factory=_ValueCounts, repr=False, compare=False)

    def update_table(self, table: pa.Table, name: str) -> None:
        """Add the column ``name`` of one batch (every kind of statistics takes a batch so)."""
        self.update(table.column(name))

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        """Add one batch of values (nulls count as missing)."""
        for chunk in _chunks(values):
            self.missing += chunk.null_count
            self.count += len(chunk) - chunk.null_count
            self._values.add(chunk)
        self.approximate |= self._values.pruned

    def merge(self, other: CategoricalStats) -> None:
        """Fold ``other`` into this one (exact and order-independent unless pruning)."""
        self.count += other.count
        self.missing += other.missing
        if other._values.size:
            table = other._values.table()  # views of other's arrays
            values, counts = table.column("value").chunk(0), arrow.to_numpy(table.column("count"))
            if other is self:  # counting into the arrays the views read: copy them first
                values, counts = arrow.strings(values.to_pylist(), pa.large_string()), counts.copy()
            self._values.add(values, counts)
        self.approximate |= other.approximate or self._values.pruned

    @property
    def distinct(self) -> int:
        """Distinct values tracked (all of them, unless :attr:`approximate`)."""
        return self._values.size

    def top(self, k: int) -> list[tuple[str, int]]:
        """The ``k`` most frequent values with their counts (ties broken by value)."""
        if k <= 0 or self._values.size == 0:
            return []
        table = self._values.table()
        if k < table.num_rows:  # preselect in C++, then sort the few
            table = table.take(pc.select_k_unstable(table, k=k, sort_keys=_ORDER))
        table = table.take(pc.sort_indices(table, sort_keys=_ORDER))
        return list(
            zip(table.column("value").to_pylist(), table.column("count").to_pylist(), strict=True)
        )

    @property
    def counts(self) -> dict[str, int]:
        """Every tracked value with its count."""
        table = self._values.table()
        return dict(
            zip(table.column("value").to_pylist(), table.column("count").to_pylist(), strict=True)
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
            stats._values.add(
                arrow.strings(t["value"] for t in d["top"]),
                np.array([t["count"] for t in d["top"]], dtype=np.int64),
            )
            stats.approximate |= stats._values.pruned
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
            extent.update(np.asarray(arrow.to_numpy(values), dtype=np.int64))
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

    def to_dict(self, top_k: int | None = None) -> dict[str, Any]:
        """The statistics as JSON values (``top_k`` applies to categorical columns only)."""
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
    """The label's distribution: the exact count of every value (as strings: '0'/'1', 'true',
    class names) while there are at most :data:`MAX_LABEL_VALUES` distinct ones, and for a
    numeric label its count, min, max, mean and standard deviation (what a regression
    standardises its target with).

    A regression label (minutes played, spend) has as many distinct values as rows: past
    :data:`MAX_LABEL_VALUES` the counts are dropped and ``many_values`` is set, so a task's
    memory does not grow with its input. No classifier has that many classes
    (:mod:`shardtrain.data.task`).
    """

    counts: dict[str, int] = field(default_factory=dict)
    missing: int = 0
    many_values: bool = False
    numeric: NumericStats | None = None

    def update(self, values: pa.Array | pa.ChunkedArray) -> None:
        self.missing += values.null_count
        present = values.drop_null()
        if len(present) == 0:
            return
        if pa.types.is_integer(present.type) or pa.types.is_floating(present.type):
            if self.numeric is None:
                self.numeric = NumericStats()
            self.numeric.update(present)
        if self.many_values:
            return
        if pa.types.is_boolean(present.type):
            present = pc.cast(present, pa.int64())  # store bools as 0/1, as in the Examples
        if pa.types.is_signed_integer(present.type):
            # Class ids: counted with bincount over their range (cheaper than value_counts).
            ids = arrow.to_numpy(present).astype(np.int64, copy=False)
            low, high = int(ids.min()), int(ids.max())
            if high - low < 1 << 16:
                counts = np.bincount(ids - low, minlength=1)
                for k in np.flatnonzero(counts).tolist():
                    key = str(low + k)
                    self.counts[key] = self.counts.get(key, 0) + int(counts[k])
                self._bound()
                return
        vc = pc.value_counts(present)
        if len(vc) > MAX_LABEL_VALUES:
            self._bound(len(vc))
            return
        for value, n in zip(
            vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True
        ):
            key = str(value)
            self.counts[key] = self.counts.get(key, 0) + n
        self._bound()

    def _bound(self, distinct: int = 0) -> None:
        """Drop the counts once there are more than :data:`MAX_LABEL_VALUES` values."""
        if max(distinct, len(self.counts)) > MAX_LABEL_VALUES:
            self.counts = {}
            self.many_values = True

    def merge(self, other: LabelStats) -> None:
        self.missing += other.missing
        if other.numeric is not None:
            if self.numeric is None:
                self.numeric = NumericStats()
            self.numeric.merge(other.numeric)
        self.many_values = self.many_values or other.many_values
        if self.many_values:
            self.counts = {}
            return
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        self._bound()

    def to_dict(self) -> dict[str, Any]:
        """``missing``, ``counts`` (empty with ``many_values``), and for a numeric label
        ``numeric`` (:meth:`NumericStats.to_dict`)."""
        out: dict[str, Any] = {"missing": self.missing, "counts": dict(sorted(self.counts.items()))}
        if self.many_values:
            out["many_values"] = True
        if self.numeric is not None:
            out["numeric"] = self.numeric.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabelStats:
        numeric = d.get("numeric")
        return cls(
            counts=dict(d["counts"]),
            missing=d["missing"],
            many_values=bool(d.get("many_values", False)),
            numeric=NumericStats.from_dict(numeric) if numeric else None,
        )
