"""One piece read as typed batches: each block of whole records found, read by one of the
reader paths (:mod:`.readers`), converted to the schema's types and split into accepted rows,
with a split hash each, and rejects with their line and reason."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import Column, Schema
from shardtrain.data.sources.base import MAX_REJECT_TEXT, Batch, Piece, Reject
from shardtrain.data.sources.csv import readers
from shardtrain.data.sources.csv.align import PieceExtent, RecordBounds, iter_record_blocks
from shardtrain.data.sources.csv.convert import POINT_IN_DECIMAL_COMMA, safe_convert
from shardtrain.data.sources.csv.plan_options import DEFAULT_DIALECT
from shardtrain.data.sources.csv.ranges import BlockRows, warn_float32_overflow
from shardtrain.data.sources.typed import hash_strings
from shardtrain.kernels import arrow, csv_parse, csv_records, csv_types, xxh64


def read_piece(
    piece: Piece,
    schema: Schema,
    *,
    block_bytes: int = 16 * 1024 * 1024,
    dialect: CsvDialect | None = None,
    known_start: int | None = None,
    extent: PieceExtent | None = None,
    count_types: bool = False,
) -> Iterator[Batch]:
    """Stream one piece as typed batches with rejects; see the package docstring.

    The piece reads the records that begin in it (from ``known_start`` when the plan knows
    where its first record begins); ``extent`` receives where it began and stopped
    (:func:`~.align.iter_record_blocks`). With ``count_types`` each batch also holds the
    kinds of its fields as the type pass counts them (:attr:`Batch.type_counts`)."""
    dialect = dialect or DEFAULT_DIALECT
    key_index = schema.names.index(schema.key) if schema.key else None
    # The header is line 1 of its file.
    lines_before = 1 if piece.start == 0 and dialect.header else 0
    blocks = iter_record_blocks(
        piece, schema, block_bytes, dialect, known_start=known_start, extent=extent
    )
    for block in blocks:
        batch = parse_block(
            block.data,
            schema,
            lines_before=lines_before,
            key_index=key_index,
            source=piece.uri,
            dialect=dialect,
            bounds=block.bounds,
            unquoted=block.unquoted,
            count_types=count_types,
        )
        if count_types and batch.type_counts is None:  # not counted by the fast path
            batch.type_counts = csv_types.new_tally(len(schema.columns))
            count_block_types(block.data, batch.type_counts, schema, dialect)
        lines_before += batch.lines  # every block but the last ends with a line feed
        yield batch


def count_block_types(data: bytes, counts: np.ndarray, schema: Schema, dialect: CsvDialect) -> None:
    """Add the kinds of the fields of ``data`` (whole records, no header) to ``counts`` (a
    :func:`csv_types.new_tally` of the schema's width), as the type pass counts them."""
    csv_types.classify_block(data, counts, **classify_options(schema, dialect))


def classify_options(schema: Schema, dialect: CsvDialect) -> dict[str, Any]:
    """The keyword arguments of :func:`csv_types.classify_block` for this schema and dialect:
    the label's index, the dialect's bytes, the null words and the decimal mark."""
    return {
        "label": schema.names.index(schema.label),
        "delim": dialect.delim_byte,
        "quote": dialect.quote_byte,
        "escape": dialect.escape_byte,
        "nulls": tuple(v.encode() for v in schema.null_values),
        "decimal": ord(getattr(dialect, "decimal", ".") or "."),
    }


@dataclass(frozen=True)
class _Records:
    """Where the records of one block are.

    Attributes:
        data: the block's bytes as ``uint8``.
        starts, ends: each record's bounds (a blank line is an empty record).
        first_lines: the line of the block (0-based) each record starts on; None when a
            record is a line.
        lines: the block's physical lines.
        quoted: the block holds a quote or escape character.
    """

    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    first_lines: np.ndarray | None
    lines: int
    quoted: bool

    @cached_property
    def nonblank(self) -> np.ndarray:
        """The indices of the records that are rows (not blank)."""
        return np.flatnonzero(self.ends > self.starts)

    def line_of(self, record: int) -> int:
        """The line of the block (0-based) a record starts on."""
        return int(self.first_lines[record]) if self.first_lines is not None else record

    def text(self, record: int) -> str:
        """A record's raw text (invalid UTF-8 replaced)."""
        return bytes(self.data[self.starts[record] : self.ends[record]]).decode("utf-8", "replace")


def _find_records(
    block: bytes,
    arr: np.ndarray,
    dialect: CsvDialect,
    bounds: RecordBounds | None,
    unquoted: bool,
) -> _Records:
    """The records of a block: lines when it holds no quote or escape character, else found
    by the quote state machine (or taken from ``bounds``)."""
    special = dialect.special_bytes
    quoted = not unquoted and (
        bounds is not None or (bool(special) and any(block.find(c) >= 0 for c in special))
    )
    if not quoted:
        starts, ends = csv_records.line_bounds(arr)
        return _Records(arr, starts, ends, None, int(starts.size), quoted=False)
    if bounds is not None:
        starts, ends, first_lines = bounds.starts, bounds.ends, bounds.first_lines
        # Line feeds: those before the last record (its first line) and from it on.
        last = int(starts[-1]) if len(starts) else 0
        n_lf = (int(first_lines[-1]) if len(starts) else 0) + block.count(b"\n", last)
    else:
        starts, ends, first_lines, _, n_lf = csv_records.record_bounds(
            arr, delim=dialect.delim_byte, quote=dialect.quote_byte, escape=dialect.escape_byte
        )
    lines = n_lf + (1 if len(block) and block[-1] != 0x0A else 0)
    return _Records(arr, starts, ends, first_lines, lines, quoted=True)


def _read_records(
    block: bytes,
    records: _Records,
    schema: Schema,
    *,
    source: str,
    lines_before: int,
    dialect: CsvDialect,
    fast: bool,
    count_types: tuple[np.ndarray, int] | None = None,
) -> readers.ParsedBlock:
    """The block's records read by the fastest reader path that can (see :mod:`.readers`):
    the key column as text (it is hashed as written, then converted)."""
    types = {c.name: c.arrow_type for c in schema.columns}
    if schema.key:
        types[schema.key] = pa.string()
    # Decimal commas are Arrow's (decimal_point); the kernel reads points.
    fast = (
        fast
        and dialect.delim_byte in csv_parse.FAST_DELIMITERS
        and dialect.decimal == "."
        and not dialect.skip_initial_space
    )
    inp = readers.BlockInput(
        block=block,
        starts=records.starts,
        ends=records.ends,
        nonblank=records.nonblank,
        schema=schema,
        types=types,
        dialect=dialect,
        source=source,
        lines_before=lines_before,
        count_types=count_types,
    )
    parsed = None
    if fast and not records.quoted:
        parsed = readers.read_fast(inp)
    elif fast:
        parsed = readers.read_mixed(inp)
    if parsed is None:
        parsed = readers.read_arrow(inp, records.quoted)
    return parsed


@dataclass
class _Converted:
    """A block's columns in their types, and the rows with a value that did not convert."""

    columns: list[pa.Array]
    bad: np.ndarray
    why: dict[int, str] = field(default_factory=dict)  # row -> the first reason it is bad

    def add(self, column: Column, bad: np.ndarray, text: pa.Array | None, decimal: str) -> None:
        """Record the rows ``bad`` of ``column`` (``text``: its values as written)."""
        for i in np.flatnonzero(bad & ~self.bad):
            self.why[int(i)] = f"column '{column.name}' is not {column.type}"
            if (
                text is not None
                and column.type == "float"
                and decimal == ","
                and "." in str(text[i])
            ):
                self.why[int(i)] += POINT_IN_DECIMAL_COMMA
        self.bad |= bad


def _convert(parsed: readers.ParsedBlock, schema: Schema, decimal: str) -> _Converted:
    """The parsed columns in their types: as read, or converted value by value when read as
    text (the key column stays text: see :func:`_convert_key`)."""
    out = _Converted([], np.zeros(parsed.table.num_rows, dtype=bool))
    for col, values in zip(schema.columns, parsed.table.columns, strict=True):
        values = arrow.contiguous(values)
        if parsed.as_text and not (col.type == "string" or col.name == schema.key):
            text = values
            values, bad = safe_convert(values, col.type, decimal)
            out.add(col, bad, text, decimal)
        out.columns.append(values)
    return out


def _convert_key(converted: _Converted, schema: Schema, key_index: int, decimal: str) -> np.ndarray:
    """Convert the key column (read as text) to its type; return the split hash of each row:
    of the key's text as written."""
    key = schema.column(schema.key)  # type: ignore[arg-type]
    text = converted.columns[key_index]
    if key.type != "string":
        values, bad = safe_convert(text, key.type, decimal)
        converted.add(key, bad, None, decimal)
        converted.columns[key_index] = values
    return hash_strings(text)


def _reject(
    records: _Records,
    record: int,
    lines_before: int,
    reason: str,
    detail: str,
    text: str | None = None,
) -> Reject:
    """A rejected record, with the line of the piece (1-based) it starts on and its text."""
    return Reject(
        line=lines_before + records.line_of(record) + 1,
        reason=reason,
        detail=detail,
        text=(records.text(record) if text is None else text)[:MAX_REJECT_TEXT],
    )


def parse_block(
    block: bytes,
    schema: Schema,
    *,
    lines_before: int,
    key_index: int | None = None,
    source: str = "CSV",
    fast: bool | None = None,
    dialect: CsvDialect | None = None,
    report: bool = True,
    bounds: RecordBounds | None = None,
    unquoted: bool = False,
    count_types: bool = False,
) -> Batch:
    """Parse a block of whole CSV records (no header) into a :class:`Batch`.

    Args:
        block: whole records of CSV, without the header.
        schema: the columns and their types.
        lines_before: lines of the piece before this block (for reject line numbers).
        key_index: index of the split key column, if any.
        source: names the file in error messages.
        fast: try the compiled fast path first (see the package docstring); None follows
            ``SHARDTRAIN_CSV_FAST``. Either way the result is the same.
        dialect: delimiter, quoting and escapes; None: :data:`DEFAULT_DIALECT`.
        report: log values stored changed (floats beyond float32: ±inf); False for samples
            parsed again later.
        bounds: the block's record bounds, when the caller found them already.
        unquoted: the caller knows the block holds no quote or escape character.
        count_types: also count the kinds of the fields as the type pass counts them, where
            the reader path does it as it parses (the fast one): :attr:`Batch.type_counts`.

    Raises:
        DataError: the block is not CSV the reader can parse.
    """
    dialect = dialect or DEFAULT_DIALECT
    records = _find_records(block, np.frombuffer(block, dtype=np.uint8), dialect, bounds, unquoted)
    nonblank = records.nonblank
    batch = Batch(
        table=None,  # set below, once the columns are converted
        row_hash=np.empty(0, np.uint64),
        rows_read=int(nonblank.size),
        blank_lines=int(records.starts.size - nonblank.size),
        lines=records.lines,
        bytes_read=len(block),
    )
    parsed = _read_records(
        block,
        records,
        schema,
        source=source,
        lines_before=lines_before,
        dialect=dialect,
        fast=readers.fast_path_enabled() if fast is None else fast,
        count_types=_expected_kinds(schema) if count_types else None,
    )

    # Row i of the parser (valid or invalid, 1-based `number`) is the i-th non-blank record.
    keep = np.ones(nonblank.size, dtype=bool)
    keep[np.array([bad.number - 1 for bad in parsed.invalid], dtype=np.int64)] = False
    row_records = nonblank[keep]  # the record of each parsed row
    for number, fields, text in parsed.invalid:
        if fields >= 0:
            reason, detail = "wrong_field_count", f"{fields} fields, expected {len(schema.names)}"
        else:
            reason, detail = "unreadable_line", "not UTF-8, or a carriage return inside a field"
        record = int(nonblank[number - 1])
        batch.rejects.append(_reject(records, record, lines_before, reason, detail, text or ""))

    converted = _convert(parsed, schema, dialect.decimal)
    key_hash = None
    if key_index is not None:
        key_hash = _convert_key(converted, schema, key_index, dialect.decimal)
    columns, bad = converted.columns, converted.bad

    if report:  # after the key's conversion: a float key is read as text first
        out_of_range, arrow_rows = parsed.out_of_range, parsed.arrow_rows
        if schema.key and schema.column(schema.key).type == "float":
            out_of_range = arrow_rows = None  # the kernel read the key as text: it flagged none
        floats = [
            (i, c.name, columns[i]) for i, c in enumerate(schema.columns) if c.type == "float"
        ]
        where = BlockRows(
            block=block,
            starts=records.starts,
            ends=records.ends,
            row_records=row_records,
            line_of=records.line_of,
            lines_before=lines_before,
            source=source,
            dialect=dialect,
        )
        warn_float32_overflow(floats, where, rows=out_of_range, scan=arrow_rows)

    label = columns[schema.names.index(schema.label)]
    missing_label = arrow.to_bools(label.is_null()) & ~bad
    for i in np.flatnonzero(bad):
        why = converted.why.get(int(i), "unparsable value")
        batch.rejects.append(_reject(records, int(row_records[i]), lines_before, "bad_value", why))
    for i in np.flatnonzero(missing_label):
        why = f"label '{schema.label}' is empty"
        batch.rejects.append(
            _reject(records, int(row_records[i]), lines_before, "missing_label", why)
        )
    batch.rejects.sort(key=lambda r: r.line or 0)  # CSV rejects always have a line

    accept = ~(bad | missing_label)
    table = pa.Table.from_arrays(columns, names=schema.names)
    if not accept.all():
        table = table.filter(arrow.from_numpy(accept))
        if key_hash is not None:
            key_hash = key_hash[accept]
    batch.table = table
    if key_hash is None:
        kept = row_records[accept]
        key_hash = xxh64.hash_slices(records.data, records.starts[kept], records.ends[kept])
    batch.row_hash = key_hash
    batch.type_counts = parsed.type_counts
    return batch


#: The type pass's kind (:mod:`shardtrain.kernels.csv_types`) each column type expects.
_EXPECTED_KIND = {
    "int": csv_types.INT,
    "float": csv_types.FLOAT,
    "bool": csv_types.BOOL,
    "string": csv_types.TEXT,
}


def _expected_kinds(schema: Schema) -> tuple[np.ndarray, int]:
    """``(expect, label)`` of :attr:`readers.BlockInput.count_types` for ``schema``."""
    expect = np.array([_EXPECTED_KIND[c.type] for c in schema.columns], dtype=np.int64)
    return expect, schema.names.index(schema.label)


__all__ = ["parse_block", "read_piece"]
