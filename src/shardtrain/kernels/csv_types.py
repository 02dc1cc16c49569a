"""What kind of value every CSV field holds, without converting it: the type pass.

Column types by *all* rows (``--infer-types all``, the default) need every field of every
file looked at once before any shard is written. Converting the fields (Arrow's CSV reader,
then regular expressions per column) costs as much as sharding itself; this module only
*classifies* them, in one compiled pass over the raw bytes of a block of whole records, and
counts per column how many fields are of each kind. The sharder then decides each column's
type from the counts (:class:`shardtrain.data.schema.TypeTally`'s rules) -- for example a
zip code column that holds ``98115-4820`` after 230,000 numeric rows is a string, a fee
column of ``0`` for thousands of rows and then ``45.12`` is a float.

The kinds, per field (a *code*: a kind plus flags, see :func:`describe`):

* missing (code 0): the field equals one of the null words, quoted or not;
* ``TEXT``: anything else that is not one of the following;
* ``BOOL``: exactly ``true``/``True``/``TRUE``/``false``/``False``/``FALSE``;
* ``INT``: ``[ \\t]*[+-]?[0-9]+[ \\t]*``, flagged :data:`BEYOND_INT64` when the reader could
  not store it as an int64 (outside int64, or with a ``+``, which Arrow refuses);
* ``FLOAT``: any other number (``1.5``, ``.5``, ``1e+05``, ``inf``, ``NaN``), flagged
  :data:`F32_OVERFLOW` or :data:`F32_UNDERFLOW` when it is beyond float32's range (stored as
  ±inf or 0);
* either number flagged :data:`LEADING_ZERO` when it starts with a zero followed by a digit
  (``07919``: a code, kept as text).

The fields are the ones the sharder's reader sees (:mod:`shardtrain.data.sources.csv`): records
cut by the quote state machine of :mod:`shardtrain.kernels.csv_records` (a line feed inside
quotes is data), quotes opening only at a field's start, doubled quotes and the escape
character read as in pandas and Arrow, text after a closing quote appended. Only records the
reader accepts as rows are counted: the right number of fields, the label present, valid UTF-8
and no bare carriage return inside (those the reader rejects whatever the types). Blank
records are skipped.

How it is fast: an unquoted field (most fields) is scanned once, each byte adding its class
(digit, point, exponent letter, sign, blank, other; or "stop": delimiter, line feed, carriage
return, escape) from a 256-entry table to one counter -- no dependency from byte to byte but
that add. Plain integers and decimals, and text whose first byte starts no number, are told
from the counts and a byte or two; the rest (exponents, blanks, ``inf``, booleans) run through
a table-driven automaton of the number grammar. Quoted fields are unescaped into a scratch
buffer first. Null words are compared only for fields no longer than the longest null word
whose first byte starts one. Measured figures are in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from shardtrain.kernels.csv_fields import is_null, null_addresses, null_tokens, utf8_valid
from shardtrain.kernels.native import as_bytes_array, load_i64, load_u8, store_u8

__all__ = [
    "BEYOND_INT64",
    "BOOL",
    "F32_OVERFLOW",
    "F32_UNDERFLOW",
    "FLOAT",
    "INT",
    "KIND_MASK",
    "LEADING_ZERO",
    "MISSING",
    "N_CODES",
    "TEXT",
    "automaton_tables",
    "classify_block",
    "describe",
    "field_code",
    "new_tally",
]

#: A field equal to a null word.
MISSING = 0
#: The kinds (the low three bits of a code).
TEXT, BOOL, INT, FLOAT = 1, 2, 3, 4
KIND_MASK = 7
#: Flags of a number's code.
LEADING_ZERO = 8
BEYOND_INT64 = 16
F32_OVERFLOW = 32
F32_UNDERFLOW = 64
#: Codes per column in a tally (``tally[column, code]`` counts fields).
N_CODES = 128

_LF = 10
_CR = 13
_SPACE = 32
_TAB = 9
_PLUS = ord("+")
_MINUS = ord("-")
_ZERO = ord("0")

# The automaton's states.
_START, _START_BLANK, _SIGN, _INT, _DOT, _FRAC, _EXP0, _EXP_SIGN, _EXP = 0, 1, 2, 3, 4, 5, 6, 7, 8
_TRAIL_INT, _TRAIL_FLOAT, _TRAIL_EXP, _NOT = 9, 10, 11, 12
_FIRST_WORD_STATE = 13

# What a final state says (the class before flags). _FLOAT_E: a float with an exponent.
_C_TEXT, _C_BOOL, _C_INT, _C_FLOAT, _C_FLOAT_E = 1, 2, 3, 4, 5

#: The digits of -int64's min and of int64's max.
_INT64_MIN_DIGITS = np.frombuffer(b"9223372036854775808", dtype=np.uint8)
_INT64_MAX_DIGITS = np.frombuffer(b"9223372036854775807", dtype=np.uint8)

_FLOAT_WORDS: tuple[str, ...] = ("inf", "Inf", "INF", "infinity", "Infinity", "INFINITY")
_FLOAT_WORDS += ("nan", "naN", "Nan", "NaN", "NAN")
_BOOL_WORDS = ("true", "True", "TRUE", "false", "False", "FALSE")


@functools.lru_cache(maxsize=16)
def _automaton(decimal: int) -> tuple[np.ndarray, np.ndarray]:
    """``(table, final)``: the field automaton and the class of each state.

    ``table[state * 256 + byte]`` is the next state after a byte of a field's (unescaped)
    value. The grammar is the one of :data:`shardtrain.data.schema.FLOAT_PATTERN` with
    blanks around, the decimal point being ``decimal``, plus the boolean words.
    """
    prefixes: dict[str, int] = {}
    accept: dict[int, int] = {}
    for word in _FLOAT_WORDS + _BOOL_WORDS:
        for k in range(1, len(word) + 1):
            if word[:k] not in prefixes:
                prefixes[word[:k]] = _FIRST_WORD_STATE + len(prefixes)
        accept[prefixes[word]] = _C_FLOAT if word in _FLOAT_WORDS else _C_BOOL
    n_states = _FIRST_WORD_STATE + len(prefixes)
    words_by_state = {s: p for p, s in prefixes.items()}

    def step(state: int, c: int) -> int:
        ch = chr(c)
        blank = c in (_SPACE, _TAB)
        digit = 48 <= c <= 57
        if state in (_START, _START_BLANK, _SIGN):
            if blank and state != _SIGN:
                return _START_BLANK
            if c in (_PLUS, _MINUS) and state != _SIGN:
                return _SIGN
            if digit:
                return _INT
            if c == decimal:
                return _DOT
            if ch in prefixes and (state == _START or ch.lower() in "in"):
                return prefixes[ch]
            return _NOT
        if state == _INT:
            return (
                _INT
                if digit
                else _FRAC
                if c == decimal
                else _EXP0
                if ch in "eE"
                else _TRAIL_INT
                if blank
                else _NOT
            )
        if state == _DOT:
            return _FRAC if digit else _NOT
        if state == _FRAC:
            return _FRAC if digit else _EXP0 if ch in "eE" else _TRAIL_FLOAT if blank else _NOT
        if state == _EXP0:
            return _EXP_SIGN if c in (_PLUS, _MINUS) else _EXP if digit else _NOT
        if state == _EXP_SIGN:
            return _EXP if digit else _NOT
        if state == _EXP:
            return _EXP if digit else _TRAIL_EXP if blank else _NOT
        if state in (_TRAIL_INT, _TRAIL_FLOAT, _TRAIL_EXP):
            return state if blank else _NOT
        if state >= _FIRST_WORD_STATE:
            word = words_by_state[state] + ch
            if word in prefixes:
                return prefixes[word]
            if blank and accept.get(state) == _C_FLOAT:
                return _TRAIL_FLOAT
        return _NOT

    table = np.empty(n_states * 256, dtype=np.uint8)
    for s in range(n_states):
        for c in range(256):
            table[s * 256 + c] = step(s, c) if c < 128 else _NOT
    final = np.full(n_states, _C_TEXT, dtype=np.uint8)
    final[[_INT, _TRAIL_INT]] = _C_INT
    final[[_FRAC, _TRAIL_FLOAT]] = _C_FLOAT
    final[[_EXP, _TRAIL_EXP]] = _C_FLOAT_E
    for s, kind in accept.items():
        final[s] = kind
    for a in (table, final):
        a.flags.writeable = False
    return table, final


def new_tally(width: int) -> np.ndarray:
    """An empty tally for ``width`` columns: ``tally[column, code]`` counts fields."""
    return np.zeros((width, N_CODES), dtype=np.int64)


def describe(code: int) -> str:
    """A code in words (for messages and tests): ``INT|LEADING_ZERO``, ``missing``..."""
    if code == MISSING:
        return "missing"
    names = {TEXT: "TEXT", BOOL: "BOOL", INT: "INT", FLOAT: "FLOAT"}
    parts = [names.get(code & KIND_MASK, "?")]
    for flag, name in (
        (LEADING_ZERO, "LEADING_ZERO"),
        (BEYOND_INT64, "BEYOND_INT64"),
        (F32_OVERFLOW, "F32_OVERFLOW"),
        (F32_UNDERFLOW, "F32_UNDERFLOW"),
    ):
        if code & flag:
            parts.append(name)
    return "|".join(parts)


@numba.njit(cache=True, nogil=True)
def _is_digit(c):
    return 48 <= c <= 57


@numba.njit(cache=True, nogil=True)
def _number_flags(buf, a, b, cls, decimal):
    """The flags of a number ``buf[a:b]`` of class ``cls`` (int, float, float with exponent)."""
    flags = 0
    i = a
    while i < b and (load_u8(buf, i) == _SPACE or load_u8(buf, i) == _TAB):
        i += 1
    plus = load_u8(buf, i) == _PLUS
    negative = load_u8(buf, i) == _MINUS
    if plus or negative:
        i += 1
    if i + 1 < b and load_u8(buf, i) == _ZERO and _is_digit(load_u8(buf, i + 1)):
        flags |= LEADING_ZERO
    if cls == _C_INT:
        # What Arrow's string -> int64 cast accepts: '-'? digits (leading zeros fine), no '+'.
        if plus:
            return flags | BEYOND_INT64
        while i < b and load_u8(buf, i) == _ZERO:
            i += 1
        j = i
        while j < b and _is_digit(load_u8(buf, j)):
            j += 1
        n = j - i
        if n > 19:
            return flags | BEYOND_INT64
        if n == 19:
            limit = _INT64_MIN_DIGITS if negative else _INT64_MAX_DIGITS
            for k in range(19):
                d = load_u8(buf, i + k)
                m = limit[k]
                if d < m:
                    break
                if d > m:
                    return flags | BEYOND_INT64
        return flags
    if cls == _C_FLOAT_E or b - a > 38:
        # Beyond float32: the value's decimal exponent E (value = m * 10**E, 1 <= m < 10),
        # with m from the first 17 significant digits.
        mant = 0.0
        sig = 0
        exp10 = 0  # position of the first significant digit, relative to the point
        seen_point = False
        lead = True
        while i < b:
            c = load_u8(buf, i)
            if _is_digit(c):
                if lead and c == _ZERO:
                    if seen_point:
                        exp10 -= 1
                else:
                    if lead:
                        lead = False
                        exp10 -= 1  # the first significant digit itself
                    if sig < 17:
                        mant = mant * 10.0 + (c - _ZERO)
                        sig += 1
                    if not seen_point:
                        exp10 += 1
            elif c == decimal:
                seen_point = True
            else:
                break
            i += 1
        if lead:
            return flags  # zero
        e = 0
        if i < b and (load_u8(buf, i) | 0x20) == ord("e"):
            i += 1
            eneg = False
            if i < b and (load_u8(buf, i) == _PLUS or load_u8(buf, i) == _MINUS):
                eneg = load_u8(buf, i) == _MINUS
                i += 1
            while i < b and _is_digit(load_u8(buf, i)):
                if e < 100000:
                    e = e * 10 + (load_u8(buf, i) - _ZERO)
                i += 1
            if eneg:
                e = -e
        big = exp10 + e  # value = 0.m... scaled: first digit at 10**big
        for _ in range(sig - 1):
            mant /= 10.0
        if big > 38:
            return flags | F32_OVERFLOW
        if big < -46:
            return flags | F32_UNDERFLOW
        value = mant * 10.0**big
        if value >= 3.4028235677973366e38:
            return flags | F32_OVERFLOW
        if value <= 7.006492321624085e-46:
            return flags | F32_UNDERFLOW
    return flags


@numba.njit(cache=True, nogil=True)
def _code(buf, a, b, state_class, tokens, decimal):
    """The code of the value ``buf[a:b]`` whose automaton class is ``state_class``
    (``tokens``: the null words, from :func:`~.csv_fields.null_addresses`)."""
    if is_null(buf, a, b, tokens):
        return MISSING
    if state_class == _C_TEXT:
        return TEXT
    if state_class == _C_BOOL:
        return BOOL
    flags = _number_flags(buf, a, b, state_class, decimal)
    return (INT if state_class == _C_INT else FLOAT) | flags


@numba.njit(cache=True, nogil=True)
def _quick_code(buf, a, b, acc, quoted, fin, decimal):
    """The code of a non-null unquoted field ``buf[a:b]`` from its byte counts by class
    (``acc``, see :func:`_byte_classes`): plain integers and decimals, and text that cannot
    be a number or a boolean, are told from the counts and one or two bytes; anything else
    (exponents, blanks, signs in odd places, words) is run through the automaton."""
    size = b - a
    digits = acc & 0xFF
    points = (acc >> 8) & 0xFF
    exps = (acc >> 16) & 0xFF
    signs = (acc >> 24) & 0xFF
    blanks = (acc >> 32) & 0xFF
    others = (acc >> 40) & 0xFF
    if size < 255 and size > 0:
        first = load_u8(buf, a)
        lead = a
        if first == _PLUS or first == _MINUS:  # noqa: SIM109 - two compares in compiled code
            lead = a + 1
        if others == 0 and blanks == 0 and exps == 0 and signs == lead - a and digits > 0:
            # [+-]? digits with at most one point: a number.
            if points <= 1:
                flags = 0
                if (
                    lead + 1 < b
                    and load_u8(buf, lead) == _ZERO
                    and _is_digit(load_u8(buf, lead + 1))
                ):
                    flags = LEADING_ZERO
                if points == 0:
                    if size >= 19 or first == _PLUS:
                        return INT | _number_flags(buf, a, b, _C_INT, decimal)
                    return INT | flags
                if size > 38:
                    return FLOAT | _number_flags(buf, a, b, _C_FLOAT, decimal)
                return FLOAT | flags
        elif others > 0 and lead < b and load_u8(quoted, load_u8(buf, lead)) == _NOT:
            return TEXT  # the first byte (after a sign) starts no number, word or boolean
    cls = _run(quoted, fin, buf, a, b)
    if cls == _C_TEXT:
        return TEXT
    if cls == _C_BOOL:
        return BOOL
    return (INT if cls == _C_INT else FLOAT) | _number_flags(buf, a, b, cls, decimal)


@numba.njit(cache=True, nogil=True)
def field_code(buf, a, b, quoted, fin, tokens, decimal):
    """The code of the unquoted field ``buf[a:b]`` (``buf`` an address), classified as the
    type pass classifies it; ``(quoted, fin)`` are :func:`automaton_tables`, ``tokens`` the
    null words (:func:`~.csv_fields.null_addresses`). For the sharder's reader, which counts
    the kinds of the fields it parses (:mod:`.csv_parse`'s ``count_types``)."""
    return _code(buf, a, b, _run(quoted, fin, buf, a, b), tokens, decimal)


def automaton_tables(decimal: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(quoted, final, text_start)``: the tables :func:`field_code` runs on, and per byte 1
    when a field starting with it is text whatever follows (for a quick test first)."""
    quoted, final = _automaton(decimal)
    return quoted, final, _text_start(decimal)


@functools.lru_cache(maxsize=16)
def _byte_classes(delim: int, escape: int, decimal: int) -> np.ndarray:
    """Per byte, what it adds to a field's class counts (digits, points, exponent letters,
    signs, blanks, other bytes: 8 bits each from the lowest), or -1 for the bytes that end
    an unquoted field (delimiter, line feed, carriage return, escape)."""
    classes = np.full(256, 1 << 40, dtype=np.int64)
    classes[ord("0") : ord("9") + 1] = 1
    classes[decimal] = 1 << 8
    classes[[ord("e"), ord("E")]] = 1 << 16
    classes[[_PLUS, _MINUS]] = 1 << 24
    classes[[_SPACE, _TAB]] = 1 << 32
    for c in (delim, _LF, _CR, escape):
        if c >= 0:
            classes[c] = -1
    classes.flags.writeable = False
    return classes


@functools.lru_cache(maxsize=16)
def _text_start(decimal: int) -> np.ndarray:
    """Per byte, 1 when a field starting with it is text whatever follows: not a digit, sign,
    point, blank, nor the first letter of ``inf``/``nan``/a boolean."""
    quoted, _ = _automaton(decimal)
    starts = (quoted[:256] == _NOT).astype(np.uint8)
    starts.flags.writeable = False
    return starts


@numba.njit(cache=True, nogil=True)
def _run(quoted, fin, buf, a, b):
    """The automaton's class of ``buf[a:b]`` read as text (no stop bytes)."""
    s = _START
    for i in range(a, b):
        s = load_u8(quoted, s * 256 + load_u8(buf, i))
        if s == _NOT:
            return _C_TEXT
    return load_u8(fin, s)


@numba.njit(cache=True, nogil=True, inline="always")
def _line_end(buf, p, n):
    """Where the carriage returns from ``p`` on end, if they end the line (a line feed or
    the block's end follows them), else -1: a bare carriage return, where the reader ends
    a row."""
    q = p
    while q < n and load_u8(buf, q) == _CR:
        q += 1
    if q == n or load_u8(buf, q) == _LF:
        return q
    return -1


@numba.njit(cache=True, nogil=True, inline="always")
def _unescape(buf, p, n, scratch, m):
    """The escape byte at ``p``: the byte after it (if the block has one) is literal and is
    appended to ``scratch`` at ``m``. Returns ``(p, m)`` past both."""
    if p + 1 < n:
        store_u8(scratch, m, load_u8(buf, p + 1))
        m += 1
    return p + 2, m


@numba.njit(cache=True, nogil=True)
def _classify(
    block,
    classes,
    text_start,
    quoted,
    fin,
    delim,
    quote,
    escape,
    decimal,
    width,
    label,
    nulls,
    check_utf8,
    scratch,
    row,
    tally,
):
    buf = block.ctypes.data
    cl = classes.ctypes.data
    qtab = quoted.ctypes.data
    ts = text_start.ctypes.data
    fn = fin.ctypes.data
    tokens = null_addresses(nulls)
    fb = nulls.first.ctypes.data
    longest = nulls.longest
    sc = scratch.ctypes.data
    n = block.shape[0]
    rows = 0
    rejected = 0
    p = 0
    while p < n:
        rs = p
        c = load_u8(buf, p)
        if c == _LF:  # a blank record
            p += 1
            continue
        if c == _CR and (p + 1 == n or load_u8(buf, p + 1) == _LF):
            p += 2
            continue
        fields = 0
        bad = False
        while True:  # one field per turn; p is at its first byte (or the end)
            code = MISSING
            if p < n and load_u8(buf, p) == quote:
                # A quoted field: unescaped into the scratch buffer, then classified.
                p += 1
                m = 0
                closed = False
                while p < n:
                    c = load_u8(buf, p)
                    if c == escape:
                        p, m = _unescape(buf, p, n, sc, m)
                        continue
                    if c == quote:
                        if p + 1 < n and load_u8(buf, p + 1) == quote:
                            store_u8(sc, m, c)
                            m += 1
                            p += 2
                            continue
                        p += 1
                        closed = True
                        break
                    store_u8(sc, m, c)
                    m += 1
                    p += 1
                if closed and p < n:
                    c = load_u8(buf, p)
                    if c != delim and c != _LF:
                        # Text after the closing quote is appended (an escape byte too,
                        # right after it); then an unquoted field's rules.
                        first_byte = True
                        while p < n:
                            c = load_u8(buf, p)
                            if c == delim or c == _LF:  # noqa: SIM109 - two compares in compiled code
                                break
                            if c == _CR:
                                q = _line_end(buf, p, n)
                                if q >= 0:
                                    p = q
                                    break
                                bad = True
                            if c == escape and not first_byte:
                                p, m = _unescape(buf, p, n, sc, m)
                                continue
                            store_u8(sc, m, c)
                            m += 1
                            p += 1
                            first_byte = False
                if p > n:
                    p = n
                if not bad:
                    code = _code(sc, 0, m, _run(qtab, fn, sc, 0, m), tokens, decimal)
            else:
                # An unquoted field: count its bytes by class up to a stop byte.
                a = p
                acc = 0
                simple = True
                while True:
                    while p < n:
                        v = load_i64(cl, load_u8(buf, p))
                        if v < 0:
                            break
                        acc += v
                        p += 1
                    if p >= n:
                        break
                    c = load_u8(buf, p)
                    if c == delim or c == _LF:  # noqa: SIM109 - two compares in compiled code
                        break
                    if c == _CR:
                        if _line_end(buf, p, n) >= 0:
                            break  # the carriage return(s) of the line end
                        bad = True  # the reader ends a row there: this record is rejected
                        p += 1
                        continue
                    # The escape byte: the next byte is literal.
                    simple = False
                    p += 2
                if p > n:
                    p = n
                e = p
                if not bad:
                    if simple:
                        if e - a <= longest and (
                            e == a or load_u8(fb, load_u8(buf, a)) != 0
                        ):  # maybe a null word
                            if is_null(buf, a, e, tokens):
                                code = MISSING
                            else:
                                code = _code(buf, a, e, _run(qtab, fn, buf, a, e), tokens, decimal)
                        else:
                            # The common cases without branches (they would be mispredicted
                            # from column to column): '-'? digits (an int64), [+-]? digits with
                            # one point (a float), text; 0 for the rest.
                            size = e - a
                            first = load_u8(buf, a)
                            sign = (first == _MINUS) | (first == _PLUS)
                            lead = a + sign
                            c0 = load_u8(buf, lead if lead < n else a)
                            c1 = load_u8(buf, lead + 1 if lead + 1 < n else a)
                            digits = acc & 0xFF
                            rest = (acc >> 8) - sign * (1 << 16)
                            plain_int = (rest == 0) & (digits > 0) & (size < 19) & (first != _PLUS)
                            plain_float = (rest == 1) & (digits > 0) & (size <= 38)
                            leading_zero = (
                                (c0 == _ZERO) & (size - sign > 1) & (c1 >= _ZERO) & (c1 <= 57)
                            )
                            text = ((acc >> 40) != 0) & (load_u8(ts, first) != 0)
                            code = (
                                plain_int * INT
                                + plain_float * FLOAT
                                + text * TEXT
                                + ((plain_int | plain_float) & leading_zero) * LEADING_ZERO
                            )
                            if code == 0:
                                code = _quick_code(buf, a, e, acc, qtab, fn, decimal)
                    else:
                        m = 0
                        i = a
                        while i < e:
                            c = load_u8(buf, i)
                            if c == escape:
                                i += 1
                                if i >= e:
                                    break
                                c = load_u8(buf, i)
                            store_u8(sc, m, c)
                            m += 1
                            i += 1
                        code = _code(sc, 0, m, _run(qtab, fn, sc, 0, m), tokens, decimal)
                # Skip the carriage return(s) before the line feed.
                while p < n and load_u8(buf, p) == _CR:
                    p += 1
            if fields < width:
                row[fields] = code
                tally[fields * N_CODES + code] += 1
            fields += 1
            if p < n and load_u8(buf, p) == delim:
                p += 1
                continue
            break
        end = p  # at the line feed or the end
        if p < n:
            p += 1
        if check_utf8 and not bad and not utf8_valid(buf, rs, end):
            bad = True
        if bad or fields != width or row[label] == MISSING:
            # Not a row the reader accepts: take its fields back out of the counts.
            for k in range(min(fields, width)):
                tally[k * N_CODES + row[k]] -= 1
            rejected += 1
            continue
        rows += 1
    return rows, rejected


def classify_block(
    block: np.ndarray | bytes,
    tally: np.ndarray,
    *,
    label: int,
    delim: int,
    quote: int,
    escape: int,
    nulls: tuple[bytes, ...],
    decimal: int = ord("."),
) -> tuple[int, int]:
    """Classify every field of a block of whole records (no header) and add the rows the
    reader accepts to ``tally`` (``tally[column, code]``, from :func:`new_tally`).

    Args:
        block: whole CSV records, starting at a record start (UTF-8).
        tally: the counts to add to; its first dimension is the number of columns.
        label: the index of the label column (a row without a label is not counted).
        delim: the delimiter byte.
        quote: the quote byte, or -1 without quoting.
        escape: the escape byte, or -1.
        nulls: the null words as bytes.
        decimal: the decimal point byte.

    Returns:
        ``(rows, rejected)``: the records counted and the non-blank records not counted
        (wrong field count, no label, invalid UTF-8, a bare carriage return).
    """
    buf = as_bytes_array(block)
    width = tally.shape[0]
    quoted, final = _automaton(decimal)
    classes = _byte_classes(delim, escape, decimal)
    null_words = null_tokens(tuple(nulls))
    check_utf8 = not (buf.tobytes().isascii() if isinstance(block, np.ndarray) else block.isascii())
    scratch = np.empty(max(len(buf), 1) + 8, dtype=np.uint8)
    counts = tally.reshape(-1)  # a view: the kernel adds to tally[column * N_CODES + code]
    if not np.shares_memory(counts, tally):
        raise ValueError("the tally must be a C-contiguous array from new_tally")
    row = np.zeros(max(width, 1), dtype=np.int64)
    rows, rejected = _classify(
        buf, classes, _text_start(decimal), quoted, final, delim, quote, escape, decimal,
        width, label, null_words, check_utf8, scratch, row, counts,
    )  # fmt: skip
    return int(rows), int(rejected)
