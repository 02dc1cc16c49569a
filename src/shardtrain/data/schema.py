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

import functools
import io
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.csv as pacsv

from shardtrain import storage
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
TRUE_VALUES = ("true", "True", "TRUE")
FALSE_VALUES = ("false", "False", "FALSE")

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


#: Patterns of the values each type accepts (the CSV reader's own rules, written out).
INT_PATTERN = r"^[+-]?[0-9]+$"
FLOAT_PATTERN = (
    r"^[+-]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"
    r"|[iI]nf(inity)?|INF(INITY)?|[nN]a[nN]|NAN)$"
)


def float_pattern(decimal: str = ".") -> str:
    """:data:`FLOAT_PATTERN` for numbers written with the decimal mark ``decimal``
    (``,``: ``1,5``, ``-0,25``, ``1,5e3``; ``1.5`` then does not match)."""
    return FLOAT_PATTERN if decimal == "." else FLOAT_PATTERN.replace(r"\.", decimal)


#: A number written with a decimal comma (``0,5``, ``-12,75``): in a file read with the decimal
#: point, a column of such values is text, and the sharder suggests ``--decimal ,``.
DECIMAL_COMMA_PATTERN = r"^[ \t]*[+-]?[0-9]*,[0-9]+([eE][+-]?[0-9]+)?[ \t]*$"

#: Integers with a leading zero (``07919``) are codes -- zip codes, ids, phone numbers -- and
#: stay strings: as numbers they would lose the zeros, a silent change of meaning.
LEADING_ZERO_PATTERN = r"^[ \t]*[+-]?0[0-9]"


#: A column is numeric when at least this fraction of its sampled values are numbers; the
#: few that are not are rejected as bad values (junk in a numeric column) rather than
#: turning the column into strings.
TYPE_AGREEMENT = 0.99


def _infer_type(values: pa.Array, decimal: str = ".") -> ColumnType | None:
    """The column type of the sampled (non-missing) values, numbers written with the decimal
    mark ``decimal`` (``.`` or ``,``).

    * ``bool`` when every value is a true/false word;
    * numeric when at least :data:`TYPE_AGREEMENT` of the values are numbers: ``int`` when
      all of those are integers that fit int64, else ``float`` -- types widen instead of
      rejecting a sampled value (``1e+05`` in an integer column, as R writes it, makes it
      float);
    * ``string`` otherwise, and for numbers that must stay exact: codes with a leading zero
      (``07919``) and integers beyond int64 (``18446744073709551616``).

    Blanks around a number are allowed, as the reader allows them.
    """
    import pyarrow.compute as pc

    present = values.drop_null()
    if len(present) == 0:
        return None
    if pc.all(pc.is_in(present, value_set=arrow.strings(TRUE_VALUES + FALSE_VALUES))).as_py():
        return "bool"
    head = present.slice(0, 1000)
    allowed = (1 - TYPE_AGREEMENT) * len(present)  # values that may fail the numeric test

    number_pattern = _BLANKS_AROUND.format(float_pattern(decimal)[1:-1])

    def numbers(v: pa.Array) -> pa.Array:
        return pc.match_substring_regex(v, number_pattern)

    # More failures among the first values than the whole sample may have: not numeric,
    # without testing the rest (a third of the planning time, on wide files).
    if len(head) - (pc.sum(numbers(head)).as_py() or 0) > allowed:
        return "string"
    is_number = numbers(present)
    if len(present) - (pc.sum(is_number).as_py() or 0) > allowed:
        return "string"
    found = pc.filter(present, is_number)
    if pc.any(pc.match_substring_regex(found, LEADING_ZERO_PATTERN)).as_py():
        return "string"
    if pc.all(pc.match_substring_regex(found, _BLANKS_AROUND.format(INT_PATTERN[1:-1]))).as_py():
        return "int" if _fits_int64(found) else "string"
    return "float"


_BLANKS_AROUND = r"^[ \t]*(?:{})[ \t]*$"


def number_pattern(decimal: str = ".") -> str:
    """The regular expression of a number field as the reader takes it: :func:`float_pattern`
    with blanks around allowed."""
    return _BLANKS_AROUND.format(float_pattern(decimal)[1:-1])


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
    number = pc.match_substring_regex(present, _BLANKS_AROUND.format(float_pattern(",")[1:-1]))
    return bool(pc.all(number).as_py())


def _first_value(values: pa.ChunkedArray) -> str:
    import pyarrow.compute as pc

    found = pc.filter(values, pc.match_substring_regex(values, DECIMAL_COMMA_PATTERN))
    return repr(found[0].as_py()) if len(found) else "?"


#: The key, in a plan's (and ``metadata.json``'s) options, of the lines saying what the values
#: that are not numbers decided for mostly numeric columns (:meth:`TypeTally.note`).
TYPE_NOTES_OPTION = "type_notes"

#: The most a column's values that are not numbers may be and the column still be numeric
#: (see :meth:`TypeTally.type`), whatever ``--max-bad-fraction`` allows: a column of which 1% or
#: more is text is text, not numbers with junk (the sample's tolerance, :data:`TYPE_AGREEMENT`).
MAX_JUNK_FRACTION = 1 - TYPE_AGREEMENT

#: One group of a code: letters and digits with at least one digit (``98115``, ``K1A``, ``0B1``).
_CODE_GROUP = r"[A-Za-z]*[0-9][A-Za-z0-9]*"
#: What joins the groups of a code.
CODE_SEPARATORS = "-/.,: "


def code_patterns(decimal: str = ".") -> tuple[str, str]:
    """``(code, decimal_only)``: regular expressions of a value shaped like a code -- two or
    more groups of ASCII letters and digits, each holding a digit, joined by single
    ``-`` ``/`` ``.`` ``,`` ``:`` or spaces, blanks around allowed -- and of such a value whose
    every separator is the decimal mark ``decimal`` (``1.2.3``: a number with one mark too
    many, not a code). A value is code-shaped when it matches the first and not the second
    (see :func:`code_shaped`)."""
    group = _CODE_GROUP
    code = rf"^[ \t]*{group}(?:[{CODE_SEPARATORS}]{group})+[ \t]*$"
    decimal_only = rf"^[ \t]*{group}(?:{re.escape(decimal)}{group})+[ \t]*$"
    return code, decimal_only


def code_shaped(value: str, decimal: str = ".") -> bool:
    """Whether a value that is not a number looks like a code, not junk.

    Code-shaped (they keep a column a string): ``98115-4820``, ``2024-01-05``, ``555-1234``,
    ``K1A 0B1``, ``12:30``, ``1,234.5`` -- groups of letters and digits, each with a digit,
    joined by ``-`` ``/`` ``.`` ``,`` ``:`` or a space. Junk (a column of numbers holding a few
    stays numeric and their rows are rejected): ``12abc`` (one group), ``#VALUE!``, ``?``,
    ``n/a`` or ``12 kg`` (a group without a digit), ``1.2.3`` (only decimal marks between the
    groups: a number with a mark too many).
    """
    code, decimal_only = _compiled_code_patterns(decimal)
    return bool(code.match(value)) and not decimal_only.match(value)


@functools.lru_cache(maxsize=4)
def _compiled_code_patterns(decimal: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    code, decimal_only = code_patterns(decimal)
    return re.compile(code), re.compile(decimal_only)


@dataclass
class TypeTally:
    """The evidence for a column's type, gathered over any number of blocks of text values.

    :func:`_infer_type` decides from one sample; a tally decides from every value of a file
    (``--infer-types all``): feed it each block's string column with :meth:`add` (or counts,
    from the compiled type pass, and the non-numbers with :meth:`see`), then read
    :meth:`type`. ``decimal`` is the numbers' decimal mark (``.`` or ``,``,
    :attr:`~shardtrain.data.csv_dialect.CsvDialect.decimal`).

    The fields from ``shapes_seen`` on describe the values that are not numbers, looked at
    one by one; they are not compared (the compiled pass only counts kinds, and looks at the
    non-numbers of a column only when they can decide its type).
    """

    decimal: str = "."
    present: int = 0
    bools: int = 0
    numbers: int = 0
    ints: int = 0
    leading_zero: bool = False
    beyond_int64: bool = False
    #: Non-numbers looked at (all of them, or the first ones when there are many), how many
    #: of those are shaped like codes, and the first code and the first other value with
    #: where they are (``file line N``; empty when not known).
    shapes_seen: int = field(default=0, compare=False)
    codes: int = field(default=0, compare=False)
    first_code: tuple[str, str] | None = field(default=None, compare=False)
    first_junk: tuple[str, str] | None = field(default=None, compare=False)

    def add(self, values: pa.Array) -> None:
        """Count one block's values (nulls are missing and ignored)."""
        import pyarrow.compute as pc

        present = values.drop_null()
        if len(present) == 0:
            return
        self.present += len(present)
        truth = arrow.strings(TRUE_VALUES + FALSE_VALUES)
        self.bools += pc.sum(pc.is_in(present, value_set=truth)).as_py() or 0
        is_number = pc.match_substring_regex(
            present, _BLANKS_AROUND.format(float_pattern(self.decimal)[1:-1])
        )
        non_numbers = pc.filter(present, pc.invert(is_number))
        if len(non_numbers):
            code, decimal_only = code_patterns(self.decimal)
            is_code = pc.and_(
                pc.match_substring_regex(non_numbers, code),
                pc.invert(pc.match_substring_regex(non_numbers, decimal_only)),
            )
            codes = pc.sum(is_code).as_py() or 0
            self.shapes_seen += len(non_numbers)
            self.codes += codes
            if codes and self.first_code is None:
                self.first_code = (pc.filter(non_numbers, is_code)[0].as_py(), "")
            if codes < len(non_numbers) and self.first_junk is None:
                self.first_junk = (pc.filter(non_numbers, pc.invert(is_code))[0].as_py(), "")
        found = pc.filter(present, is_number)
        self.numbers += len(found)
        if len(found) == 0:
            return
        if pc.any(pc.match_substring_regex(found, LEADING_ZERO_PATTERN)).as_py():
            self.leading_zero = True
        is_int = pc.match_substring_regex(found, _BLANKS_AROUND.format(INT_PATTERN[1:-1]))
        ints = pc.filter(found, is_int)
        self.ints += len(ints)
        if len(ints) and not _fits_int64(ints):
            self.beyond_int64 = True

    def see(self, value: str, where: str = "") -> None:
        """Look at one value that is not a number (``where``: its file and line)."""
        self.shapes_seen += 1
        if code_shaped(value, self.decimal):
            self.codes += 1
            self.first_code = self.first_code or (value, where)
        else:
            self.first_junk = self.first_junk or (value, where)

    @property
    def non_numbers(self) -> int:
        """Values that are neither missing nor numbers (booleans among numbers included)."""
        return self.present - self.numbers

    def numbers_type(self) -> ColumnType:
        """The type of the numbers alone: ``int``, ``float``, or ``string`` for codes with a
        leading zero and integers beyond int64 (kept exact)."""
        if self.leading_zero:
            return "string"
        if self.ints == self.numbers:
            return "string" if self.beyond_int64 else "int"
        return "float"

    def junk_candidate(self) -> bool:
        """Whether some ``--max-bad-fraction`` could leave the column numeric despite its
        non-numbers: at most :data:`MAX_JUNK_FRACTION` of the values are not numbers, and the
        numbers make an ``int`` or ``float``. Its non-numbers are then looked at
        (:meth:`needs_shapes`), whatever the run's fraction, so that what the type pass finds
        does not depend on it."""
        return (
            0 < self.non_numbers <= MAX_JUNK_FRACTION * self.present
            and self.numbers_type() != "string"
        )

    def junk_tolerated(self, max_bad_fraction: float) -> bool:
        """Whether the non-numbers are few enough for the column to stay numeric, if none is
        shaped like a code: a :meth:`junk_candidate` whose non-numbers are at most
        ``max_bad_fraction`` of its values."""
        return self.junk_candidate() and self.non_numbers <= max_bad_fraction * self.present

    def needs_shapes(self) -> bool:
        """Whether the non-numbers of a :meth:`junk_candidate` still need to be looked at
        (:meth:`see`) for :meth:`type` to decide."""
        return self.junk_candidate() and self.shapes_seen == 0

    def noteworthy(self) -> bool:
        """Whether :meth:`note` has something to say: a column of mostly numbers (``int`` or
        ``float`` ones) holding some values that are not numbers."""
        return 0 < self.non_numbers < self.numbers and self.numbers_type() != "string"

    def type(self, max_bad_fraction: float = 0.0) -> ColumnType | None:
        """The column's type; None when no value was seen.

        The rules are the sample's (:func:`_infer_type`) but types only widen: ``bool`` when
        every value is a true/false word; else the type of the numbers (``int``, ``float``,
        or ``string`` for leading-zero codes and integers beyond int64) when every value is a
        number; else ``string`` -- except that values that are not numbers, at most
        ``max_bad_fraction`` of all (and :data:`MAX_JUNK_FRACTION`), none of those looked at
        shaped like a code (:func:`code_shaped`), leave the column numeric: their rows are
        then rejected when read (``bad_value``). With ``max_bad_fraction`` 0 one value that
        is not a number makes the column a string.
        """
        if self.present == 0:
            return None
        if self.bools == self.present:
            return "bool"
        if self.non_numbers == 0:
            return self.numbers_type()
        if self.junk_numeric(max_bad_fraction):
            return self.numbers_type()
        return "string"

    def junk_numeric(self, max_bad_fraction: float) -> bool:
        """Whether the column is numeric despite its non-numbers (see :meth:`type`)."""
        return self.junk_tolerated(max_bad_fraction) and self.shapes_seen > 0 and self.codes == 0

    def note(self, name: str, max_bad_fraction: float) -> str | None:
        """One line saying what the non-numbers of a mostly numeric column decided, for the
        planning log and ``inspect``; None when not :meth:`noteworthy`. The text depends on
        ``max_bad_fraction`` only through the type it decides.

        For example ``gear_score: 1 of 49,999 values is not a number ('12abc', q.csv line
        1327) → float; its row is rejected (bad_value); a --schema file with 'gear_score:
        string' keeps it``.
        """
        if not self.noteworthy():
            return None
        n = self.non_numbers
        head = f"{name}: {n:,} of {self.present:,} values {'is' if n == 1 else 'are'} not "
        head += "a number" if n == 1 else "numbers"
        if self.junk_candidate() and self.codes:
            return (
                f"{head}, and {'it is' if n == 1 else 'one is'} shaped like a code "
                f"({_example(self.first_code)}) → string, every value kept as text"
            )
        if self.junk_numeric(max_bad_fraction):
            looked = f"; the first {self.shapes_seen:,} looked at" if self.shapes_seen < n else ""
            rows = "its row is" if n == 1 else "their rows are"
            return (
                f"{head} ({_example(self.first_junk)}) → {self.numbers_type()}; {rows} "
                f"rejected (bad_value){looked}; a --schema file with '{name}: string' keeps "
                f"{'it' if n == 1 else 'them'}"
            )
        instead = f"a --schema file with '{name}: {self.numbers_type()}' rejects their rows"
        if self.junk_tolerated(max_bad_fraction):  # none looked at: the type stays text
            return f"{head}, none looked at → string; {instead}"
        return (
            f"{head} ({n / self.present:.2%}), more than --max-bad-fraction lets a numeric "
            f"column hold (at most {MAX_JUNK_FRACTION:.0%}) → string; {instead}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The tally as JSON (stored in a plan: :meth:`from_dict` decides again from it)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TypeTally:
        """Inverse of :meth:`to_dict`."""
        found = {
            k: tuple(d[k]) if d.get(k) is not None else None for k in ("first_code", "first_junk")
        }
        return cls(**{**d, **found})


def type_notes(tallies: Mapping[str, TypeTally], max_bad_fraction: float) -> list[str]:
    """The :meth:`TypeTally.note` of each column that has one, in order."""
    notes = (t.note(name, max_bad_fraction) for name, t in tallies.items())
    return [n for n in notes if n is not None]


def _example(found: tuple[str, str] | None) -> str:
    if found is None:
        return "?"
    value, where = found
    return f"{value!r}, {where}" if where else repr(value)


def _fits_int64(values: pa.Array) -> bool:
    import pyarrow.compute as pc

    try:
        pc.cast(pc.utf8_trim(values, " \t"), pa.int64())
    except (pa.ArrowInvalid, OverflowError):
        return False
    return True


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
    order bool, int, float, string (see :func:`_infer_type`): a sample of ``0``, ``45.12``
    is float, ``07919`` is a string (a code), ``18446744073709551616`` is a string (beyond
    int64, kept exact).

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
    unknown = (set(overrides.types) | set(overrides.drop)) - set(names)
    if unknown:
        raise ConfigError(
            f"schema file names columns that {source} does not have: {', '.join(sorted(unknown))}"
        )
    decimal = dialect.decimal if dialect is not None else "."
    columns = []
    comma_numbers = []
    for name, values in zip(names, table.columns, strict=True):
        typ = overrides.types.get(name)
        if typ is None:
            typ = _infer_type(values.combine_chunks(), decimal)
            if typ == "string" and _decimal_comma_numbers(values.combine_chunks(), dialect):
                comma_numbers.append(name)
            if typ is None and table.num_rows:
                log.warning(
                    "column '%s' is empty in the sample of %s: treated as string "
                    "(set its type in a schema file)",
                    name,
                    source,
                )
            typ = typ or "string"
        columns.append(Column(name=name, type=typ, drop=name in overrides.drop))
    if comma_numbers:
        log.warning(
            "%s: column(s) %s hold numbers written with a decimal comma (e.g. %s), read as "
            "text; if they are numbers, shard with --decimal ,",
            source,
            _preview([f"'{n}'" for n in comma_numbers], limit=5),
            _first_value(table.column(comma_numbers[0])),
        )
    return Schema(columns=tuple(columns), label=label, key=key, null_values=tuple(null_values))
