"""Columnar block Examples encoded in compiled code (:mod:`shardtrain.data.column_blocks`):
a batch's columns serialized (:func:`varints`, :func:`bytes_items`), then its blocks laid out
(:func:`assemble_blocks`).

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

from shardtrain.kernels.cache import install_locator

install_locator()  # before any kernel is defined: numba picks a kernel's cache folder then

__all__ = ["KIND_BYTES", "KIND_FLOAT", "KIND_INT", "assemble_blocks", "bytes_items", "varints"]

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
            out[at : at + payload] = data[a : a + payload]
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
        starts: int64 ``[columns, rows + 1]``: row ``i`` of column ``c`` is
            ``data[starts[c, i]:starts[c, i + 1]]``.
        ranges: ``(start, end)`` row ranges, one block each.
    """
    firsts = np.array([r[0] for r in ranges], dtype=np.int64)
    ends = np.array([r[1] for r in ranges], dtype=np.int64)
    offsets = np.zeros(len(ranges) + 1, dtype=np.int64)
    args = (kinds, keys, key_starts, data, starts, firsts, ends)
    _assemble(*args, np.empty(0, dtype=np.uint8), offsets)
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    _assemble(*args, out, offsets)
    return out, offsets


@numba.njit(cache=True, nogil=True)
def _varints(values, starts, out):
    """Pass 1 (``out`` empty): each value's varint size into ``starts``; pass 2: the bytes."""
    at = 0
    for i in range(values.shape[0]):
        v = values[i]
        if out.shape[0] == 0:
            size = 1
            while v >= 128:
                v >>= 7
                size += 1
            starts[i + 1] = starts[i] + size
            continue
        while v >= 128:
            out[at] = (v & 0x7F) | 0x80
            v >>= 7
            at += 1
        out[at] = v
        at += 1


def varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints of int64 ``values`` (two's complement: negatives take 10 bytes), back
    to back, and where each begins (one more entry than values)."""
    u = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    starts = np.zeros(len(u) + 1, dtype=np.int64)
    _varints(u, starts, np.empty(0, dtype=np.uint8))
    out = np.empty(int(starts[-1]), dtype=np.uint8)
    _varints(u, starts, out)
    return out, starts


@numba.njit(cache=True, nogil=True)
def _items(offsets, data, starts, out):
    """Pass 1 (``out`` empty): each item's size into ``starts``; pass 2: the bytes."""
    at = 0
    for i in range(offsets.shape[0] - 1):
        a = offsets[i]
        n = offsets[i + 1] - a
        if out.shape[0] == 0:
            starts[i + 1] = starts[i] + 1 + _vlen(n) + n
            continue
        out[at] = 0x0A
        at = _put_varint(out, at + 1, n)
        out[at : at + n] = data[a : a + n]
        at += n


def bytes_items(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value ``data[offsets[i]:offsets[i + 1]]`` as a ``BytesList`` item (field 1: tag,
    length varint, bytes), back to back, and where each begins."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    starts = np.zeros(len(offsets), dtype=np.int64)
    _items(offsets, data, starts, np.empty(0, dtype=np.uint8))
    out = np.empty(int(starts[-1]), dtype=np.uint8)
    _items(offsets, data, starts, out)
    return out, starts
