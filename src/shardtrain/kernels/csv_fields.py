"""One CSV field at a time: the pieces the compiled CSV readers share.

The block parser (:mod:`.csv_parse`) inlines these into its line loop, and the type pass
(:mod:`.csv_types`) calls the null-token and UTF-8 checks:

* :func:`scan_field`: where an unquoted field ends, eight bytes at a time;
* :class:`NullTokens` (built by :func:`null_tokens`) and :func:`is_null`: whether a field is
  one of the null tokens (``""``, ``NA``, ``null``...), byte for byte;
* :func:`utf8_valid`: whether bytes are well-formed UTF-8;
* :func:`parse_int` and :func:`parse_bool`: int64 and bool fields converted exactly as
  Arrow's CSV reader converts them (floats have their own module, :mod:`.csv_float`).

Helpers take the *address* of the block's bytes (``buf``, ``array.ctypes.data``), not the
array: an array argument costs reference counting per call (see
:mod:`shardtrain.kernels.native`). A field parser returns ``(q, value, code)``: ``code`` is
:data:`PARSED` (``q`` is at the delimiter or the line end) or :data:`NOT_PARSED` (``q`` is the
first byte not consumed; the caller scans on to the field's end, and the field is a bad value
unless it is a null token); the float parser adds :data:`TOO_CLOSE` and :data:`OUT_OF_RANGE`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numba
import numpy as np

from shardtrain.kernels.native import (
    kernel_input,
    load_i64,
    load_u8,
    load_u32,
    load_u64,
    trailing_zeros,
    u64_as_i64,
)

__all__ = [
    "MAX_DIGITS",
    "NOT_PARSED",
    "OUT_OF_RANGE",
    "PARSED",
    "TOO_CLOSE",
    "NullTokens",
    "field_stops",
    "in_every_byte",
    "is_null",
    "lower_is",
    "null_addresses",
    "null_tokens",
    "parse_bool",
    "parse_int",
    "parse_int_loop",
    "plain_number",
    "scan_field",
    "skip_blanks",
    "utf8_valid",
]

#: Codes of the field parsers. OUT_OF_RANGE: parsed, but a finite nonzero numeral became ±inf
#: or ±0 in float32 (``1e39``, ``1e-50``): stored like PARSED, and the row is flagged.
#: TOO_CLOSE: a valid numeral whose float32 needs an exact conversion (see :mod:`.csv_float`).
PARSED, NOT_PARSED, TOO_CLOSE, OUT_OF_RANGE = 0, 1, 2, 3

#: Decimal digits that always fit an int64 (10**18 < 2**63): the int64 fast path and the
#: significand of a float take at most this many.
MAX_DIGITS = 18

# Null tokens of at least this many bytes are not in the length mask (an int64).
_LONG_TOKEN = 63

# int64 accumulated as a negative number: the most negative value is -(2**63), so a value
# below _INT64_MIN_TENTH (or equal, with a next digit above _INT64_MIN_LAST) overflows.
_INT64_MIN = -(2**63)
_INT64_MIN_TENTH = -(2**63 // 10)
_INT64_MIN_LAST = 2**63 % 10
_HEX_DIGITS = 16  # an int64 in hex: 0x and at most 16 digits

# Bytes the parsers compare with.
_TAB, _LF, _CR, _SPACE = ord("\t"), ord("\n"), ord("\r"), ord(" ")
_MINUS = ord("-")
_ZERO, _NINE = ord("0"), ord("9")
_CASE = 0x20  # an ASCII letter | _CASE is the lowercase letter
_A, _E, _F, _X = b"aefx"  # lowercase letters, compared | _CASE
# The true/false spellings Arrow accepts, as little-endian words of their first 4 bytes
# ("false" and "FALSE" then end in "e" or "E").
_TRUE_LOWER = int.from_bytes(b"true", "little")
_TRUE_TITLE = int.from_bytes(b"True", "little")
_TRUE_UPPER = int.from_bytes(b"TRUE", "little")
_FALS_LOWER = int.from_bytes(b"fals", "little")
_FALS_TITLE = int.from_bytes(b"Fals", "little")
_FALS_UPPER = int.from_bytes(b"FALS", "little")
_E_UPPER = ord("E")


# --------------------------------------------------------------------------------------------
# Null tokens
# --------------------------------------------------------------------------------------------


class NullTokens(NamedTuple):
    """The null tokens as the kernels read them (see :func:`null_tokens`)."""

    data: np.ndarray  # uint8: the tokens back to back (never empty)
    offsets: np.ndarray  # int64: token t is data[offsets[t]:offsets[t + 1]]
    length_mask: int  # bit k: some token has k < _LONG_TOKEN bytes
    long_tokens: bool  # some token has _LONG_TOKEN bytes or more
    numeric: bool  # some token might read as a number
    first: np.ndarray  # uint8[256]: 1 for a byte that starts a non-empty token
    longest: int  # the length of the longest token


@functools.cache
def null_tokens(values: tuple[bytes, ...]) -> NullTokens:
    """The null tokens ``values`` packed for the kernels.

    Token ``t`` is ``data[offsets[t]:offsets[t + 1]]``. Bit ``k`` of ``length_mask`` says
    that some token has ``k < 63`` bytes and ``long_tokens`` that some token is longer, so a
    field is compared with the tokens only when its length matches one (:func:`is_null`).
    ``numeric`` says that some token might read as a number (it has a digit, or spells
    ``nan``/``inf``); when none can (the default ``"", "NA", "null"``), a field that parsed
    as a number need not be compared with the tokens at all. ``first`` and ``longest`` let
    a caller skip the comparison for fields that start with no token's first byte or are
    longer than every token.
    """
    tokens = sorted(set(values))
    data = np.frombuffer(b"".join(tokens) + b"\0", dtype=np.uint8)  # never empty
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in tokens], out=offsets[1:])
    length_mask = 0
    for t in tokens:
        if len(t) < _LONG_TOKEN:
            length_mask |= 1 << len(t)
    first = np.zeros(256, dtype=np.uint8)
    for t in tokens:
        if t:
            first[t[0]] = 1
    return NullTokens(
        data=kernel_input(data, np.uint8),
        offsets=kernel_input(offsets, np.int64),
        length_mask=length_mask,
        long_tokens=any(len(t) >= _LONG_TOKEN for t in tokens),
        numeric=any(
            any(_ZERO <= b <= _NINE for b in t) or b"nan" in t.lower() or b"inf" in t.lower()
            for t in tokens
        ),
        first=kernel_input(first, np.uint8),
        longest=max((len(t) for t in tokens), default=0),
    )


@numba.njit(cache=True, nogil=True, inline="always")
def null_addresses(nulls):
    """What :func:`is_null` reads of a :class:`NullTokens`, by address: ``(data address,
    offsets address, number of tokens, length_mask, long_tokens)``. Called once per kernel
    call; the arrays must outlive its use (the caller holds ``nulls``)."""
    return (
        nulls.data.ctypes.data,
        nulls.offsets.ctypes.data,
        nulls.offsets.shape[0] - 1,
        nulls.length_mask,
        nulls.long_tokens,
    )


@numba.njit(cache=True, nogil=True, inline="always")
def is_null(buf, s, e, tokens):
    """Whether the field ``[s, e)`` equals one of the null tokens (``tokens`` from
    :func:`null_addresses`)."""
    null_data, null_offsets, n_tokens, length_mask, long_tokens = tokens
    n = e - s
    if n < _LONG_TOKEN:
        if not (length_mask >> n) & 1:
            return False
    elif not long_tokens:
        return False
    for t in range(n_tokens):
        a = load_i64(null_offsets, t)
        if load_i64(null_offsets, t + 1) - a != n:
            continue
        same = True
        for k in range(n):
            if load_u8(buf, s + k) != load_u8(null_data, a + k):
                same = False
                break
        if same:
            return True
    return False


# --------------------------------------------------------------------------------------------
# Field ends and UTF-8
# --------------------------------------------------------------------------------------------


def in_every_byte(byte: int) -> np.uint64:
    """A uint64 with ``byte`` in each of its eight bytes (for SWAR comparisons)."""
    return np.uint64(byte * 0x0101010101010101)


_ONES = in_every_byte(0x01)
_HIGHS = in_every_byte(0x80)  # the high bit of every byte
_CRS = in_every_byte(_CR)
_LFS = in_every_byte(_LF)


@numba.njit(cache=True, nogil=True, inline="always")
def _zero_bytes(x):
    """High bit set in the lowest zero byte of ``x`` (and maybe above it, never below)."""
    return (x - _ONES) & ~x & _HIGHS


@numba.njit(cache=True, nogil=True, inline="always")
def field_stops(delim, quote):
    """``(delims, quotes)`` for :func:`scan_field`: the delimiter and the quote (the
    delimiter again without quoting, ``quote < 0``) in every byte of a word."""
    return np.uint64(delim) * _ONES, np.uint64(quote if quote >= 0 else delim) * _ONES


@numba.njit(cache=True, nogil=True, inline="always")
def scan_field(buf, p, end, size, delim, quote, delims, quotes):
    """Find the end of the field containing ``p``: return ``(q, high, stop)``.

    ``q`` is the position of the next delimiter (or the line end), ``high`` whether non-ASCII
    bytes were seen, ``stop`` whether a byte that forces the fallback (the quote character, a
    carriage return or a line feed) was found (at ``q``). ``size`` is the buffer's length;
    ``delims`` and ``quotes`` come from :func:`field_stops` (``quote`` is negative without
    quoting).

    Eight bytes at a time (SWAR) while a whole word fits in the buffer: a byte loop costs a
    mispredicted branch at every field end, which dominated string columns. The lowest
    marked byte of the OR of the per-character masks is exactly the first special byte.
    """
    high = np.uint64(0)
    while p + 8 <= size:
        w = load_u64(buf, p)
        marks = (
            _zero_bytes(w ^ delims)
            | _zero_bytes(w ^ quotes)
            | _zero_bytes(w ^ _CRS)
            | _zero_bytes(w ^ _LFS)
        )
        k = trailing_zeros(marks) >> 3  # 8 when no special byte
        n = min(k, end - p)  # field bytes in this word
        if n < 8:
            keep = (np.uint64(1) << np.uint64(8 * n)) - np.uint64(1)
            high |= w & keep & _HIGHS
            if k < end - p:  # the special byte lies inside the line
                return p + k, high != 0, load_u8(buf, p + k) != delim
            return end, high != 0, False  # the line ends first
        high |= w & _HIGHS
        p += 8
    while p < end:  # the last bytes of the buffer
        c = load_u8(buf, p)
        if c == delim:
            return p, high != 0, False
        if c in (quote, _CR, _LF):
            return p, high != 0, True
        high |= np.uint64(c & 0x80)
        p += 1
    return p, high != 0, False


@numba.njit(cache=True, nogil=True)
def utf8_valid(buf, s, e):
    """Whether ``[s, e)`` is well-formed UTF-8 (shortest forms, no surrogates, <= U+10FFFF)."""
    p = s
    while p < e:
        b = load_u8(buf, p)
        if b < 0x80:
            p += 1
            continue
        if 0xC2 <= b <= 0xDF:
            more, lo, hi = 1, 0x80, 0xBF
        elif b == 0xE0:
            more, lo, hi = 2, 0xA0, 0xBF
        elif b == 0xED:
            more, lo, hi = 2, 0x80, 0x9F
        elif 0xE1 <= b <= 0xEF:
            more, lo, hi = 2, 0x80, 0xBF
        elif b == 0xF0:
            more, lo, hi = 3, 0x90, 0xBF
        elif 0xF1 <= b <= 0xF3:
            more, lo, hi = 3, 0x80, 0xBF
        elif b == 0xF4:
            more, lo, hi = 3, 0x80, 0x8F
        else:
            return False
        if p + more >= e:  # truncated sequence
            return False
        if not lo <= load_u8(buf, p + 1) <= hi:
            return False
        for k in range(2, more + 1):
            if not 0x80 <= load_u8(buf, p + k) <= 0xBF:
                return False
        p += more + 1
    return True


# --------------------------------------------------------------------------------------------
# int64 and bool fields
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def skip_blanks(buf, p, end, delim):
    """Skip spaces and tabs: Arrow trims exactly these around numbers (never the delimiter:
    with ``\t`` between fields a tab ends the field instead)."""
    while p < end:
        c = load_u8(buf, p)
        if c == delim or (c != _SPACE and c != _TAB):
            break
        p += 1
    return p


@numba.njit(cache=True, nogil=True, inline="always")
def lower_is(buf, p, letter):
    """Whether the byte at ``p`` is ``letter`` (a lowercase ASCII letter) in either case."""
    return (load_u8(buf, p) | _CASE) == letter


@numba.njit(cache=True, nogil=True, inline="always")
def _parse_hex(buf, p, end, delim):
    """Parse the hex digits of an int64 field after its ``0x``, as :func:`parse_int`.

    Arrow reads ``0x`` followed by 1 to 16 hex digits (no sign) as the 64-bit pattern they
    spell, so ``0xFFFFFFFFFFFFFFFF`` is -1.
    """
    v = np.uint64(0)
    digits = 0
    while p < end:
        c = load_u8(buf, p)
        if _ZERO <= c <= _NINE:
            d = c - _ZERO
        elif _A <= (c | _CASE) <= _F:
            d = (c | _CASE) - _A + 10
        else:
            break
        v = (v << np.uint64(4)) | np.uint64(d)
        digits += 1
        p += 1
    if digits == 0 or digits > _HEX_DIGITS:
        return p, 0, NOT_PARSED
    p = skip_blanks(buf, p, end, delim)
    if p < end and load_u8(buf, p) != delim:
        return p, 0, NOT_PARSED
    return p, u64_as_i64(v), PARSED


@numba.njit(cache=True, nogil=True, inline="always")
def plain_number(buf, p, end, delim, point):
    """The common case of a number field: ``-``? digits with at most one ``point`` (a byte
    value; -1 for none), 1 to :data:`MAX_DIGITS` digits in all, ending at the delimiter or
    the line end.

    Returns ``(q, negative, m, e10, dot)``: where the field ends, its sign, its digits as an
    integer, minus the number of digits after the point and whether it has the point (``5.``
    has one, and no digit after it); ``q`` is -1 for any other field,
    which is the general parser's. A plain byte loop: it mispredicts once per field, where
    the field ends, and on such numerals it beats converting eight digits a word at a time
    (fast_float's multiply trick), which needs two dependent scans and more branches.
    """
    q = p
    negative = False
    if q < end and load_u8(buf, q) == _MINUS:
        negative = True
        q += 1
    m = 0
    digits = 0
    e10 = 0
    dot = False
    while q < end:
        c = load_u8(buf, q)
        d = c - _ZERO
        if 0 <= d <= 9:
            m = m * 10 + d
            digits += 1
            if dot:
                e10 -= 1
        elif c == point and not dot:
            dot = True
        elif c == delim:
            break
        else:
            return -1, False, 0, 0, False
        q += 1
    if digits == 0 or digits > MAX_DIGITS:
        return -1, False, 0, 0, False
    return q, negative, m, e10, dot


@numba.njit(cache=True, nogil=True, inline="always")
def parse_int_loop(buf, p, end, delim):
    """``-``? 1-18 digits ending at the delimiter or the line end (:func:`plain_number`), or
    ``code == -1`` for :func:`parse_int`."""
    q, negative, v, _, _ = plain_number(buf, p, end, delim, -1)
    if q < 0:
        return p, 0, -1
    return q, -v if negative else v, PARSED


@numba.njit(cache=True, nogil=True, inline="always")
def parse_int(buf, p, end, delim):
    """Parse an int64 field starting at ``p``; return ``(q, value, code)``.

    Spaces and tabs around the number are ignored, then ``-``? digits (no ``+``: Arrow
    rejects ``+1``), leading zeros allowed, the value must fit int64 exactly; or ``0x``
    (``0X``) and 1 to 16 hex digits.
    """
    p = skip_blanks(buf, p, end, delim)
    if p + 2 < end and load_u8(buf, p) == _ZERO and lower_is(buf, p + 1, _X):
        return _parse_hex(buf, p + 2, end, delim)  # '0x' / '0X'
    negative = False
    if p < end and load_u8(buf, p) == _MINUS:
        negative = True
        p += 1
    v = 0  # accumulated as a negative number, so that -2**63 fits
    digits = 0
    overflow = False
    while p < end:
        d = load_u8(buf, p) - _ZERO
        if d < 0 or d > 9:
            break
        if v < _INT64_MIN_TENTH or (v == _INT64_MIN_TENTH and d > _INT64_MIN_LAST):
            overflow = True
        else:
            v = v * 10 - d
        digits += 1
        p += 1
    if digits == 0:
        return p, 0, NOT_PARSED
    p = skip_blanks(buf, p, end, delim)
    if p < end and load_u8(buf, p) != delim:
        return p, 0, NOT_PARSED
    if overflow:
        return p, 0, NOT_PARSED
    if not negative:
        if v == _INT64_MIN:
            return p, 0, NOT_PARSED  # 2**63
        v = -v
    return p, v, PARSED


@numba.njit(cache=True, nogil=True, inline="always")
def parse_bool(buf, s, e):
    """1 for true/True/TRUE, 0 for false/False/FALSE, -1 for anything else."""
    n = e - s
    if n != 4 and n != 5:
        return -1
    w = u64_as_i64(load_u32(buf, s))  # the first four bytes
    if n == 4:
        return 1 if w in (_TRUE_LOWER, _TRUE_TITLE, _TRUE_UPPER) else -1
    last = load_u8(buf, s + 4)
    if w in (_FALS_LOWER, _FALS_TITLE) and last == _E:
        return 0
    if w == _FALS_UPPER and last == _E_UPPER:
        return 0
    return -1
