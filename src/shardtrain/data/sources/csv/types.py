"""Column types by all rows (``--infer-types all``, the default): every column typed by all of
its values at planning, before any shard is written.

:func:`type_pass` is what planning runs: the aligned pieces are read once more, in threads,
and every field is classified from its raw bytes by a compiled kernel
(:mod:`shardtrain.kernels.csv_types`) without being converted. :func:`all_row_types` is the
reference it is tested against (every value converted and counted in Python), and what reads
files with ``--skip-initial-space``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import numpy as np

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import (
    Column,
    ColumnType,
    Schema,
    SchemaOverrides,
    TypeTally,
)
from shardtrain.data.sources.base import Piece, SourceFile, available_cpus
from shardtrain.data.sources.csv.align import iter_record_blocks
from shardtrain.data.sources.csv.parse import read_piece
from shardtrain.kernels import arrow, csv_types

log = logging.getLogger(__name__)

#: Bumped whenever the type pass's rules change, so a stored plan's types are found again.
TYPE_PASS_VERSION = 1


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
) -> Schema:
    """``schema`` with every column not set by ``overrides`` typed by all of its values.

    Every file is read once, every column as text, and each value counted by a
    :class:`~shardtrain.data.schema.TypeTally` (same rules as the sample's inference): a zip
    code column that turns ``98115-4820`` after 230,000 rows is a string, a fee column that is
    ``0`` for thousands of rows and then ``45.12`` is a float, and no valid row is rejected
    for a type the sample did not see. Costs one parse of the data, in one process: planning
    uses :func:`type_pass` instead, which finds the same types far faster.
    """
    types = all_row_types(sources, schema, dialect, block_bytes)
    return apply_all_row_types(schema, types, overrides)


def all_row_types(
    sources: list[SourceFile],
    schema: Schema,
    dialect: CsvDialect,
    block_bytes: int = 4 * 1024 * 1024,
) -> dict[str, ColumnType | None]:
    """Every column's type by all of its values (None: only nulls), reading every file once
    (see :func:`infer_types_from_all_rows`).

    The reference: every value converted to an Arrow string by the sharder's own reader and
    counted by :class:`~shardtrain.data.schema.TypeTally`, in one process. :func:`type_pass`
    finds the same types at a fraction of the cost (tests check both agree) and is what
    planning runs, except with ``--skip-initial-space``, which only this path reads."""
    text = as_text(schema)
    tallies = [TypeTally(decimal=dialect.decimal) for _ in schema.columns]
    for src in sources:
        piece = Piece(src.uri, 0, src.size, src.gzip)
        for batch in read_piece(piece, text, block_bytes=block_bytes, dialect=dialect):
            for tally, values in zip(tallies, batch.table.columns, strict=True):
                tally.add(arrow.contiguous(values))
    return {col.name: tally.type() for col, tally in zip(schema.columns, tallies, strict=True)}


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
) -> dict[str, ColumnType | None]:
    """Every column's type by all of its values (None: only nulls): the same answer as
    :func:`all_row_types`, found by classifying the raw bytes of every field without
    converting it (:mod:`shardtrain.kernels.csv_types`), over the planner's pieces in
    parallel.

    Pieces start at record starts
    (:func:`~shardtrain.data.sources.csv.align.align_pieces`); each is read in blocks of whole
    records as the tasks will read it (gzip files whole, other encodings transcoded to
    UTF-8), classified by a compiled kernel that releases the GIL -- so ``threads`` threads
    run on as many cores without a process pool -- and the per-column counts are added up.
    Only rows the sharder accepts are counted (right field count, label present). Values
    beyond float32's range are logged here, per column, before any shard is written.

    With ``--skip-initial-space`` (read by Python's csv module) this is :func:`all_row_types`.
    """
    if dialect.skip_initial_space:
        ends: dict[str, int] = {}
        for p in pieces:
            ends[p.uri] = max(ends.get(p.uri, 0), p.end)
        return all_row_types([SourceFile(u, e, "") for u, e in ends.items()], schema, dialect)
    from concurrent.futures import ThreadPoolExecutor

    text = as_text(schema)
    label = schema.names.index(schema.label)
    nulls = tuple(v.encode() for v in schema.null_values)
    decimal = getattr(dialect, "decimal", ".") or "."

    def count(piece: Piece) -> np.ndarray:
        tally = csv_types.new_tally(len(schema.columns))
        for block in iter_record_blocks(piece, text, block_bytes, dialect):
            csv_types.classify_block(
                block.data,
                tally,
                label=label,
                delim=dialect.delim_byte,
                quote=dialect.quote_byte,
                escape=dialect.escape_byte,
                nulls=nulls,
                decimal=ord(decimal),
            )
        return tally

    workers = max(1, min(threads or available_cpus(), len(pieces)))
    if workers == 1:
        tallies = [count(p) for p in pieces]
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="type-pass") as pool:
            tallies = list(pool.map(count, pieces))
    total = np.sum(tallies, axis=0) if tallies else csv_types.new_tally(len(schema.columns))
    types: dict[str, ColumnType | None] = {}
    for col, counts in zip(schema.columns, total, strict=True):
        tally = type_tally(counts, decimal)
        types[col.name] = tally.type()
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
