"""``tf.train.Example`` encoding and TFRecord framing in compiled code, without TensorFlow.

The sharder's hot loop turns column batches (NumPy arrays, usually zero-copy views of Arrow
arrays) into TFRecord files of ``tf.train.Example`` protos. Doing that with the protobuf API
costs microseconds per feature in Python; here it is done column-wise by numba kernels that
write the protobuf wire format directly, at C speed, with the GIL released (``nogil``) so
threads can encode in parallel. Nothing here imports TensorFlow or protobuf, and importing the
module has no side effects: kernels compile on first use and are cached on disk
(``cache=True``), the CRC table is built on first use.

Protobuf wire format, as far as ``tf.train.Example`` needs it
------------------------------------------------------------
A message is a sequence of *fields*. Each field starts with a *tag*, the varint
``(field_number << 3) | wire_type``; every field used here has wire type 2 (*length-delimited*:
a varint byte count, then that many bytes), so tags are ``0x0A`` (field 1), ``0x12`` (field 2)
and ``0x1A`` (field 3). A *varint* is base 128, least significant group first, with the high
bit of each byte set on all bytes but the last: ``300 -> AC 02``. ``int64`` values are written
as their 64-bit two's complement, so every negative number takes 10 bytes. The messages are
(``tensorflow/core/example/{example,feature}.proto``)::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }     # a map is a repeated entry message:
    MapEntry  { string key = 1; Feature value = 2; }   #   one field 1 per map entry
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                             Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }   # packed: one length-delimited
    Int64List { repeated int64 value = 1 [packed = true]; }   #   field holding all values

So the Example ``{"age": 42.0}`` (float) serialises to::

    0A 11                          Example.features, 17 bytes
       0A 0F                       Features.feature: one map entry, 15 bytes
          0A 03 61 67 65           MapEntry.key = "age"
          12 08                    MapEntry.value: Feature, 8 bytes
             12 06                 Feature.float_list, 6 bytes
                0A 04 00 00 28 42  FloatList.value, packed: 4 bytes, float32 42.0 little-endian

Every feature written here holds exactly one value. A missing value is expressed by omitting
the feature (``tf.io.parse_example`` then substitutes the ``FixedLenFeature`` default); a row
with no feature at all is the Example ``0A 00`` (an empty ``Features``). Map entries are written
in the order of the columns, so the output is deterministic; parsers accept any order.

TFRecord framing
----------------
A TFRecord file is a sequence of records, each::

    uint64 length           little-endian
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

where ``masked_crc32c(x) = rotate_right(crc32c(x), 15) + 0xA282EAD8 (mod 2**32)``
(masking keeps a CRC stored inside CRC'd data from being degenerate). A GZIP-compressed
TFRecord file is this byte stream gzipped as a whole, so framed buffers produced here can be
fed straight to a gzip compressor.
"""

from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Literal, NamedTuple, TypeAlias

import numba
import numpy as np
from numba.extending import overload

from shardtrain.kernels.native import (
    as_bytes_array,
    has_hardware_crc32c,
    kernel_input,
    load_i64,
    load_u8,
    load_u32,
    load_u64,
    sse42_crc32_u8,
    sse42_crc32_u64,
    store_u8,
    store_u32,
    store_u64,
)

__all__ = [
    "ColumnData",
    "FeatureColumn",
    "crc32c",
    "encode_example_groups",
    "encode_examples",
    "frame_records",
    "hash_slices",
    "hash_strings",
    "masked_crc32c",
    "read_tfrecords",
    "write_tfrecords",
    "xxh64",
]

FeatureKind: TypeAlias = Literal["float", "int", "bytes"]

#: Per-column input of :func:`encode_examples`: ``(values, valid)`` for ``"float"`` and
#: ``"int"`` columns, ``(data, offsets, valid)`` for ``"bytes"`` columns.
ColumnData: TypeAlias = (
    tuple[np.ndarray, np.ndarray | None] | tuple[np.ndarray, np.ndarray, np.ndarray | None]
)

_FLOAT, _INT, _BYTES = 0, 1, 2  # kind codes inside the kernels
_KIND_CODES = {"float": _FLOAT, "int": _INT, "bytes": _BYTES}

_FRAME_OVERHEAD = 16  # 8-byte length + 4-byte length CRC + 4-byte data CRC
_SLACK = 8  # bytes after a buffer's contents that eight-byte moves may read or write
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_CRC32C_POLY = 0x82F63B78  # Castagnoli polynomial 0x1EDC6F41, bit-reversed
_READ_CHUNK = 1 << 24  # bound single reads so a corrupt length cannot trigger a huge alloc

# xxHash64 primes (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md).
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)


# --------------------------------------------------------------------------------------------
# Argument checks (normalisation: shardtrain.kernels.native.kernel_input)
# --------------------------------------------------------------------------------------------


def _check_offsets(offsets: np.ndarray, data_size: int, what: str) -> None:
    """Reject offsets a kernel would turn into out-of-bounds memory access.

    Kernels run without bounds checks, so this O(n) vectorised check is the safety net.
    """
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError(f"{what}: offsets must be a non-empty 1-D array")
    if offsets[0] < 0 or offsets[-1] > data_size:
        raise ValueError(
            f"{what}: offsets span [{offsets[0]}, {offsets[-1]}] outside the data "
            f"(size {data_size})"
        )
    if len(offsets) > 1 and bool(np.any(offsets[1:] < offsets[:-1])):
        raise ValueError(f"{what}: offsets must be non-decreasing")


def _check_uint(value: int, bits: int, what: str) -> int:
    value = operator.index(value)
    if not 0 <= value < 1 << bits:
        raise ValueError(f"{what} must be in [0, 2**{bits}), got {value}")
    return value


# --------------------------------------------------------------------------------------------
# CRC-32C
# --------------------------------------------------------------------------------------------


#: Bytes per stream in the three-stream hardware CRC (see :func:`_crc32c_hw`).
_CRC_STREAM = 128


def _shift_tables(byte_table: np.ndarray, zeros: int) -> np.ndarray:
    """``t[b][v]``: the CRC register ``v << 8b`` after ``zeros`` zero bytes.

    The register's update is linear over GF(2), so the register ``s`` after ``zeros`` zero
    bytes is ``t[0][s & 0xFF] ^ t[1][(s >> 8) & 0xFF] ^ t[2][(s >> 16) & 0xFF] ^
    t[3][s >> 24]``: four lookups instead of ``zeros`` steps.
    """
    t = np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32))[:, None]
    for _ in range(zeros):
        t = byte_table[t & 0xFF] ^ (t >> 8)
    return t.astype(np.uint32)


@functools.cache
def _crc32c_tables() -> np.ndarray:
    """The CRC-32C lookup tables, 12 rows of 256 ``uint32``.

    Rows 0-7, slicing-by-8: ``tables[k][b]`` is the CRC of byte ``b`` followed by ``k``
    zeros. With them a kernel folds 8 input bytes per step with 8 independent table lookups
    instead of 8 dependent ones, which is what makes a table-driven CRC run at several bytes
    per cycle (CPUs without SSE4.2).

    Rows 8-11 and 12-15, for the hardware CRC: :func:`_shift_tables` for ``_CRC_STREAM`` and
    ``2 * _CRC_STREAM`` zero bytes, which join three CRCs computed side by side.
    """
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = np.where(crc & 1, (crc >> 1) ^ np.uint32(_CRC32C_POLY), crc >> 1).astype(np.uint32)
    tables = np.empty((16, 256), dtype=np.uint32)
    tables[0] = crc
    for k in range(1, 8):
        tables[k] = (tables[k - 1] >> 8) ^ tables[0][tables[k - 1] & 0xFF]
    tables[8:12] = _shift_tables(crc, _CRC_STREAM)
    tables[12:16] = _shift_tables(crc, 2 * _CRC_STREAM)
    tables.flags.writeable = False
    return tables


@numba.njit(cache=True, nogil=True, inline="always")
def _crc32c_sw(tables, crc, src, start, end):
    """CRC-32C of the bytes ``[start, end)`` at address ``src``, continuing from ``crc`` (a
    finished CRC, like ``google_crc32c.extend``), with the slicing-by-8 tables at address
    ``tables``. Arithmetic is in uint64 holding 32-bit values."""
    c = np.uint64(np.uint32(crc) ^ np.uint32(0xFFFFFFFF))
    p = start
    while p + 8 <= end:
        word = load_u64(src, p)
        lo = c ^ (word & np.uint64(0xFFFFFFFF))
        hi = word >> np.uint64(32)
        c = (
            load_u32(tables, 4 * (7 * 256 + (lo & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (6 * 256 + ((lo >> np.uint64(8)) & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (5 * 256 + ((lo >> np.uint64(16)) & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (4 * 256 + (lo >> np.uint64(24))))
            ^ load_u32(tables, 4 * (3 * 256 + (hi & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (2 * 256 + ((hi >> np.uint64(8)) & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (1 * 256 + ((hi >> np.uint64(16)) & np.uint64(0xFF))))
            ^ load_u32(tables, 4 * (hi >> np.uint64(24)))
        )
        p += 8
    while p < end:
        c = load_u32(tables, 4 * ((c ^ np.uint64(load_u8(src, p))) & np.uint64(0xFF))) ^ (
            c >> np.uint64(8)
        )
        p += 1
    return np.int64(np.uint32(c) ^ np.uint32(0xFFFFFFFF))


@numba.njit(cache=True, nogil=True, inline="always")
def _shift(tables, row, s):
    """Register ``s`` after the zero bytes of shift-table rows ``row..row + 3``."""
    base = 4 * 256 * row
    return (
        load_u32(tables, base + 4 * (s & np.uint64(0xFF)))
        ^ load_u32(tables, base + 4 * (256 + ((s >> np.uint64(8)) & np.uint64(0xFF))))
        ^ load_u32(tables, base + 4 * (512 + ((s >> np.uint64(16)) & np.uint64(0xFF))))
        ^ load_u32(tables, base + 4 * (768 + ((s >> np.uint64(24)) & np.uint64(0xFF))))
    )


@numba.njit(cache=True, nogil=True, inline="always")
def _crc32c_hw(tables, crc, src, start, end):
    """As :func:`_crc32c_sw`, with the SSE4.2 instruction, three streams at a time.

    One ``crc32`` waits 3 cycles for the previous one, but the CPU can start one every
    cycle: so each run of ``3 * _CRC_STREAM`` bytes is folded as three independent streams
    (the second and third from a zero register), joined with the shift tables
    (``crc(A B C) = shift2(crc(A)) ^ shift1(crc(B)) ^ crc(C)``). ~3x one stream.
    """
    c = np.uint64(np.uint32(crc) ^ np.uint32(0xFFFFFFFF))
    p = start
    while p + 3 * _CRC_STREAM <= end:
        b = np.uint64(0)
        d = np.uint64(0)
        for k in range(0, _CRC_STREAM, 8):
            c = sse42_crc32_u64(c, load_u64(src, p + k))
            b = sse42_crc32_u64(b, load_u64(src, p + _CRC_STREAM + k))
            d = sse42_crc32_u64(d, load_u64(src, p + 2 * _CRC_STREAM + k))
        c = _shift(tables, 12, c) ^ _shift(tables, 8, b) ^ d
        p += 3 * _CRC_STREAM
    while p + 8 <= end:
        c = sse42_crc32_u64(c, load_u64(src, p))
        p += 8
    c32 = np.uint32(c)
    while p < end:
        c32 = sse42_crc32_u8(c32, np.uint8(load_u8(src, p)))
        p += 1
    return np.int64(c32 ^ np.uint32(0xFFFFFFFF))


def _crc32c_at(tables, crc, src, start, end):
    """CRC-32C of the bytes ``[start, end)`` at address ``src`` continuing from ``crc``;
    ``tables`` is the address of :func:`_crc32c_tables`. Only callable from kernels.

    Which implementation a kernel gets is decided when it is compiled, for the CPU it is
    compiled on (numba's on-disk cache is keyed by CPU, too): the SSE4.2 instruction where it
    exists, slicing-by-8 tables elsewhere (e.g. on ARM).
    """
    raise NotImplementedError("call from numba-compiled code only")


@overload(_crc32c_at, jit_options={"cache": True, "nogil": True})
def _crc32c_at_impl(tables, crc, src, start, end):
    if has_hardware_crc32c():
        return lambda tables, crc, src, start, end: _crc32c_hw(tables, crc, src, start, end)
    return lambda tables, crc, src, start, end: _crc32c_sw(tables, crc, src, start, end)


@numba.njit(cache=True, nogil=True)
def _crc32c_buffer(tables, crc, buf, start, end):
    return _crc32c_at(tables.ctypes.data, crc, buf.ctypes.data, start, end)


@numba.njit(cache=True, nogil=True)
def _crc32c_buffer_sw(tables, crc, buf, start, end):
    """The table-driven CRC on any CPU (for tests: the one a CPU without SSE4.2 runs)."""
    return _crc32c_sw(tables.ctypes.data, crc, buf.ctypes.data, start, end)


@numba.njit(cache=True, nogil=True, inline="always")
def _mask_crc(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def crc32c(data: np.ndarray | bytes, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, as used by TFRecord framing, GCS and iSCSI.

    Compiled code: the SSE4.2 ``crc32`` instruction where the CPU has it (~10 GB/s),
    slicing-by-8 tables elsewhere (~2 GB/s); equal to ``google_crc32c.value``.

    Args:
        data: bytes-like object, or a NumPy array whose raw (C-order) bytes are checksummed.
        value: a previous result to continue from, so that
            ``crc32c(b, crc32c(a)) == crc32c(a + b)`` (like ``google_crc32c.extend``).

    Returns:
        The CRC as an unsigned 32-bit integer.
    """
    value = _check_uint(value, 32, "value")
    buf = as_bytes_array(data)
    return int(_crc32c_buffer(_crc32c_tables(), value, buf, 0, len(buf)))


def masked_crc32c(crc: int) -> int:
    """The TFRecord mask of a CRC-32C: ``rotate_right(crc, 15) + 0xA282EAD8`` mod 2**32.

    TFRecord stores masked CRCs because the CRC of data that itself contains CRCs is
    degenerate; every CRC field of a TFRecord frame holds ``masked_crc32c(crc32c(bytes))``.
    """
    crc = _check_uint(crc, 32, "crc")
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32


# --------------------------------------------------------------------------------------------
# xxHash64
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(cache=True, nogil=True, inline="always")
def _xxh_round(acc, lane):
    return _rotl(acc + lane * _P2, 31) * _P1


@numba.njit(cache=True, nogil=True, inline="always")
def _xxh_merge(h, v):
    return (h ^ _xxh_round(np.uint64(0), v)) * _P1 + _P4


@numba.njit(cache=True, nogil=True, inline="always")
def _xxh64_at(src, start, end, seed):
    """XXH64 of the bytes ``[start, end)`` at address ``src``; all arithmetic is uint64 and
    wraps, as the spec requires."""
    p = start
    if end - start >= 32:
        v1 = seed + _P1 + _P2
        v2 = seed + _P2
        v3 = seed
        v4 = seed - _P1
        while p + 32 <= end:
            v1 = _xxh_round(v1, load_u64(src, p))
            v2 = _xxh_round(v2, load_u64(src, p + 8))
            v3 = _xxh_round(v3, load_u64(src, p + 16))
            v4 = _xxh_round(v4, load_u64(src, p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _xxh_merge(h, v1)
        h = _xxh_merge(h, v2)
        h = _xxh_merge(h, v3)
        h = _xxh_merge(h, v4)
    else:
        h = seed + _P5
    h += np.uint64(end - start)
    while p + 8 <= end:
        h ^= _xxh_round(np.uint64(0), load_u64(src, p))
        h = _rotl(h, 27) * _P1 + _P4
        p += 8
    if p + 4 <= end:
        h ^= load_u32(src, p) * _P1
        h = _rotl(h, 23) * _P2 + _P3
        p += 4
    while p < end:
        h ^= np.uint64(load_u8(src, p)) * _P5
        h = _rotl(h, 11) * _P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@numba.njit(cache=True, nogil=True)
def _xxh64(buf, start, end, seed):
    return _xxh64_at(buf.ctypes.data, start, end, seed)


@numba.njit(cache=True, nogil=True)
def _xxh64_slices(buf, starts, ends, seed, out):
    src = buf.ctypes.data
    for i in range(out.shape[0]):
        out[i] = _xxh64_at(src, starts[i], ends[i], seed)


def xxh64(data: bytes | np.ndarray, seed: int = 0) -> int:
    """The standard 64-bit xxHash (XXH64) of ``data``.

    Bit-for-bit the algorithm of the reference implementation (equal to
    ``xxhash.xxh64_intdigest(data, seed)``). Train/eval splits are derived from these hashes
    on many machines and across releases, so this function must never change its output:
    treat it as a stable file format, not an implementation detail.

    Args:
        data: bytes-like object, or a NumPy array whose raw (C-order) bytes are hashed.
        seed: unsigned 64-bit seed.

    Returns:
        The hash as an unsigned 64-bit integer.
    """
    seed = _check_uint(seed, 64, "seed")
    buf = as_bytes_array(data)
    return int(_xxh64(buf, 0, len(buf), np.uint64(seed)))


def hash_slices(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray, seed: int = 0
) -> np.ndarray:
    """XXH64 of every slice ``data[starts[i]:ends[i]]``, in compiled code.

    The general form of :func:`hash_strings`, for slices that are not back to back (e.g.
    the lines of a CSV block, found by their start and end positions).

    Args:
        data: uint8 buffer.
        starts: integer array of slice starts.
        ends: integer array of slice ends, same length, ``starts <= ends <= len(data)``.
        seed: unsigned 64-bit seed.

    Returns:
        uint64 array of hashes, one per slice; stable forever like :func:`xxh64`.

    Raises:
        ValueError: shapes differ or a slice lies outside ``data``.
    """
    buf = as_bytes_array(data)
    starts = kernel_input(starts, np.int64)
    ends = kernel_input(ends, np.int64)
    if starts.ndim != 1 or starts.shape != ends.shape:
        raise ValueError("starts and ends must be 1-D arrays of the same length")
    if len(starts) and (starts.min() < 0 or ends.max() > len(buf) or bool(np.any(ends < starts))):
        raise ValueError("every slice must satisfy 0 <= start <= end <= len(data)")
    return _hash(buf, starts, ends, seed)


def _hash(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, seed: int) -> np.ndarray:
    seed = _check_uint(seed, 64, "seed")
    out = np.empty(len(starts), dtype=np.uint64)
    _xxh64_slices(buf, starts, ends, np.uint64(seed), out)
    return out


def hash_strings(data: np.ndarray, offsets: np.ndarray, seed: int = 0) -> np.ndarray:
    """XXH64 of each string of an Arrow-layout string array, in compiled code.

    String ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (the layout of Arrow ``string``,
    ``binary`` and their ``large_`` variants; ``offsets[0]`` may be non-zero, as in a sliced
    array). Used to assign rows to train/eval splits deterministically on every machine, so
    the result is exactly XXH64 and stable forever like :func:`xxh64`.

    Args:
        data: uint8 buffer of the concatenated strings.
        offsets: int32 or int64 array of ``n + 1`` non-decreasing offsets into ``data``.
        seed: unsigned 64-bit seed.

    Returns:
        uint64 array of ``n`` hashes.

    Raises:
        ValueError: offsets are malformed or point outside ``data``.
    """
    buf = as_bytes_array(data)
    offsets = kernel_input(offsets, np.int64)
    _check_offsets(offsets, len(buf), "hash_strings")
    return _hash(buf, offsets[:-1], offsets[1:], seed)


# --------------------------------------------------------------------------------------------
# tf.train.Example encoding
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FeatureColumn:
    """One feature of the Examples: its key and which ``Feature`` list holds its value.

    Attributes:
        name: the feature key (UTF-8 encoded in the Example).
        kind: ``"float"`` → ``float_list`` (float32), ``"int"`` → ``int64_list``,
            ``"bytes"`` → ``bytes_list``.
    """

    name: str
    kind: FeatureKind

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"feature name must be str, got {type(self.name).__name__}")
        if self.kind not in _KIND_CODES:
            raise ValueError(
                f"feature {self.name!r}: kind must be one of {sorted(_KIND_CODES)}, "
                f"got {self.kind!r}"
            )


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _ColumnPlan(NamedTuple):
    """Per-column constants for the kernels, computed once per column list.

    ``heads[head_offsets[j]:head_offsets[j + 1]]`` are the constant bytes of column ``j``'s
    map entry. For a float column the whole entry is constant but for the 4 value bytes, so
    the head is everything before them. For int and bytes columns the entry's own length
    varies with the value, so the head is just the key field (``0A len key``), written after
    the variable entry header.
    """

    kinds: np.ndarray  # int8[ncols]: _FLOAT, _INT or _BYTES
    heads: np.ndarray  # uint8[...], plus 8 bytes of slack for the kernel's eight-byte moves
    head_offsets: np.ndarray  # int64[ncols + 1]


@functools.lru_cache(maxsize=64)
def _column_plan(columns: tuple[FeatureColumn, ...]) -> _ColumnPlan:
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"duplicate feature names: {dupes}")
    kinds = np.array([_KIND_CODES[c.kind] for c in columns], dtype=np.int8)
    heads: list[bytes] = []
    for j, column in enumerate(columns):
        key = column.name.encode("utf-8")
        key_field = b"\x0a" + _varint(len(key)) + key  # MapEntry.key
        if kinds[j] == _FLOAT:
            # MapEntry.value = Feature{float_list: FloatList{value: [packed, 4 bytes]}},
            # 8 bytes: 12 06 0A 04 <float32>.
            content = len(key_field) + 2 + 8
            heads.append(b"\x0a" + _varint(content) + key_field + b"\x12\x08\x12\x06\x0a\x04")
        else:
            heads.append(key_field)
    head_offsets = np.zeros(len(columns) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in heads], out=head_offsets[1:])
    return _ColumnPlan(
        kinds=kinds,
        heads=np.frombuffer(b"".join(heads) + bytes(_SLACK), dtype=np.uint8).copy(),
        head_offsets=head_offsets,
    )


@numba.njit(cache=True, nogil=True)
def _varint_size(value):
    """Bytes in the varint of ``value`` (uint64): 1 below 2**7 ... 10 from 2**63 up."""
    size = 1
    while value >= np.uint64(0x80):
        value >>= np.uint64(7)
        size += 1
    return size


@numba.njit(cache=True, nogil=True, inline="always")
def _put_varint(dst, pos, value):
    """Write ``value`` (uint64) as a varint at address ``dst`` + ``pos``; return the position
    after it."""
    while value >= np.uint64(0x80):
        store_u8(dst, pos, (value & np.uint64(0x7F)) | np.uint64(0x80))
        value >>= np.uint64(7)
        pos += 1
    store_u8(dst, pos, value)
    return pos + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _copy_over(dst, d, src, s, n):
    """Copy ``n`` bytes from address ``src + s`` to ``dst + d``, eight at a time.

    The last word may read up to 7 bytes past the source run and write up to 7 bytes past
    the destination run: callers give both buffers that much slack, and write forward, so
    whatever lands past the run is overwritten by what comes next.
    """
    k = 0
    while k < n:
        store_u64(dst, d + k, load_u64(src, s + k))
        k += 8


@numba.njit(cache=True, nogil=True, inline="always")
def _copy_head(dst, d, src, s, n, limit):
    """Copy a key (``heads`` has slack after it) to ``dst + d``, by words unless a word
    would run past ``limit + 8``."""
    if d + n <= limit:
        _copy_over(dst, d, src, s, n)
    else:
        _copy_exact(dst, d, src, s, n)


@numba.njit(cache=True, nogil=True, inline="always")
def _copy_exact(dst, d, src, s, n):
    """Copy exactly ``n`` bytes (no slack needed): words, then the tail byte by byte."""
    k = 0
    while k + 8 <= n:
        store_u64(dst, d + k, load_u64(src, s + k))
        k += 8
    while k < n:
        store_u8(dst, d + k, load_u8(src, s + k))
        k += 1


@numba.njit(cache=True, nogil=True)
def _int_feature_size(value):
    # Feature{int64_list: Int64List{value: [v]}} = 1A <2+n> 0A <n> <varint v, n bytes>
    return 4 + _varint_size(value)


@numba.njit(cache=True, nogil=True)
def _bytes_feature_size(length):
    # Feature{bytes_list: BytesList{value: [s]}} = 0A <B> (0A <len s> <s>), B = list size
    list_size = 1 + _varint_size(np.uint64(length)) + length
    return 1 + _varint_size(np.uint64(list_size)) + list_size


@numba.njit(cache=True, nogil=True)
def _entry_size(key_field_size, feature_size):
    """Bytes of a whole map entry field: 0A <len> (key field, 12 <len> Feature)."""
    content = key_field_size + 1 + _varint_size(np.uint64(feature_size)) + feature_size
    return 1 + _varint_size(np.uint64(content)) + content


@numba.njit(cache=True, nogil=True, inline="always")
def _is_valid(valid, i):
    """Whether value ``i`` of a column is present: ``valid`` is the address of its bool
    array, or 0 when every value is."""
    return valid == 0 or load_u8(valid, i) != 0


@numba.njit(cache=True, nogil=True, inline="always")
def _value_size(kind, values, offsets, i, head_size):
    """Bytes of the map entry of value ``i`` of a column (see :func:`_write_examples`)."""
    if kind == _FLOAT:
        return head_size + 4
    if kind == _INT:
        return _entry_size(head_size, _int_feature_size(load_u64(values, 8 * i)))
    length = load_i64(offsets, i + 1) - load_i64(offsets, i)
    return _entry_size(head_size, _bytes_feature_size(length))


@numba.njit(cache=True, nogil=True)
def _measure_examples(kinds, head_offsets, values, valids, offsets, features_sizes, sizes):
    """Pass 1: each row's ``Features`` size and its whole Example's size.

    A float column without missing values adds the same bytes to every row: those are
    summed once, and the row loop visits only the other columns (16 of 39 for the quest
    logs: encoding a 4 MiB block takes 5.9 instead of 6.1 ms).
    """
    ncols = kinds.shape[0]
    fixed = 0
    varying = np.empty(ncols, dtype=np.int64)
    n_varying = 0
    for j in range(ncols):
        if kinds[j] == _FLOAT and valids[j] == 0:
            fixed += head_offsets[j + 1] - head_offsets[j] + 4
        else:
            varying[n_varying] = j
            n_varying += 1
    for i in range(features_sizes.shape[0]):
        size = fixed
        for v in range(n_varying):
            j = varying[v]
            if _is_valid(valids[j], i):
                head_size = head_offsets[j + 1] - head_offsets[j]
                size += _value_size(kinds[j], values[j], offsets[j], i, head_size)
        features_sizes[i] = size
        sizes[i] = 1 + _varint_size(np.uint64(size)) + size  # Example: 0A <len> Features


@numba.njit(cache=True, nogil=True)
def _write_examples(
    kinds,
    heads,
    head_offsets,
    values,
    valids,
    offsets,
    data_sizes,
    features_sizes,
    rows,
    starts,
    ends,
    framed,
    tables,
    out,
):
    """Pass 2: serialise row ``rows[k]``'s Example at ``out[starts[k]:ends[k]]``, for every k.

    The caller picks the iteration order: output order (a gather from the columns), or the
    rows' own order when every row is written once (a scatter into the output, which reads
    each column front to back: faster when the output groups rows by shard).

    Column ``j`` is read through addresses (see :mod:`shardtrain.kernels.native`): ``values[j]``
    (float32 bits, int64, or for bytes the string data of ``data_sizes[j]`` bytes),
    ``valids[j]`` (bool array, or 0: all present) and, for bytes, ``offsets[j]`` (int64
    offsets into the data). Columns stay where the caller has them (Arrow buffers, mostly):
    nothing is regrouped or copied before encoding.

    With ``framed`` each Example is wrapped in its TFRecord frame in place (``starts[k]``
    then points at the frame's 12-byte header): one pass over the output instead of an
    encode pass plus a copying frame pass. Keys and strings are copied eight bytes at a
    time, and what such a move writes past a field is overwritten by the bytes that follow.
    Records may be written in any order, so no move may run past its record (``ends[k]``):
    near the end, copies are exact. ``heads`` has 8 bytes of slack after its contents, and
    strings near the end of their buffer are copied exactly too.
    """
    dst = out.ctypes.data
    head_src = heads.ctypes.data
    crc_tables = tables.ctypes.data
    for k in range(rows.shape[0]):
        i = rows[k]
        frame = starts[k]
        limit = ends[k] - 8  # an eight-byte move may start at or before this
        p = frame + 12 if framed else frame
        store_u8(dst, p, 0x0A)  # Example.features
        p = _put_varint(dst, p + 1, np.uint64(features_sizes[i]))
        for j in range(kinds.shape[0]):
            if not _is_valid(valids[j], i):
                continue
            h0 = head_offsets[j]
            head_size = head_offsets[j + 1] - h0
            kind = kinds[j]
            if kind == _FLOAT:
                _copy_head(dst, p, head_src, h0, head_size, limit)
                p += head_size
                store_u32(dst, p, load_u32(values[j], 4 * i))
                p += 4
            elif kind == _INT:
                value = load_u64(values[j], 8 * i)
                n = _varint_size(value)
                feature_size = 4 + n
                store_u8(dst, p, 0x0A)  # Features.feature (map entry)
                p = _put_varint(dst, p + 1, np.uint64(head_size + 2 + feature_size))
                _copy_head(dst, p, head_src, h0, head_size, limit)
                p += head_size
                # MapEntry.value, Feature.int64_list, Int64List.value (packed), as one word:
                # 12 <feature_size> 1A <2 + n> 0A <n>
                word = (
                    np.uint64(0x12)
                    | (np.uint64(feature_size) << np.uint64(8))
                    | np.uint64(0x1A << 16)
                    | (np.uint64(2 + n) << np.uint64(24))
                    | np.uint64(0x0A << 32)
                    | (np.uint64(n) << np.uint64(40))
                )
                if p <= limit:
                    store_u64(dst, p, word)
                else:
                    for b in range(6):
                        store_u8(dst, p + b, word >> np.uint64(8 * b))
                p = _put_varint(dst, p + 6, value)
            else:
                start = load_i64(offsets[j], i)
                length = load_i64(offsets[j], i + 1) - start
                list_size = 1 + _varint_size(np.uint64(length)) + length
                feature_size = 1 + _varint_size(np.uint64(list_size)) + list_size
                content = head_size + 1 + _varint_size(np.uint64(feature_size)) + feature_size
                store_u8(dst, p, 0x0A)  # Features.feature (map entry)
                p = _put_varint(dst, p + 1, np.uint64(content))
                _copy_head(dst, p, head_src, h0, head_size, limit)
                p += head_size
                store_u8(dst, p, 0x12)  # MapEntry.value
                p = _put_varint(dst, p + 1, np.uint64(feature_size))
                store_u8(dst, p, 0x0A)  # Feature.bytes_list
                p = _put_varint(dst, p + 1, np.uint64(list_size))
                store_u8(dst, p, 0x0A)  # BytesList.value
                p = _put_varint(dst, p + 1, np.uint64(length))
                if p + length <= limit and start + length + 8 <= data_sizes[j]:
                    _copy_over(dst, p, values[j], start, length)
                else:  # the record's or the buffer's last bytes: no word may run past them
                    _copy_exact(dst, p, values[j], start, length)
                p += length
        if framed:
            _frame_in_place(crc_tables, dst, frame, p - (frame + 12))


@numba.njit(cache=True, nogil=True, inline="always")
def _frame_in_place(tables, dst, p, length):
    """Fill in the TFRecord header at ``dst + p`` (12 bytes) and the data CRC after the
    record (addresses, as in :func:`_write_examples`)."""
    store_u64(dst, p, np.uint64(length))
    store_u32(dst, p + 8, _mask_crc(_crc32c_at(tables, 0, dst, p, p + 8)))
    body = p + 12
    store_u32(dst, body + length, _mask_crc(_crc32c_at(tables, 0, dst, body, body + length)))


def _valid_mask(valid: np.ndarray | None, num_rows: int, name: str) -> np.ndarray | None:
    if valid is None:
        return None
    valid = np.asarray(valid, dtype=bool)
    if valid.shape != (num_rows,):
        raise ValueError(f"feature {name!r}: valid has shape {valid.shape}, want ({num_rows},)")
    return valid


def encode_examples(
    columns: Sequence[FeatureColumn],
    arrays: Sequence[ColumnData],
    num_rows: int,
    *,
    order: np.ndarray | None = None,
    framed: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Serialise one ``tf.train.Example`` per row from columnar data, in compiled code.

    Row ``i``'s Example has one feature per column whose value is present, each holding a
    single value, in the order of ``columns`` (so the bytes are deterministic). The output
    parses with ``tf.train.Example.FromString`` into the same message the protobuf API
    would build, and matches protobuf's own serialisation byte for byte when map entries are
    written in the same order (lists are packed, as protobuf writes them).

    Args:
        columns: the features, in output order; names must be unique.
        arrays: one entry per column, by kind:

            * ``"float"``: ``(values, valid)``, values float32 or float64 (rounded to float32
              like a C cast, so values beyond float32 range become ±inf; NaN payloads and
              -0.0 are kept bit for bit);
            * ``"int"``: ``(values, valid)``, values int64 (or a narrower integer/bool type);
            * ``"bytes"``: ``(data, offsets, valid)`` in Arrow string/binary layout, value
              ``i`` being ``data[offsets[i]:offsets[i + 1]]``; offsets int32 or int64,
              ``num_rows + 1`` of them, ``offsets[0]`` may be non-zero (sliced arrays).

            ``valid`` is a bool array of ``num_rows`` (False: the value is missing and the
            feature is omitted from that row's Example) or None (all present).
        num_rows: number of rows (needed when there are no columns).
        order: rows to encode, in output order (default: all, in order). The sharder passes
            the rows sorted by destination shard, so each shard's records are one slice.
        framed: wrap each Example in its TFRecord frame (as :func:`frame_records` would),
            ready to be written to a ``.tfrecord`` file as is.

    Returns:
        ``(data, offsets)``: uint8 buffer with the serialised (framed) Examples back to
        back, and int64 offsets (``len(order) + 1``, starting at 0) so that output record
        ``k`` (row ``order[k]``) is ``data[offsets[k]:offsets[k + 1]]``.

    Raises:
        ValueError: mismatched lengths, malformed offsets, unknown kinds, duplicate names.
        TypeError: values of a type that does not convert safely (e.g. uint64 → int64).
    """
    return _encode(columns, arrays, num_rows, order=order, framed=framed)  # type: ignore[return-value]


def encode_example_groups(
    columns: Sequence[FeatureColumn],
    arrays: Sequence[ColumnData],
    num_rows: int,
    *,
    order: np.ndarray,
    bounds: np.ndarray,
    phases: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Framed Examples laid out for ``O_DIRECT`` writes straight from the buffer.

    As :func:`encode_examples` with ``framed=True``, but the output records form groups --
    records ``bounds[g]:bounds[g + 1]`` of ``order``, one per shard in the sharder -- and
    group ``g`` starts at an offset that is ``phases[g]`` (``0 <= phases[g] < PAGE``) past
    a page boundary, with that page's first ``phases[g]`` bytes left free and ``data``
    itself page-aligned. A writer that has ``phases[g]`` bytes of its file's last page
    still to write (its file size modulo ``PAGE``) copies them into that room and writes
    whole pages from ``data`` itself, instead of copying all of the group into an aligned
    buffer first (see ``storage.direct._DirectWriter.write_in_place``). The room costs at most two
    pages per group.

    Returns:
        ``(data, starts, ends)``: group ``g`` is ``data[starts[g]:ends[g]]``.
    """
    return _encode(  # type: ignore[return-value]
        columns, arrays, num_rows, order=order, framed=True, groups=(bounds, phases)
    )


#: Page size for :func:`encode_example_groups` (a multiple of every common block size).
PAGE = 4096


def _page_aligned(size: int) -> np.ndarray:
    """An uninitialised uint8 array of ``size`` bytes starting on a page boundary."""
    raw = np.empty(size + PAGE, dtype=np.uint8)
    skip = -raw.ctypes.data % PAGE
    return raw[skip : skip + size]


def _page_layout(
    out_offsets: np.ndarray, bounds: np.ndarray, phases: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of the output records once each group is moved to its phase of a page."""
    bounds = np.asarray(bounds, dtype=np.int64)
    phases = np.asarray(phases, dtype=np.int64)
    n = len(out_offsets) - 1
    if bounds.ndim != 1 or len(bounds) < 1 or bounds[0] != 0 or bounds[-1] != n:
        raise ValueError(f"bounds must run from 0 to {n}")
    if np.any(np.diff(bounds) < 0):
        raise ValueError("bounds must not decrease")
    if phases.shape != (len(bounds) - 1,) or np.any((phases < 0) | (phases >= PAGE)):
        raise ValueError(f"phases must be {len(bounds) - 1} integers in [0, {PAGE})")
    packed_starts = out_offsets[bounds[:-1]]
    sizes = out_offsets[bounds[1:]] - packed_starts
    starts = np.empty(len(sizes), dtype=np.int64)
    end = 0
    for g, (size, phase) in enumerate(zip(sizes.tolist(), phases.tolist(), strict=True)):
        if size:  # an empty group needs no room
            end = -(-end // PAGE) * PAGE + phase
        starts[g] = end
        end += size
    positions = out_offsets[:-1] + np.repeat(starts - packed_starts, np.diff(bounds))
    return positions, starts, starts + sizes


def _encode(
    columns: Sequence[FeatureColumn],
    arrays: Sequence[ColumnData],
    num_rows: int,
    *,
    order: np.ndarray | None,
    framed: bool,
    groups: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, ...]:
    """Both encoders' work: ``(data, offsets)``, or with ``groups`` ``(data, starts, ends)``."""
    columns = tuple(columns)
    if len(arrays) != len(columns):
        raise ValueError(f"{len(columns)} columns but {len(arrays)} arrays")
    num_rows = operator.index(num_rows)
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    plan = _column_plan(columns)
    ncols = len(columns)

    # What the kernels read, per column: the addresses of its values (or string data), its
    # validity (0: all present) and its string offsets, and the data's size. `keep` holds
    # every array an address points into until the kernels return.
    values_addr = np.zeros(ncols, dtype=np.int64)
    valid_addr = np.zeros(ncols, dtype=np.int64)
    offsets_addr = np.zeros(ncols, dtype=np.int64)
    data_sizes = np.zeros(ncols, dtype=np.int64)
    keep: list[np.ndarray] = []

    def address(array: np.ndarray) -> int:
        keep.append(array)
        return int(array.ctypes.data)

    for j, (column, column_data) in enumerate(zip(columns, arrays, strict=True)):
        name = column.name
        want = 3 if column.kind == "bytes" else 2
        if len(column_data) != want:
            shape = "(data, offsets, valid)" if want == 3 else "(values, valid)"
            raise ValueError(f"feature {name!r} ({column.kind}): expected {shape}")
        valid = _valid_mask(column_data[-1], num_rows, name)
        if valid is not None:
            valid_addr[j] = address(np.ascontiguousarray(valid))
        if column.kind == "bytes":
            data = np.asarray(column_data[0])
            if data.dtype != np.uint8 or data.ndim != 1:
                raise ValueError(f"feature {name!r}: data must be a 1-D uint8 array")
            offsets = np.asarray(column_data[1])
            if offsets.dtype.kind not in "iu" or offsets.shape != (num_rows + 1,):
                raise ValueError(
                    f"feature {name!r}: offsets must be {num_rows + 1} integers, "
                    f"got {offsets.dtype} {offsets.shape}"
                )
            offsets = kernel_input(offsets, np.int64)
            _check_offsets(offsets, len(data), f"feature {name!r}")
            data = np.ascontiguousarray(data)
            values_addr[j] = address(data)
            offsets_addr[j] = address(offsets)
            data_sizes[j] = len(data)
        else:
            values = np.asarray(column_data[0])
            if values.shape != (num_rows,):
                raise ValueError(
                    f"feature {name!r}: values have shape {values.shape}, want ({num_rows},)"
                )
            if column.kind == "float":
                if values.dtype.kind not in "fiub":
                    raise TypeError(f"feature {name!r}: float values, got {values.dtype}")
                with np.errstate(over="ignore"):  # out of float32 range → ±inf, as in C
                    values = kernel_input(values, np.float32)
            else:
                values = kernel_input(values.astype(np.int64, casting="safe", copy=False), np.int64)
            # Bit patterns, so the kernels copy floats exactly (NaN payloads, -0.0) and write
            # int64 as the uint64 two's complement protobuf uses for negative varints.
            values_addr[j] = address(values)

    features_sizes = np.empty(num_rows, dtype=np.int64)
    sizes = np.empty(num_rows, dtype=np.int64)
    _measure_examples(
        plan.kinds, plan.head_offsets, values_addr, valid_addr, offsets_addr, features_sizes, sizes
    )
    if order is None:
        order = np.arange(num_rows, dtype=np.int64)
    else:
        order = np.asarray(order)
        if order.ndim != 1 or (len(order) and order.dtype.kind not in "iu"):
            raise ValueError("order must be a 1-D integer array")
        if len(order) and (order.min() < 0 or order.max() >= num_rows):
            raise ValueError(f"order has indices outside [0, {num_rows})")
    order = kernel_input(order, np.int64)
    if framed:
        sizes += _FRAME_OVERHEAD
    out_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(sizes[order], out=out_offsets[1:])
    positions = out_offsets[:-1]  # of the output records, back to back unless grouped
    size = int(out_offsets[-1])
    group_starts = group_ends = None
    if groups is not None:
        positions, group_starts, group_ends = _page_layout(out_offsets, *groups)
        size = int(group_ends[-1]) if len(group_ends) else 0
    if len(order) == num_rows and _is_permutation(order, num_rows):
        # Every row once: scatter rows, in their own order, to their output positions.
        rows = np.arange(num_rows, dtype=np.int64)
        starts = np.empty(num_rows, dtype=np.int64)
        starts[order] = positions
    else:  # a subset, or repeats: gather in output order
        rows, starts = order, positions
    out = np.empty(size, dtype=np.uint8) if groups is None else _page_aligned(size)
    _write_examples(
        kinds=plan.kinds,
        heads=plan.heads,
        head_offsets=plan.head_offsets,
        values=values_addr,
        valids=valid_addr,
        offsets=offsets_addr,
        data_sizes=data_sizes,
        features_sizes=features_sizes,
        rows=rows,
        starts=starts,
        ends=starts + sizes[rows],
        framed=bool(framed),
        tables=_crc32c_tables(),
        out=out,
    )
    if groups is None:
        return out, out_offsets
    return out, group_starts, group_ends


def _is_permutation(order: np.ndarray, n: int) -> bool:
    seen = np.zeros(n, dtype=bool)
    seen[order] = True
    return bool(seen.all())


# --------------------------------------------------------------------------------------------
# TFRecord framing
# --------------------------------------------------------------------------------------------


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
        _copy_exact(dst, p + 12, src, start, length)
        _frame_in_place(crc_tables, dst, p, length)


def frame_records(
    data: np.ndarray, offsets: np.ndarray, order: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Frame records as TFRecords into one contiguous buffer, in compiled code.

    Each record becomes ``uint64 length | uint32 masked CRC of the length | data |
    uint32 masked CRC of the data`` (little-endian), byte-identical to
    ``tf.io.TFRecordWriter`` without compression.

    Args:
        data: uint8 buffer of records back to back (e.g. from :func:`encode_examples`).
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
    _check_offsets(offsets, len(buf), "frame_records")
    num_records = len(offsets) - 1
    if order is None:
        order = np.arange(num_records, dtype=np.int64)
    else:
        order = np.asarray(order)
        if order.ndim != 1 or (len(order) and order.dtype.kind not in "iu"):
            raise ValueError("order must be a 1-D integer array")
        if len(order) and (order.min() < 0 or order.max() >= num_records):
            raise ValueError(f"order has indices outside [0, {num_records})")
    order = kernel_input(order, np.int64)
    lengths = offsets[order + 1] - offsets[order]
    framed_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths + _FRAME_OVERHEAD, out=framed_offsets[1:])
    framed = np.empty(int(framed_offsets[-1]), dtype=np.uint8)
    _frame_kernel(_crc32c_tables(), buf, offsets, order, framed, framed_offsets)
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
        header = _read_exact(fileobj, 12)
        if not header:
            return
        if len(header) < 12:
            raise ValueError(
                f"truncated TFRecord header at byte offset {offset}: {len(header)} of 12 bytes"
            )
        (length,) = struct.unpack_from("<Q", header)
        (length_crc,) = struct.unpack_from("<I", header, 8)
        if verify and masked_crc32c(crc32c(header[:8])) != length_crc:
            raise ValueError(f"corrupt TFRecord at byte offset {offset}: length CRC mismatch")
        body = _read_exact(fileobj, length + 4)
        if len(body) < length + 4:
            raise ValueError(
                f"truncated TFRecord at byte offset {offset}: record of {length} bytes, "
                f"only {max(len(body) - 4, 0)} present"
            )
        record = body[:length]
        (data_crc,) = struct.unpack_from("<I", body, length)
        if verify and masked_crc32c(crc32c(record)) != data_crc:
            raise ValueError(f"corrupt TFRecord at byte offset {offset}: data CRC mismatch")
        yield record
        offset += 12 + length + 4
