"""``tf.train.Example`` encoding in compiled code, without TensorFlow.

The sharder's hot loop turns column batches (NumPy arrays, usually zero-copy views of Arrow
arrays) into TFRecord files of ``tf.train.Example`` protos. Doing that with the protobuf API
costs microseconds per feature in Python; here it is done column-wise by numba kernels that
write the protobuf wire format directly, at C speed, with the GIL released (``nogil``) so
threads can encode in parallel. Examples can come out framed as TFRecords
(:mod:`shardtrain.kernels.tfrecord`), and laid out in page-aligned groups for direct writes
(:func:`encode_example_groups`). Nothing here imports TensorFlow or protobuf, and importing
the module has no side effects: kernels compile on first use and are cached on disk
(``cache=True``).

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
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple, TypeAlias

import numba
import numpy as np

from shardtrain.kernels.crc32c import crc32c_tables
from shardtrain.kernels.native import (
    check_indices,
    check_offsets,
    copy_exact,
    copy_over,
    kernel_input,
    load_i64,
    load_u8,
    load_u32,
    load_u64,
    store_u8,
    store_u32,
    store_u64,
)
from shardtrain.kernels.tfrecord import FRAME_OVERHEAD, HEADER_SIZE, frame_in_place

__all__ = [
    "PAGE",
    "ColumnData",
    "FeatureColumn",
    "FeatureKind",
    "encode_example_groups",
    "encode_examples",
]

FeatureKind: TypeAlias = Literal["float", "int", "bytes"]

#: Per-column input of :func:`encode_examples`: ``(values, valid)`` for ``"float"`` and
#: ``"int"`` columns, ``(data, offsets, valid)`` for ``"bytes"`` columns.
ColumnData: TypeAlias = (
    tuple[np.ndarray, np.ndarray | None] | tuple[np.ndarray, np.ndarray, np.ndarray | None]
)

_FLOAT, _INT, _BYTES = 0, 1, 2  # kind codes inside the kernels
_KIND_CODES = {"float": _FLOAT, "int": _INT, "bytes": _BYTES}

_WORD = 8  # bytes of the eight-byte moves that copy keys and strings
_SLACK = _WORD  # bytes after a buffer's contents that eight-byte moves may read or write

# Tags of the fields written (see the module docstring): (field_number << 3) | 2, wire type
# 2 being length-delimited.
_EXAMPLE_FEATURES = 0x0A  # Example.features
_FEATURES_ENTRY = 0x0A  # Features.feature: one map entry
_ENTRY_KEY = 0x0A  # MapEntry.key
_ENTRY_VALUE = 0x12  # MapEntry.value
_BYTES_LIST = 0x0A  # Feature.bytes_list
_FLOAT_LIST = 0x12  # Feature.float_list
_INT64_LIST = 0x1A  # Feature.int64_list
_LIST_VALUE = 0x0A  # BytesList.value, FloatList.value, Int64List.value (packed)

_VARINT_MORE = 0x80  # high bit of a varint byte: more bytes follow
_VARINT_BITS = 0x7F  # the seven value bits of a varint byte
_FLOAT_SIZE = 4  # a float32 value
# A float entry's value up to the float32, all constant: 12 08 (MapEntry.value, a Feature
# of 8 bytes), 12 06 (its float_list, 6 bytes), 0A 04 (FloatList.value, packed, 4 bytes).
_FLOAT_VALUE_HEAD = bytes((_ENTRY_VALUE, 8, _FLOAT_LIST, 6, _LIST_VALUE, _FLOAT_SIZE))
# An int entry's value up to the varint: 12 <feature size> 1A <list size> 0A <varint size>.
_INT_VALUE_HEAD = 6

#: Page size for :func:`encode_example_groups` (a multiple of every common block size).
PAGE = 4096


# --------------------------------------------------------------------------------------------
# Features and their constant bytes
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
    while value >= _VARINT_MORE:
        out.append((value & _VARINT_BITS) | _VARINT_MORE)
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
    heads: np.ndarray  # uint8[...], plus _SLACK bytes for the kernel's eight-byte moves
    head_offsets: np.ndarray  # int64[ncols + 1]


class _ColumnAddresses(NamedTuple):
    """Where the kernels read each column's data: int64 per column, addresses (see
    :mod:`shardtrain.kernels.native`) or 0, and sizes. Columns stay where the caller has
    them (Arrow buffers, mostly): nothing is regrouped or copied before encoding."""

    values: np.ndarray  # float32 bits, int64 values, or for bytes the string data
    valids: np.ndarray  # a bool array, or 0: every value present
    offsets: np.ndarray  # bytes: int64 offsets into the string data (else 0)
    data_sizes: np.ndarray  # bytes: the string data's size in bytes (else 0)

    @classmethod
    def zeros(cls, ncols: int) -> _ColumnAddresses:
        return cls(*(np.zeros(ncols, dtype=np.int64) for _ in cls._fields))


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
        key_field = bytes((_ENTRY_KEY,)) + _varint(len(key)) + key
        if kinds[j] == _FLOAT:
            content = len(key_field) + len(_FLOAT_VALUE_HEAD) + _FLOAT_SIZE
            entry = bytes((_FEATURES_ENTRY,)) + _varint(content)
            heads.append(entry + key_field + _FLOAT_VALUE_HEAD)
        else:
            heads.append(key_field)
    head_offsets = np.zeros(len(columns) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in heads], out=head_offsets[1:])
    return _ColumnPlan(
        kinds=kinds,
        heads=np.frombuffer(b"".join(heads) + bytes(_SLACK), dtype=np.uint8).copy(),
        head_offsets=head_offsets,
    )


# --------------------------------------------------------------------------------------------
# Kernel helpers (``dst``, ``src``: addresses, see shardtrain.kernels.native)
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _varint_size(value):
    """Bytes in the varint of ``value`` (uint64): 1 below 2**7 ... 10 from 2**63 up."""
    size = 1
    while value >= np.uint64(_VARINT_MORE):
        value >>= np.uint64(7)
        size += 1
    return size


@numba.njit(cache=True, nogil=True, inline="always")
def _put_varint(dst, pos, value):
    """Write ``value`` (uint64) as a varint at address ``dst`` + ``pos``; return the position
    after it."""
    while value >= np.uint64(_VARINT_MORE):
        store_u8(dst, pos, (value & np.uint64(_VARINT_BITS)) | np.uint64(_VARINT_MORE))
        value >>= np.uint64(7)
        pos += 1
    store_u8(dst, pos, value)
    return pos + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _copy_head(dst, d, src, s, n, limit):
    """Copy a key (``heads`` has slack after it) to ``dst + d``, by words unless a word
    would run past ``limit + _WORD``."""
    if d + n <= limit:
        copy_over(dst, d, src, s, n)
    else:
        copy_exact(dst, d, src, s, n)


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
        return head_size + _FLOAT_SIZE
    if kind == _INT:
        return _entry_size(head_size, _int_feature_size(load_u64(values, 8 * i)))
    length = load_i64(offsets, i + 1) - load_i64(offsets, i)
    return _entry_size(head_size, _bytes_feature_size(length))


# --------------------------------------------------------------------------------------------
# The kernels: sizes (pass 1), then bytes (pass 2)
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _measure_examples(plan, columns, features_sizes, sizes):
    """Pass 1: each row's ``Features`` size and its whole Example's size, for the columns of
    ``plan`` (a :class:`_ColumnPlan`) read through ``columns`` (:class:`_ColumnAddresses`).

    A float column without missing values adds the same bytes to every row: those are
    summed once, and the row loop visits only the other columns.
    """
    kinds, _, head_offsets = plan
    values, valids, offsets, _ = columns
    ncols = kinds.shape[0]
    fixed = 0
    varying = np.empty(ncols, dtype=np.int64)
    n_varying = 0
    for j in range(ncols):
        if kinds[j] == _FLOAT and valids[j] == 0:
            fixed += head_offsets[j + 1] - head_offsets[j] + _FLOAT_SIZE
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
def _write_examples(plan, columns, features_sizes, rows, starts, ends, framed, tables, out):
    """Pass 2: serialise row ``rows[k]``'s Example at ``out[starts[k]:ends[k]]``, for every k.

    The caller picks the iteration order: output order (a gather from the columns), or the
    rows' own order when every row is written once (a scatter into the output, which reads
    each column front to back: faster when the output groups rows by shard).

    Column ``j`` has the constant bytes and kind of ``plan`` (a :class:`_ColumnPlan`) and
    is read through ``columns`` (:class:`_ColumnAddresses`); ``features_sizes`` are pass 1's
    and ``tables`` are :func:`crc32c_tables`.

    With ``framed`` each Example is wrapped in its TFRecord frame in place (``starts[k]``
    then points at the frame's header): one pass over the output instead of an encode pass
    plus a copying frame pass. Keys and strings are copied eight bytes at a
    time, and what such a move writes past a field is overwritten by the bytes that follow.
    Records may be written in any order, so no move may run past its record (``ends[k]``):
    near the end, copies are exact. ``heads`` has ``_SLACK`` bytes after its contents, and
    strings near the end of their buffer are copied exactly too.
    """
    kinds, heads, head_offsets = plan
    values, valids, offsets, data_sizes = columns
    dst = out.ctypes.data
    head_src = heads.ctypes.data
    crc_tables = tables.ctypes.data
    for k in range(rows.shape[0]):
        i = rows[k]
        frame = starts[k]
        limit = ends[k] - _WORD  # an eight-byte move may start at or before this
        p = frame + HEADER_SIZE if framed else frame
        store_u8(dst, p, _EXAMPLE_FEATURES)
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
                store_u32(dst, p, load_u32(values[j], _FLOAT_SIZE * i))
                p += _FLOAT_SIZE
            elif kind == _INT:
                value = load_u64(values[j], 8 * i)
                n = _varint_size(value)
                feature_size = 4 + n  # as _int_feature_size
                store_u8(dst, p, _FEATURES_ENTRY)
                p = _put_varint(dst, p + 1, np.uint64(head_size + 2 + feature_size))
                _copy_head(dst, p, head_src, h0, head_size, limit)
                p += head_size
                # MapEntry.value, Feature.int64_list, Int64List.value (packed), as one word:
                # 12 <feature_size> 1A <2 + n> 0A <n>
                word = (
                    np.uint64(_ENTRY_VALUE)
                    | (np.uint64(feature_size) << np.uint64(8))
                    | np.uint64(_INT64_LIST << 16)
                    | (np.uint64(2 + n) << np.uint64(24))
                    | np.uint64(_LIST_VALUE << 32)
                    | (np.uint64(n) << np.uint64(40))
                )
                if p <= limit:
                    store_u64(dst, p, word)
                else:
                    for b in range(_INT_VALUE_HEAD):
                        store_u8(dst, p + b, word >> np.uint64(8 * b))
                p = _put_varint(dst, p + _INT_VALUE_HEAD, value)
            else:
                start = load_i64(offsets[j], i)
                length = load_i64(offsets[j], i + 1) - start
                list_size = 1 + _varint_size(np.uint64(length)) + length
                feature_size = 1 + _varint_size(np.uint64(list_size)) + list_size
                content = head_size + 1 + _varint_size(np.uint64(feature_size)) + feature_size
                store_u8(dst, p, _FEATURES_ENTRY)
                p = _put_varint(dst, p + 1, np.uint64(content))
                _copy_head(dst, p, head_src, h0, head_size, limit)
                p += head_size
                store_u8(dst, p, _ENTRY_VALUE)
                p = _put_varint(dst, p + 1, np.uint64(feature_size))
                store_u8(dst, p, _BYTES_LIST)
                p = _put_varint(dst, p + 1, np.uint64(list_size))
                store_u8(dst, p, _LIST_VALUE)
                p = _put_varint(dst, p + 1, np.uint64(length))
                if p + length <= limit and start + length + _WORD <= data_sizes[j]:
                    copy_over(dst, p, values[j], start, length)
                else:  # the record's or the buffer's last bytes: no word may run past them
                    copy_exact(dst, p, values[j], start, length)
                p += length
        if framed:
            frame_in_place(crc_tables, dst, frame, p - (frame + HEADER_SIZE))


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


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
        framed: wrap each Example in its TFRecord frame (as
            :func:`~shardtrain.kernels.tfrecord.frame_records` would), ready to be written
            to a ``.tfrecord`` file as is.

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


# --------------------------------------------------------------------------------------------
# Page layout, and the encoders' common work
# --------------------------------------------------------------------------------------------


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
    # `keep` holds every array an address points into: it must outlive the kernels.
    addresses, keep = _column_addresses(columns, arrays, num_rows)
    features_sizes = np.empty(num_rows, dtype=np.int64)
    sizes = np.empty(num_rows, dtype=np.int64)
    _measure_examples(plan, addresses, features_sizes, sizes)
    if order is None:
        order = kernel_input(np.arange(num_rows, dtype=np.int64), np.int64)
    else:
        order = check_indices(order, num_rows, "order")
    if framed:
        sizes += FRAME_OVERHEAD
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
    ends = starts + sizes[rows]
    tables = crc32c_tables()
    _write_examples(plan, addresses, features_sizes, rows, starts, ends, bool(framed), tables, out)
    del keep
    if groups is None:
        return out, out_offsets
    assert group_starts is not None and group_ends is not None  # laid out with the groups
    return out, group_starts, group_ends


def _column_addresses(
    columns: tuple[FeatureColumn, ...], arrays: Sequence[ColumnData], num_rows: int
) -> tuple[_ColumnAddresses, list[np.ndarray]]:
    """Check each column's data and find where the kernels read it; also returns the arrays
    the addresses point into (converted or not), which must live while the kernels run."""
    addresses = _ColumnAddresses.zeros(len(columns))
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
            addresses.valids[j] = address(np.ascontiguousarray(valid))
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
            check_offsets(offsets, len(data), f"feature {name!r}")
            data = np.ascontiguousarray(data)
            addresses.values[j] = address(data)
            addresses.offsets[j] = address(offsets)
            addresses.data_sizes[j] = len(data)
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
            addresses.values[j] = address(values)
    return addresses, keep


def _is_permutation(order: np.ndarray, n: int) -> bool:
    seen = np.zeros(n, dtype=bool)
    seen[order] = True
    return bool(seen.all())
