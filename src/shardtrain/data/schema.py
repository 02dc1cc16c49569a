"""The schema of a tabular dataset: column types, the label, the key, dropped columns.

A schema is inferred from a sample of the first source and can be overridden with a YAML or
JSON file. It is stored in ``metadata.json`` beside the shards, so the trainer builds its
input parsing and preprocessing from exactly what the sharder wrote.

Column types and how they are stored in each ``tf.train.Example``:

==========  ===========================  =================================================
type        CSV values                   Example feature
==========  ===========================  =================================================
``int``     ``-3``, ``42``               ``int64_list`` with one value
``float``   ``0.5``, ``1e-3``, ``nan``   ``float_list`` with one value (float32)
``bool``    ``true``/``false``           ``int64_list`` with 0 or 1
``string``  anything                     ``bytes_list`` with the UTF-8 bytes (categorical)
``image``   (image datasets only)        ``bytes_list`` with the encoded JPEG/PNG bytes
==========  ===========================  =================================================

A missing value (an empty field, or one of ``null_values``) is stored as an *absent* feature,
the standard encoding: parse it with a default value or as a ragged/var-len feature.

A schema override file::

    # quest.schema.yaml
    columns:            # types to force; unlisted columns keep their inferred type
      player_level: float
      region: string
    drop: [attempt_id]  # columns not written to the Examples
    null_values: ["", "NA", "null"]
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.csv as pacsv

from shardtrain import storage
from shardtrain.data.type_rule import (  # the type rule's names, as other modules import them
    DECIMAL_COMMA_PATTERN,
    infer_type,
    number_pattern,
)
from shardtrain.data.type_rule import FALSE_VALUES as FALSE_VALUES
from shardtrain.data.type_rule import FLOAT_PATTERN as FLOAT_PATTERN
from shardtrain.data.type_rule import INT_PATTERN as INT_PATTERN
from shardtrain.data.type_rule import MAX_JUNK_FRACTION as MAX_JUNK_FRACTION
from shardtrain.data.type_rule import TRUE_VALUES as TRUE_VALUES
from shardtrain.data.type_rule import TypeTally as TypeTally
from shardtrain.data.type_rule import code_shaped as code_shaped
from shardtrain.data.type_rule import type_notes as type_notes
from shardtrain.errors import ConfigError, DataError
from shardtrain.kernels import arrow

if TYPE_CHECKING:
    from shardtrain.data.csv_dialect import CsvDialect

log = logging.getLogger(__name__)

ColumnType = Literal["int", "float", "bool", "string", "image"]
#: The types a CSV column (or a schema file) may have; ``image`` is set by the image sources.
COLUMN_TYPES: tuple[str, ...] = ("int", "float", "bool", "string")

#: Values read as "missing" unless the schema says otherwise. "nan" is deliberately not one of
#: them: in a float column it is the float NaN and is stored as such (the statistics count
#: NaNs separately, and the trainer treats them like missing values).
DEFAULT_NULL_VALUES: tuple[str, ...] = ("", "NA", "N/A", "NULL", "null")

#: How much of the first source is read to infer column types.
SAMPLE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Column:
    """One CSV column.

    Attributes:
        name: the header name.
        type: one of ``int``, ``float``, ``bool``, ``string`` (or ``image``: encoded image
            bytes, in image datasets).
        drop: True when the column is read and validated but not written to the Examples.
    """

    name: str
    type: ColumnType
    drop: bool = False

    @property
    def arrow_type(self) -> pa.DataType:
        """The Arrow type the CSV reader converts this column to."""
        return {
            "int": pa.int64(),
            "float": pa.float32(),  # what a float_list holds; parsed without double rounding
            "bool": pa.bool_(),
            "string": pa.string(),
            "image": pa.binary(),
        }[self.type]

    @property
    def example_kind(self) -> str:
        """How the value is stored in a tf.train.Example: 'int', 'float' or 'bytes'."""
        return {"int": "int", "bool": "int", "float": "float", "string": "bytes", "image": "bytes"}[
            self.type
        ]


@dataclass(frozen=True)
class Schema:
    """The columns of a CSV dataset, in file order, plus the roles of label and key.

    Attributes:
        columns: every column of the CSV header, in order (dropped ones included).
        label: name of the label column.
        key: name of the column hashed to pick each row's split; None hashes the whole row.
        null_values: field values read as missing.
    """

    columns: tuple[Column, ...]
    label: str
    key: str | None = None
    null_values: tuple[str, ...] = DEFAULT_NULL_VALUES

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise DataError(f"duplicate column names in the CSV header: {', '.join(dupes)}")
        if self.label not in names:
            raise DataError(f"label column '{self.label}' not found (columns: {_preview(names)})")
        if self.key is not None and self.key not in names:
            raise DataError(f"key column '{self.key}' not found (columns: {_preview(names)})")
        if self.column(self.label).drop:
            raise ConfigError(f"the label column '{self.label}' cannot be dropped")

    @property
    def names(self) -> list[str]:
        """All column names in CSV order."""
        return [c.name for c in self.columns]

    @property
    def written(self) -> list[Column]:
        """Columns written to the Examples (not dropped), label included, in CSV order."""
        return [c for c in self.columns if not c.drop]

    @property
    def features(self) -> list[Column]:
        """Written columns other than the label and the key: the model's inputs."""
        return [c for c in self.written if c.name not in (self.label, self.key)]

    def column(self, name: str) -> Column:
        """The column called ``name``."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (stored in metadata.json)."""
        return {
            "columns": [asdict(c) for c in self.columns],
            "label": self.label,
            "key": self.key,
            "null_values": list(self.null_values),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Schema:
        """Inverse of :meth:`to_dict`."""
        return cls(
            columns=tuple(Column(**c) for c in data["columns"]),
            label=data["label"],
            key=data.get("key"),
            null_values=tuple(data.get("null_values", DEFAULT_NULL_VALUES)),
        )


@dataclass(frozen=True)
class SchemaOverrides:
    """What a schema file may say: forced types, dropped columns, null values."""

    types: dict[str, ColumnType] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    null_values: tuple[str, ...] | None = None

    @classmethod
    def load(cls, uri: str) -> SchemaOverrides:
        """Read a YAML or JSON schema file (see the module docstring for its format)."""
        import yaml

        text = storage.read_text(uri)
        try:
            data = json.loads(text) if uri.endswith(".json") else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:
            raise ConfigError(f"{uri}: not a valid schema file ({_first_line(exc)})") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{uri}: a schema file must be a mapping with 'columns'/'drop'")
        unknown = set(data) - {"columns", "drop", "null_values"}
        if unknown:
            raise ConfigError(f"{uri}: unknown schema keys: {', '.join(sorted(unknown))}")
        types = data.get("columns") or {}
        if not isinstance(types, dict):
            raise ConfigError(f"{uri}: 'columns' must map column names to types")
        for name, typ in types.items():
            if typ not in COLUMN_TYPES:
                raise ConfigError(
                    f"{uri}: column '{name}' has type '{typ}'; "
                    f"expected one of {', '.join(COLUMN_TYPES)}"
                )
        drop = data.get("drop") or []
        if not isinstance(drop, list):
            raise ConfigError(f"{uri}: 'drop' must be a list of column names")
        nulls = data.get("null_values")
        return cls(
            types={str(k): v for k, v in types.items()},
            drop=tuple(str(d) for d in drop),
            null_values=tuple(str(v) for v in nulls) if nulls is not None else None,
        )


def _preview(names: list[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _decimal_comma_numbers(values: pa.Array, dialect: CsvDialect | None) -> bool:
    """Whether a text column of a file read with the decimal point looks like numbers with a
    decimal comma: every value a number when read with ``,`` (``0,5``, ``12``, ``1e-05``)
    and at least one with a comma (possible only when ``,`` is not the delimiter)."""
    import pyarrow.compute as pc

    if dialect is None or dialect.decimal != "." or dialect.delimiter in (None, ","):
        return False
    present = values.drop_null()
    if len(present) == 0:
        return False
    comma = pc.match_substring_regex(present, DECIMAL_COMMA_PATTERN)
    if not pc.any(comma).as_py():
        return False
    number = pc.match_substring_regex(present, number_pattern(","))
    return bool(pc.all(number).as_py())


def _padded_fields(values: pa.Array, dialect: CsvDialect | None) -> bool:
    """Whether a text column looks padded with spaces after the delimiter (``,   "GOLD"``,
    ``,  x``): every value starts with a space, in a file read without
    ``--skip-initial-space`` (its values then keep the spaces, and quotes, as text)."""
    import pyarrow.compute as pc

    if dialect is None or dialect.skip_initial_space:
        return False
    present = values.drop_null()
    if len(present) == 0:
        return False
    return bool(pc.all(pc.match_substring_regex(present, r"^ +\S")).as_py())


def _first_comma_number(values: pa.ChunkedArray) -> str:
    import pyarrow.compute as pc

    found = pc.filter(values, pc.match_substring_regex(values, DECIMAL_COMMA_PATTERN))
    return repr(found[0].as_py()) if len(found) else "?"


def _first_present(values: pa.ChunkedArray) -> str:
    return repr(values.drop_null()[0].as_py())


#: Text columns of a sample that are likely something else, read with the wrong flags: how
#: to tell (from the column's values and the dialect), the value a warning shows (from the
#: first such column) and the warning (the file, the columns, that value).
_TEXT_LOOKALIKES = (
    (
        _decimal_comma_numbers,
        _first_comma_number,
        "%s: column(s) %s hold numbers written with a decimal comma (e.g. %s), read as text; "
        "if they are numbers, shard with --decimal ,",
    ),
    (
        _padded_fields,
        _first_present,
        "%s: every value of column(s) %s starts with spaces (e.g. %s), kept as text; if the "
        "fields are padded after the delimiter, shard with --skip-initial-space",
    ),
)


#: The key, in a plan's (and ``metadata.json``'s) options, of the lines saying what the values
#: that are not numbers decided for mostly numeric columns
#: (:meth:`~shardtrain.data.type_rule.TypeTally.note`).
TYPE_NOTES_OPTION = "type_notes"


def _parse_options(dialect: CsvDialect | None, **kw: Any) -> pacsv.ParseOptions:
    if dialect is None:
        return pacsv.ParseOptions(**kw)
    return pacsv.ParseOptions(
        delimiter=dialect.delimiter or ",",
        quote_char=dialect.quote_char or False,
        escape_char=dialect.escape_char or False,
        double_quote=True,
        newlines_in_values=True,
        **kw,
    )


def parse_header(line: bytes, source: str, dialect: CsvDialect | None = None) -> list[str]:
    """The column names of a CSV header line (quotes handled by the CSV parser).

    Raises:
        DataError: the header cannot be read, or has a blank or duplicate name (one line
            naming the file and the columns).
    """
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    try:
        table = pacsv.read_csv(
            io.BytesIO(line + b"\n"),
            read_options=pacsv.ReadOptions(autogenerate_column_names=True, use_threads=False),
            parse_options=_parse_options(dialect),
            convert_options=pacsv.ConvertOptions(column_types={}, strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise DataError(f"{source}: cannot read the CSV header ({_first_line(exc)})") from exc
    # An empty name reads as a null column: it must not become the name "None".
    names = ["" if not len(v) or v[0].as_py() is None else str(v[0].as_py()) for v in table.columns]
    blank = [i + 1 for i, n in enumerate(names) if n.strip() == ""]
    if not names or blank:
        where = ", ".join(str(i) for i in blank)
        trailing = ""
        if blank == [len(names)]:
            trailing = " (a delimiter at the end of the header?)"
        elif blank == [1]:
            trailing = " (R's row names? write.csv/write.csv2 with row.names = FALSE)"
        raise DataError(
            f"{source}: the CSV header has an empty column name at position {where}"
            f"{trailing}: {line[:200]!r}"
        )
    names = [n.strip() for n in names]
    check_names(names, source)
    return names


def check_names(names: list[str], source: str) -> None:
    """Raise a :class:`DataError` naming ``source`` when a column name appears twice."""
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise DataError(f"{source}: duplicate column names in the CSV header: {', '.join(dupes)}")


def infer_schema(
    sample: bytes,
    source: str,
    *,
    label: str,
    key: str | None = None,
    overrides: SchemaOverrides | None = None,
    dialect: CsvDialect | None = None,
) -> Schema:
    """Infer column types from the first bytes of a CSV (header included).

    The type of a column is the narrowest that *every* value of the sample parses as, in the
    order bool, int, float, string (see :func:`~shardtrain.data.type_rule.infer_type`): a
    sample of ``0``, ``45.12`` is float, ``07919`` is a string (a code),
    ``18446744073709551616`` is a string (beyond int64, kept exact).

    Args:
        sample: the beginning of the first source, cut at a line end.
        source: its URI, for messages.
        label: the label column.
        key: the split key column, or None.
        overrides: types / drops / null values from a schema file.
        dialect: the files' :class:`~shardtrain.data.csv_dialect.CsvDialect`
            (delimiter, quoting, header, null values); None: the defaults.

    Returns:
        The schema.

    Raises:
        DataError: the sample has no header, no data row, or lacks the label/key column.
        ConfigError: the overrides name columns that do not exist.
    """
    overrides = overrides or SchemaOverrides()
    null_values = (
        (dialect.null_values if dialect is not None else None)
        or overrides.null_values
        or DEFAULT_NULL_VALUES
    )
    if dialect is not None and not dialect.header:
        names = list(dialect.columns or ())
        check_names(names, source)
        body = sample
    else:
        header_end = sample.find(b"\n")
        header_line = sample if header_end < 0 else sample[:header_end]
        names = parse_header(header_line.rstrip(b"\r"), source, dialect)
        body = b"" if header_end < 0 else sample[header_end + 1 :]
    if not body.strip():
        raise DataError(f"{source}: no data rows after the header")
    try:
        table = pacsv.read_csv(
            io.BytesIO(body),
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False),
            parse_options=_parse_options(dialect, invalid_row_handler=lambda row: "skip"),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names},
                null_values=list(null_values),
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise DataError(f"{source}: not a readable CSV file ({_first_line(exc)})") from exc
    if dialect is not None and dialect.skip_initial_space:
        # Arrow has no such option (a quote after the space would be text): Python's csv.
        import pyarrow.compute as pc

        rows = [
            r
            for r in dialect.python_reader(body.decode("utf-8", "replace"))
            if len(r) == len(names)
        ]
        nulls = arrow.strings(null_values)
        columns = []
        for values in zip(*rows, strict=True) if rows else [[] for _ in names]:
            arr = arrow.strings(values)
            columns.append(pc.if_else(pc.is_in(arr, value_set=nulls), arrow.null(pa.string()), arr))
        table = pa.Table.from_arrays(columns, names=names)
    if table.num_rows == 0:
        # Types cannot be inferred, but the run must still account for every row: the
        # sharder will reject them (wrong field count) and report it.
        log.warning("%s: no well-formed row in the first %d bytes", source, len(sample))
    if label not in names:
        hint = ""
        inside = [n for n in names if label in n and n != label]
        if inside:
            hint = (
                f"; it appears inside the column name {inside[0]!r}: is the delimiter right? "
                "(--delimiter)"
            )
        raise DataError(
            f"{source}: label column '{label}' not found (columns: {_preview(names)}){hint}"
        )
    if key is not None and key not in names:
        raise DataError(f"{source}: key column '{key}' not found (columns: {_preview(names)})")
    unknown = (set(overrides.types) | set(overrides.drop)) - set(names)
    if unknown:
        raise ConfigError(
            f"schema file names columns that {source} does not have: {', '.join(sorted(unknown))}"
        )
    decimal = dialect.decimal if dialect is not None else "."
    columns = []
    lookalikes: list[list[str]] = [[] for _ in _TEXT_LOOKALIKES]
    for name, values in zip(names, table.columns, strict=True):
        typ = overrides.types.get(name)
        if typ is None:
            typ = infer_type(values.combine_chunks(), decimal)
            if typ == "string":
                text = values.combine_chunks()
                for found, (looks, _, _) in zip(lookalikes, _TEXT_LOOKALIKES, strict=True):
                    if looks(text, dialect):
                        found.append(name)
            if typ is None and table.num_rows:
                log.warning(
                    "column '%s' is empty in the sample of %s: treated as string "
                    "(set its type in a schema file)",
                    name,
                    source,
                )
            typ = typ or "string"
        columns.append(Column(name=name, type=typ, drop=name in overrides.drop))
    for found, (_, example, message) in zip(lookalikes, _TEXT_LOOKALIKES, strict=True):
        if found:
            shown = _preview([f"'{n}'" for n in found], limit=5)
            log.warning(message, source, shown, example(table.column(found[0])))
    return Schema(columns=tuple(columns), label=label, key=key, null_values=tuple(null_values))
