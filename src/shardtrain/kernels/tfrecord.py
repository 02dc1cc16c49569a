"""TFRecord framing in compiled code, and a small pure-Python writer and reader.

A TFRecord file is a sequence of records, each::

    uint64 length           little-endian
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

where ``masked_crc32c(x) = rotate_right(crc32c(x), 15) + 0xA282EAD8 (mod 2**32)``
(masking keeps a CRC stored inside CRC'd data from being degenerate). A GZIP-compressed
TFRecord file is this byte stream gzipped as a whole, so framed buffers produced here can be
fed straight to a gzip compressor.

:func:`frame_records` frames records already encoded; the Example encoder
(:mod:`shardtrain.kernels.example_encode`) frames in place with :func:`frame_in_place` as it
writes each Example. The CRC is :mod:`shardtrain.kernels.crc32c`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import IO

import numba
import numpy as np

from shardtrain.kernels.crc32c import crc32c, crc32c_at, crc32c_tables, mask_crc, masked_crc32c
from shardtrain.kernels.native import (
    as_bytes_array,
    check_indices,
    check_offsets,
    copy_exact,
    kernel_input,
    store_u32,
    store_u64,
)

__all__ = ["frame_records", "read_tfrecords", "write_tfrecords"]

_LENGTH_SIZE = 8  # uint64 length
_CRC_SIZE = 4  # uint32 masked CRC
HEADER_SIZE = _LENGTH_SIZE + _CRC_SIZE  # the length and its CRC, before the data
FRAME_OVERHEAD = HEADER_SIZE + _CRC_SIZE  # the header, and the data's CRC after the data
_READ_CHUNK = 1 << 24  # bound single reads so a corrupt length cannot trigger a huge alloc


# --------------------------------------------------------------------------------------------
# Framing in compiled code
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def frame_in_place(tables, dst, p, length):
    """Fill in the TFRecord header at ``dst + p`` and the data CRC after the record, whose
    ``length`` bytes are already at ``dst + p + HEADER_SIZE``. ``tables`` and ``dst``
    are addresses (see :mod:`shardtrain.kernels.native`) of :func:`crc32c_tables` and of the
    output."""
    store_u64(dst, p, np.uint64(length))
    store_u32(dst, p + _LENGTH_SIZE, mask_crc(crc32c_at(tables, 0, dst, p, p + _LENGTH_SIZE)))
    body = p + HEADER_SIZE
    store_u32(dst, body + length, mask_crc(crc32c_at(tables, 0, dst, body, body + length)))


@numba.njit(cache=True, nogil=True)
def _frame_kernel(tables, data, offsets, order, out, out_offsets):
    src = data.ctypes.data
    dst = out.ctypes.data
    crc_tables = tables.ctypes.data
    for k in range(order.shape[0]):
        record = order[k]
        start = offsets[record]
        length = offsets[record + 1] - start
        p = out_offsets[k]
        # The copy first, then the header and CRCs (the CRC reads the copy: it was just
        # written, so it is in L1 cache).
        copy_exact(dst, p + HEADER_SIZE, src, start, length)
        frame_in_place(crc_tables, dst, p, length)


def frame_records(
    data: np.ndarray, offsets: np.ndarray, order: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Frame records as TFRecords into one contiguous buffer, in compiled code.

    Each record becomes ``uint64 length | uint32 masked CRC of the length | data |
    uint32 masked CRC of the data`` (little-endian), byte-identical to
    ``tf.io.TFRecordWriter`` without compression.

    Args:
        data: uint8 buffer of records back to back (e.g. from
            :func:`~shardtrain.kernels.example_encode.encode_examples`).
        offsets: int64 offsets, record ``i`` being ``data[offsets[i]:offsets[i + 1]]``.
        order: indices of the records to frame, in output order (may repeat or omit
            records); default all, in order. To write rows to shards, group them with
            ``order = np.argsort(shard_of_row, kind="stable")``; each shard's frames are then
            one contiguous slice of the output.

    Returns:
        ``(framed, framed_offsets)``: the uint8 frames back to back, and int64 offsets
        (``len(order) + 1``) so that the frame of ``order[k]`` is
        ``framed[framed_offsets[k]:framed_offsets[k + 1]]``, and frames ``a..b-1`` are
        ``framed[framed_offsets[a]:framed_offsets[b]]`` — ready for one ``write`` call.

    Raises:
        ValueError: malformed offsets or indices out of range.
    """
    buf = as_bytes_array(data)
    offsets = kernel_input(offsets, np.int64)
    check_offsets(offsets, len(buf), "frame_records")
    num_records = len(offsets) - 1
    if order is None:
        order = kernel_input(np.arange(num_records, dtype=np.int64), np.int64)
    else:
        order = check_indices(order, num_records, "order")
    lengths = offsets[order + 1] - offsets[order]
    framed_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths + FRAME_OVERHEAD, out=framed_offsets[1:])
    framed = np.empty(int(framed_offsets[-1]), dtype=np.uint8)
    _frame_kernel(crc32c_tables(), buf, offsets, order, framed, framed_offsets)
    return framed, framed_offsets


# --------------------------------------------------------------------------------------------
# Small pure-Python writer and reader
# --------------------------------------------------------------------------------------------


def write_tfrecords(fileobj: IO[bytes], records: Iterable[bytes]) -> None:
    """Write ``records`` to a binary file object as uncompressed TFRecords.

    A convenience for small amounts of data and tests; bulk writers should use
    :func:`frame_records` and write whole buffers.
    """
    for record in records:
        header = struct.pack("<Q", len(record))
        fileobj.write(header)
        fileobj.write(struct.pack("<I", masked_crc32c(crc32c(header))))
        fileobj.write(record)
        fileobj.write(struct.pack("<I", masked_crc32c(crc32c(record))))


def _read_exact(fileobj: IO[bytes], size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at end of file (file objects may return short reads)."""
    parts = []
    remaining = size
    while remaining:
        chunk = fileobj.read(min(remaining, _READ_CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def read_tfrecords(fileobj: IO[bytes], verify: bool = True) -> Iterator[bytes]:
    """Yield the records of an uncompressed TFRecord stream (no TensorFlow needed).

    For GZIP TFRecord files, pass ``gzip.open(path, "rb")``.

    Args:
        fileobj: binary file object positioned at the start of a record.
        verify: check both CRCs of every record (the length CRC is what stops a corrupt
            length from being trusted).

    Yields:
        Each record's data.

    Raises:
        ValueError: a CRC mismatch or a truncated record; the message gives the byte offset
            (from where reading started) of the bad record.
    """
    offset = 0
    while True:
        header = _read_exact(fileobj, HEADER_SIZE)
        if not header:
            return
        if len(header) < HEADER_SIZE:
            raise ValueError(
                f"truncated TFRecord header at byte offset {offset}: "
                f"{len(header)} of {HEADER_SIZE} bytes"
            )
        (length,) = struct.unpack_from("<Q", header)
        (length_crc,) = struct.unpack_from("<I", header, _LENGTH_SIZE)
        if verify and masked_crc32c(crc32c(header[:_LENGTH_SIZE])) != length_crc:
            raise ValueError(f"corrupt TFRecord at byte offset {offset}: length CRC mismatch")
        body = _read_exact(fileobj, length + _CRC_SIZE)
        if len(body) < length + _CRC_SIZE:
            raise ValueError(
                f"truncated TFRecord at byte offset {offset}: record of {length} bytes, "
                f"only {max(len(body) - _CRC_SIZE, 0)} present"
            )
        record = body[:length]
        (data_crc,) = struct.unpack_from("<I", body, length)
        if verify and masked_crc32c(crc32c(record)) != data_crc:
            raise ValueError(f"corrupt TFRecord at byte offset {offset}: data CRC mismatch")
        yield record
        offset += FRAME_OVERHEAD + length
