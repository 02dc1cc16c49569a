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
  ``infinity`` in any letter case, with a sign (``-nan`` is a NaN with the sign bit set,
  ``0xFFC00000``); ``nan`` may be followed by ``(chars)`` of letters, digits and ``_``, as
  in C's ``strtod``. The result is the *correctly rounded* float32 (round to nearest, ties to
  even), like Arrow's ``fast_float``; see below for how this is guaranteed.
* **bool**: exactly one of the six true/false spellings; no trimming.
* **string**: the raw bytes. They must be valid UTF-8 for an Arrow ``string``: fields that
  are plain ASCII need no check, others are validated, and invalid UTF-8 makes the whole
  block fall back (Arrow rejects the block; the caller then reads it line by line).

A block falls back (``None``) when a line holds the quote character (quoted fields need the
full grammar; without quoting a ``"`` is text), a carriage return (Arrow ends a row there) or
a line feed, when a string field is not valid UTF-8, or when the block starts with a UTF-8
byte-order mark (Arrow drops it).

Floats beyond float32's range
-----------------------------
A finite nonzero numeral that becomes ±inf (``1e39``) or ±0 (``1e-50``) in float32 is stored
as Arrow stores it, and its row is flagged (:attr:`FastColumns.out_of_range`) so that the
caller can report it without looking at the block again. Only conversions outside the exact
fast path (case 1 below) can leave the range, so the test costs nothing on typical data.

Correctly rounded float32 from decimal text
-------------------------------------------
A decimal numeral is an exact rational ``v = m * 10**e``. Parsing accumulates the first 18
significant digits into an int64 ``m`` (further digits are dropped, and counted in ``e``)
and then needs ``RN32(v)``, the float32 nearest to ``v``. Three cases:

1. *Exact operands* (``m <= 2**24`` and ``|e| <= 10``, which covers typical data such as
   ``-0.4128``): ``m`` and ``10**|e|`` are both exact float32 values, so ``m * 10**e`` or
   ``m / 10**-e`` is a single IEEE operation on exact operands -- correctly rounded (this is
   Clinger's fast path, for binary32). The kernel does the operation in float64 and then
   rounds to float32. Double rounding is harmless here: for +, -, *, / and sqrt of p-bit
   operands, rounding first to p' >= 2p + 2 bits and then to p bits equals rounding once
   (Figueroa, "When is double rounding innocuous?", 1995), and 53 >= 2 * 24 + 2.
2. *Everything else in range*: ``x = float64(m) (* or /) 10.0**|e|`` carries at most three
   float64 rounding errors plus the dropped digits, a relative error below ``2**-51``: less
   than 4 float64 ulps. Rounding ``x`` to float32 gives ``RN32(v)`` unless a float32 *rounding
   boundary* -- the midpoint between two adjacent float32 values -- lies between ``x`` and
   ``v`` (rounding is monotonic, so both round the same way when no boundary separates them).
   In the float32 normal range the midpoints are exactly the float64 values whose low 29
   mantissa bits are ``0x10000000``, so the kernel checks whether ``x``'s low 29 bits are
   within 16 ulps of that pattern. Only then (about once in 16 million random values, and
   for numerals written to be exact halfway cases such as ``1.000000178813934326171875``) is
   the value *too close to call*. (Simply rounding the correctly rounded float64 to float32
   is **not** correct: ``1.00000017881393432617187499`` is just below a midpoint but its
   float64 is the midpoint itself, which then rounds to even, upwards.)
3. *Far outside the float32 range*: ``v >= 10**39`` is ``inf``, ``v < 10**-46`` rounds to
   zero (half the smallest subnormal is ``7.0e-46``), both with the numeral's sign.

Values too close to call, and results in the float32 subnormal range (below ``2**-126``,
where the grid of representable values is different), are converted afterwards in Python
with exact rational arithmetic (:func:`decimal_to_float32_bits`). They are rare enough that
this costs nothing measurable, and no value is ever approximated.

Speed
-----
A byte-at-a-time loop mispredicts a branch at the end of every field. String fields are
therefore scanned eight bytes at a time (SWAR: one 64-bit load, a few ALU operations, a
trailing-zero count). Plain numerals -- ``-``? digits with at most one ``.``, 18 digits at
most, then a comma or the line end -- go through a tight byte loop before the general parser
is tried: on such numerals it is faster than converting eight digits a word at a time
(fast_float's multiply trick), which needs two dependent scans and more branches per field.
Nothing reads outside the block's buffer.

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
import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import NamedTuple

import numba
import numpy as np
import pyarrow as pa

from shardtrain.kernels import arrow
from shardtrain.kernels.native import (
    as_bytes_array,
    f32_bits,
    f64_bits,
    kernel_input,
    load_f64,
    load_i64,
    load_u8,
    load_u32,
    load_u64,
    store_u64,
    trailing_zeros,
    u64_as_i64,
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

# Codes of the per-field parsers. _OUT_OF_RANGE: parsed, but a finite nonzero numeral became
# ±inf or ±0 in float32 (``1e39``, ``1e-50``): stored like _PARSED, and the row is flagged.
_PARSED, _NOT_PARSED, _TOO_CLOSE, _OUT_OF_RANGE = 0, 1, 2, 3

# Null tokens of at least this many bytes are not in the length mask (an int64).
_LONG_TOKEN = 63

#: Bits written for a float value that still needs exact conversion (a NaN payload the
#: kernel never produces otherwise: parsed NaNs are 0x7FC00000 or 0xFFC00000).
_PENDING_BITS = 0x7FC0DEAD

_F32_INF_BITS = 0x7F800000
_F32_NAN_BITS = 0x7FC00000
_F32_SIGN = 0x80000000
_F32_MAGNITUDE = 0x7FFFFFFF
_F32_MIN_NORMAL = 2.0**-126
_MAX_DECIMAL_EXPONENT = 63  # pow10 table: 10**0 .. 10**63
_MAX_OFFSET = 2**31 - 1  # Arrow string offsets are int32
_UTF8_BOM = b"\xef\xbb\xbf"

# Numbers: digits kept in the int64 mantissa (10**18 < 2**63), and case 1 of _float_bits
# (exact operands: m <= 2**24 and |e10| <= 10, as float32 values are exact up to 2**24).
_MAX_DIGITS = 18
_F32_EXACT_INT = 2**24
_F32_EXACT_POW10 = 10
# |v| >= 10**39 is inf in float32, |v| < 10**-46 rounds to zero (case 3 of _float_bits).
_F32_INF_DECADE = 39
_F32_ZERO_DECADE = -46
# A float64 whose low 29 mantissa bits (those below float32 precision) are within
# _NEAR_MIDPOINT ulps of _F32_MIDPOINT is too close to a float32 midpoint to round.
_BELOW_F32 = (1 << 29) - 1
_F32_MIDPOINT = 1 << 28
_NEAR_MIDPOINT = 16
_EXPONENT_CAP = 100_000_000  # decimal exponents saturate here: beyond, only the sign matters
# int64 accumulated as a negative number: the most negative value is -(2**63), so a value
# below _INT64_MIN_TENTH (or equal, with a next digit above _INT64_MIN_LAST) overflows.
_INT64_MIN = -(2**63)
_INT64_MIN_TENTH = -(2**63 // 10)
_INT64_MIN_LAST = 2**63 % 10
_HEX_DIGITS = 16  # an int64 in hex: 0x and at most 16 digits

# Bytes the parsers compare with.
_TAB, _LF, _CR, _SPACE = ord("\t"), ord("\n"), ord("\r"), ord(" ")
_QUOTE, _COMMA, _PLUS, _MINUS, _DOT = ord('"'), ord(","), ord("+"), ord("-"), ord(".")

#: The ``quote`` of :func:`parse_block_fast` for a dialect without quoting.
NO_QUOTE = -1
#: The delimiters the kernel reads (others could be part of a number: ``.``, ``-``, ``e``...).
FAST_DELIMITERS = frozenset(b",;\t|")
_OPEN, _CLOSE, _UNDERSCORE = ord("("), ord(")"), ord("_")
_ZERO, _NINE = ord("0"), ord("9")
_CASE = 0x20  # an ASCII letter | _CASE is the lowercase letter
_A, _E, _F, _I, _N, _T, _X, _Y, _Z = b"aefintxyz"  # lowercase letters, compared | _CASE
# The true/false spellings Arrow accepts, as little-endian words of their first 4 bytes
# ("false" and "FALSE" then end in "e" or "E").
_TRUE_LOWER = int.from_bytes(b"true", "little")
_TRUE_TITLE = int.from_bytes(b"True", "little")
_TRUE_UPPER = int.from_bytes(b"TRUE", "little")
_FALS_LOWER = int.from_bytes(b"fals", "little")
_FALS_TITLE = int.from_bytes(b"Fals", "little")
_FALS_UPPER = int.from_bytes(b"FALS", "little")
_E_UPPER = ord("E")


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
    """

    values: list
    valid: list
    row_status: np.ndarray
    bad_column: np.ndarray
    field_count: np.ndarray
    out_of_range: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.row_status)


# --------------------------------------------------------------------------------------------
# Lookup tables (argument normalisation: shardtrain.kernels.native.kernel_input)
# --------------------------------------------------------------------------------------------


@functools.cache
def _powers_of_ten() -> np.ndarray:
    """``10.0**k`` for k in 0..63, correctly rounded (exact up to 10**22)."""
    table = np.array([float(f"1e{k}") for k in range(_MAX_DECIMAL_EXPONENT + 1)])
    table.flags.writeable = False
    return table


class _NullTokens(NamedTuple):
    """The null tokens as :func:`_parse_lines` reads them (see :func:`_null_table`)."""

    data: np.ndarray  # uint8: the tokens back to back (never empty)
    offsets: np.ndarray  # int64: token t is data[offsets[t]:offsets[t + 1]]
    length_mask: int  # bit k: some token has k < _LONG_TOKEN bytes
    long_tokens: bool  # some token has _LONG_TOKEN bytes or more
    numeric: bool  # some token might read as a number


@functools.cache
def _null_table(null_values: tuple[bytes, ...]) -> _NullTokens:
    """Null tokens for the kernel.

    Token ``t`` is ``data[offsets[t]:offsets[t + 1]]``. Bit ``k`` of ``length_mask`` says
    that some token has ``k < 63`` bytes and ``long_tokens`` that some token is longer, so a
    field is compared with the tokens only when its length matches one. ``numeric`` says
    that some token might read as a number (it has a digit, or spells ``nan``/``inf``); when
    none can (the default ``"", "NA", "null"``), a field that parsed as a number is not
    compared with the tokens at all.
    """
    tokens = sorted(set(null_values))
    data = np.frombuffer(b"".join(tokens) + b"\0", dtype=np.uint8)  # never empty
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in tokens], out=offsets[1:])
    length_mask = 0
    for t in tokens:
        if len(t) < _LONG_TOKEN:
            length_mask |= 1 << len(t)
    long_tokens = any(len(t) >= _LONG_TOKEN for t in tokens)
    numeric = any(
        any(_ZERO <= b <= _NINE for b in t) or b"nan" in t.lower() or b"inf" in t.lower()
        for t in tokens
    )
    return _NullTokens(
        data=kernel_input(data, np.uint8),
        offsets=kernel_input(offsets, np.int64),
        length_mask=length_mask,
        long_tokens=long_tokens,
        numeric=numeric,
    )


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
# Field parsers (inlined into the kernel); ``buf`` is the address of the block's bytes
# (see shardtrain.kernels.native for why helpers take addresses, not arrays)
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def _skip_blanks(buf, p, end, delim):
    """Skip spaces and tabs: Arrow trims exactly these around numbers (never the delimiter:
    with ``\t`` between fields a tab ends the field instead)."""
    while p < end:
        c = load_u8(buf, p)
        if c == delim or (c != _SPACE and c != _TAB):
            break
        p += 1
    return p


@numba.njit(cache=True, nogil=True, inline="always")
def _lower_is(buf, p, letter):
    """Whether the byte at ``p`` is ``letter`` (a lowercase ASCII letter) in either case."""
    return (load_u8(buf, p) | _CASE) == letter


@numba.njit(cache=True, nogil=True, inline="always")
def _float_bits(m, nd, e10, sign, pow10):
    """Float32 bits of ``m * 10**e10`` (``m > 0`` of ``nd`` digits), or -1: too close to call.

    See "Correctly rounded float32 from decimal text" in the module docstring.
    """
    if m <= _F32_EXACT_INT and -_F32_EXACT_POW10 <= e10 <= _F32_EXACT_POW10:
        # Case 1: exact float32 operands, one operation: correctly rounded.
        x = np.float64(m)
        x = x * load_f64(pow10, e10) if e10 >= 0 else x / load_f64(pow10, -e10)
        return f32_bits(np.float32(x)) | sign
    lead = nd - 1 + e10  # 10**lead <= value < 10**(lead + 1)
    if lead >= _F32_INF_DECADE:
        return _F32_INF_BITS | sign
    if lead < _F32_ZERO_DECADE:
        return sign  # zero
    # Case 2: a float64 approximation within 4 ulps (here -63 <= e10 <= 38).
    x = np.float64(m)
    x = x * load_f64(pow10, e10) if e10 >= 0 else x / load_f64(pow10, -e10)
    if x < _F32_MIN_NORMAL:
        return -1  # the float32 subnormal range: converted exactly later
    low = f64_bits(x) & _BELOW_F32
    if abs(low - _F32_MIDPOINT) <= _NEAR_MIDPOINT:
        return -1  # too close to a float32 midpoint
    return f32_bits(np.float32(x)) | sign


@numba.njit(cache=True, nogil=True, inline="always")
def _beyond_float32(bits):
    """Whether the float32 ``bits`` of a finite nonzero numeral are ±inf or ±0: the value
    was beyond float32's range (overflow or underflow)."""
    magnitude = bits & _F32_MAGNITUDE
    return magnitude == 0 or magnitude == _F32_INF_BITS


@numba.njit(cache=True, nogil=True, inline="always")
def _decimal_digits(m):
    """The number of decimal digits of ``m > 0``."""
    n = 0
    while m > 0:
        m //= 10
        n += 1
    return n


@numba.njit(cache=True, nogil=True, inline="always")
def _parse_float_loop(buf, p, end, pow10, delim):
    """The common case of :func:`_parse_float`, or ``code == -1``: ``-``? digits, at most
    one ``.``, at most 18 digits in all, ending at the delimiter or the line end.

    A plain byte loop: it mispredicts once per field, where the field ends (see "Speed" in
    the module docstring). Anything else goes to the general parser.
    """
    q = p
    negative = 0
    if q < end and load_u8(buf, q) == _MINUS:
        negative = 1
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
        elif c == _DOT and not dot:
            dot = True
        elif c == delim:
            break
        else:
            return p, 0, -1
        q += 1
    if digits == 0 or digits > _MAX_DIGITS:
        return p, 0, -1
    sign = negative << 31
    if m == 0:
        return q, sign, _PARSED
    # The digit count matters only outside case 1 of _float_bits (exact operands).
    exact = m <= _F32_EXACT_INT and -_F32_EXACT_POW10 <= e10 <= _F32_EXACT_POW10
    bits = _float_bits(m, 0 if exact else _decimal_digits(m), e10, sign, pow10)
    if bits < 0:
        return q, 0, _TOO_CLOSE
    if not exact and _beyond_float32(bits):
        return q, bits, _OUT_OF_RANGE
    return q, bits, _PARSED


@numba.njit(cache=True, nogil=True, inline="always")
def _parse_float(buf, p, end, pow10, delim):
    """Parse a float32 field starting at ``p``; return ``(q, bits, code)``.

    ``code`` is ``_PARSED`` (``bits`` are the float32's, ``q`` is at the delimiter or the
    line end), ``_TOO_CLOSE`` (the syntax is valid and ``q`` at the field end, but the value
    needs exact conversion) or ``_NOT_PARSED`` (``q`` is the first byte not consumed; the
    caller scans on to the field end, and the field is a bad value unless a null token).
    """
    p = _skip_blanks(buf, p, end, delim)
    sign = 0
    if p < end:
        c = load_u8(buf, p)
        if c == _MINUS:
            sign = _F32_SIGN
            p += 1
        elif c == _PLUS:
            p += 1
    m = 0  # the first _MAX_DIGITS significant digits
    nd = 0  # number of digits in m
    e10 = 0  # value = m * 10**e10
    digits = 0  # all mantissa digits seen
    while p < end:
        d = load_u8(buf, p) - _ZERO
        if d < 0 or d > 9:
            break
        digits += 1
        if nd < _MAX_DIGITS:
            if m != 0 or d != 0:
                m = m * 10 + d
                nd += 1
        else:
            e10 += 1  # a dropped integer digit
        p += 1
    dot = False
    if p < end and load_u8(buf, p) == _DOT:
        dot = True
        p += 1
        while p < end:
            d = load_u8(buf, p) - _ZERO
            if d < 0 or d > 9:
                break
            digits += 1
            if nd < _MAX_DIGITS:
                if m != 0 or d != 0:
                    m = m * 10 + d
                    nd += 1
                e10 -= 1
            p += 1
    if digits == 0:
        if dot or p >= end:
            return p, 0, _NOT_PARSED
        # nan, inf, infinity, in any letter case.
        if p + 3 <= end and _lower_is(buf, p, _N):
            if not (_lower_is(buf, p + 1, _A) and _lower_is(buf, p + 2, _N)):
                return p, 0, _NOT_PARSED
            bits = _F32_NAN_BITS | sign
            p += 3
            if p < end and load_u8(buf, p) == _OPEN:  # nan(n-char-sequence), as C strtod
                q = p + 1
                while q < end:
                    c = load_u8(buf, q)
                    if c == _CLOSE:
                        p = q + 1
                        break
                    lower = c | _CASE
                    if not (_A <= lower <= _Z or _ZERO <= c <= _NINE or c == _UNDERSCORE):
                        break  # not a valid sequence: the field fails after "nan"
                    q += 1
        elif p + 3 <= end and _lower_is(buf, p, _I):
            if not (_lower_is(buf, p + 1, _N) and _lower_is(buf, p + 2, _F)):
                return p, 0, _NOT_PARSED
            bits = _F32_INF_BITS | sign
            p += 3
            if (
                p + 5 <= end
                and _lower_is(buf, p, _I)
                and _lower_is(buf, p + 1, _N)
                and _lower_is(buf, p + 2, _I)
                and _lower_is(buf, p + 3, _T)
                and _lower_is(buf, p + 4, _Y)
            ):
                p += 5
        else:
            return p, 0, _NOT_PARSED
        p = _skip_blanks(buf, p, end, delim)
        if p < end and load_u8(buf, p) != delim:
            return p, 0, _NOT_PARSED
        return p, bits, _PARSED
    if p < end and _lower_is(buf, p, _E):
        p += 1
        negative_exponent = False
        if p < end:
            c = load_u8(buf, p)
            if c in (_MINUS, _PLUS):
                negative_exponent = c == _MINUS
                p += 1
        exponent = 0
        exponent_digits = 0
        while p < end:
            d = load_u8(buf, p) - _ZERO
            if d < 0 or d > 9:
                break
            if exponent < _EXPONENT_CAP:
                exponent = exponent * 10 + d
            exponent_digits += 1
            p += 1
        if exponent_digits == 0:
            return p, 0, _NOT_PARSED
        e10 += -exponent if negative_exponent else exponent
    p = _skip_blanks(buf, p, end, delim)
    if p < end and load_u8(buf, p) != delim:
        return p, 0, _NOT_PARSED
    if m == 0:
        return p, sign, _PARSED  # zero, with its sign
    bits = _float_bits(m, nd, e10, sign, pow10)
    if bits < 0:
        return p, 0, _TOO_CLOSE
    if _beyond_float32(bits):
        return p, bits, _OUT_OF_RANGE
    return p, bits, _PARSED


@numba.njit(cache=True, nogil=True, inline="always")
def _parse_hex(buf, p, end, delim):
    """Parse the hex digits of an int64 field after its ``0x``, as :func:`_parse_int`.

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
        return p, 0, _NOT_PARSED
    p = _skip_blanks(buf, p, end, delim)
    if p < end and load_u8(buf, p) != delim:
        return p, 0, _NOT_PARSED
    return p, u64_as_i64(v), _PARSED


@numba.njit(cache=True, nogil=True, inline="always")
def _parse_int_loop(buf, p, end, delim):
    """``-``? 1-18 digits ending at the delimiter or the line end (a byte loop, as
    :func:`_parse_float_loop`), or ``code == -1`` for :func:`_parse_int`."""
    q = p
    negative = False
    if q < end and load_u8(buf, q) == _MINUS:
        negative = True
        q += 1
    v = 0
    digits = 0
    while q < end:
        d = load_u8(buf, q) - _ZERO
        if 0 <= d <= 9:
            v = v * 10 + d
            digits += 1
        elif d == delim - _ZERO:
            break
        else:
            return p, 0, -1
        q += 1
    if digits == 0 or digits > _MAX_DIGITS:
        return p, 0, -1
    return q, -v if negative else v, _PARSED


@numba.njit(cache=True, nogil=True, inline="always")
def _parse_int(buf, p, end, delim):
    """Parse an int64 field starting at ``p``; return ``(q, value, code)`` as _parse_float."""
    p = _skip_blanks(buf, p, end, delim)
    if p + 2 < end and load_u8(buf, p) == _ZERO and _lower_is(buf, p + 1, _X):
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
        return p, 0, _NOT_PARSED
    p = _skip_blanks(buf, p, end, delim)
    if p < end and load_u8(buf, p) != delim:
        return p, 0, _NOT_PARSED
    if overflow:
        return p, 0, _NOT_PARSED
    if not negative:
        if v == _INT64_MIN:
            return p, 0, _NOT_PARSED  # 2**63
        v = -v
    return p, v, _PARSED


@numba.njit(cache=True, nogil=True, inline="always")
def _parse_bool(buf, s, e):
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


def _in_every_byte(byte: int) -> np.uint64:
    """A uint64 with ``byte`` in each of its eight bytes (for SWAR comparisons)."""
    return np.uint64(byte * 0x0101010101010101)


_ONES = _in_every_byte(0x01)
_HIGHS = _in_every_byte(0x80)  # the high bit of every byte
_CRS = _in_every_byte(_CR)
_LFS = _in_every_byte(_LF)


@numba.njit(cache=True, nogil=True, inline="always")
def _zero_bytes(x):
    """High bit set in the lowest zero byte of ``x`` (and maybe above it, never below)."""
    return (x - _ONES) & ~x & _HIGHS


@numba.njit(cache=True, nogil=True, inline="always")
def _scan_field(buf, p, end, size, delim, quote, delims, quotes):
    """Find the end of the field containing ``p``: return ``(q, high, stop)``.

    ``q`` is the position of the next delimiter (or the line end), ``high`` whether non-ASCII
    bytes were seen, ``stop`` whether a byte that forces the fallback (the quote character, a
    carriage return or a line feed) was found (at ``q``). ``size`` is the buffer's length;
    ``delims`` and ``quotes`` are the delimiter and the quote in every byte of a word
    (``quote`` is :data:`NO_QUOTE` without quoting, and ``quotes`` then the delimiters again).

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


@numba.njit(cache=True, nogil=True, inline="always")
def _is_null(buf, s, e, null_data, null_offsets, n_tokens, length_mask, long_tokens):
    """Whether the field ``[s, e)`` equals one of the null tokens."""
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


@numba.njit(cache=True, nogil=True)
def _utf8_valid(buf, s, e):
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
# The kernels
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _parse_lines(block, starts, ends, kinds, slots, nulls, pow10, delim, quote, defer, out):
    """Pass 1: parse every line, field by field, left to right; return ``(result, pending)``.

    Line ``i`` is ``block[starts[i]:ends[i]]``; column ``col`` has kind ``kinds[col]`` and
    its values go to row ``slots[col]`` of its kind's array in ``out`` (a :class:`_Parsed`).
    ``nulls`` is a :class:`_NullTokens`, ``pow10`` the table of :func:`_powers_of_ten`;
    ``delim`` separates fields, and ``quote`` (:data:`NO_QUOTE`: none) forces the fallback --
    of the block, or with ``defer`` of the line alone (:data:`STATUS_DEFERRED`).

    Each field is read once: numbers are converted while their end is searched for, other
    fields are scanned to the next delimiter. ``result`` is ``_ABORT`` as soon as a byte that
    forces the fallback (or invalid UTF-8 in a string) is seen; ``pending`` counts the float
    values left for exact conversion (marked with ``_PENDING_BITS``). A row with a float
    beyond float32's range (stored as ±inf or ±0) is flagged in ``out.out_of_range``.
    """
    null_data, null_offsets, length_mask, long_tokens, numeric_nulls = nulls
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
    null_buf = null_data.ctypes.data
    null_offsets_buf = null_offsets.ctypes.data
    n_tokens = null_offsets.shape[0] - 1
    pow10_buf = pow10.ctypes.data
    delims = np.uint64(delim) * _ONES
    quotes = np.uint64(quote if quote >= 0 else delim) * _ONES
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
        while True:
            if col < ncols:
                kind = kinds[col]
                slot = slots[col]
                s = p
                code = _NOT_PARSED
                number = 0
                if kind == KIND_FLOAT:
                    q, number, code = _parse_float_loop(buf, p, end, pow10_buf, delim)
                    if code < 0:
                        q, number, code = _parse_float(buf, p, end, pow10_buf, delim)
                    p = q
                elif kind == KIND_INT:
                    q, number, code = _parse_int_loop(buf, p, end, delim)
                    if code < 0:
                        q, number, code = _parse_int(buf, p, end, delim)
                    p = q
                high = False
                if code == _NOT_PARSED:
                    p, high, stop = _scan_field(buf, p, end, size, delim, quote, delims, quotes)
                    if stop:
                        if not defer:
                            return _ABORT, pending
                        status = STATUS_DEFERRED
                        break
                present = (code != _NOT_PARSED and not numeric_nulls) or not _is_null(
                    buf, s, p, null_buf, null_offsets_buf, n_tokens, length_mask, long_tokens
                )
                ok = True
                if kind == KIND_FLOAT:
                    if not present or code == _NOT_PARSED:
                        float_bits[slot, i] = 0
                        ok = not present
                    elif code == _PARSED:
                        float_bits[slot, i] = number
                    elif code == _OUT_OF_RANGE:
                        float_bits[slot, i] = number
                        flagged = True
                    else:
                        float_bits[slot, i] = _PENDING_BITS
                        pending += 1
                elif kind == KIND_INT:
                    ok = not present or code == _PARSED
                    int_values[slot, i] = number if present else 0
                elif kind == KIND_BOOL:
                    value = _parse_bool(buf, s, p) if present else 0
                    ok = value >= 0
                    bool_values[slot, i] = value == 1
                else:
                    if present and high and not _utf8_valid(buf, s, p):
                        return _ABORT, pending
                    string_starts[slot, i] = s
                    length = p - s if present else 0
                    string_offsets[slot, i + 1] = string_offsets[slot, i] + length
                valid[col, i] = present and ok
                if not ok and status == STATUS_OK:
                    status = STATUS_BAD_VALUE
                    bad = col
            else:  # an extra field: only counted (and checked for quotes)
                p, high, stop = _scan_field(buf, p, end, size, delim, quote, delims, quotes)
                if stop:
                    if not defer:
                        return _ABORT, pending
                    status = STATUS_DEFERRED
                    break
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


# --------------------------------------------------------------------------------------------
# Exact decimal to float32 conversion (for the few values the kernel leaves)
# --------------------------------------------------------------------------------------------


def decimal_to_float32_bits(text: bytes | str) -> int:
    """The bits of the float32 nearest to a decimal numeral (ties to even), exactly.

    Exact rational arithmetic: the numeral's value ``q`` is placed between powers of two,
    ``2**E <= q < 2**(E+1)``; float32 values there are multiples of
    ``2**(max(E, -126) - 23)`` (the ``max`` covers subnormals); ``q`` divided by that
    quantum is rounded to the nearest integer, ties to even (``round`` of a ``Fraction``).
    Exponents far outside the float32 range are decided before any big number is built.

    Args:
        text: a numeral in the syntax the kernel accepts (blanks around it are ignored);
            not ``nan``/``inf``.

    Returns:
        The float32 bits as an unsigned 32-bit integer.
    """
    if isinstance(text, bytes):
        text = text.decode("ascii")
    number = Decimal(text.strip(" \t"))
    if not number.is_finite():
        raise ValueError(f"not a finite numeral: {text!r}")
    sign = _F32_SIGN if number.is_signed() else 0
    if number.is_zero() or number.adjusted() < -47:
        return sign
    if number.adjusted() > 39:
        return sign | _F32_INF_BITS
    q = Fraction(number.copy_abs())  # exact: abs() would round to 28 digits
    e2 = q.numerator.bit_length() - q.denominator.bit_length()
    if q < Fraction(2) ** e2:
        e2 -= 1
    quantum = max(e2, -126) - 23
    units = round(q / Fraction(2) ** quantum)
    if units >= 2 ** (128 - quantum):
        return sign | _F32_INF_BITS
    value = np.float32(math.ldexp(units, quantum))  # exact: units <= 2**24
    return sign | int(value.view(np.uint32))


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
    for col in np.flatnonzero(kinds == KIND_FLOAT):
        column_bits = out.float_bits[slots[col]]
        for i in np.flatnonzero(column_bits == _PENDING_BITS):
            line = buf[starts[i] : ends[i]].tobytes()
            bits = decimal_to_float32_bits(line.split(bytes([delim]))[col])
            column_bits[i] = bits
            if bits & _F32_MAGNITUDE in (0, _F32_INF_BITS) and out.row_status[i] == STATUS_OK:
                out.out_of_range[i] = True


_LOW7 = _in_every_byte(0x7F)


@numba.njit(cache=True, nogil=True)
def _find_lines(block, position, starts, ends, count):
    """Record lines from byte ``position`` on as ``starts[count:]``/``ends[count:]``.

    Returns ``(position, count, done)``: where to resume and the lines recorded when the
    arrays are full, or ``done``. A line's end excludes its line feed and one carriage
    return before it; a last line without a line feed ends at the block's end.

    Eight bytes at a time, with the exact zero-byte test (no false marks, unlike
    :func:`_zero_bytes`), in one pass: NumPy's ``flatnonzero(block == 10)`` makes two, and
    its ``nonzero`` is the slower one.
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

    Returns:
        A :class:`FastColumns` with one entry per line, or None when the block needs Arrow:
        a line contains the quote, ``\\r`` or ``\\n``, a string field is not valid UTF-8, the
        block starts with a UTF-8 byte-order mark (which Arrow drops), or the block is too
        large for int32 string offsets.

    Raises:
        ValueError: malformed line ranges or unknown kinds.
    """
    buf = as_bytes_array(block)
    starts = kernel_input(starts, np.int64)
    ends = kernel_input(ends, np.int64)
    if starts.ndim != 1 or starts.shape != ends.shape:
        raise ValueError("starts and ends must be 1-D arrays of the same length")
    if len(starts) and (starts.min() < 0 or ends.max() > len(buf) or bool(np.any(ends < starts))):
        raise ValueError("every line must satisfy 0 <= start <= end <= len(block)")
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
    nulls = _null_table(tuple(v.encode() if isinstance(v, str) else bytes(v) for v in null_values))
    out = _Parsed.empty(counts, len(kinds), len(starts))
    result, pending = _parse_lines(
        buf, starts, ends, kinds, slots, nulls, _powers_of_ten(), delimiter, quote, defer, out
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
        out_of_range=out.out_of_range,
    )


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
        rows = np.asarray(rows)
        if rows.ndim != 1 or (len(rows) and rows.dtype.kind not in "iu"):
            raise ValueError("rows must be a 1-D integer array")
        rows = rows.astype(np.int64, copy=False)
        if len(rows) and (rows.min() < 0 or rows.max() >= fast.num_rows):
            raise ValueError(f"rows has indices outside [0, {fast.num_rows})")
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
