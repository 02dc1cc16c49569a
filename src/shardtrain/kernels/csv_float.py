"""Correctly rounded float32 values from decimal CSV fields, in compiled code.

The block parser (:mod:`.csv_parse`) inlines :func:`parse_float_loop` and
:func:`parse_float` into its line loop; a value they cannot decide in float64 arithmetic is
left *pending* (:data:`PENDING_BITS`) and converted afterwards, exactly, by
:func:`convert_pending` (:func:`decimal_to_float32_bits`).

The syntax is Arrow's: spaces and tabs around the number are ignored, then
``[+-]? (digits [. digits*] | . digits) [(e|E) [+-]? digits]``, or ``nan``, ``inf``,
``infinity`` in any letter case, with a sign (``-nan`` is a NaN with the sign bit set,
``0xFFC00000``); ``nan`` may be followed by ``(chars)`` of letters, digits and ``_``, as in C's
``strtod``. The result is the *correctly rounded* float32 (round to nearest, ties to even),
like Arrow's ``fast_float``.

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
with exact rational arithmetic. They are rare, and no value is ever approximated.

Floats beyond float32's range
-----------------------------
A finite nonzero numeral that becomes ±inf (``1e39``) or ±0 (``1e-50``) in float32 is
stored as Arrow stores it, and reported (:data:`~.csv_fields.OUT_OF_RANGE`) so that the
caller can flag its row. Only conversions outside the exact fast path (case 1) can leave
the range, so the test costs nothing on typical data.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal
from fractions import Fraction

import numba
import numpy as np

from shardtrain.kernels.csv_fields import (
    MAX_DIGITS,
    NOT_PARSED,
    OUT_OF_RANGE,
    PARSED,
    TOO_CLOSE,
    lower_is,
    plain_number,
    skip_blanks,
)
from shardtrain.kernels.native import f32_bits, f64_bits, load_f64, load_u8

__all__ = [
    "PENDING_BITS",
    "convert_pending",
    "decimal_to_float32_bits",
    "parse_float",
    "parse_float_loop",
    "powers_of_ten",
]

#: Bits written for a float value that still needs exact conversion (a NaN payload the
#: kernel never produces otherwise: parsed NaNs are 0x7FC00000 or 0xFFC00000).
PENDING_BITS = 0x7FC0DEAD

_F32_INF_BITS = 0x7F800000
_F32_NAN_BITS = 0x7FC00000
_F32_SIGN = 0x80000000
_F32_MAGNITUDE = 0x7FFFFFFF
_F32_MIN_NORMAL = 2.0**-126
_MAX_DECIMAL_EXPONENT = 63  # pow10 table: 10**0 .. 10**63

# Case 1 of _float_bits (exact operands: m <= 2**24 and |e10| <= 10, as float32 values are
# exact up to 2**24).
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

# Bytes the parser compares with.
_PLUS, _MINUS, _DOT = ord("+"), ord("-"), ord(".")
_OPEN, _CLOSE, _UNDERSCORE = ord("("), ord(")"), ord("_")
_ZERO, _NINE = ord("0"), ord("9")
_CASE = 0x20  # an ASCII letter | _CASE is the lowercase letter
_A, _E, _F, _I, _N, _T, _Y, _Z = b"aefintyz"  # lowercase letters, compared | _CASE


@functools.cache
def powers_of_ten() -> np.ndarray:
    """``10.0**k`` for k in 0..63, correctly rounded (exact up to 10**22): the ``pow10``
    table the parsers read (by address)."""
    table = np.array([float(f"1e{k}") for k in range(_MAX_DECIMAL_EXPONENT + 1)])
    table.flags.writeable = False
    return table


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
def parse_float_loop(buf, p, end, pow10, delim):
    """The common case of :func:`parse_float` (:func:`~.csv_fields.plain_number`: ``-``?
    digits, at most one ``.``, at most 18 digits in all, ending at the delimiter or the line
    end), or ``code == -1``: anything else goes to the general parser. Returns ``(q, bits,
    code, point)``: ``point`` tells whether the numeral has the point (a float to the type
    pass, an integer without)."""
    q, negative, m, e10, point = plain_number(buf, p, end, delim, _DOT)
    if q < 0:
        return p, 0, -1, False
    sign = _F32_SIGN if negative else 0
    if m == 0:
        return q, sign, PARSED, point
    # The digit count matters only outside case 1 of _float_bits (exact operands).
    exact = m <= _F32_EXACT_INT and -_F32_EXACT_POW10 <= e10 <= _F32_EXACT_POW10
    bits = _float_bits(m, 0 if exact else _decimal_digits(m), e10, sign, pow10)
    if bits < 0:
        return q, 0, TOO_CLOSE, point
    if not exact and _beyond_float32(bits):
        return q, bits, OUT_OF_RANGE, point
    return q, bits, PARSED, point


@numba.njit(cache=True, nogil=True, inline="always")
def _digit_run(buf, p, end, m, nd, fraction):
    """Read the digits from ``p`` on into the significand ``m`` of ``nd`` digits; return
    ``(p, m, nd, digits, e10)``: the first byte after them, the significand, its digits, the
    digits read and the change of the decimal exponent.

    Leading zeros are not kept; beyond :data:`MAX_DIGITS` kept digits, the rest are dropped,
    each adding one to the exponent in the integer part. Each kept digit of the
    ``fraction`` subtracts one.
    """
    digits = 0
    e10 = 0
    while p < end:
        d = load_u8(buf, p) - _ZERO
        if d < 0 or d > 9:
            break
        digits += 1
        if nd < MAX_DIGITS:
            if m != 0 or d != 0:
                m = m * 10 + d
                nd += 1
            if fraction:
                e10 -= 1
        elif not fraction:
            e10 += 1  # a dropped integer digit
        p += 1
    return p, m, nd, digits, e10


@numba.njit(cache=True, nogil=True, inline="always")
def parse_float(buf, p, end, pow10, delim):
    """Parse a float32 field starting at ``p``; return ``(q, bits, code)``.

    ``code`` is ``PARSED`` (``bits`` are the float32's, ``q`` is at the delimiter or the
    line end), ``OUT_OF_RANGE`` (likewise, a finite numeral beyond float32's range),
    ``TOO_CLOSE`` (the syntax is valid and ``q`` at the field end, but the value needs exact
    conversion) or ``NOT_PARSED`` (``q`` is the first byte not consumed; the caller scans
    on to the field end, and the field is a bad value unless a null token).
    """
    p = skip_blanks(buf, p, end, delim)
    sign = 0
    if p < end:
        c = load_u8(buf, p)
        if c == _MINUS:
            sign = _F32_SIGN
            p += 1
        elif c == _PLUS:
            p += 1
    # value = m * 10**e10, m the first MAX_DIGITS significant digits (nd of them)
    p, m, nd, digits, e10 = _digit_run(buf, p, end, 0, 0, False)
    dot = False
    if p < end and load_u8(buf, p) == _DOT:
        dot = True
        p, m, nd, fraction_digits, fraction_e10 = _digit_run(buf, p + 1, end, m, nd, True)
        digits += fraction_digits
        e10 += fraction_e10
    if digits == 0:
        if dot or p >= end:
            return p, 0, NOT_PARSED
        # nan, inf, infinity, in any letter case.
        if p + 3 <= end and lower_is(buf, p, _N):
            if not (lower_is(buf, p + 1, _A) and lower_is(buf, p + 2, _N)):
                return p, 0, NOT_PARSED
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
        elif p + 3 <= end and lower_is(buf, p, _I):
            if not (lower_is(buf, p + 1, _N) and lower_is(buf, p + 2, _F)):
                return p, 0, NOT_PARSED
            bits = _F32_INF_BITS | sign
            p += 3
            if (
                p + 5 <= end
                and lower_is(buf, p, _I)
                and lower_is(buf, p + 1, _N)
                and lower_is(buf, p + 2, _I)
                and lower_is(buf, p + 3, _T)
                and lower_is(buf, p + 4, _Y)
            ):
                p += 5
        else:
            return p, 0, NOT_PARSED
        p = skip_blanks(buf, p, end, delim)
        if p < end and load_u8(buf, p) != delim:
            return p, 0, NOT_PARSED
        return p, bits, PARSED
    if p < end and lower_is(buf, p, _E):
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
            return p, 0, NOT_PARSED
        e10 += -exponent if negative_exponent else exponent
    p = skip_blanks(buf, p, end, delim)
    if p < end and load_u8(buf, p) != delim:
        return p, 0, NOT_PARSED
    if m == 0:
        return p, sign, PARSED  # zero, with its sign
    bits = _float_bits(m, nd, e10, sign, pow10)
    if bits < 0:
        return p, 0, TOO_CLOSE
    if _beyond_float32(bits):
        return p, bits, OUT_OF_RANGE
    return p, bits, PARSED


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


def convert_pending(
    block: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    column: int,
    delim: int,
    bits: np.ndarray,
) -> np.ndarray:
    """Replace every :data:`PENDING_BITS` entry of one float column with its exact value.

    Args:
        block: the block's bytes; line ``i`` is ``block[starts[i]:ends[i]]``.
        starts, ends: the lines' byte ranges.
        column: the field of each line that holds the column's value.
        delim: the field delimiter (a byte value).
        bits: the column's float32 bits, one per line, updated in place.

    Returns:
        The lines (int64) whose value is beyond float32's range: ±inf or ±0 in ``bits``.
    """
    pending = np.flatnonzero(bits == PENDING_BITS)
    for i in pending:
        line = block[starts[i] : ends[i]].tobytes()
        bits[i] = decimal_to_float32_bits(line.split(bytes([delim]))[column])
    magnitude = bits[pending] & _F32_MAGNITUDE
    return pending[(magnitude == 0) | (magnitude == _F32_INF_BITS)].astype(np.int64)
