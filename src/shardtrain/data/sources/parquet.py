"""Reading Parquet files for the sharder: row groups as the unit of parallelism, Parquet's own
types, bounded memory.

* **Pieces.** The plan cuts every file into byte ranges like a CSV file
  (:func:`~shardtrain.data.sources.base.plan_pieces`); a row group belongs to the range that
  holds the middle of its bytes (what Spark and Hadoop do), so many tasks, on one machine or
  many pods, split one large file by row groups and every row group is read exactly once. A
  range without the middle of any row group reads nothing.
* **Reading.** A task reads the footer, then each of its row groups in record batches of about
  ``block_bytes`` of uncompressed data (``pyarrow.parquet`` over the storage layer's file
  objects: local, ``s3://``, ``gs://``); memory is bounded by one row group's column chunks.
* **Types.** From the files' own schema, mapped as :mod:`.typed` describes (ints, floats and
  decimals, booleans, strings; dates and timestamps as ISO text; uint64 as exact text); a
  column of a type an Example cannot hold (binary, lists, structs) is one error naming the
  file and the column, unless a ``--schema`` file drops it. Nulls are missing values.
* **Several files.** Columns are matched by name, in the first file's order. Every file must
  have the same columns; a column that is int in some files and float in others is float;
  any other difference is one error naming the file, the column and both types.
* **Rejects.** Parquet values are typed, so the only row a Parquet file can be wrong about is
  one with a null label (``missing_label``). Its ``line`` in ``rejects.jsonl`` is the row's
  1-based number in its file, and its text the row as JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardtrain.data.schema import Column, ColumnType, Schema, SchemaOverrides
from shardtrain.data.sources import typed
from shardtrain.data.sources.base import (
    Batch,
    Piece,
    PlanInputs,
    Reject,
    SourceLayout,
    open_source,
)
from shardtrain.errors import DataError

log = logging.getLogger(__name__)

#: Rows parsed at plan time to measure the output size per input byte.
SAMPLE_ROWS = 2000


class ParquetReject(Reject):
    """A rejected Parquet row: ``line`` is the row's 1-based number counted from the first row
    of its piece's first row group; the sharder adds the rows of the file's earlier pieces, so
    ``rejects.jsonl`` holds the row's number in its file (as for :class:`.base.Reject`)."""

    @property
    def where(self) -> str:
        return f"row {self.line}"


def _read_footer(f: IO[bytes], uri: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(f)
    except (pa.ArrowInvalid, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{uri}: not a readable Parquet file ({first})") from exc


def _file_types(uri: str, schema: pa.Schema, drop: tuple[str, ...]) -> dict[str, ColumnType | None]:
    """Each column's schema type (None: nulls only); dropped columns of any type are kept as
    ``string`` placeholders."""
    out: dict[str, ColumnType | None] = {}
    for field in schema:
        if field.name in out:
            raise DataError(f"{uri}: duplicate column name '{field.name}'")
        try:
            out[field.name] = typed.column_type(field.type)
        except typed.UnsupportedType:
            if field.name not in drop:
                raise DataError(
                    typed.unsupported_message(uri, field.name, str(field.type))
                ) from None
            out[field.name] = "string"
    return out


def _unify(
    merged: dict[str, ColumnType | None], first: str, types: dict[str, ColumnType | None], uri: str
) -> None:
    """Merge one file's column types into ``merged`` (see the module docstring)."""
    if set(types) != set(merged):
        missing = sorted(set(merged) - set(types))
        extra = sorted(set(types) - set(merged))
        parts = []
        if missing:
            parts.append(f"lacks {', '.join(missing[:6])}")
        if extra:
            parts.append(f"has {', '.join(extra[:6])} in addition")
        raise DataError(f"{uri}: its columns differ from {first}'s: it {' and '.join(parts)}")
    for name, t in types.items():
        have = merged[name]
        if t is None or have == t:
            continue
        if have is None:
            merged[name] = t
        elif {have, t} == {"int", "float"}:
            merged[name] = "float"
        else:
            raise DataError(
                f"{uri}: column '{name}' is {t} here but {have} in {first}; "
                "make the files' types agree, or force one with a --schema file"
            )


def _compressed_size(meta: pq.RowGroupMetaData) -> int:
    """Bytes a row group's column chunks take in the file."""
    return sum(meta.column(i).total_compressed_size for i in range(meta.num_columns))


def _row_group_midpoint(meta: pq.RowGroupMetaData) -> int:
    """The byte offset of the middle of a row group's column chunks."""
    start = min(
        (
            c.dictionary_page_offset
            if c.has_dictionary_page and c.dictionary_page_offset
            else c.data_page_offset
        )
        for c in (meta.column(i) for i in range(meta.num_columns))
    )
    return start + _compressed_size(meta) // 2


class ParquetSource(typed.TypedFileSource):
    """Parquet files (local or in object storage). See the module docstring.

    Arguments: see :class:`~shardtrain.data.sources.typed.TypedFileSource`.
    """

    def plan_inputs(self) -> PlanInputs:
        """Read every file's footer (not its data): the schema, the exact row count."""
        from shardtrain.data.sources.csv.listing import list_sources

        sources = list_sources(self.patterns)
        overrides = SchemaOverrides.load(self.schema_file) if self.schema_file else None
        drop = overrides.drop if overrides else ()
        merged: dict[str, ColumnType | None] = {}
        rows = 0
        sample, sample_bytes = None, 0
        for i, src in enumerate(sources):
            with open_source(src.uri, gzip=False) as f:
                pf = _read_footer(f, src.uri)
                types = _file_types(src.uri, pf.schema_arrow, drop)
                if i == 0:
                    merged = dict(types)
                    typed.check_label_and_key(list(types), self.label, self.key, src.uri)
                else:
                    _unify(merged, sources[0].uri, types, src.uri)
                rows += pf.metadata.num_rows
                if sample is None and pf.metadata.num_rows:
                    sample, sample_bytes = _read_sample(pf)
        columns = []
        for name, t in merged.items():
            if t is None:
                log.warning(
                    "column '%s' holds only nulls in %s: treated as string", name, sources[0].uri
                )
            columns.append(Column(name, t or "string"))
        columns = typed.apply_overrides(columns, overrides, sources[0].uri)
        schema = Schema(tuple(columns), label=self.label, key=self.key, null_values=())
        table = None
        if sample is not None:
            table = _typed_table(sample, schema, sources[0].uri)
        return PlanInputs(
            sources=sources,
            schema=schema,
            input_bytes=sum(s.size for s in sources),
            estimated_rows=rows,
            options={"format": "parquet"},
            sample=table,
            sample_bytes=sample_bytes,
        )

    def read_piece(self, piece: Piece, layout: SourceLayout, block_bytes: int) -> Iterator[Batch]:
        return read_piece(piece, layout.schema, block_bytes=block_bytes)


def _read_sample(pf: pq.ParquetFile) -> tuple[pa.Table, int]:
    """Up to ``SAMPLE_ROWS`` rows of the first non-empty row group, and about how many
    (compressed) file bytes they take."""
    meta = pf.metadata
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        if rg.num_rows:
            batch = next(pf.iter_batches(batch_size=SAMPLE_ROWS, row_groups=[g]))
            return pa.Table.from_batches([batch]), max(
                1, _compressed_size(rg) * batch.num_rows // rg.num_rows
            )
    return pa.table({}), 0


def _typed_table(raw: pa.Table, schema: Schema, uri: str) -> pa.Table:
    """The columns of ``raw`` converted to the schema's types, in schema order; dropped
    columns are null placeholders (read but never written)."""
    arrays = []
    for col in schema.columns:
        if col.drop:
            arrays.append(pa.nulls(raw.num_rows, col.arrow_type))
            continue
        if col.name not in raw.column_names:
            raise DataError(f"{uri}: column '{col.name}' is missing (the plan's files have it)")
        values = raw.column(col.name)
        try:
            typed.column_type(values.type)
            arrays.append(typed.to_column_type(values, col))
        except typed.UnsupportedType:
            raise DataError(typed.unsupported_message(uri, col.name, str(values.type))) from None
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise DataError(
                f"{uri}: column '{col.name}' ({values.type}) does not convert to {col.type} "
                f"({str(exc).splitlines()[0]})"
            ) from exc
    return pa.Table.from_arrays(arrays, names=schema.names)


def read_piece(piece: Piece, schema: Schema, *, block_bytes: int = 4 << 20) -> Iterator[Batch]:
    """Stream the row groups whose middle lies in ``piece`` as typed batches (see the module
    docstring)."""
    read_columns = [c.name for c in schema.columns if not c.drop]
    with open_source(piece.uri, gzip=False) as f:
        pf = _read_footer(f, piece.uri)
        meta = pf.metadata
        file_names = set(pf.schema_arrow.names)
        missing = [n for n in read_columns if n not in file_names]
        if missing:
            raise DataError(
                f"{piece.uri}: column '{missing[0]}' is missing (the plan's files have it)"
            )
        rows_before = 0  # rows of this piece before the current batch (piece-relative numbers)
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            if not rg.num_rows or not piece.start <= _row_group_midpoint(rg) < piece.end:
                continue
            per_row = max(rg.total_byte_size / rg.num_rows, 1.0)
            batch_rows = max(256, int(block_bytes / per_row))
            compressed_per_row = _compressed_size(rg) / rg.num_rows
            for record_batch in pf.iter_batches(
                batch_size=batch_rows, row_groups=[g], columns=read_columns, use_threads=False
            ):
                raw = pa.Table.from_batches([record_batch])
                table = _typed_table(raw, schema, piece.uri)
                n = table.num_rows
                kept, keep, rejects = typed.split_missing_labels(table, schema, rows_before + 1)
                batch = Batch(
                    table=kept,
                    row_hash=typed.row_hash(table, schema)[keep] if n else np.empty(0, np.uint64),
                    rejects=[ParquetReject(r.line, r.reason, r.detail, r.text) for r in rejects],
                    rows_read=n,
                    lines=n,
                    bytes_read=int(compressed_per_row * n),
                )
                rows_before += n
                yield batch


__all__ = ["ParquetReject", "ParquetSource", "read_piece"]
