"""The four ways a block of whole CSV records becomes columns, all giving the same rows,
values and invalid records (see the package docstring):

* :func:`read_fast`: the compiled kernel (:mod:`shardtrain.kernels.csv_parse`), for blocks
  without quotes and with ``,``, ``;``, tab or ``|`` between fields;
* :func:`read_mixed`: a block with quotes: its unquoted records by the kernel, the quoted
  ones by Arrow, merged back in order;
* :func:`read_arrow`: Arrow's CSV reader, for every other block;
* :func:`read_linewise`: Python's csv module, record by record, for what Arrow cannot map
  back to records (invalid UTF-8, a carriage return inside a field, ``--skip-initial-space``).

Each returns a :class:`ParsedBlock`; :func:`~shardtrain.data.sources.csv.parse.parse_block`
turns it into a batch with rejects.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import FALSE_VALUES, TRUE_VALUES, Schema
from shardtrain.errors import DataError
from shardtrain.kernels import arrow, csv_parse, csv_records

#: Environment variable that turns the compiled CSV fast path off when set to ``0``.
FAST_PATH_ENV = "SHARDTRAIN_CSV_FAST"

#: The fast path's code for each Arrow type the reader converts columns to.
_FAST_KINDS = {
    pa.float32(): csv_parse.KIND_FLOAT,
    pa.int64(): csv_parse.KIND_INT,
    pa.bool_(): csv_parse.KIND_BOOL,
    pa.string(): csv_parse.KIND_STRING,
}


class InvalidRecord(NamedTuple):
    """A record no row came from."""

    number: int  #: its position among the block's non-blank records, from 1
    fields: int  #: the fields it has; -1 when it cannot be read (not UTF-8, a bare CR)
    text: str


@dataclass(frozen=True)
class BlockInput:
    """A block of whole records and what every reader path reads it with.

    Attributes:
        block: the records' bytes (no header).
        starts, ends: each record's bounds (a blank line is an empty record).
        nonblank: the indices of the non-blank records: the rows.
        schema: the columns.
        types: the Arrow type each column is read as (the split key: text).
        dialect: how the block is written.
        source: names the file in error messages.
        lines_before: lines of the piece before the block (for error messages).
    """

    block: bytes
    starts: np.ndarray
    ends: np.ndarray
    nonblank: np.ndarray
    schema: Schema
    types: dict[str, pa.DataType]
    dialect: CsvDialect
    source: str = "CSV"
    lines_before: int = 0
    #: ``(expect, label)`` when the kinds of the fields are to be counted as the type pass
    #: counts them (:func:`csv_parse.parse_block_fast`'s ``count_types``; the fast path only).
    count_types: tuple[np.ndarray, int] | None = None

    @property
    def data(self) -> np.ndarray:
        """The block's bytes as ``uint8`` (no copy)."""
        return np.frombuffer(self.block, dtype=np.uint8)


@dataclass(frozen=True)
class ParsedBlock:
    """What a reader made of a block's non-blank records.

    Attributes:
        table: one row per valid record, in record order; columns in schema order, typed as
            asked unless ``as_text``.
        invalid: the records with the wrong number of fields or unreadable, in order.
        as_text: every column was read as text (a value did not parse as its type, or the
            block was read record by record): the caller converts and rejects value by value.
        out_of_range: the table rows the kernel flagged for a float beyond float32's range;
            None when not known (Arrow converted, or ``as_text``).
        arrow_rows: with ``out_of_range``, the table rows Arrow converted (the quoted records
            of a mixed block), which the caller checks the whole way.
    """

    table: pa.Table
    invalid: list[InvalidRecord]
    as_text: bool
    out_of_range: np.ndarray | None = None
    arrow_rows: np.ndarray | None = None
    #: The kinds of the block's fields as the type pass counts them, when asked for
    #: (:attr:`BlockInput.count_types`) and counted by this path (the fast one); else None.
    type_counts: np.ndarray | None = None


def _convert_options(
    schema: Schema, types: dict[str, pa.DataType], decimal: str = "."
) -> pacsv.ConvertOptions:
    # Quoted null words are missing too ("" and "NA" as much as NA): pandas' rule, and the
    # same in every block whichever parser reads it. Arrow reads a decimal comma with the
    # same correctly rounded float32 conversion as the point (checked on 200,000 values).
    return pacsv.ConvertOptions(
        column_types=types,
        decimal_point=decimal,
        null_values=list(schema.null_values),
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
        true_values=list(TRUE_VALUES),
        false_values=list(FALSE_VALUES),
    )


@contextlib.contextmanager
def _undecodable_rows_unreported(handler: Any) -> Iterator[None]:
    """Keep quiet the one error pyarrow reports itself: a bad row whose text is not UTF-8
    cannot be decoded for ``handler``; pyarrow prints "Exception ignored in ..." with a
    traceback (``sys.unraisablehook``) and then raises the row error, which
    :func:`read_arrow` handles (the block is read record by record, that record rejected)."""
    previous = sys.unraisablehook

    def hook(info: Any) -> None:
        if not (isinstance(info.exc_value, UnicodeDecodeError) and info.object is handler):
            previous(info)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _read(
    inp: BlockInput, types: dict[str, pa.DataType], invalid: list[InvalidRecord], quoted: bool
) -> pa.Table:
    """Arrow's typed read of the block, the invalid rows appended to ``invalid``."""
    block, schema, dialect = inp.block, inp.schema, inp.dialect

    def on_invalid(row: pacsv.InvalidRow) -> str:
        invalid.append(InvalidRecord(row.number, row.actual_columns, row.text))
        return "skip"

    with _undecodable_rows_unreported(on_invalid):
        return pacsv.read_csv(
            pa.py_buffer(block),
            read_options=pacsv.ReadOptions(
                column_names=schema.names, use_threads=False, block_size=len(block) + 1
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=dialect.delimiter or ",",
                quote_char=dialect.quote_char or False,
                escape_char=dialect.escape_char or False,
                invalid_row_handler=on_invalid,
                newlines_in_values=quoted,
            ),
            convert_options=_convert_options(schema, types, dialect.decimal),
        )


def read_linewise(inp: BlockInput) -> ParsedBlock:
    """Slow path: each record read by Python's csv module; string columns and invalid rows."""
    import csv

    block, starts, ends, schema, dialect = inp.block, inp.starts, inp.ends, inp.schema, inp.dialect

    width = len(schema.names)
    rows: list[list[str]] = []
    invalid: list[InvalidRecord] = []
    csv.field_size_limit(1 << 30)
    for number, li in enumerate(inp.nonblank, start=1):
        raw = block[starts[li] : ends[li]]
        try:
            text = bytes(raw).decode("utf-8")
            records = list(dialect.python_reader(text))
        except (UnicodeDecodeError, csv.Error):  # not UTF-8; a bare carriage return in a field
            invalid.append(InvalidRecord(number, -1, bytes(raw).decode("utf-8", "replace")))
            continue
        if len(records) != 1:
            invalid.append(InvalidRecord(number, -1, text))
        elif len(records[0]) != width:
            invalid.append(InvalidRecord(number, len(records[0]), text))
        else:
            rows.append(records[0])
    nulls = arrow.strings(schema.null_values)
    columns = []
    for values in zip(*rows, strict=True) if rows else [[] for _ in range(width)]:
        arr = arrow.strings(values)
        columns.append(pc.if_else(pc.is_in(arr, value_set=nulls), arrow.null(pa.string()), arr))
    return ParsedBlock(pa.Table.from_arrays(columns, names=schema.names), invalid, as_text=True)


def fast_path_enabled() -> bool:
    """Whether blocks may take the compiled fast path (``SHARDTRAIN_CSV_FAST`` is not ``0``)."""
    return os.environ.get(FAST_PATH_ENV, "1").strip() != "0"


def read_fast(inp: BlockInput) -> ParsedBlock | None:
    """The fast path: the table, invalid records and ``as_text`` as :func:`read_arrow` finds
    them, with the rows the kernel flagged for a float beyond float32's range.

    The block holds no quote or escape character. Returns None when it must go to Arrow (see
    :func:`csv_parse.parse_block_fast`).
    """
    schema, types, dialect, arr = inp.schema, inp.types, inp.dialect, inp.data
    starts, ends = inp.starts[inp.nonblank], inp.ends[inp.nonblank]  # the rows' lines
    names = schema.names
    kinds = np.array([_FAST_KINDS[types[n]] for n in names], dtype=np.int8)
    nulls = tuple(v.encode() for v in schema.null_values)
    delimiter, quote = dialect.delim_byte, dialect.quote_byte
    parsed = csv_parse.parse_block_fast(
        arr, starts, ends, kinds, nulls, delimiter=delimiter, quote=quote,
        count_types=inp.count_types,
    )  # fmt: skip
    if parsed is None:
        return None
    type_counts = parsed.type_counts  # of the typed reading, which reads every field
    as_text = False
    if (parsed.row_status == csv_parse.STATUS_BAD_VALUE).any():
        # Arrow fails the typed read of a block with a bad value, and parse_block then reads
        # every column as text and converts each with safe_convert. Reproduce that exactly:
        # the same text columns, then the same conversion code.
        kinds = np.full(len(names), csv_parse.KIND_STRING, dtype=np.int8)
        parsed = csv_parse.parse_block_fast(
            arr, starts, ends, kinds, nulls, delimiter=delimiter, quote=quote
        )
        if parsed is None:
            return None
        as_text = True
    invalid = _kernel_invalid(parsed, arr, starts, ends)
    if invalid is None:
        return None  # what Arrow does with such a line is Arrow's to decide
    rows = np.flatnonzero(parsed.row_status == csv_parse.STATUS_OK) if invalid else None
    flagged = parsed.out_of_range if rows is None else parsed.out_of_range[rows]
    return ParsedBlock(
        pa.Table.from_arrays(csv_parse.to_arrow(parsed, kinds, rows), names=names),
        invalid,
        as_text,
        out_of_range=None if as_text else np.flatnonzero(flagged),
        type_counts=type_counts,
    )


def _kernel_invalid(
    parsed: csv_parse.FastColumns, arr: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> list[InvalidRecord] | None:
    """The records the kernel found with the wrong number of fields (``starts``/``ends``: the
    bounds of the records it read); None when one is not UTF-8 (Arrow's to read)."""
    invalid = []
    for i in np.flatnonzero(parsed.row_status == csv_parse.STATUS_FIELD_COUNT).tolist():
        try:
            text = arr[starts[i] : ends[i]].tobytes().decode("utf-8")
        except UnicodeDecodeError:
            return None
        invalid.append(InvalidRecord(i + 1, int(parsed.field_count[i]), text))
    return invalid


#: A quoted block goes to Arrow whole when more than this share of its records is quoted.
MAX_DEFERRED_SHARE = 0.5


def read_mixed(inp: BlockInput) -> ParsedBlock | None:
    """A block with quotes: its records without a quote by the kernel, the others by Arrow.

    Gives the table, invalid records and ``as_text`` that :func:`read_arrow` gives for the
    whole block, value for value, and the table rows that the kernel flagged for a float
    beyond float32's range and those Arrow read (both None when read as text). The quoted
    records form a block of their own for Arrow, the kernel reads the rest (``defer``), and
    the two are merged back in record order. The
    whole-block rules are kept: a bad value anywhere makes every column text (converted
    afterwards), and a record with the wrong number of fields anywhere makes the block read
    record by record (:func:`read_linewise`, whose text the kernel's string columns equal
    for unquoted records). Returns None when the block is better (or must be) read whole:
    most records are quoted, invalid UTF-8, an escape character.
    """
    block, schema, types, dialect, arr = inp.block, inp.schema, inp.types, inp.dialect, inp.data
    if dialect.escape_char is not None:
        return None  # the kernel does not stop at escapes
    names = schema.names
    nulls = tuple(v.encode() for v in schema.null_values)
    rec_starts, rec_ends = inp.starts[inp.nonblank], inp.ends[inp.nonblank]

    def kernel(kinds: np.ndarray) -> csv_parse.FastColumns | None:
        return csv_parse.parse_block_fast(
            arr, rec_starts, rec_ends, kinds, nulls,
            delimiter=dialect.delim_byte, quote=dialect.quote_byte, defer=True,
        )  # fmt: skip

    typed_kinds = np.array([_FAST_KINDS[types[n]] for n in names], dtype=np.int8)
    parsed = kernel(typed_kinds)
    if parsed is None:
        return None
    status = parsed.row_status
    deferred = np.flatnonzero(status == csv_parse.STATUS_DEFERRED)
    if deferred.size > MAX_DEFERRED_SHARE * max(len(status), 1):
        return None
    # The quoted records, as a block of their own for Arrow.
    view = memoryview(block)
    sub = b"\n".join(view[rec_starts[i] : rec_ends[i]] for i in deferred.tolist())
    sub_starts, sub_ends, _, _, _ = csv_records.record_bounds(
        sub, delim=dialect.delim_byte, quote=dialect.quote_byte, escape=dialect.escape_byte
    )
    lengths = rec_ends[deferred] - rec_starts[deferred]
    if len(sub_starts) != deferred.size or not np.array_equal(sub_ends - sub_starts, lengths):
        return None  # the records do not come back as they were: read the block whole
    quoted_input = dataclasses.replace(
        inp, block=sub, starts=sub_starts, ends=sub_ends, nonblank=np.arange(deferred.size)
    )

    def empty(column_types: dict[str, pa.DataType]) -> pa.Table:
        return pa.table({n: pa.array([], column_types[n]) for n in names})

    if deferred.size:
        quoted_part = read_arrow(quoted_input, True)
        table_q, invalid_q, converted_q = (
            quoted_part.table,
            quoted_part.invalid,
            quoted_part.as_text,
        )
    else:  # quote characters only in blank... or none left: nothing for Arrow
        table_q, invalid_q, converted_q = empty(types), [], False
    kernel_invalid = np.flatnonzero(status == csv_parse.STATUS_FIELD_COUNT)
    kernel_bad = bool((status == csv_parse.STATUS_BAD_VALUE).any())
    if kernel_invalid.size or invalid_q:
        # Whole, the block would be read record by record: the same for the quoted part.
        if not deferred.size:
            table_q = empty({n: pa.string() for n in names})
        elif not invalid_q:  # (with invalid records, read_arrow read them one by one already)
            linewise = read_linewise(quoted_input)
            table_q, invalid_q = linewise.table, linewise.invalid
        converted = True
    elif kernel_bad or converted_q:
        # Whole, the block would be read as text: the same for the quoted part.
        if not deferred.size:
            table_q = empty({n: pa.string() for n in names})
        elif not converted_q:
            invalid_q = []
            try:
                text_types = {n: pa.string() for n in names}
                table_q = _read(quoted_input, text_types, invalid_q, quoted=True)
            except pa.ArrowInvalid:
                linewise = read_linewise(quoted_input)
                table_q, invalid_q = linewise.table, linewise.invalid
        converted = True
    else:
        converted = False
    if converted:
        parsed = kernel(np.full(len(names), csv_parse.KIND_STRING, dtype=np.int8))
        if parsed is None or not np.array_equal(
            np.flatnonzero(parsed.row_status == csv_parse.STATUS_DEFERRED), deferred
        ):
            return None
    kinds = typed_kinds if not converted else np.full(len(names), csv_parse.KIND_STRING, np.int8)
    invalid = _kernel_invalid(parsed, arr, rec_starts, rec_ends)
    if invalid is None:
        return None
    kernel_rows = np.flatnonzero(parsed.row_status == csv_parse.STATUS_OK)
    bad_q = np.array([number - 1 for number, _, _ in invalid_q], dtype=np.int64)
    invalid.extend(
        InvalidRecord(int(deferred[number - 1]) + 1, actual, text)
        for number, actual, text in invalid_q
    )
    invalid.sort(key=lambda item: item[0])
    quoted_rows = np.delete(deferred, bad_q) if bad_q.size else deferred
    if table_q.num_rows != quoted_rows.size:
        return None
    # One take from both tables: every kernel line (zero-copy), then Arrow's rows.
    kernel_table = pa.Table.from_arrays(csv_parse.to_arrow(parsed, kinds), names=names)
    table_q = table_q.cast(kernel_table.schema)
    both = pa.concat_tables([kernel_table, table_q])
    keys = np.concatenate([kernel_rows, quoted_rows])
    sources = np.concatenate([kernel_rows, len(rec_starts) + np.arange(quoted_rows.size)])
    by_record = np.argsort(keys, kind="stable")
    table = both.take(arrow.from_numpy(sources[by_record])).combine_chunks()
    if converted:  # read as text: the kernel's flags do not apply
        return ParsedBlock(table, invalid, as_text=True)
    # Table rows of the kernel's flagged records, and of Arrow's (to check the whole way).
    keys = keys[by_record]
    flagged = np.searchsorted(keys, np.flatnonzero(parsed.out_of_range))
    return ParsedBlock(
        table,
        invalid,
        as_text=False,
        out_of_range=flagged,
        arrow_rows=np.searchsorted(keys, quoted_rows),
    )


def _is_utf8(block: bytes | memoryview) -> bool:
    try:
        codecs.utf_8_decode(block, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


def read_arrow(inp: BlockInput, quoted: bool) -> ParsedBlock:
    """Arrow's reading of a block (``quoted``: line breaks may occur inside values).

    Raises:
        DataError: the block is not CSV Arrow can parse.
    """
    invalid: list[InvalidRecord] = []
    if inp.dialect.skip_initial_space:  # Arrow has no such option: Python's csv module has
        return read_linewise(inp)
    try:
        table = _read(inp, inp.types, invalid, quoted)
        converted = False
    except pa.ArrowInvalid as exc:
        text = str(exc).lower()
        if "utf8" in text or "utf-8" in text or not _is_utf8(inp.block):
            # Invalid UTF-8 (Arrow also raises its row error when the row it would hand to
            # the invalid-row handler is not UTF-8): record by record, that row rejected.
            return read_linewise(inp)
        elif "conversion error" not in text and "invalid value" not in text:
            raise DataError(
                f"{inp.source}: cannot parse the CSV near line {inp.lines_before + 1} of this part "
                f"({str(exc).splitlines()[0]})"
            ) from exc
        else:
            invalid = []
            try:
                text_types = {n: pa.string() for n in inp.schema.names}
                table = _read(inp, text_types, invalid, quoted)
            except pa.ArrowInvalid:  # a bad value *and* invalid UTF-8 in one block
                return read_linewise(inp)
            converted = True

    if table.num_rows + len(invalid) != inp.nonblank.size or (quoted and invalid):
        # The parser's rows do not map to our records (or, with line breaks in values, Arrow
        # does not number its invalid rows): read this block record by record instead.
        return read_linewise(inp)
    return ParsedBlock(table, invalid, converted)
