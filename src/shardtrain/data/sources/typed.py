"""What the typed sources (:mod:`.parquet`, :mod:`.jsonl`) share: Arrow types mapped to the
schema's, columns converted to the types the sharder writes, split hashes, missing labels.

A CSV file is text and its types are guessed; Parquet and JSON carry their own types, and
these sources map them onto the four column types an Example holds (see
:mod:`shardtrain.data.schema`):

==========================================  ==========  ============================================
Arrow type (Parquet, or JSON values)        column      stored as
==========================================  ==========  ============================================
int8 ... int64, uint8 ... uint32            ``int``     the integer
uint64                                      ``string``  its decimal text: values beyond int64 stay
                                                        exact (64-bit unsigned ids)
float16/32/64, decimal                      ``float``   float32, as a CSV ``45.12`` is (beyond
                                                        float32's range: ±inf, as in CSV)
bool                                        ``bool``    0 or 1
string, large_string, dictionary of them    ``string``  the UTF-8 text
date, time, timestamp                       ``string``  ISO 8601 as Arrow writes it
                                                        (``2020-01-02 03:04:05.123``, ``...Z`` with
                                                        a UTC zone): what the same data in a CSV
                                                        file becomes; parse it in the model's
                                                        preprocessing if you need a number
only nulls                                  ``string``  (with a warning, as an empty CSV column)
binary, list, struct, map, ...              --          one error naming the file and the column;
                                                        drop it with ``drop:`` in ``--schema``
==========================================  ==========  ============================================

A null is a missing value (an absent feature), like an empty CSV field. Strings are never
read as missing: ``"NA"`` in a Parquet or JSON string is the text ``NA`` (these formats have
real nulls), so the schema's ``null_values`` are empty.

A schema file (``--schema``) may drop columns and force a column to ``string`` or ``float``
(any numeric column), as for CSV.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain.data.schema import Column, ColumnType, Schema, SchemaOverrides
from shardtrain.data.sources.base import MAX_REJECT_TEXT, Reject, TabularSource
from shardtrain.errors import ConfigError, DataError
from shardtrain.kernels import arrow, xxh64

#: Separator of the fields of a row when the whole row is hashed for the split.
_ROW_SEPARATOR = "\x1f"


class TypedFileSource(TabularSource):
    """The common part of the sources whose files carry typed values (Parquet, JSON lines).

    Args: see :class:`~shardtrain.data.sources.base.TabularSource` (the schema file may drop
    columns or force them to string/float).
    """

    header_lines: ClassVar[int] = 0

    def warm_up(self) -> None:
        """Load the statistics and encoding kernels by describing and encoding two rows."""
        from shardtrain.data import examples

        schema = Schema(
            (
                Column("f", "float"),
                Column("i", "int"),
                Column("s", "string"),
                Column("label", "int"),
            ),
            label="label",
            null_values=(),
        )
        table = self._warm_up_rows(schema)
        for name, stats in self.new_statistics(schema).items():
            stats.update_table(table, name)
        examples.encode(table, schema, framed=True)

    def _warm_up_rows(self, schema: Schema) -> pa.Table:
        """Two rows of ``schema`` (f=1.5/-0.25, i=2/3, s=x/y, label=1/0), read the way this
        source reads its files where that loads compiled code."""
        return pa.table(
            {
                "f": pa.array([1.5, -0.25], pa.float32()),
                "i": pa.array([2, 3], pa.int64()),
                "s": pa.array(["x", "y"]),
                "label": pa.array([1, 0], pa.int64()),
            }
        )


class UnsupportedType(Exception):
    """An Arrow type no column type holds."""


def column_type(arrow_type: pa.DataType) -> ColumnType | None:
    """The schema type an Arrow type maps to (see the module docstring); None for a column of
    nulls only.

    Raises:
        UnsupportedType: binary, nested and other types an Example column cannot hold.
    """
    t = arrow_type
    if pa.types.is_dictionary(t):
        return column_type(t.value_type)
    if pa.types.is_null(t):
        return None
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_uint64(t):
        return "string"
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_temporal(t):
        return "string"
    raise UnsupportedType(str(t))


def unsupported_message(uri: str, name: str, type_text: str) -> str:
    """The one-line error for a column of a type no Example column holds."""
    return (
        f"{uri}: column '{name}' has type {type_text}, which shardtrain cannot store "
        f"(supported: integers, floats, decimals, booleans, strings, dates and times); "
        f"drop it with 'drop: [{name}]' in a --schema file"
    )


def apply_overrides(
    columns: list[Column], overrides: SchemaOverrides | None, uri: str
) -> list[Column]:
    """The columns with a schema file's forced types and drops.

    Raises:
        ConfigError: the file names columns that do not exist, or forces a type these
            sources cannot convert to (only ``string``, and ``float`` for numbers).
    """
    if overrides is None:
        return columns
    names = {c.name for c in columns}
    unknown = (set(overrides.types) | set(overrides.drop)) - names
    if unknown:
        raise ConfigError(
            f"schema file names columns that {uri} does not have: {', '.join(sorted(unknown))}"
        )
    out = []
    for c in columns:
        forced = overrides.types.get(c.name)
        if forced is not None and forced != c.type:
            if not (forced == "string" or (forced == "float" and c.type == "int")):
                raise ConfigError(
                    f"schema file: column '{c.name}' of {uri} is {c.type}; it can be forced "
                    f"to string (or an int column to float), not to {forced}"
                )
            c = Column(c.name, forced)
        out.append(Column(c.name, c.type, drop=c.name in overrides.drop))
    return out


def to_column_type(values: pa.Array | pa.ChunkedArray, column: Column) -> pa.Array:
    """``values`` as the Arrow type the sharder writes for ``column`` (one contiguous array).

    Raises:
        pa.ArrowInvalid: a value does not convert (the caller names the file).
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    target = column.arrow_type
    if values.type == target:
        return arrow.contiguous(values)
    if column.type == "float" and pa.types.is_decimal(values.type):
        values = pc.cast(values, pa.float64())  # decimal → float32 directly rounds twice
    return arrow.contiguous(pc.cast(values, target, safe=column.type != "float"))


def hash_strings(values: pa.Array) -> np.ndarray:
    """xxh64 of each value's text (UTF-8; nulls hash like the empty string)."""
    if values.type != pa.string():
        values = pc.cast(values, pa.string())
    values = arrow.contiguous(pc.fill_null(values, arrow.scalar("")))
    data, offsets = arrow.string_buffers(values)
    return xxh64.hash_slices(data, offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64))


def row_hash(table: pa.Table, schema: Schema) -> np.ndarray:
    """The split hash of each row: of its key's text, else of all its fields' texts joined.

    The texts are Arrow's (``1.5``, ``true``, ``2020-01-02``), so a row hashes the same on
    every run and machine; they are not the CSV's text of the same values.
    """
    if table.num_rows == 0:
        return np.empty(0, np.uint64)
    if schema.key is not None:
        return hash_strings(table.column(schema.key).combine_chunks())
    texts = [pc.cast(table.column(n).combine_chunks(), pa.string()) for n in schema.names]
    joined = pc.binary_join_element_wise(
        *texts, _ROW_SEPARATOR, null_handling="replace", null_replacement=""
    )
    return hash_strings(joined)


def split_missing_labels(
    table: pa.Table,
    schema: Schema,
    first_line: int,
    lines: Iterable[int] | None = None,
    texts: list[str] | None = None,
) -> tuple[pa.Table, np.ndarray, list[Reject]]:
    """Reject the rows whose label is null; return the kept rows, a mask of them, the rejects.

    Args:
        table: the rows, typed.
        schema: their schema.
        first_line: the line (or row) number of the table's first row.
        lines: each row's line number when rows are not consecutive.
        texts: each row's raw text; default: the row as JSON.
    """
    missing = arrow.to_bools(pc.is_null(table.column(schema.label)).combine_chunks())
    if not missing.any():
        return table, np.ones(table.num_rows, bool), []
    numbers = list(lines) if lines is not None else None
    rejects = []
    for i in np.flatnonzero(missing).tolist():
        text = texts[i] if texts is not None else _row_text(table, i)
        rejects.append(
            Reject(
                line=numbers[i] if numbers is not None else first_line + i,
                reason="missing_label",
                detail=f"label '{schema.label}' is empty",
                text=text[:MAX_REJECT_TEXT],
            )
        )
    keep = ~missing
    return table.filter(arrow.from_numpy(keep)), keep, rejects


def _row_text(table: pa.Table, i: int) -> str:
    row = table.slice(i, 1).to_pylist()[0]
    return json.dumps(row, ensure_ascii=False, default=str)


def check_label_and_key(names: list[str], label: str, key: str | None, uri: str) -> None:
    """The label (and key) columns exist: else one line naming the file and the columns."""
    from shardtrain.data.schema import _preview

    if label not in names:
        raise DataError(f"{uri}: label column '{label}' not found (columns: {_preview(names)})")
    if key is not None and key not in names:
        raise DataError(f"{uri}: key column '{key}' not found (columns: {_preview(names)})")


__all__ = [
    "UnsupportedType",
    "apply_overrides",
    "check_label_and_key",
    "column_type",
    "hash_strings",
    "row_hash",
    "split_missing_labels",
    "to_column_type",
    "unsupported_message",
]
