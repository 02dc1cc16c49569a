"""The columnar record format: one ``tf.train.Example`` holds a *block* of rows.

Per-row shards hold one ``tf.train.Example`` per row (``record_format: example``): every
TensorFlow tool reads them, and a missing value is an absent feature. Parsing them costs per
row, and on a CPU that is the ceiling of the training input (figures in
benchmarks/RESULTS.md). In columnar shards, the default for tabular data (``shardtrain
shard --record-format auto``, or ``columnar``), each record is still a ``tf.train.Example``,
but of up to :data:`BLOCK_ROWS` rows of one shard
(in hash order, :data:`ROW_ORDER`): every column is one feature holding the block's values
in row order, e.g.::

    features {
      feature { key: "player_level" value { float_list { value: [12.0, 40.0, nan, ...] } } }
      feature { key: "region"       value { bytes_list { value: ["eu", "", "us", ...] } } }
      feature { key: "cleared"      value { int64_list { value: [1, 0, 0, ...] } } }
    }

so one vectorised ``tf.io.parse_example`` call parses hundreds of rows per record. Every
written column has exactly as many values as the block has rows; a missing value is stored
explicitly: ``NaN`` (float), :data:`INT_MISSING` (int, bool), ``""`` (string) — the values the
per-row parser gives an absent feature, so both formats parse to the same tensors.
``ShardInfo.num_records`` still counts rows. Image datasets keep the per-row format (an image
is already a large record).

The encoder is NumPy over Arrow buffers: no TensorFlow in the data layer.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain.data.schema import Schema
from shardtrain.kernels import arrow, block_encode
from shardtrain.kernels.native import kernel_input
from shardtrain.kernels.tfrecord import frame_records

#: ``record_format`` values (``metadata.json`` ``options.record_format``; absent = example).
EXAMPLE = "example"
COLUMNAR = "columnar"

#: Rows in one record at most. The reader pays tf.data's bookkeeping per record and parsing
#: per record and feature, so 256 rows make that negligible; smaller blocks mix better when
#: batches are drawn from them.
BLOCK_ROWS = 256

#: ``options.row_order`` of columnar datasets whose blocks hold rows in hash order: within a
#: shard, the rows of each input batch (about ``--block-mb`` of source) that go to it are
#: put in a pseudo-random order (a scrambled hash of each row and its place) before they are
#: cut into blocks, so a block is a random sample of them, not a run of consecutive source
#: rows (sharding.writer.write_batch). Batches themselves stay in source order along the
#: shard. The training input then needs no per-row permutation when a step spans several
#: blocks (shardtrain.train.dataset). Absent: blocks in source order (written before).
ROW_ORDER = "hashed"

#: What a missing int/bool is stored as (and what the per-row parser gives an absent one).
INT_MISSING = -(2**63)

# The missing values as Arrow scalars built from NumPy (``pc.fill_null`` given a Python
# value imports pandas: see shardtrain.kernels.arrow).
_FLOAT_MISSING = arrow.from_numpy(np.array([np.nan], dtype=np.float32))[0]
_INT_MISSING = arrow.from_numpy(np.array([INT_MISSING], dtype=np.int64))[0]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return bytes([(tag << 3) | 2]) + _varint(len(payload)) + payload


def _starts(sizes: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    return starts


def _serialized(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``items`` back to back as uint8, and where each begins (one more entry than items)."""
    sizes = np.array([len(item) for item in items], dtype=np.int64)
    return np.frombuffer(b"".join(items), dtype=np.uint8), _starts(sizes)


def _column_bytes(kind: str, values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """One column of the whole table serialized once, in plain Python, as ``(data,
    starts)``: row ``i``'s value is ``data[starts[i]:starts[i + 1]]`` in its list's encoding
    (packed float32, packed varints, or ``BytesList`` items), so a block's list is one
    slice. Nulls → missing values. The reference encoder's (:func:`_encode`): slow, and
    independent of the compiled kernels it checks."""
    if kind == "float":
        floats = pc.fill_null(pc.cast(values, pa.float32()), _FLOAT_MISSING)
        packed = np.asarray(arrow.to_numpy(floats), dtype="<f4")
        return packed.view(np.uint8), np.arange(len(packed) + 1, dtype=np.int64) * 4
    if kind == "int":
        ints = pc.fill_null(pc.cast(values, pa.int64()), _INT_MISSING)
        return _serialized([_varint(v % (1 << 64)) for v in ints.to_pylist()])
    if values.type not in _BYTES_TYPES:
        values = pc.cast(values, pa.string())
    large = values.type in (pa.large_string(), pa.large_binary())
    values = pc.cast(values, pa.large_binary() if large else pa.binary())
    return _serialized([b"\x0a" + _varint(len(v or b"")) + (v or b"") for v in values.to_pylist()])


#: Where each kind's list sits in a ``tf.train.Feature``: bytes_list 1, float_list 2,
#: int64_list 3. Float and int values are one packed field (1) inside it; bytes values are
#: the list's repeated field 1 items themselves.
_LIST_FIELD = {"bytes": 1, "float": 2, "int": 3}


def _feature_bytes(kind: str, payload: bytes) -> bytes:
    """A ``tf.train.Feature`` around one block's slice of :func:`_column_bytes`."""
    if kind in ("float", "int"):
        return _field(_LIST_FIELD[kind], _field(1, payload))
    return _field(_LIST_FIELD["bytes"], payload)


#: The compiled assembler's kind of each column kind.
_KERNEL_KIND = {
    "bytes": block_encode.KIND_BYTES,
    "float": block_encode.KIND_FLOAT,
    "int": block_encode.KIND_INT,
}


def _kernel_columns(
    table: pa.Table, schema: Schema
) -> tuple[np.ndarray, np.ndarray, int, list[pa.Array]]:
    """Where :func:`~shardtrain.kernels.block_encode.gather_columns` reads each written column
    of ``table``: ``(kinds, columns, capacity, keep)``, ``keep`` holding the arrays the
    addresses point into. Columns of other types are cast first, as :func:`_column_bytes`
    casts them."""
    n = table.num_rows
    kinds = np.empty(len(schema.written), dtype=np.int64)
    columns = np.zeros((len(schema.written), 6), dtype=np.int64)
    capacity = 0
    keep = []
    for c, column in enumerate(schema.written):
        kind = column.example_kind
        values = arrow.contiguous(table.column(column.name))
        if kind == "float" and values.type != pa.float32():
            values = pc.cast(values, pa.float32())
        elif kind == "int" and values.type != pa.int64():
            values = pc.cast(values, pa.int64())
        elif kind == "bytes" and values.type not in _BYTES_TYPES:
            values = pc.cast(values, pa.string())
        keep.append(values)
        kinds[c] = _KERNEL_KIND[kind]
        row = columns[c]
        row[block_encode.OFFSET] = values.offset
        if n == 0:
            continue
        buffers = values.buffers()
        if values.null_count:
            row[block_encode.VALIDITY] = _address(buffers[0])
        row[block_encode.VALUES] = _address(buffers[1])
        if kind == "float":
            capacity += 4 * n + 3
        elif kind == "int":
            capacity += 10 * n
        else:
            wide = values.type in (pa.large_string(), pa.large_binary())
            offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)
            span = int(offsets[values.offset + n]) - int(offsets[values.offset])
            row[block_encode.OFFSET_WIDTH] = 8 if wide else 4
            if buffers[2] is not None:
                row[block_encode.DATA] = _address(buffers[2])
                row[block_encode.DATA_SIZE] = buffers[2].size
            capacity += 6 * n + span
    return kinds, columns, capacity, keep


_BYTES_TYPES = (pa.string(), pa.binary(), pa.large_string(), pa.large_binary())


def _address(buffer: pa.Buffer | None) -> int:
    """Where an Arrow buffer's bytes are (0 for none: an all-null column may have none)."""
    return 0 if buffer is None else buffer.address


def _assemble(
    table: pa.Table,
    schema: Schema,
    ranges: list[tuple[int, int]],
    order: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The serialized block ``Example`` of each ``(start, end)`` row range of ``table`` (of
    ``table.take(order)`` when ``order`` is given), back to back, and their offsets.

    Every column is serialized once, in ``order``, by one compiled pass over the table's
    Arrow buffers (:func:`~shardtrain.kernels.block_encode.gather_columns`: no permuted copy
    of the table, no filled-in copy of each column), then the blocks are laid out in
    compiled code (:func:`~shardtrain.kernels.block_encode.assemble_blocks`). The same bytes
    as :func:`_encode`.
    """
    n = table.num_rows
    if order is None:
        order = np.arange(n, dtype=np.int64)
    elif len(order) != n or (n and (order.min() < 0 or order.max() >= n)):
        raise ValueError(f"order must hold {n} row positions in [0, {n})")
    kinds, columns, capacity, keep = _kernel_columns(table, schema)
    bounds = np.array(ranges, dtype=np.int64).reshape(-1, 2)
    cuts = np.unique(bounds)  # the rows where blocks begin or end
    data, starts = block_encode.gather_columns(
        kinds, columns, kernel_input(order, np.int64), capacity, cuts
    )
    del keep  # the arrays the kernel read
    keys = [_field(1, column.name.encode()) for column in schema.written]
    at = np.searchsorted(cuts, bounds).tolist()  # the ranges as positions in cuts
    return block_encode.assemble_blocks(
        kinds,
        np.frombuffer(b"".join(keys), dtype=np.uint8),
        _starts(np.array([len(k) for k in keys], dtype=np.int64)),
        data,
        starts,
        [(a, b) for a, b in at],
    )


def _encode(table: pa.Table, schema: Schema, ranges: list[tuple[int, int]]) -> list[bytes]:
    """The serialized block ``Example`` of each ``(start, end)`` row range of ``table``, in
    Python: the reference :func:`_assemble` is tested against."""
    columns = []
    for column in schema.written:
        data, starts = _column_bytes(
            column.example_kind, table.column(column.name).combine_chunks()
        )
        key = _field(1, column.name.encode())
        columns.append((column.example_kind, key, data, starts))
    blocks = []
    for start, end in ranges:
        entries = []
        for kind, key, data, starts in columns:
            payload = data[starts[start] : starts[end]].tobytes()
            entries.append(_field(1, key + _field(2, _feature_bytes(kind, payload))))
        blocks.append(_field(1, b"".join(entries)))  # Example.features: map<string, Feature>
    return blocks


def encode_block(table: pa.Table, schema: Schema) -> bytes:
    """One serialized ``tf.train.Example`` holding every row of ``table`` (see the module)."""
    return _assemble(table, schema, [(0, table.num_rows)])[0].tobytes()


def encode_blocks(
    table: pa.Table,
    schema: Schema,
    groups: list[tuple[int, int]],
    block_rows: int = BLOCK_ROWS,
    order: np.ndarray | None = None,
) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """TFRecord-framed blocks of ``table``'s row ranges ``groups`` (one per shard).

    Each ``(start, end)`` range is cut into blocks of at most ``block_rows`` rows. With
    ``order`` (a permutation of the rows), the ranges are of ``table.take(order)``: the rows
    are gathered while they are serialized, the table is not permuted.

    Returns:
        ``(framed, spans)``: the frames back to back, and per group ``(start, end, rows)``:
        its frames are ``framed[start:end]``.
    """
    ranges: list[tuple[int, int]] = []
    per_group: list[tuple[int, int]] = []  # (first block, rows) per group
    for start, end in groups:
        per_group.append((len(ranges), end - start))
        ranges += [(first, min(first + block_rows, end)) for first in range(start, end, block_rows)]
    data, offsets = _assemble(table, schema, ranges, order)
    framed, framed_offsets = frame_records(data, offsets)
    spans = []
    for (first, rows), (start, end) in zip(per_group, groups, strict=True):
        count = -(-(end - start) // block_rows)
        spans.append((int(framed_offsets[first]), int(framed_offsets[first + count]), rows))
    return framed, spans
