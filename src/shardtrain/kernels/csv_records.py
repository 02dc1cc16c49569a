"""Where CSV records begin and end when quoted fields may hold line breaks.

A CSV *record* is one row of the table. Without quotes a record is a line; with quotes a
field such as ``"Thanks!⏎Regards, Bob"`` carries line feeds and delimiters as text, and only
a line feed *outside* quotes ends the record. Whether a byte is inside quotes depends on every
byte before it, so a reader that starts in the middle of a file cannot tell on its own. This
module runs the small state machine that decides it, in compiled code, and is used

* per block while reading (:func:`record_bounds`), to cut blocks at record ends and to give
  the parser each record's byte range and first line; and
* at the start of a piece that begins in the middle of a file (:func:`speculate`), to guess
  from the bytes there whether they are inside quotes (the guess is verified once every
  piece is read: ``shardtrain.data.sharding.alignment``).

A block that holds no quote needs no state machine: its records are its lines
(:func:`line_bounds`, found eight bytes at a time), which is what the compiled parser
(:mod:`.csv_parse`) reads.

The state machine follows the lenient rules of pandas' C parser and of Arrow's CSV reader
(both agree on them):

* a quote opens a quoted field only at the start of a field (``ab"c`` is the text ``ab"c``);
* inside quotes, a doubled quote is one quote character, and the escape character (if any)
  makes the next byte literal;
* after the closing quote, text up to the next delimiter is appended (``"ab"cd`` is
  ``abcd``);
* a line feed outside quotes ends the record; a carriage return before it is not data.

States are small integers; :data:`RECORD_START` is the state before the first byte of a
record (after a line feed outside quotes, and at the start of a file's data).
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from shardtrain.kernels.csv_fields import in_every_byte
from shardtrain.kernels.native import as_bytes_array, load_u8, load_u64, trailing_zeros

__all__ = [
    "FIELD_START",
    "IN_FIELD",
    "IN_QUOTES",
    "NO_BYTE",
    "RECORD_START",
    "advance",
    "has_negative_exponent",
    "line_bounds",
    "record_bounds",
    "speculate",
]

#: Before a record's first byte.
RECORD_START = 0
#: At a field's start (after a delimiter), and inside an unquoted field.
FIELD_START, IN_FIELD = 1, 2
#: Inside a quoted field.
IN_QUOTES = 3
_QUOTE_IN_QUOTES, _ESCAPED_IN_QUOTES, _ESCAPED_IN_FIELD = 4, 5, 6

#: The quote or escape byte of a dialect without quoting (or without an escape character).
NO_BYTE = -1

_LF = ord("\n")
_CR = ord("\r")
_MINUS = ord("-")
_E_LOWER = ord("e")


def _step(state, c, delim, quote, escape):
    """The state after byte ``c``."""
    if state == IN_QUOTES:
        if c == quote:
            return _QUOTE_IN_QUOTES
        if c == escape:
            return _ESCAPED_IN_QUOTES
        return IN_QUOTES
    if state == _ESCAPED_IN_QUOTES:
        return IN_QUOTES
    if state == _QUOTE_IN_QUOTES:
        if c == quote:
            return IN_QUOTES  # a doubled quote
        if c == _LF:
            return RECORD_START
        if c == delim:
            return FIELD_START
        return IN_FIELD  # text after the closing quote is appended
    if state == _ESCAPED_IN_FIELD:
        return IN_FIELD
    # RECORD_START, FIELD_START, IN_FIELD: outside quotes
    if c == _LF:
        return RECORD_START
    if c == delim:
        return FIELD_START
    if c == escape:
        return _ESCAPED_IN_FIELD
    if c == quote and state != IN_FIELD:
        return IN_QUOTES
    return IN_FIELD


_N_STATES = 7


@functools.lru_cache(maxsize=16)
def _transitions(delim: int, quote: int, escape: int) -> np.ndarray:
    """The state machine as a table: ``table[state * 256 + byte]`` is the next state.

    One load per byte instead of :func:`_step`'s branches.
    """
    table = np.empty(_N_STATES * 256, dtype=np.uint8)
    for state in range(_N_STATES):
        for c in range(256):
            table[state * 256 + c] = _step(state, c, delim, quote, escape)
    table.flags.writeable = False
    return table


@numba.njit(cache=True, nogil=True)
def _advance(block, position, state, table, stop_at_record):
    buf = block.ctypes.data
    tab = table.ctypes.data
    size = block.shape[0]
    p = position
    while p < size:
        state = load_u8(tab, state * 256 + load_u8(buf, p))
        p += 1
        if stop_at_record and state == RECORD_START:
            break
    return p, state


def advance(
    block: np.ndarray | bytes,
    state: int,
    *,
    delim: int,
    quote: int,
    escape: int,
    position: int = 0,
    stop_at_record: bool = False,
) -> tuple[int, int]:
    """Run the state machine over ``block[position:]`` from ``state``.

    Returns ``(p, state)``: the position reached and the state there. With
    ``stop_at_record`` it stops right after the first line feed that ends a record (``p`` is
    then the start of the next record), else at the end of the block.
    """
    buf = as_bytes_array(block)
    table = _transitions(delim, quote, escape)
    p, state = _advance(buf, position, state, table, stop_at_record)
    return int(p), int(state)


@numba.njit(cache=True, nogil=True)
def _record_bounds(block, table, starts, ends, first_lines, at_eof):
    buf = block.ctypes.data
    tab = table.ctypes.data
    size = block.shape[0]
    state = RECORD_START
    count = 0
    lines = 0  # line feeds seen so far
    record = 0  # start of the current record
    record_line = 0
    p = 0
    while p < size:
        c = load_u8(buf, p)
        state = load_u8(tab, state * 256 + c)
        p += 1
        if c == _LF:
            if state == RECORD_START:
                end = p - 1
                if end > record and load_u8(buf, end - 1) == _CR:
                    end -= 1
                starts[count] = record
                ends[count] = end
                first_lines[count] = record_line
                count += 1
                record = p
                record_line = lines + 1
            lines += 1
    complete = record
    if at_eof and record < size:  # the last record, without a line feed (maybe unterminated)
        end = size - 1 if load_u8(buf, size - 1) == _CR else size
        starts[count] = record
        ends[count] = max(end, record)
        first_lines[count] = record_line
        count += 1
        complete = size
    return count, complete, lines, state


def record_bounds(
    block: np.ndarray | bytes, *, delim: int, quote: int, escape: int, at_eof: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The records of a block that starts at a record start.

    Returns ``(starts, ends, first_lines, complete, lines)``: int64 arrays with each record's
    byte range (without its line feed and a carriage return before it; blank lines are
    records with ``start == end``) and the 0-based line of the block it starts on; the
    number of bytes the complete records take (a record is complete when a line feed outside
    quotes ends it, or, with ``at_eof``, at the end of the block); and the line feeds in the
    block.
    """
    buf = as_bytes_array(block)
    capacity = int(np.count_nonzero(buf == _LF)) + 1  # a record ends at a line feed or the end
    starts = np.empty(capacity, dtype=np.int64)
    ends = np.empty(capacity, dtype=np.int64)
    first_lines = np.empty(capacity, dtype=np.int64)
    count, complete, lines, _ = _record_bounds(
        buf, _transitions(delim, quote, escape), starts, ends, first_lines, at_eof
    )
    return starts[:count], ends[:count], first_lines[:count], int(complete), int(lines)


@numba.njit(cache=True, nogil=True)
def _speculate(block, state, table, quote, n_fields):
    buf = block.ctypes.data
    tab = table.ctypes.data
    size = block.shape[0]
    first = -1
    irregular = 0
    matches = 0
    mismatches = 0
    fields = 1
    nonblank = False
    p = 0
    while p < size:
        c = load_u8(buf, p)
        new = load_u8(tab, state * 256 + c)
        if (state == IN_FIELD and c == quote) or (state == _QUOTE_IN_QUOTES and new == IN_FIELD):
            irregular += 1
        p += 1
        if new == RECORD_START:
            if first < 0:
                first = p
            elif nonblank:
                if fields == n_fields:
                    matches += 1
                else:
                    mismatches += 1
            fields = 1
            nonblank = False
        elif first >= 0:
            if new == FIELD_START:
                fields += 1
            if c != _CR:
                nonblank = True
        state = new
    return first, irregular, matches, mismatches


def speculate(
    block: np.ndarray | bytes, state: int, *, delim: int, quote: int, escape: int, n_fields: int
) -> tuple[int, int, int, int]:
    """How plausible reading ``block`` from ``state`` is, for a reader that starts in the
    middle of a file and does not know whether it is inside quotes.

    Returns ``(first, irregular, matches, mismatches)``: where the first record after the
    block's start begins (-1: none ends in the block); how many quotes the reading finds
    where well-formed CSV has none (a quote inside an unquoted field, text after a closing
    quote); and how many of the complete records after ``first`` have ``n_fields`` fields
    and how many another count (blank lines count neither).
    """
    buf = as_bytes_array(block)
    out = _speculate(buf, state, _transitions(delim, quote, escape), quote, n_fields)
    return int(out[0]), int(out[1]), int(out[2]), int(out[3])


@numba.njit(cache=True, nogil=True)
def _negative_exponents(block, starts, ends, rows, out):
    buf = block.ctypes.data
    for k in range(rows.shape[0]):
        r = rows[k]
        found = False
        for p in range(starts[r] + 1, ends[r]):
            if load_u8(buf, p) == _MINUS and (load_u8(buf, p - 1) | 0x20) == _E_LOWER:
                found = True
                break
        out[k] = found


def has_negative_exponent(
    block: np.ndarray | bytes, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """Whether each record ``rows[k]`` (of ``block[starts[r]:ends[r]]``) holds ``e-`` or
    ``E-``: the cheap test for a number written too small for float32 (``1e-50``)."""
    buf = as_bytes_array(block)
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    out = np.zeros(len(rows), dtype=np.bool_)
    if len(rows):
        _negative_exponents(
            buf,
            np.ascontiguousarray(starts, np.int64),
            np.ascontiguousarray(ends, np.int64),
            rows,
            out,
        )
    return out


# --------------------------------------------------------------------------------------------
# Lines: the records of a block without quotes
# --------------------------------------------------------------------------------------------

_LFS = in_every_byte(_LF)
_LOW7 = in_every_byte(0x7F)


@numba.njit(cache=True, nogil=True)
def _find_lines(block, position, starts, ends, count):
    """Record lines from byte ``position`` on as ``starts[count:]``/``ends[count:]``.

    Returns ``(position, count, done)``: where to resume and the lines recorded when the
    arrays are full, or ``done``. A line's end excludes its line feed and one carriage
    return before it; a last line without a line feed ends at the block's end.

    Eight bytes at a time, with the exact zero-byte test (no false marks, unlike
    :func:`.csv_fields._zero_bytes`), in one pass: NumPy's ``flatnonzero(block == 10)``
    makes two, and its ``nonzero`` is the slower one.
    """
    buf = block.ctypes.data
    size = block.shape[0]
    capacity = starts.shape[0]
    line = position  # start of the line being looked at
    p = position
    while True:
        if count == capacity:
            return line, count, False
        q = -1
        while p + 8 <= size:
            x = load_u64(buf, p) ^ _LFS
            marks = ~(((x & _LOW7) + _LOW7) | x | _LOW7)
            if marks:
                q = p + (trailing_zeros(marks) >> 3)
                break
            p += 8
        if q < 0:
            while p < size:
                if load_u8(buf, p) == _LF:
                    q = p
                    break
                p += 1
        if q < 0:  # no more line feeds
            if line < size:
                end = size - 1 if load_u8(buf, size - 1) == _CR else size
                starts[count] = line
                ends[count] = max(end, line)
                count += 1
            return size, count, True
        end = q - 1 if q > line and load_u8(buf, q - 1) == _CR else q
        starts[count] = line
        ends[count] = end
        count += 1
        line = q + 1
        p = line


def line_bounds(block: np.ndarray | bytes) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive, without ``\\r\\n``) of every line of a block, as int64.

    A block that ends with a line feed has no empty line after it; one that does not ends
    with its unterminated last line. Blank lines are included (``start == end``).
    """
    buf = as_bytes_array(block)
    capacity = len(buf) // 128 + 16  # grows below if lines are shorter on average
    starts = np.empty(capacity, dtype=np.int64)
    ends = np.empty(capacity, dtype=np.int64)
    position, count, done = _find_lines(buf, 0, starts, ends, 0)
    while not done:
        capacity = 2 * capacity
        starts = np.concatenate((starts[:count], np.empty(capacity - count, dtype=np.int64)))
        ends = np.concatenate((ends[:count], np.empty(capacity - count, dtype=np.int64)))
        position, count, done = _find_lines(buf, position, starts, ends, count)
    return starts[:count], ends[:count]
