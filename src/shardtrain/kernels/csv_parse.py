"""A compiled fast path for parsing unquoted CSV blocks into typed columns.

Most real CSV files never quote a field, and for those the full CSV grammar of Arrow's CSV
reader is overkill: a line is its fields separated by a delimiter (``,``, or ``;`` -- the
default of much of Europe --, tab or ``|``: a kernel parameter), and a field is its bytes.
:func:`parse_block_fast` handles exactly that case in one numba kernel, faster than Arrow,
and answers ``None`` for any block it cannot handle exactly like Arrow, so the caller falls
back to Arrow for that block::

    fast = parse_block_fast(arr, starts, ends, kinds, null_values)
    if fast is None:
        ...  # quotes, a bare carriage return, invalid UTF-8: use pyarrow.csv
    else:
        ok = np.flatnonzero(fast.row_status == 0)
        arrays = to_arrow(fast, kinds, ok)

Importing the module has no side effects: kernels compile on first use and are cached on disk
(``cache=True``); they release the GIL (``nogil``), so threads can parse blocks in parallel.
The parser is built from three modules: this one (the line loop, the columns, the public
API), :mod:`.csv_fields` (null tokens, field ends, UTF-8, int64 and bool fields) and
:mod:`.csv_float` (correctly rounded float32 values); the lines of a block come from
:func:`.csv_records.line_bounds` (re-exported here).

What "the same as Arrow" means, value by value
---------------------------------------------
The reference is ``pyarrow.csv.read_csv`` with explicit ``column_types`` (float32, int64,
bool, string), ``null_values``, ``strings_can_be_null=True`` and the true/false values
``true True TRUE`` / ``false False FALSE``. Its rules, all reproduced here:

* **missing**: a field equal (byte for byte, untrimmed) to one of ``null_values`` is null, for
  every type. An empty field is only missing because ``b""`` is normally one of the null
  values; without it, an empty string is a valid string and an empty number a bad value.
* **int64**: spaces and tabs around the number are ignored, then ``-``? digits (no ``+``:
  Arrow rejects ``+1``), leading zeros allowed, the value must fit int64 exactly; or ``0x``
  (``0X``) and 1 to 16 hex digits, unsigned, read as the 64-bit pattern (``0xFF...FF`` is -1).
* **float32**: spaces and tabs around the number are ignored, then
  ``[+-]? (digits [. digits*] | . digits) [(e|E) [+-]? digits]``, or ``nan``, ``inf``,
  ``infinity`` in any letter case, with a sign; the result is the *correctly rounded*
  float32 (round to nearest, ties to even), like Arrow's ``fast_float``
  (:mod:`.csv_float` says how this is guaranteed).
* **bool**: exactly one of the six true/false spellings; no trimming.
* **string**: the raw bytes. They must be valid UTF-8 for an Arrow ``string``: fields that
  are plain ASCII need no check, others are validated, and invalid UTF-8 makes the whole
  block fall back (Arrow rejects the block; the caller then reads it line by line).

A block falls back (``None``) when a line holds the quote character (quoted fields need the
full grammar; without quoting a ``"`` is text), a carriage return (Arrow ends a row there) or
a line feed, when a string field is not valid UTF-8, or when the block starts with a UTF-8
byte-order mark (Arrow drops it).

A finite nonzero numeral that becomes ±inf (``1e39``) or ±0 (``1e-50``) in float32 is stored
as Arrow stores it, and its row is flagged (:attr:`FastColumns.out_of_range`) so that the
caller can report it without looking at the block again.

Speed
-----
A byte-at-a-time loop mispredicts a branch at the end of every field. String fields are
therefore scanned eight bytes at a time (SWAR: one 64-bit load, a few ALU operations, a
trailing-zero count). Plain numerals -- ``-``? digits with at most one ``.``, 18 digits at
most, then the delimiter or the line end -- go through a tight byte loop before the general
parser is tried. Nothing reads outside the block's buffer.

Output layout
-------------
Values are written column-major (one contiguous row of a 2-D array per column), so every
column of :class:`FastColumns` is a zero-copy view and :func:`to_arrow` wraps it into an
Arrow array with ``pa.Array.from_buffers`` without copying. String columns are built in
Arrow's layout: pass 1 records where each field starts and the running offsets, pass 2 copies
the bytes of each column into one contiguous buffer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
import pyarrow as pa

from shardtrain.kernels import arrow, csv_types
from shardtrain.kernels.csv_fields import (
    NOT_PARSED,
    OUT_OF_RANGE,
    PARSED,
    field_stops,
    is_null,
    null_addresses,
    null_tokens,
    parse_bool,
    parse_int,
    parse_int_loop,
    scan_field,
    utf8_valid,
)
from shardtrain.kernels.csv_float import (
    PENDING_BITS,
    convert_pending,
    decimal_to_float32_bits,
    parse_float,
    parse_float_loop,
    powers_of_ten,
)
from shardtrain.kernels.csv_records import line_bounds
from shardtrain.kernels.csv_types import field_code
from shardtrain.kernels.native import (
    as_bytes_array,
    check_indices,
    check_ranges,
    kernel_input,
    load_u8,
    load_u64,
    store_u64,
)

__all__ = [
    "FAST_DELIMITERS",
    "KIND_BOOL",
    "KIND_FLOAT",
    "KIND_INT",
    "KIND_STRING",
    "NO_QUOTE",
    "STATUS_BAD_VALUE",
    "STATUS_DEFERRED",
    "STATUS_FIELD_COUNT",
    "STATUS_OK",
    "FastColumns",
    "decimal_to_float32_bits",
    "line_bounds",
    "parse_block_fast",
    "to_arrow",
]

KIND_FLOAT, KIND_INT, KIND_BOOL, KIND_STRING = 0, 1, 2, 3
STATUS_OK, STATUS_FIELD_COUNT, STATUS_BAD_VALUE = 0, 1, 2
#: A line left to the full parser (``defer=True``): it holds the quote character, ``\r`` or
#: ``\n`` (a quoted record).
STATUS_DEFERRED = 3

# Kernel result codes.
_DONE, _ABORT = 0, 1

_MAX_OFFSET = 2**31 - 1  # Arrow string offsets are int32
_UTF8_BOM = b"\xef\xbb\xbf"

_QUOTE, _COMMA = ord('"'), ord(",")
_MINUS_SIGN, _ZERO_DIGIT, _POINT = ord("-"), ord("0"), ord(".")
# csv_types' codes, as constants the kernel compiles in.
_TEXT_CODE, _INT_CODE, _FLOAT_CODE = csv_types.TEXT, csv_types.INT, csv_types.FLOAT
_LEADING_ZERO_FLAG, _KIND_BITS = csv_types.LEADING_ZERO, csv_types.KIND_MASK

#: The ``quote`` of :func:`parse_block_fast` for a dialect without quoting.
NO_QUOTE = -1
#: The delimiters the kernel reads (others could be part of a number: ``.``, ``-``, ``e``...).
FAST_DELIMITERS = frozenset(b",;\t|")


@dataclass
class FastColumns:
    """The typed columns of one block, one entry per line.

    Attributes:
        values: per column, by kind: float32, int64 or bool ndarray, or for strings
            ``(data, offsets)`` in Arrow string layout (uint8 data, int32 offsets of
            ``n + 1`` entries starting at 0). Entries of missing values and of rows whose
            status is not 0 are zero (empty strings).
        valid: per column, a bool ndarray: False for a missing value (a null token) and for
            every value of a row whose status is not 0.
        row_status: int8 per line: 0 ok, 1 wrong number of fields, 2 a value that does not
            parse as its column's type (a wrong field count takes precedence), 3 left to the
            full parser (``defer``).
        bad_column: int32 per line: the first column whose value did not parse (status 2),
            else -1.
        field_count: int32 per line: the number of fields on the line.
        out_of_range: bool per line: an accepted line (status 0) holds a float value beyond
            float32's range, stored as ±inf (``1e39``) or ±0 (``1e-50``). Spelled
            infinities and zeros (``inf``, ``0.0e-3``) are not flagged.
        type_counts: with ``count_types``, the kinds of the fields of the lines the type pass
            counts (a :func:`~.csv_types.new_tally`); else None.
    """

    values: list
    valid: list
    row_status: np.ndarray
    bad_column: np.ndarray
    field_count: np.ndarray
    out_of_range: np.ndarray
    type_counts: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return len(self.row_status)


# --------------------------------------------------------------------------------------------
# Kernel arguments (normalised: shardtrain.kernels.native.kernel_input)
# --------------------------------------------------------------------------------------------


class _Parsed(NamedTuple):
    """What :func:`_parse_lines` writes, one entry per line. The values of column ``col``
    are row ``slots[col]`` of its kind's array (see :func:`_column_slots`)."""

    float_bits: np.ndarray  # uint32[n_float, n]
    int_values: np.ndarray  # int64[n_int, n]
    bool_values: np.ndarray  # bool[n_bool, n]
    string_starts: np.ndarray  # int64[n_string, n]: where each string field starts
    string_offsets: np.ndarray  # int32[n_string, n + 1]: Arrow offsets of each column
    valid: np.ndarray  # bool[ncols, n]
    row_status: np.ndarray  # int8[n]
    bad_column: np.ndarray  # int32[n]
    field_count: np.ndarray  # int32[n]
    out_of_range: np.ndarray  # bool[n]: a float value of the row was beyond float32's range

    @classmethod
    def empty(cls, counts: tuple[int, int, int, int], ncols: int, n: int) -> _Parsed:
        """Uninitialised arrays for ``n`` lines of ``counts`` columns of each kind."""
        n_float, n_int, n_bool, n_string = counts
        return cls(
            float_bits=np.empty((n_float, n), dtype=np.uint32),
            int_values=np.empty((n_int, n), dtype=np.int64),
            bool_values=np.empty((n_bool, n), dtype=np.bool_),
            string_starts=np.empty((n_string, n), dtype=np.int64),
            string_offsets=np.empty((n_string, n + 1), dtype=np.int32),
            valid=np.empty((ncols, n), dtype=np.bool_),
            row_status=np.empty(n, dtype=np.int8),
            bad_column=np.empty(n, dtype=np.int32),
            field_count=np.empty(n, dtype=np.int32),
            out_of_range=np.empty(n, dtype=np.bool_),
        )


@functools.lru_cache(maxsize=64)
def _column_slots(kinds_key: bytes) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]:
    """``(kinds, slots, counts)``: each column's index within its kind's group of columns."""
    kinds = np.frombuffer(kinds_key, dtype=np.int8)
    slots = np.empty(len(kinds), dtype=np.int64)
    counts = [0, 0, 0, 0]
    for j, kind in enumerate(kinds):
        slots[j] = counts[kind]
        counts[kind] += 1
    return (
        kernel_input(kinds, np.int8),
        kernel_input(slots, np.int64),
        (counts[0], counts[1], counts[2], counts[3]),
    )


# --------------------------------------------------------------------------------------------
# The kernels
# --------------------------------------------------------------------------------------------


class _Counting(NamedTuple):
    """What :func:`_parse_lines` counts of the kinds of the fields it parses (``count_types``;
    see :func:`parse_block_fast`): per column, only the fields whose kind is not the one its
    type expects (``expect``), as :mod:`.csv_types` codes; the others are added up by the
    caller from ``counted``."""

    expect: np.ndarray  # int64[ncols]: the csv_types kind each column's fields are expected to be
    label: int  # the label column (a row without a label is not counted)
    quoted: np.ndarray  # csv_types.automaton_tables
    final: np.ndarray
    text_start: np.ndarray
    decimal: int
    tally: np.ndarray  # int64[ncols, N_CODES]: fields of an unexpected kind
    explicit: np.ndarray  # int64[ncols]: how many of a column's fields ``tally`` holds
    counted: np.ndarray  # int64[1]: rows counted (the right field count, a label)
    events: np.ndarray  # int64[2, ncols]: scratch, one row's (column, code) pairs


@numba.njit(cache=True, nogil=True)
def _parse_lines(
    block, starts, ends, kinds, slots, nulls, pow10, delim, quote, defer, out, count, counting
):
    """Pass 1: parse every line, field by field, left to right; return ``(result, pending)``.

    Line ``i`` is ``block[starts[i]:ends[i]]``; column ``col`` has kind ``kinds[col]`` and
    its values go to row ``slots[col]`` of its kind's array in ``out`` (a :class:`_Parsed`).
    ``nulls`` is a :class:`~.csv_fields.NullTokens`, ``pow10`` the table of
    :func:`~.csv_float.powers_of_ten`;
    ``delim`` separates fields, and ``quote`` (:data:`NO_QUOTE`: none) forces the fallback --
    of the block, or with ``defer`` of the line alone (:data:`STATUS_DEFERRED`).

    Each field is read once: numbers are converted while their end is searched for, other
    fields are scanned to the next delimiter. ``result`` is ``_ABORT`` as soon as a byte that
    forces the fallback (or invalid UTF-8 in a string) is seen; ``pending`` counts the float
    values left for exact conversion (marked with :data:`~.csv_float.PENDING_BITS`). A row
    with a float beyond float32's range (stored as ±inf or ±0) is flagged in
    ``out.out_of_range``.

    With ``count``, the kinds of the fields are counted into ``counting`` (a
    :class:`_Counting`) as the type pass would count them: only the rows it counts (the
    right field count, the label present, not deferred), and per field only what differs
    from the kind its column's type expects, so that a column of its sample's type costs a
    byte or two per field.
    """
    tokens = null_addresses(nulls)
    numeric_nulls = nulls.numeric
    (
        expect,
        label,
        t_quoted,
        t_final,
        text_start,
        decimal,
        tally,
        explicit,
        counted,
        events,
    ) = counting
    t_quoted = t_quoted.ctypes.data  # the tables by address, as csv_types' kernels read them
    t_final = t_final.ctypes.data
    text_start = text_start.ctypes.data
    (
        float_bits,
        int_values,
        bool_values,
        string_starts,
        string_offsets,
        valid,
        row_status,
        bad_column,
        field_count,
        out_of_range,
    ) = out  # unpacked once: bound to variables, the arrays are not reference-counted per use
    buf = block.ctypes.data
    size = block.shape[0]
    pow10_buf = pow10.ctypes.data
    delims, quotes = field_stops(delim, quote)
    ncols = kinds.shape[0]
    n_strings = string_offsets.shape[0]
    for c in range(n_strings):
        string_offsets[c, 0] = 0
    pending = 0
    for i in range(starts.shape[0]):
        p = starts[i]
        end = ends[i]
        status = STATUS_OK
        bad = -1
        col = 0
        flagged = False
        n_events = 0  # fields of this row of a kind their column does not expect
        labelled = True
        unreadable = False  # a field the type pass would not count the row for (not UTF-8)
        while True:
            # A field past the last column (a line with too many fields) is only scanned:
            # counted, and checked for quotes.
            known = col < ncols
            kind = kinds[col] if known else KIND_STRING
            slot = slots[col] if known else 0
            s = p
            code = NOT_PARSED
            number = 0
            plain = False
            point = False
            if kind == KIND_FLOAT:
                q, number, code, point = parse_float_loop(buf, p, end, pow10_buf, delim)
                plain = code >= 0
                if code < 0:
                    q, number, code = parse_float(buf, p, end, pow10_buf, delim)
                p = q
            elif kind == KIND_INT:
                q, number, code = parse_int_loop(buf, p, end, delim)
                plain = code >= 0
                if code < 0:
                    q, number, code = parse_int(buf, p, end, delim)
                p = q
            high = False
            if code == NOT_PARSED:
                p, high, stop = scan_field(buf, p, end, size, delim, quote, delims, quotes)
                if stop:
                    if not defer:
                        return _ABORT, pending
                    status = STATUS_DEFERRED
                    break
            if known:
                present = (code != NOT_PARSED and not numeric_nulls) or not is_null(
                    buf, s, p, tokens
                )
                ok = True
                if kind == KIND_FLOAT:
                    if not present or code == NOT_PARSED:
                        float_bits[slot, i] = 0
                        ok = not present
                    elif code == PARSED:
                        float_bits[slot, i] = number
                    elif code == OUT_OF_RANGE:
                        float_bits[slot, i] = number
                        flagged = True
                    else:
                        float_bits[slot, i] = PENDING_BITS
                        pending += 1
                elif kind == KIND_INT:
                    ok = not present or code == PARSED
                    int_values[slot, i] = number if present else 0
                elif kind == KIND_BOOL:
                    value = parse_bool(buf, s, p) if present else 0
                    ok = value >= 0
                    bool_values[slot, i] = value == 1
                else:
                    if present and high and not utf8_valid(buf, s, p):
                        return _ABORT, pending
                    string_starts[slot, i] = s
                    length = p - s if present else 0
                    string_offsets[slot, i + 1] = string_offsets[slot, i] + length
                valid[col, i] = present and ok
                if not ok and status == STATUS_OK:
                    status = STATUS_BAD_VALUE
                    bad = col
                if count:
                    found = -1  # the field's code when not the expected kind's
                    if not present:
                        found = 0  # csv_types.MISSING
                        if col == label:
                            labelled = False
                    elif plain:  # a numeral that parsed: int or float, maybe a leading zero
                        # Branch-free: a sign or a leading 0 is a coin toss in many columns
                        lead = s + np.int64(load_u8(buf, s) == _MINUS_SIGN)
                        second = lead + 1  # after its first digit (lead < p: it has one)
                        after = load_u8(buf, min(second, p - 1))
                        zero = (
                            np.int64(load_u8(buf, lead) == _ZERO_DIGIT)
                            & np.int64(second < p)
                            & np.int64(np.uint64(after - 48) <= np.uint64(9))
                        )
                        numeral = _INT_CODE + (_FLOAT_CODE - _INT_CODE) * np.int64(point)
                        other = np.int64(point != (kind == KIND_FLOAT))  # an int in a float column
                        found = zero * (numeral | _LEADING_ZERO_FLAG) + (1 - zero) * (
                            other * (numeral + 1) - 1
                        )
                    elif kind == KIND_BOOL and ok:
                        pass
                    elif (
                        kind == KIND_STRING and p > s and load_u8(text_start, load_u8(buf, s)) == 1
                    ):
                        if expect[col] != _TEXT_CODE:  # a numeric split key, read as text
                            found = _TEXT_CODE
                    else:  # anything else: classified as the type pass classifies it
                        found = field_code(buf, s, p, t_quoted, t_final, tokens, decimal)
                        if (found & _KIND_BITS) == _TEXT_CODE and not utf8_valid(buf, s, p):
                            unreadable = True
                        if found == expect[col]:
                            found = -1
                    if found >= 0:
                        events[0, n_events] = col
                        events[1, n_events] = found
                        n_events += 1
            col += 1
            if p >= end:
                break
            p += 1  # the delimiter
        field_count[i] = col
        if status == STATUS_DEFERRED:
            bad = -1
        elif col != ncols:
            status = STATUS_FIELD_COUNT
            bad = -1
        row_status[i] = status
        bad_column[i] = bad
        out_of_range[i] = flagged and status == STATUS_OK
        if count and labelled and not unreadable and col == ncols and status != STATUS_DEFERRED:
            counted[0] += 1
            for k in range(n_events):
                c = events[0, k]
                tally[c, events[1, k]] += 1
                explicit[c] += 1
        if status != STATUS_OK:  # a rejected row: no values, whatever was parsed
            for c in range(ncols):
                valid[c, i] = False
            for c in range(float_bits.shape[0]):
                float_bits[c, i] = 0
            for c in range(int_values.shape[0]):
                int_values[c, i] = 0
            for c in range(bool_values.shape[0]):
                bool_values[c, i] = False
            for c in range(n_strings):
                string_starts[c, i] = 0
                string_offsets[c, i + 1] = string_offsets[c, i]
    return _DONE, pending


@numba.njit(cache=True, nogil=True)
def _gather_strings(block, field_starts, offsets, out):
    """Pass 2 for one string column: copy field ``i`` to ``out[offsets[i]:offsets[i + 1]]``.

    Eight bytes at a time: a word may run past the field into the next one's place, which
    the next field then overwrites (fields are copied in order), so only the buffers' ends
    need byte copies.
    """
    src = block.ctypes.data
    dst = out.ctypes.data
    src_size = block.shape[0]
    dst_size = out.shape[0]
    for i in range(field_starts.shape[0]):
        a = offsets[i]
        n = offsets[i + 1] - a
        s = field_starts[i]
        k = 0
        while k < n and s + k + 8 <= src_size and a + k + 8 <= dst_size:
            store_u64(dst, a + k, load_u64(src, s + k))
            k += 8
        while k < n:
            out[a + k] = block[s + k]
            k += 1


def _resolve_pending(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    kinds: np.ndarray,
    slots: np.ndarray,
    delim: int,
    out: _Parsed,
) -> None:
    """Replace every pending float value with its exact conversion (and flag the rows of
    those that end up beyond float32's range)."""
    for col in np.flatnonzero(kinds == KIND_FLOAT).tolist():
        beyond = convert_pending(buf, starts, ends, col, delim, out.float_bits[slots[col]])
        out.out_of_range[beyond[out.row_status[beyond] == STATUS_OK]] = True


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def parse_block_fast(
    block: np.ndarray | bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    kinds: np.ndarray,
    null_values: tuple[bytes, ...],
    *,
    delimiter: int = _COMMA,
    quote: int = _QUOTE,
    defer: bool = False,
    count_types: tuple[np.ndarray, int] | None = None,
) -> FastColumns | None:
    """Parse the unquoted CSV lines ``block[starts[i]:ends[i]]`` into typed columns.

    Fields are separated by ``delimiter``; one line is one row. The values, nulls and
    rejections are those of ``pyarrow.csv.read_csv`` with the same delimiter, column types
    and null values (see the module docstring), computed in compiled code.

    Args:
        block: the block's bytes (uint8 array or bytes-like).
        starts, ends: int64 byte range of each line, without the line feed and without a
            trailing carriage return; lines must not be empty.
        kinds: int8 per column: ``KIND_FLOAT`` (float32), ``KIND_INT`` (int64), ``KIND_BOOL``
            or ``KIND_STRING``.
        null_values: the byte strings read as missing (e.g. ``(b"", b"NA", b"null")``).
        delimiter: the field separator, one of :data:`FAST_DELIMITERS` (as a byte value).
        quote: the quote character (a byte value), whose presence makes the block Arrow's
            (quoted fields need the full grammar); :data:`NO_QUOTE` when the dialect has no
            quoting (a ``"`` is then text, as for Arrow with ``quote_char=False``).
        defer: leave a line that holds the quote, ``\\r`` or ``\\n`` (a quoted record, when
            the lines are records) to the caller instead of the whole block: its status is
            :data:`STATUS_DEFERRED` and it has no values.
        count_types: ``(expect, label)``: also count the kinds of the fields as the type
            pass does (:func:`shardtrain.kernels.csv_types.classify_block`, whose counts
            they equal), into :attr:`FastColumns.type_counts`: ``expect`` holds per column the
            kind its type expects (a :mod:`.csv_types` kind), ``label`` the label column's
            index. Deferred lines are not counted.

    Returns:
        A :class:`FastColumns` with one entry per line, or None when the block needs Arrow:
        a line contains the quote, ``\\r`` or ``\\n``, a string field is not valid UTF-8, the
        block starts with a UTF-8 byte-order mark (which Arrow drops), or the block is too
        large for int32 string offsets.

    Raises:
        ValueError: malformed line ranges or unknown kinds.
    """
    buf = as_bytes_array(block)
    starts, ends = check_ranges(starts, ends, len(buf), "line", "block")
    kinds = np.asarray(kinds)
    if kinds.ndim != 1 or (len(kinds) and (kinds.min() < 0 or kinds.max() > KIND_STRING)):
        raise ValueError("kinds must be a 1-D array of KIND_* codes")
    if len(kinds) == 0:
        raise ValueError("at least one column is needed")
    if delimiter not in FAST_DELIMITERS:
        raise ValueError(
            f"delimiter {chr(delimiter)!r} is not one of {sorted(map(chr, FAST_DELIMITERS))}"
        )
    if (quote != NO_QUOTE and not 0 < quote < 128) or quote == delimiter:
        raise ValueError("quote must be an ASCII byte other than the delimiter, or NO_QUOTE")
    if len(buf) > _MAX_OFFSET:
        return None
    if len(starts) and starts[0] == 0 and bytes(buf[:3]) == _UTF8_BOM:
        return None  # Arrow drops a byte-order mark at the start of its input
    kinds, slots, counts = _column_slots(kinds.astype(np.int8).tobytes())
    nulls = null_tokens(tuple(v.encode() if isinstance(v, str) else bytes(v) for v in null_values))
    out = _Parsed.empty(counts, len(kinds), len(starts))
    counting = _counting(count_types, len(kinds))
    result, pending = _parse_lines(
        buf,
        starts,
        ends,
        kinds,
        slots,
        nulls,
        powers_of_ten(),
        delimiter,
        quote,
        defer,
        out,
        count_types is not None,
        counting,
    )
    if result != _DONE:
        return None
    if pending:
        _resolve_pending(buf, starts, ends, kinds, slots, delimiter, out)

    values: list = []
    for kind, slot in zip(kinds.tolist(), slots.tolist(), strict=True):
        if kind == KIND_FLOAT:
            values.append(out.float_bits[slot].view(np.float32))
        elif kind == KIND_INT:
            values.append(out.int_values[slot])
        elif kind == KIND_BOOL:
            values.append(out.bool_values[slot])
        else:
            offsets = out.string_offsets[slot]
            data = np.empty(int(offsets[-1]), dtype=np.uint8)
            _gather_strings(buf, out.string_starts[slot], offsets, data)
            values.append((data, offsets))
    return FastColumns(
        values=values,
        valid=list(out.valid),
        row_status=out.row_status,
        bad_column=out.bad_column,
        field_count=out.field_count,
        type_counts=_type_counts(counting) if count_types is not None else None,
        out_of_range=out.out_of_range,
    )


def _counting(count_types: tuple[np.ndarray, int] | None, ncols: int) -> _Counting:
    """The kernel's counting arguments (empty arrays when not counting)."""
    quoted, final, text_start = csv_types.automaton_tables(_POINT)
    width = ncols if count_types is not None else 0
    expect = np.zeros(width, dtype=np.int64)
    label = 0
    if count_types is not None:
        expect[:] = count_types[0]
        label = int(count_types[1])
    return _Counting(
        expect=expect,
        label=label,
        quoted=quoted,
        final=final,
        text_start=text_start,
        decimal=_POINT,
        tally=csv_types.new_tally(width),
        explicit=np.zeros(width, dtype=np.int64),
        counted=np.zeros(1, dtype=np.int64),
        events=np.empty((2, width), dtype=np.int64),
    )


def _type_counts(counting: _Counting) -> np.ndarray:
    """The kernel's counts completed: every counted field not counted as an exception is of
    its column's expected kind."""
    tally = counting.tally
    counted = int(counting.counted[0])
    for col, expected in enumerate(counting.expect.tolist()):
        tally[col, expected] += counted - int(counting.explicit[col])
    return tally


def _validity_buffer(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    """Arrow validity bitmap (LSB first) and null count; no bitmap when nothing is null."""
    null_count = len(valid) - int(np.count_nonzero(valid))
    if null_count == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), null_count


def to_arrow(
    fast: FastColumns, kinds: np.ndarray, rows: np.ndarray | None = None
) -> list[pa.Array]:
    """The columns of ``fast`` as typed Arrow arrays (float32, int64, bool, string).

    Nulls come from ``fast.valid``. Without ``rows``, float, int and string arrays wrap the
    NumPy buffers without copying (only validity and bool bitmaps are built); with ``rows``
    (int64 line indices, e.g. ``np.flatnonzero(fast.row_status == 0)``) only those rows are
    kept, in that order.
    """
    kinds = np.asarray(kinds)
    if len(kinds) != len(fast.values):
        raise ValueError(f"{len(kinds)} kinds for {len(fast.values)} columns")
    if rows is not None:
        rows = check_indices(rows, fast.num_rows, "rows")
    out = []
    for kind, values, valid in zip(kinds.tolist(), fast.values, fast.valid, strict=True):
        if kind == KIND_STRING:
            data, offsets = values
            validity, null_count = _validity_buffer(valid)
            array = pa.Array.from_buffers(
                pa.string(),
                len(valid),
                [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                null_count=null_count,
            )
            if rows is not None:
                array = array.take(arrow.from_numpy(rows))
            out.append(array)
            continue
        if rows is not None:
            values = values[rows]
            valid = valid[rows]
        validity, null_count = _validity_buffer(valid)
        if kind == KIND_FLOAT:
            arrow_type, data = pa.float32(), pa.py_buffer(values)
        elif kind == KIND_INT:
            arrow_type, data = pa.int64(), pa.py_buffer(values)
        elif kind == KIND_BOOL:
            arrow_type = pa.bool_()
            data = pa.py_buffer(np.packbits(values, bitorder="little"))
        else:
            raise ValueError(f"unknown kind {kind}")
        out.append(
            pa.Array.from_buffers(arrow_type, len(valid), [validity, data], null_count=null_count)
        )
    return out
