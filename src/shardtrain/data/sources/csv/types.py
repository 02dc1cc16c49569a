"""Column types by all rows (``--infer-types all``, the default): every column typed by all of
its values, from counts of the kind of every field (:mod:`shardtrain.kernels.csv_types`).

The tasks make those counts as they parse (the parser's ``count_types``), and the run's settle
step decides the types from them with :func:`decide_types`. :func:`type_pass` makes the same
counts by a pass of its own over pieces, in threads (planning runs it for
``--skip-initial-space`` files only); :func:`all_row_types` is the reference both are tested
against (every value converted and counted in Python), and what reads files with
``--skip-initial-space``.

A column of numbers holding a few values that are not numbers (none shaped like a code) may
stay numeric under the run's ``--max-bad-fraction``
(:meth:`~shardtrain.data.schema.TypeTally.type`): the type pass counts kinds, not values, so
it looks at those values again in the pieces that hold some (:func:`_look_at_non_numbers`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
from collections.abc import Mapping

import numpy as np

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import (
    Column,
    ColumnType,
    Schema,
    SchemaOverrides,
    TypeTally,
    number_pattern,
)
from shardtrain.data.sources.base import Piece, SourceFile, available_cpus, open_source
from shardtrain.data.sources.csv.align import iter_record_blocks
from shardtrain.data.sources.csv.parse import classify_options, read_piece
from shardtrain.kernels import arrow, csv_records, csv_types

log = logging.getLogger(__name__)

#: Bumped whenever the type pass's rules change, so a stored plan's types are found again
#: (2: a few values that are not numbers no longer make a column of numbers a string).
TYPE_PASS_VERSION = 2


def as_text(schema: Schema) -> Schema:
    """``schema`` with every column read as text (and no split key)."""
    return Schema(
        columns=tuple(Column(c.name, "string") for c in schema.columns),
        label=schema.label,
        null_values=schema.null_values,
    )


def infer_types_from_all_rows(
    sources: list[SourceFile],
    schema: Schema,
    dialect: CsvDialect,
    overrides: SchemaOverrides | None = None,
    block_bytes: int = 4 * 1024 * 1024,
    max_bad_fraction: float = 0.0,
) -> Schema:
    """``schema`` with every column not set by ``overrides`` typed by all of its values.

    Every file is read once, every column as text, and each value counted by a
    :class:`~shardtrain.data.schema.TypeTally` (same rules as the sample's inference): a zip
    code column that turns ``98115-4820`` after 230,000 rows is a string, a fee column that is
    ``0`` for thousands of rows and then ``45.12`` is a float, and no valid row is rejected
    for a type the sample did not see; a column of numbers with a few values that are not
    (at most ``max_bad_fraction``, none shaped like a code) is numeric. Costs one parse of the
    data, in one process: planning uses :func:`type_pass` instead, which finds the same types
    far faster.
    """
    types = all_row_types(sources, schema, dialect, block_bytes, max_bad_fraction=max_bad_fraction)
    return apply_all_row_types(schema, types, overrides)


def all_row_types(
    sources: list[SourceFile],
    schema: Schema,
    dialect: CsvDialect,
    block_bytes: int = 4 * 1024 * 1024,
    *,
    max_bad_fraction: float = 0.0,
    found: dict[str, TypeTally] | None = None,
) -> dict[str, ColumnType | None]:
    """Every column's type by all of its values (None: only nulls), reading every file once
    (see :func:`infer_types_from_all_rows`).

    The reference: every value converted to an Arrow string by the sharder's own reader and
    counted by :class:`~shardtrain.data.schema.TypeTally`, in one process. :func:`type_pass`
    finds the same types at a fraction of the cost (tests check both agree) and is what
    planning runs, except with ``--skip-initial-space``, which only this path reads.
    ``max_bad_fraction`` and ``found`` as in :func:`type_pass` (the values that are not
    numbers are named without their line here)."""
    text = as_text(schema)
    tallies = [TypeTally(decimal=dialect.decimal) for _ in schema.columns]
    for src in sources:
        piece = Piece(src.uri, 0, src.size, src.gzip)
        for batch in read_piece(piece, text, block_bytes=block_bytes, dialect=dialect):
            for tally, values in zip(tallies, batch.table.columns, strict=True):
                tally.add(arrow.contiguous(values))
    for col, tally in zip(schema.columns, tallies, strict=True):
        _keep(col.name, tally, found)
    return {
        col.name: tally.type(max_bad_fraction)
        for col, tally in zip(schema.columns, tallies, strict=True)
    }


#: Bytes of one block of the type pass: small enough to stay in the CPU cache between the read
#: and the kernel (2 MiB: ~5% less CPU than 8 MiB blocks on the quest CSV).
TYPE_PASS_BLOCK_BYTES = 2 * 1024 * 1024


def type_pass(
    pieces: list[Piece],
    schema: Schema,
    dialect: CsvDialect,
    *,
    threads: int | None = None,
    block_bytes: int = TYPE_PASS_BLOCK_BYTES,
    max_bad_fraction: float = 0.0,
    found: dict[str, TypeTally] | None = None,
) -> dict[str, ColumnType | None]:
    """Every column's type by all of its values (None: only nulls): the same answer as
    :func:`all_row_types`, found by classifying the raw bytes of every field without
    converting it (:mod:`shardtrain.kernels.csv_types`), over the planner's pieces in
    parallel.

    Each piece is read as a task reads it (the records that begin in it, the first found by
    :func:`~shardtrain.data.sources.csv.align.iter_record_blocks`), in blocks of whole
    records as the tasks will read it (gzip files whole, other encodings transcoded to
    UTF-8), classified by a compiled kernel that releases the GIL -- so ``threads`` threads
    run on as many cores without a process pool -- and the per-column counts are added up.
    Only rows the sharder accepts are counted (right field count, label present). Values
    beyond float32's range are logged here, per column, before any shard is written.

    A column of numbers holding a few values that are not (at most ``max_bad_fraction`` of
    them) is numeric unless one of those looks like a code (see
    :meth:`~shardtrain.data.schema.TypeTally.type`): the pieces whose counts show such values
    are looked at again (:func:`_look_at_non_numbers`). The tallies of such columns are put
    in ``found``: their :meth:`~shardtrain.data.schema.TypeTally.note` says what was decided,
    and with them the types can be decided again for another fraction without reading the
    data.

    With ``--skip-initial-space`` (read by Python's csv module) this is :func:`all_row_types`.
    """
    if dialect.skip_initial_space:
        ends: dict[str, int] = {}
        for p in pieces:
            ends[p.uri] = max(ends.get(p.uri, 0), p.end)
        return all_row_types(
            [SourceFile(u, e, "") for u, e in ends.items()],
            schema,
            dialect,
            max_bad_fraction=max_bad_fraction,
            found=found,
        )
    from concurrent.futures import ThreadPoolExecutor

    text = as_text(schema)
    classify = classify_options(schema, dialect)

    def count(piece: Piece) -> np.ndarray:
        tally = csv_types.new_tally(len(schema.columns))
        for block in iter_record_blocks(piece, text, block_bytes, dialect):
            csv_types.classify_block(block.data, tally, **classify)
        return tally

    workers = max(1, min(threads or available_cpus(), len(pieces)))
    if workers == 1:
        tallies = [count(p) for p in pieces]
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="type-pass") as pool:
            tallies = list(pool.map(count, pieces))
    return decide_types(
        pieces, tallies, schema, dialect, max_bad_fraction=max_bad_fraction, found=found
    )


def decide_types(
    pieces: list[Piece],
    piece_counts: list[np.ndarray],
    schema: Schema,
    dialect: CsvDialect,
    *,
    max_bad_fraction: float = 0.0,
    found: dict[str, TypeTally] | None = None,
) -> dict[str, ColumnType | None]:
    """Every column's type from the type pass's counts of ``pieces`` (``piece_counts[i]``
    counts the fields of ``pieces[i]``; pieces start at record starts): by planning's pass
    (:func:`type_pass`) or counted by the tasks as they read
    (:func:`~.parse.count_block_types`).

    The values that are not numbers of the columns whose type may depend on them are looked
    at in the pieces whose counts hold some (:func:`_look_at_non_numbers`); ``found`` and the
    warnings about values beyond float32's range are :func:`type_pass`'s."""
    decimal = getattr(dialect, "decimal", ".") or "."
    total = (
        np.sum(piece_counts, axis=0) if piece_counts else csv_types.new_tally(len(schema.columns))
    )
    columns = [type_tally(counts, decimal) for counts in total]
    if any(t.needs_shapes() for t in columns):
        _look_at_non_numbers(pieces, piece_counts, columns, schema, dialect, TYPE_PASS_BLOCK_BYTES)
    types: dict[str, ColumnType | None] = {}
    for col, counts, tally in zip(schema.columns, total, columns, strict=True):
        types[col.name] = tally.type(max_bad_fraction)
        _keep(col.name, tally, found)
        beyond = int(counts[_BEYOND_FLOAT32_CODES].sum())
        if beyond and types[col.name] == "float":
            log.warning(
                "column '%s': %d value(s) beyond the float32 range will be stored as ±inf or 0 "
                "(make the column a string in --schema to keep them exact)",
                col.name,
                beyond,
            )
    return types


#: The codes (see :mod:`shardtrain.kernels.csv_types`) of numbers beyond float32's range.
_BEYOND_FLOAT32_CODES = np.flatnonzero(
    np.arange(csv_types.N_CODES) & (csv_types.F32_OVERFLOW | csv_types.F32_UNDERFLOW)
)
#: The codes of fields that are neither missing nor numbers (text and booleans).
_NON_NUMBER_CODES = np.flatnonzero(
    np.isin(np.arange(csv_types.N_CODES) & csv_types.KIND_MASK, (csv_types.TEXT, csv_types.BOOL))
)


def _keep(name: str, tally: TypeTally, found: dict[str, TypeTally] | None) -> None:
    """Keep in ``found`` the tally of a column whose non-numbers decided its type
    (:meth:`~shardtrain.data.schema.TypeTally.noteworthy`)."""
    if found is not None and tally.noteworthy():
        found[name] = tally


#: The values that are not numbers of mostly numeric columns are looked for in parts of about
#: this many bytes of whole records (:func:`_look_at_non_numbers`): the kernel finds the parts
#: that hold some, and only those are read field by field in Python.
NON_NUMBER_PART_BYTES = 16 * 1024
#: At most this many parts are read field by field (16 MiB); a column whose non-numbers are
#: spread wider is decided by those found in them.
NON_NUMBER_PARTS = 1024
#: Lines before a piece are counted (to name a value's line in its file) when the piece starts
#: at most this far into its file; past it, the line is given from the piece's start.
LINE_COUNT_BYTES = 1 << 30


def _look_at_non_numbers(
    pieces: list[Piece],
    piece_counts: list[np.ndarray],
    tallies: list[TypeTally],
    schema: Schema,
    dialect: CsvDialect,
    block_bytes: int,
) -> None:
    """Find the values that are not numbers of the columns whose type may depend on them
    (:meth:`TypeTally.needs_shapes`, whatever the run's ``--max-bad-fraction``) and show
    them to their tallies (:meth:`TypeTally.see`), with their file and line.

    The type pass counts kinds, not values: the pieces whose counts (``piece_counts``) hold
    such values are read again, each block classified by the kernel; a block that holds some
    is cut at record starts (:func:`csv_records.record_bounds`) into parts of about
    :data:`NON_NUMBER_PART_BYTES`, each classified again, and the records of the parts that
    hold some are read field by field (Python's csv module, in the dialect). Only rows the
    type pass counts are looked at (right field count, label present, valid UTF-8). It stops
    when every such value has been seen, when a column's values include a code (it is a
    string whatever the others are), or after :data:`NON_NUMBER_PARTS` parts.
    """
    wanted = {i for i, t in enumerate(tallies) if t.needs_shapes()}
    left = {i: tallies[i].non_numbers for i in wanted}
    text = as_text(schema)
    label, width = schema.names.index(schema.label), len(schema.columns)
    number = re.compile(number_pattern(dialect.decimal))
    budget = NON_NUMBER_PARTS
    counted: dict[str, tuple[int, int]] = {}  # URI -> (bytes, line feeds) counted so far
    classify = classify_options(schema, dialect)

    def holds(data: np.ndarray) -> bool:
        counts = csv_types.new_tally(len(schema.columns))
        csv_types.classify_block(data, counts, **classify)
        return any(counts[i, _NON_NUMBER_CODES].any() for i in left)

    def look(record: bytes, where: str) -> None:
        try:
            fields = next(dialect.python_reader(record.decode("utf-8")), [])
        except UnicodeDecodeError:
            return  # rejected by the reader, not counted by the type pass
        if len(fields) != width or fields[label] in schema.null_values:
            return  # not a row the type pass counted
        for i in list(left):
            value = fields[i]
            if value in schema.null_values or number.match(value):
                continue
            tallies[i].see(value, where)
            left[i] -= 1
            if not left[i] or tallies[i].codes:
                del left[i]  # all seen, or a code: a string whatever the rest

    for p, piece in enumerate(pieces):
        if not left or not budget:
            return
        if not any(piece_counts[p][i, _NON_NUMBER_CODES].any() for i in left):
            continue
        lines_before = 1 if piece.start == 0 and dialect.header else 0
        # The pieces start at record starts (where their tasks read them from).
        known = piece.start if piece.start > 0 else None
        blocks = iter_record_blocks(piece, text, block_bytes, dialect, known_start=known)
        for record_block in blocks:
            block = record_block.data
            arr = np.frombuffer(block, np.uint8)
            if holds(arr):
                starts, ends, first_lines, _, _ = csv_records.record_bounds(
                    arr,
                    delim=dialect.delim_byte,
                    quote=dialect.quote_byte,
                    escape=dialect.escape_byte,
                )
                cuts = np.searchsorted(
                    starts, np.arange(NON_NUMBER_PART_BYTES, len(block), NON_NUMBER_PART_BYTES)
                )
                bounds = np.unique(np.concatenate([[0], cuts, [len(starts)]]))
                for a, b in itertools.pairwise(bounds.tolist()):
                    end = int(starts[b]) if b < len(starts) else len(block)
                    if a == b or not left or not budget or not holds(arr[int(starts[a]) : end]):
                        continue
                    budget -= 1
                    before = _lines_before(piece, counted)
                    for r in range(a, b):
                        line = lines_before + int(first_lines[r]) + 1  # from the piece's start
                        look(block[int(starts[r]) : int(ends[r])], _where(piece, before, line))
                if not left or not budget:
                    return
            lines_before += block.count(b"\n") + (1 if block[-1:] != b"\n" else 0)


def _lines_before(piece: Piece, counted: dict[str, tuple[int, int]]) -> int | None:
    """The lines of a piece's file before it (line feeds of the raw bytes, which no character
    of a file cut into pieces holds: :attr:`CsvDialect.cuttable`); None when the piece starts
    more than :data:`LINE_COUNT_BYTES` into the file (not worth reading it all again).
    ``counted`` keeps how far each file was counted, so pieces in order read it once."""
    if piece.start == 0:
        return 0
    if piece.start > LINE_COUNT_BYTES:
        return None
    pos, count = counted.get(piece.uri, (0, 0))
    if pos > piece.start:
        pos, count = 0, 0
    with open_source(piece.uri, gzip=False) as f:
        f.seek(pos)
        while pos < piece.start:
            chunk = f.read(min(16 << 20, piece.start - pos))
            if not chunk:
                break
            count, pos = count + chunk.count(b"\n"), pos + len(chunk)
    counted[piece.uri] = (pos, count)
    return count


def _where(piece: Piece, lines_before: int | None, line: int) -> str:
    """``URI line N``: line ``line`` of ``piece`` (counted from its start) in its file."""
    if lines_before is None:
        return f"{piece.uri} line {line} after byte {piece.start:,}"
    return f"{piece.uri} line {lines_before + line}"


def type_tally(counts: np.ndarray, decimal: str = ".") -> TypeTally:
    """A column's :class:`~shardtrain.data.schema.TypeTally` from its counts per code
    (a row of a :func:`csv_types.new_tally`), for numbers with the decimal mark ``decimal``."""
    codes = np.arange(csv_types.N_CODES)
    kind = codes & csv_types.KIND_MASK
    number = (kind == csv_types.INT) | (kind == csv_types.FLOAT)
    ints = kind == csv_types.INT
    return TypeTally(
        decimal=decimal,
        present=int(counts[codes != csv_types.MISSING].sum()),
        bools=int(counts[kind == csv_types.BOOL].sum()),
        numbers=int(counts[number].sum()),
        ints=int(counts[ints].sum()),
        leading_zero=bool(counts[number & ((codes & csv_types.LEADING_ZERO) != 0)].any()),
        beyond_int64=bool(counts[ints & ((codes & csv_types.BEYOND_INT64) != 0)].any()),
    )


def apply_all_row_types(
    schema: Schema, types: Mapping[str, ColumnType | None], overrides: SchemaOverrides | None = None
) -> Schema:
    """``schema`` with the types of :func:`all_row_types`, except where ``overrides`` set one
    (a column of only nulls is a string)."""
    forced = overrides.types if overrides is not None else {}
    columns = []
    for col in schema.columns:
        typ = col.type if col.name in forced else (types[col.name] or "string")
        if typ != col.type:
            log.info("column '%s': %s by all rows (%s by the sample)", col.name, typ, col.type)
        columns.append(dataclasses.replace(col, type=typ))
    return dataclasses.replace(schema, columns=tuple(columns))
