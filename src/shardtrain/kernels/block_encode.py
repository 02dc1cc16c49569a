"""Columnar block Examples encoded in compiled code (:mod:`shardtrain.data.column_blocks`):
a batch's columns serialized in the order its rows are written, read in place from their
Arrow buffers (:func:`gather_columns`), then its blocks laid out (:func:`assemble_blocks`).

A block's ``tf.train.Example`` is, per column, a map entry ``(key, Feature)`` whose Feature
holds one slice of the column's values, serialized once for the whole batch (packed float32,
packed varints, or ``BytesList`` items). Assembling those entries in Python cost a few
small ``bytes`` objects per block and column (~3.7 CPU-s per GB of CSV, more than the
encoding itself); here every block of a batch is laid out in two passes (sizes, then bytes)
over plain arrays.

The protobuf wire format used (fields are length-delimited, tag ``(field << 3) | 2``)::

    Example      = 0x0A len Features
    Features     = (0x0A len MapEntry)*          one per column
    MapEntry     = key_field 0x12 len Feature     key_field = 0x0A len name
    Feature      = 0x0A len items                 bytes_list: the items themselves
                 | 0x12 len (0x0A len floats)     float_list: one packed field
                 | 0x1A len (0x0A len varints)    int64_list: one packed field
"""

from __future__ import annotations

import numba
import numpy as np

from shardtrain.kernels import native
from shardtrain.kernels.native import kernel_input

__all__ = [
    "FLOAT_MISSING_BITS",
    "INT_MISSING_BITS",
    "KIND_BYTES",
    "KIND_FLOAT",
    "KIND_INT",
    "assemble_blocks",
    "gather_columns",
]

#: A column's list kind (the Feature field it is in).
KIND_BYTES, KIND_FLOAT, KIND_INT = 0, 1, 2


@numba.njit(cache=True, nogil=True, inline="always")
def _vlen(n):
    """Bytes of the varint of ``n >= 0``."""
    size = 1
    while n >= 128:
        n >>= 7
        size += 1
    return size


@numba.njit(cache=True, nogil=True, inline="always")
def _put_varint(out, at, n):
    while n >= 128:
        out[at] = (n & 0x7F) | 0x80
        n >>= 7
        at += 1
    out[at] = n
    return at + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _feature_size(kind, payload):
    if kind == 0:
        return 1 + _vlen(payload) + payload
    inner = 1 + _vlen(payload) + payload
    return 1 + _vlen(inner) + inner


@numba.njit(cache=True, nogil=True)
def _assemble(kinds, keys, key_starts, data, starts, firsts, ends, out, offsets):
    """Pass 1 (``out`` empty): each block's size into ``offsets``; pass 2: the bytes."""
    ncols = kinds.shape[0]
    dst = out.ctypes.data
    src = data.ctypes.data
    at = 0
    for b in range(firsts.shape[0]):
        s = firsts[b]
        e = ends[b]
        total = 0
        for c in range(ncols):
            payload = starts[c, e] - starts[c, s]
            feature = _feature_size(kinds[c], payload)
            value = 1 + _vlen(feature) + feature
            entry = (key_starts[c + 1] - key_starts[c]) + value
            total += 1 + _vlen(entry) + entry
        size = 1 + _vlen(total) + total
        if out.shape[0] == 0:
            offsets[b + 1] = offsets[b] + size
            continue
        out[at] = 0x0A
        at = _put_varint(out, at + 1, total)
        for c in range(ncols):
            kind = kinds[c]
            a = starts[c, s]
            payload = starts[c, e] - a
            feature = _feature_size(kind, payload)
            value = 1 + _vlen(feature) + feature
            k0 = key_starts[c]
            k1 = key_starts[c + 1]
            entry = (k1 - k0) + value
            out[at] = 0x0A
            at = _put_varint(out, at + 1, entry)
            for k in range(k0, k1):
                out[at] = keys[k]
                at += 1
            out[at] = 0x12
            at = _put_varint(out, at + 1, feature)
            if kind == 0:
                out[at] = 0x0A
                at = _put_varint(out, at + 1, payload)
            else:
                out[at] = 0x12 if kind == 1 else 0x1A
                at = _put_varint(out, at + 1, 1 + _vlen(payload) + payload)
                out[at] = 0x0A
                at = _put_varint(out, at + 1, payload)
            native.copy_exact(dst, at, src, a, payload)
            at += payload


def assemble_blocks(
    kinds: np.ndarray,
    keys: np.ndarray,
    key_starts: np.ndarray,
    data: np.ndarray,
    starts: np.ndarray,
    ranges: list[tuple[int, int]],
) -> tuple[np.ndarray, np.ndarray]:
    """The serialized block Examples of the row ``ranges``, back to back, and their offsets.

    Args:
        kinds: int64 per column, :data:`KIND_BYTES`, :data:`KIND_FLOAT` or :data:`KIND_INT`.
        keys: every column's key field (``0x0A len name``) back to back, as uint8;
            ``key_starts`` (int64, one more than the columns) where each begins.
        data: every column's serialized values back to back (uint8).
        starts: int64 ``[columns, points]``: the rows of column ``c`` from point ``a`` to
            point ``b`` are ``data[starts[c, a]:starts[c, b]]`` (points: every row and the
            end, or only those the ranges need, see :func:`gather_columns`).
        ranges: ``(a, b)`` ranges of points, one block each.
    """
    firsts = np.array([r[0] for r in ranges], dtype=np.int64)
    ends = np.array([r[1] for r in ranges], dtype=np.int64)
    offsets = np.zeros(len(ranges) + 1, dtype=np.int64)
    args = (kinds, keys, key_starts, data, starts, firsts, ends)
    _assemble(*args, np.empty(0, dtype=np.uint8), offsets)
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    _assemble(*args, out, offsets)
    return out, offsets


# --------------------------------------------------------------------------------------------
# Columns serialized in a given row order, straight from their Arrow buffers
# --------------------------------------------------------------------------------------------

#: The bits of the float32 a missing float is stored as (NumPy's ``float32(nan)``).
FLOAT_MISSING_BITS = np.uint64(0x7FC00000)

#: A missing int as the uint64 its varint encodes (two's complement of ``-2**63``).
INT_MISSING_BITS = np.uint64(1 << 63)

#: Columns of :func:`gather_columns`' ``columns`` table: the addresses of the values (float32
#: or int64; a string column's offsets) and of the validity bitmap (0: no nulls), the
#: array's offset in them, and for strings the address and size of the data and the width
#: of the offsets (4 or 8 bytes).
VALUES, VALIDITY, OFFSET, DATA, DATA_SIZE, OFFSET_WIDTH = range(6)

#: Bytes :func:`gather_columns` may write past the end of the last column.
SLACK = 8


@numba.njit(cache=True, nogil=True, inline="always")
def _present(validity, j):
    """Whether bit ``j`` of the bitmap at address ``validity`` is set (0: every bit is)."""
    return validity == 0 or (native.load_u8(validity, j >> 3) >> (j & 7)) & 1


@numba.njit(cache=True, nogil=True, inline="always")
def _store_varint(dst, pos, value):
    """Write ``value`` (uint64) as a varint at address ``dst + pos``; return where it ends."""
    while value >= np.uint64(128):
        native.store_u8(dst, pos, (value & np.uint64(0x7F)) | np.uint64(0x80))
        value >>= np.uint64(7)
        pos += 1
    native.store_u8(dst, pos, value)
    return pos + 1


@numba.njit(cache=True, nogil=True)
def _gather_columns(kinds, columns, order, cuts, out, starts):
    """Serialize every column in ``order`` into ``out``, noting where row ``cuts[k]`` of
    column ``c`` starts in ``starts[c, k]``; returns the bytes written."""
    dst = out.ctypes.data
    n = order.shape[0]
    ncuts = cuts.shape[0]
    at = 0
    for c in range(kinds.shape[0]):
        values = columns[c, VALUES]
        validity = columns[c, VALIDITY]
        offset = columns[c, OFFSET]
        kind = kinds[c]
        k = 0
        cut = cuts[0] if ncuts else -1
        if kind == KIND_FLOAT:
            at = (at + 3) & ~3  # keeps the packed floats aligned
            for k in range(ncuts):
                starts[c, k] = at + 4 * cuts[k]
            for i in range(n):
                j = offset + order[i]
                bits = FLOAT_MISSING_BITS
                if _present(validity, j):
                    bits = native.load_u32(values, 4 * j)
                native.store_u32(dst, at, bits)
                at += 4
            continue
        data = columns[c, DATA]
        size = columns[c, DATA_SIZE]
        wide = columns[c, OFFSET_WIDTH] == 8
        for i in range(n):
            if i == cut:
                starts[c, k] = at
                k += 1
                cut = cuts[k] if k < ncuts else -1
            j = offset + order[i]
            if kind == KIND_INT:
                value = INT_MISSING_BITS
                if _present(validity, j):
                    value = native.load_u64(values, 8 * j)
                at = _store_varint(dst, at, value)
                continue
            if wide:
                a = native.load_i64(values, j)
                length = native.load_i64(values, j + 1) - a
            else:
                a = np.int64(native.load_u32(values, 4 * j))
                length = np.int64(native.load_u32(values, 4 * j + 4)) - a
            if not _present(validity, j):
                length = 0
            native.store_u8(dst, at, 0x0A)
            at = _store_varint(dst, at + 1, np.uint64(length))
            if a + length + 8 <= size:
                native.copy_over(dst, at, data, a, length)
            else:
                native.copy_exact(dst, at, data, a, length)
            at += length
        if cut == n:
            starts[c, k] = at
    return at


def gather_columns(
    kinds: np.ndarray,
    columns: np.ndarray,
    order: np.ndarray,
    capacity: int,
    cuts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every column's values in ``order``, serialized for :func:`assemble_blocks`: ``(data,
    starts)``, rows ``cuts[a]`` to ``cuts[b]`` (of ``order``) of column ``c`` being
    ``data[starts[c, a]:starts[c, b]]``.

    A permuted copy of the table, and a copy of each column with its nulls filled in, cost
    more than the serialization itself; here each value is read from the column's Arrow
    buffers in place and written once. A null is the column's missing value: NaN, ``-2**63``,
    or an empty ``BytesList`` item. Where each row starts is noted only at the ``cuts``
    (where blocks begin and end), not for every value.

    Args:
        kinds: int64 per column, :data:`KIND_BYTES`, :data:`KIND_FLOAT` or :data:`KIND_INT`
            (float32 values; int64 values; int32 or int64 offsets into UTF-8 or binary data).
        columns: int64 ``[columns, 6]``, indexed by :data:`VALUES` ... :data:`OFFSET_WIDTH`:
            addresses into arrays the caller keeps alive, valid for every row in ``order``.
        order: int64 row positions (from each column's offset).
        capacity: at least the bytes the columns take (floats 4 per row plus 3 to align
            each column, ints up to 10, strings up to 6 plus their bytes).
        cuts: increasing int64 positions in ``[0, len(order)]``; default every one.
    """
    n = len(order)
    if cuts is None:
        cuts = np.arange(n + 1, dtype=np.int64)
    elif len(cuts) and (cuts[0] < 0 or cuts[-1] > n or bool(np.any(cuts[1:] <= cuts[:-1]))):
        raise ValueError(f"cuts must increase within [0, {n}]")
    data = np.empty(capacity + SLACK, dtype=np.uint8)
    starts = np.empty((len(kinds), len(cuts)), dtype=np.int64)
    _gather_columns(kinds, columns, order, kernel_input(cuts, np.int64), data, starts)
    return data, starts
