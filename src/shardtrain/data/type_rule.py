"""The type rule: which type a column's text values make it, from a sample
(:func:`infer_type`) or from every value (:class:`TypeTally`, ``--infer-types all``).

A column is ``bool`` when every value is a true/false word, numeric (``int`` or ``float``)
when its values are numbers -- the patterns below are the CSV reader's own rules, written out
-- and ``string`` otherwise, and for numbers that must stay exact (codes with a leading zero,
integers beyond int64). A few values that are not numbers leave a column numeric, their rows
rejected as bad values, unless one of them is shaped like a code (:func:`code_shaped`:
``98115-4820`` after numeric zip codes is a string column, ``12abc`` or ``#REF!`` is junk).
:mod:`shardtrain.data.schema` builds the schema from these types and re-exports the names
other modules import from it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa

from shardtrain.kernels import arrow

#: The types the rule decides (a schema's :data:`~shardtrain.data.schema.ColumnType` adds
#: ``image``, which only the image sources set).
ValueType = Literal["int", "float", "bool", "string"]

TRUE_VALUES = ("true", "True", "TRUE")
FALSE_VALUES = ("false", "False", "FALSE")

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


def infer_type(values: pa.Array, decimal: str = ".") -> ValueType | None:
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
        return "int" if fits_int64(found) else "string"
    return "float"


_BLANKS_AROUND = r"^[ \t]*(?:{})[ \t]*$"


def number_pattern(decimal: str = ".") -> str:
    """The regular expression of a number field as the reader takes it: :func:`float_pattern`
    with blanks around allowed."""
    return _BLANKS_AROUND.format(float_pattern(decimal)[1:-1])


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

    :func:`infer_type` decides from one sample; a tally decides from every value of a file
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
        if len(ints) and not fits_int64(ints):
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

    def numbers_type(self) -> ValueType:
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

    def type(self, max_bad_fraction: float = 0.0) -> ValueType | None:
        """The column's type; None when no value was seen.

        The rules are the sample's (:func:`infer_type`) but types only widen: ``bool`` when
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


def fits_int64(values: pa.Array) -> bool:
    import pyarrow.compute as pc

    try:
        pc.cast(pc.utf8_trim(values, " \t"), pa.int64())
    except (pa.ArrowInvalid, OverflowError):
        return False
    return True
