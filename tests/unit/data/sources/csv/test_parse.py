"""The numba CSV fast path against its reference, ``pyarrow.csv.read_csv``, value by value.

Every test parses the same lines twice -- with :func:`csv_parse.parse_block_fast` and with
Arrow's CSV reader given the same column types and null values -- and requires the same
outcome: the same values (float32 compared bit for bit, so ``-0.0``, ``-nan`` and rounding
count), the same nulls, the same rejected lines (a line Arrow cannot convert is a bad value
for the kernel; a line Arrow's invalid-row handler sees has the wrong field count), or
``None`` where the kernel must leave the block to Arrow.
"""

from __future__ import annotations

import struct
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import DEFAULT_NULL_VALUES, FALSE_VALUES, TRUE_VALUES, Column, Schema
from shardtrain.data.sources import csv as csv_source
from shardtrain.data.sources.base import Batch
from shardtrain.data.sources.csv import readers
from shardtrain.data.sources.csv.align import RecordBounds
from shardtrain.kernels import csv_parse, csv_records
from shardtrain.kernels.csv_parse import (
    KIND_BOOL,
    KIND_FLOAT,
    KIND_INT,
    KIND_STRING,
    STATUS_BAD_VALUE,
    STATUS_FIELD_COUNT,
    STATUS_OK,
)

NULLS = tuple(v.encode() for v in DEFAULT_NULL_VALUES)
ARROW_TYPES = {
    KIND_FLOAT: pa.float32(),
    KIND_INT: pa.int64(),
    KIND_BOOL: pa.bool_(),
    KIND_STRING: pa.string(),
}


# --------------------------------------------------------------------------------------------
# The reference and the comparison
# --------------------------------------------------------------------------------------------


def _convert_options(kinds, nulls) -> pacsv.ConvertOptions:
    return pacsv.ConvertOptions(
        column_types={f"c{j}": ARROW_TYPES[k] for j, k in enumerate(kinds)},
        null_values=[v.decode() for v in nulls],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
        true_values=list(TRUE_VALUES),
        false_values=list(FALSE_VALUES),
    )


def arrow_read(
    lines: list[bytes], kinds, nulls=NULLS, delim: bytes = b",", quote: bytes | None = b'"'
) -> tuple[pa.Table, list[int]]:
    """Arrow's table of ``lines`` and the field counts of the lines its handler skipped.

    Raises:
        pa.ArrowInvalid: a value does not convert (or a string is not UTF-8).
    """
    skipped: list[int] = []

    def handler(row: pacsv.InvalidRow) -> str:
        skipped.append(row.actual_columns)
        return "skip"

    data = b"".join(line + b"\n" for line in lines)
    table = pacsv.read_csv(
        pa.py_buffer(data),
        read_options=pacsv.ReadOptions(
            column_names=[f"c{j}" for j in range(len(kinds))],
            use_threads=False,
            block_size=len(data) + 1,
        ),
        parse_options=pacsv.ParseOptions(
            delimiter=delim.decode(),
            quote_char=quote.decode() if quote else False,
            invalid_row_handler=handler,
            newlines_in_values=False,
        ),
        convert_options=_convert_options(kinds, nulls),
    )
    return table, skipped


def fast_parse(
    lines: list[bytes], kinds, nulls=NULLS, delim: bytes = b",", quote: bytes | None = b'"'
) -> csv_parse.FastColumns | None:
    data = b"".join(line + b"\n" for line in lines)
    lengths = np.array([len(line) for line in lines], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1])).astype(np.int64)
    return csv_parse.parse_block_fast(
        np.frombuffer(data, dtype=np.uint8),
        starts,
        starts + lengths,
        np.array(kinds),
        nulls,
        delimiter=delim[0],
        quote=quote[0] if quote else csv_parse.NO_QUOTE,
    )


def _column_summary(array: pa.Array) -> tuple[list[bool], list]:
    """Validity and values of an array, floats as their IEEE bits (so -0.0 and -nan count)."""
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    valid = array.is_valid().to_pylist()
    if pa.types.is_float32(array.type):
        bits = array.fill_null(0).to_numpy(zero_copy_only=False).view(np.uint32).tolist()
        return valid, [b if ok else None for b, ok in zip(bits, valid, strict=True)]
    return valid, array.to_pylist()


def assert_same_as_arrow(
    lines: list[bytes], kinds, nulls=NULLS, delim: bytes = b",", quote: bytes | None = b'"'
) -> csv_parse.FastColumns:
    """Parse ``lines`` both ways, line by line for Arrow; return the kernel's result.

    The lines the kernel read (without quotes) are first given to Arrow as one block (one
    Arrow call instead of one a line): when Arrow reads that block, every line, to the
    kernel's values, they are done; on any difference all lines are checked line by line,
    and the others always are.
    """
    fast = fast_parse(lines, kinds, nulls, delim, quote)
    assert fast is not None, "the kernel fell back on lines Arrow reads"
    assert fast.num_rows == len(lines)
    # Lines with a quote stay line by line: a quote Arrow leaves open at the end of the data
    # might be closed by the next line of a block.
    block = [
        i
        for i in np.flatnonzero(fast.row_status == STATUS_OK)
        if not quote or quote not in lines[i]
    ]
    rows = np.array(block, dtype=np.int64)
    if _same_block_as_arrow([lines[i] for i in block], fast, rows, kinds, nulls, delim, quote):
        rest = sorted(set(range(len(lines))) - set(block))
    else:
        rest = list(range(len(lines)))
    for i in rest:
        line = lines[i]
        try:
            table, skipped = arrow_read([line], kinds, nulls, delim, quote)
        except pa.ArrowInvalid:
            assert fast.row_status[i] == STATUS_BAD_VALUE, line
            assert not any(valid[i] for valid in fast.valid), line
            continue
        if skipped:
            assert fast.row_status[i] == STATUS_FIELD_COUNT, line
            assert fast.field_count[i] == skipped[0], line
            continue
        assert fast.row_status[i] == STATUS_OK, (line, fast.bad_column[i])
        assert fast.bad_column[i] == -1
        assert fast.field_count[i] == len(kinds)
        got = csv_parse.to_arrow(fast, kinds, np.array([i]))
        for j, column in enumerate(table.columns):
            assert _column_summary(got[j]) == _column_summary(column), (line, j)
    return fast


def _same_block_as_arrow(lines, fast, rows, kinds, nulls, delim, quote) -> bool:
    """Whether Arrow reads ``lines`` (rows ``rows`` of ``fast``) as one block, every line,
    to the kernel's values (see assert_same_as_arrow)."""
    if not lines:
        return True
    try:
        table, skipped = arrow_read(lines, kinds, nulls, delim, quote)
    except pa.ArrowInvalid:
        return False
    if skipped or table.num_rows != len(lines):
        return False
    if (fast.bad_column[rows] != -1).any() or (fast.field_count[rows] != len(kinds)).any():
        return False
    got = csv_parse.to_arrow(fast, kinds, rows)
    return all(
        _column_summary(got[j]) == _column_summary(column) for j, column in enumerate(table.columns)
    )


def assert_block_same_as_arrow(lines: list[bytes], kinds, nulls=NULLS, delim: bytes = b",") -> None:
    """Parse a block of valid lines both ways, as whole blocks (fast for many lines)."""
    table, skipped = arrow_read(lines, kinds, nulls, delim)
    assert not skipped
    fast = fast_parse(lines, kinds, nulls, delim)
    assert fast is not None
    assert (fast.row_status == STATUS_OK).all()
    got = csv_parse.to_arrow(fast, kinds)
    for j, column in enumerate(table.columns):
        want_valid, want = _column_summary(column)
        have_valid, have = _column_summary(got[j])
        assert have_valid == want_valid
        if have != want:
            first = next(i for i, (a, b) in enumerate(zip(have, want, strict=True)) if a != b)
            pytest.fail(f"line {lines[first]!r}: kernel {have[first]!r}, Arrow {want[first]!r}")


def _in_both_positions(values: list[bytes], kind: int, delim: bytes = b",") -> None:
    """Each value as the first field (ended by the delimiter) and as the last (ended by the
    line)."""
    assert_same_as_arrow([v + delim + b"1" for v in values], [kind, KIND_INT], delim=delim)
    assert_same_as_arrow([b"1" + delim + v for v in values], [KIND_INT, kind], delim=delim)


# --------------------------------------------------------------------------------------------
# Value by value
# --------------------------------------------------------------------------------------------


def test_a_block_of_every_type_with_missing_values():
    kinds = [KIND_STRING, KIND_INT, KIND_FLOAT, KIND_BOOL, KIND_STRING, KIND_INT]
    lines = [
        b"r1,1,0.5,true,mage,1",
        b"r2,-7,-2.25,false,x y,0",
        b"r3,,1000,,NA,1",
        b"r4,NULL,null,N/A,unicode \xc3\xa9 \xe2\x9c\x93,0",
        b"r5,9223372036854775807,nan,TRUE,,1",
        b"r6,0,-0,False,  padded  ,1",
    ]
    assert_block_same_as_arrow(lines, kinds)
    fast = assert_same_as_arrow(lines, kinds)
    arrays = csv_parse.to_arrow(fast, kinds)
    assert arrays[4].to_pylist() == ["mage", "x y", None, "unicode é ✓", None, "  padded  "]
    assert arrays[1].null_count == 2 and arrays[3].null_count == 2


INT_VALUES = [
    b"0", b"-0", b"7", b"-7", b"00012", b"-00012", b"+1", b"1.0", b"1e3", b"12a", b"a12",
    b" 5", b"5 ", b"\t5\t", b" \t-5 \t", b"- 5", b"5 5", b"-", b" ", b"\t", b"--1", b"1-",
    b"9223372036854775807", b"-9223372036854775808", b"9223372036854775808",
    b"-9223372036854775809", b"99999999999999999999", b"18446744073709551616",
    b"00000000000000000000009223372036854775807", b"-000000000000000000009223372036854775808",
    b"922337203685477580", b"9223372036854775799", b"92233720368547758070",
    b"0x10", b"0X1f", b"0xaBc", b" 0x10 ", b"-0x10", b"+0x10", b"0x", b"0x ", b" 0x", b"0xg",
    b"0x 1", b"00x10", b"0x-1", b"0xFFFFFFFFFFFFFFFF", b"0x8000000000000000",
    b"0x7fffffffffffffff", b"0x0000000000000001", b"0x00000000000000001",
    b"0x1FFFFFFFFFFFFFFFF", b"1_000", b"\x0b5", b"5\x0c", b"NA ", b" NA", b"nan", b"inf",
    b"\xc3\xa9", b"5\xff",
]  # fmt: skip


def test_int64_values_limits_overflow_hex_and_blanks():
    _in_both_positions(INT_VALUES, KIND_INT)


FLOAT_VALUES = [
    b"0", b"-0", b"+0", b"0.0", b"-0.0", b".5", b"-.5", b"5.", b"1.e5", b".e5", b".", b"-.",
    b"e5", b"1e", b"1e+", b"1e-", b"1e+5", b"1E-5", b"1e05", b"1e+-5", b"+-1", b"-+1", b"++1",
    b"1.5f", b"0x1p3", b"1,5", b"1..5", b"1.5.", b"1e5.5", b"1 5", b"- 1",
    b" 1.5 ", b"\t-2.25\t", b" \t1e3\t ", b"1.5\x0b", b"\x0c1",
    b"nan", b"NaN", b"NAN", b"-nan", b"+nan", b"-NaN", b" nan ", b"nan(123)", b"nan()",
    b"-nan(abc_XYZ_09)", b"nan(", b"nan(a b)", b"nan(a)x", b"nan( )", b"nan(a-b)", b"nan)",
    b"na", b"nanx", b"inf", b"-inf", b"+inf", b"Inf", b"iNf", b"INF", b"infinity",
    b"-Infinity", b"INFINITY", b"iNfInItY", b"infinit", b"infinityx", b"in", b"infin",
    b"infinity()", b"inf inity",
    b"3.4028235e38", b"3.4028234663852886e38", b"3.40282356779733661637539395458142568448e38",
    b"3.40282356779733661637539395458142568447e38", b"3.4028236e38", b"-3.4028236e38",
    b"1e38", b"1e39", b"9.99e38", b"1e400", b"-1e400", b"1e99999999999999999999",
    b"1e0000000000000000000000001", b"0e99999999999999999999", b"0.0e-99999999999",
    b"1.17549435e-38", b"1.1754942e-38", b"1.17549428e-38", b"1e-38", b"1e-40", b"1.4e-45",
    b"1.401298464324817e-45", b"7e-46", b"7.006492321624085e-46", b"7.0064923216240862e-46",
    b"7.1e-46", b"1e-46", b"-1e-46", b"1e-400", b"-1e-400", b"2.5e-45", b"2.1019476964872256e-45",
    b"0.1", b"0.2", b"0.3", b"-0.4128", b"16777216", b"16777217", b"16777217.0000001",
    b"16777219", b"33554435", b"1.000000178813934326171875",
    b"1.00000017881393432617187499", b"1.00000017881393432617187501",
    b"1.000000059604644775390625", b"1.0000000596046447753906249999999999999",
    b"123456789012345678901234567890", b"0.000000000000000000000000000000123456789",
    b"1" + b"0" * 60 + b"e-60", b"0." + b"0" * 50 + b"1e50", b"9" * 45, b"-" + b"9" * 39,
    b"NA ", b"\xc3\xa9", b"1\xff",
]  # fmt: skip


def test_float32_values_specials_syntax_and_rounding():
    _in_both_positions(FLOAT_VALUES, KIND_FLOAT)


def test_nan_and_signed_zero_bits():
    fast = assert_same_as_arrow([b"nan", b"-nan", b"-nan()", b"-0", b"+inf"], [KIND_FLOAT])
    bits = fast.values[0].view(np.uint32).tolist()
    assert bits == [0x7FC00000, 0xFFC00000, 0xFFC00000, 0x80000000, 0x7F800000]


BOOL_VALUES = [
    b"true", b"True", b"TRUE", b"false", b"False", b"FALSE", b"tRUE", b"fALSE", b"TrUe",
    b" true", b"true ", b"\ttrue", b"1", b"0", b"yes", b"no", b"t", b"f", b"tru", b"truee",
    b"falsee", b"fals", b"NA", b"null", b"\xc3\xa9",
]  # fmt: skip


def test_bool_spellings():
    _in_both_positions(BOOL_VALUES, KIND_BOOL)


STRING_VALUES = [
    b"x", b" x ", b"NA", b" NA", b"NA ", b"na", b"NULL", b"Null", b"null", b"N/A", b"\t",
    b"caf\xc3\xa9", b"\xe2\x9c\x93 check", b"\xf0\x9f\x98\x80", b"mid\xef\xbb\xbfbom",
    b"\xf4\x8f\xbf\xbf", b"\xed\x9f\xbf", b"tab\tinside", b"\x01\x1f", b"a'b", b"\\",
]  # fmt: skip


def test_strings_nulls_blanks_and_non_ascii_utf8():
    _in_both_positions(STRING_VALUES, KIND_STRING)


def test_a_byte_order_mark_is_data_except_at_the_start_of_the_block():
    # Arrow drops a BOM at the start of its input only: the kernel leaves that block to it.
    assert fast_parse([b"\xef\xbb\xbfx,1", b"y,2"], [KIND_STRING, KIND_INT]) is None
    assert_block_same_as_arrow([b"x,1", b"\xef\xbb\xbfy,2"], [KIND_STRING, KIND_INT])


def test_missing_values_for_every_type_are_matched_untrimmed():
    for kind in (KIND_FLOAT, KIND_INT, KIND_BOOL, KIND_STRING):
        fast = assert_same_as_arrow([b"," + t for t in NULLS] + [b",", b",NA,"], [kind, kind])
        assert not fast.valid[1][: len(NULLS)].any()


def test_custom_null_values_including_numbers_and_long_tokens():
    long_token = b"missing-" + b"x" * 70
    nulls = (b"-1", b"nan", b"?", long_token)
    for kind in (KIND_FLOAT, KIND_INT, KIND_BOOL, KIND_STRING):
        values = [b"-1", b"nan", b"?", long_token, long_token + b"x", b"", b"-1 ", b"2"]
        fast = assert_same_as_arrow([b"1," + v for v in values], [KIND_INT, kind], nulls)
        assert fast.valid[1][:4].tolist() == [False] * 4


def test_without_the_empty_null_value_an_empty_field_is_a_value_or_bad():
    nulls = (b"NA",)
    for kind in (KIND_FLOAT, KIND_INT, KIND_BOOL, KIND_STRING):
        assert_same_as_arrow([b"1,", b"1,NA", b"1, "], [KIND_INT, kind], nulls)


def test_no_null_values_at_all():
    assert_same_as_arrow([b"1,", b"NA,x", b",nan"], [KIND_STRING, KIND_STRING], ())
    assert_same_as_arrow([b"1,", b"NA,x", b",nan"], [KIND_STRING, KIND_FLOAT], ())


# --------------------------------------------------------------------------------------------
# Many random numerals: correct float32 rounding
# --------------------------------------------------------------------------------------------


def _random_numerals(rng: np.random.Generator, n: int) -> list[bytes]:
    """Decimal numerals of every shape: 1-40 digits, any point position, any exponent."""
    out = []
    for _ in range(n):
        nd = int(rng.integers(1, 41)) if rng.random() < 0.3 else int(rng.integers(1, 10))
        digits = "".join(map(str, rng.integers(0, 10, nd)))
        point = int(rng.integers(0, nd + 1))
        text = digits[:point] + ("." if point < nd or rng.random() < 0.1 else "") + digits[point:]
        if text.startswith("."):
            text = ("0" if rng.random() < 0.5 else "") + text
        if rng.random() < 0.5:
            exponent = int(rng.integers(-55, 45))
            text += f"{'eE'[int(rng.integers(2))]}{exponent:+d}"
        sign = rng.choice(["", "-", "+"], p=[0.6, 0.3, 0.1])
        out.append((sign + text).encode())
    return out


def test_random_decimal_numerals_round_like_arrow():
    rng = np.random.default_rng(20261123)
    assert_block_same_as_arrow(_random_numerals(rng, 60_000), [KIND_FLOAT])


def test_random_float32_values_round_trip():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 0x7F800000, 50_000, dtype=np.uint32)  # finite, incl. subnormals
    values = bits.view(np.float32)
    texts = [repr(float(v)).encode() for v in values] + [
        f"{float(v):.9g}".encode() for v in values[:10_000]
    ]
    assert_block_same_as_arrow(texts, [KIND_FLOAT])
    fast = fast_parse(texts[:50_000], [KIND_FLOAT])
    assert np.array_equal(fast.values[0].view(np.uint32), bits)


def _halfway_numerals(rng: np.random.Generator, n: int) -> list[bytes]:
    """Exact float32 midpoints and numerals a hair above or below them, all magnitudes.

    A midpoint between two adjacent float32 values is exact in float64, so its exact decimal
    expansion is a finite numeral; ties go to even, and the tiniest difference decides the
    others. These are the values the kernel's "too close to call" check exists for.
    """
    out = []
    bits = rng.integers(1, 0x7F7FFFFF, n, dtype=np.uint32)
    bits[: n // 8] = rng.integers(1, 0x00800000, n // 8, dtype=np.uint32)  # subnormals
    for b in bits.tolist():
        low = struct.unpack("<f", struct.pack("<I", b))[0]
        high = struct.unpack("<f", struct.pack("<I", b + 1))[0]
        mid = Decimal(low) + (Decimal(high) - Decimal(low)) / 2  # exact
        text = format(mid, "f") if rng.random() < 0.5 else format(mid, "e")
        out.append(text.encode())
        mantissa, _, exponent = format(mid, "e").partition("e")
        out.append(f"{mantissa}000000001e{exponent}".encode())  # just above
        below = mid - Decimal(10) ** (mid.adjusted() - 40)
        out.append(format(below, "e").encode())  # just below
    return out


def test_halfway_cases_round_to_nearest_even_like_arrow():
    rng = np.random.default_rng(3)
    texts = _halfway_numerals(rng, 3000)
    assert_block_same_as_arrow(texts, [KIND_FLOAT])
    assert_block_same_as_arrow([b"-" + t for t in texts[:900]], [KIND_FLOAT])


def test_decimal_to_float32_bits_is_exact():
    rng = np.random.default_rng(11)
    texts = _halfway_numerals(rng, 500) + _random_numerals(rng, 2000)
    table, _ = arrow_read(texts, [KIND_FLOAT])
    want = table.column(0).to_numpy().view(np.uint32).tolist()
    assert [csv_parse.decimal_to_float32_bits(t) for t in texts] == want
    with pytest.raises(ValueError):
        csv_parse.decimal_to_float32_bits("nan")


# --------------------------------------------------------------------------------------------
# Field counts, rejected rows, fallback
# --------------------------------------------------------------------------------------------


def test_wrong_field_counts_take_precedence_and_count_like_arrow():
    kinds = [KIND_INT, KIND_FLOAT, KIND_STRING]
    lines = [b"1,2,x", b"1,2", b"1", b"1,2,x,4", b"1,2,x,,,", b",,,", b"bad,2", b"bad,2,x,y", b",,"]
    fast = assert_same_as_arrow(lines, kinds)
    assert fast.row_status.tolist() == [0, 1, 1, 1, 1, 1, 1, 1, 0]
    assert fast.field_count.tolist() == [3, 2, 1, 4, 6, 4, 2, 4, 3]


def test_bad_values_flag_the_row_and_name_the_first_bad_column():
    kinds = [KIND_INT, KIND_FLOAT, KIND_BOOL, KIND_STRING]
    lines = [b"1,2.5,true,a", b"x,2.5,true,a", b"1,y,maybe,a", b"1,2.5,yes,a", b"2,3,false,b"]
    fast = assert_same_as_arrow(lines, kinds)
    assert fast.row_status.tolist() == [0, 2, 2, 2, 0]
    assert fast.bad_column.tolist() == [-1, 0, 1, 2, -1]
    ok = np.flatnonzero(fast.row_status == STATUS_OK)
    table, _ = arrow_read([lines[i] for i in ok], kinds)
    for got, want in zip(csv_parse.to_arrow(fast, kinds, ok), table.columns, strict=True):
        assert _column_summary(got) == _column_summary(want)


def test_a_block_with_a_bad_value_is_an_arrow_conversion_error():
    lines = [b"1,a", b"2,b", b"x,c"]
    with pytest.raises(pa.ArrowInvalid):
        arrow_read(lines, [KIND_INT, KIND_STRING])
    assert fast_parse(lines, [KIND_INT, KIND_STRING]).row_status.tolist() == [0, 0, 2]


@pytest.mark.parametrize(
    "line",
    [
        b'1,"quoted",x',  # quotes need the full grammar
        b'1,a"b,x',
        b'"1",2,x',
        b"1,2\r3,x",  # Arrow ends a row at a bare carriage return
        b"1,2,x\r",
        b"1,2,caf\xc3",  # truncated UTF-8 in a string column
        b"1,2,\xff",
        b"1,2,\xed\xa0\x80",  # a surrogate
        b"1,2,\xc0\xaf",  # an overlong form
        b"1,2,\xf4\x90\x80\x80",  # above U+10FFFF
        b'1,2,x,"extra"',  # a quote in an extra field
        b"1,2,x,\r",
    ],
)
def test_blocks_the_kernel_cannot_read_exactly_fall_back(line):
    kinds = [KIND_INT, KIND_INT, KIND_STRING]
    assert fast_parse([b"1,2,ok", line, b"3,4,ok"], kinds) is None


def test_invalid_utf8_in_a_number_is_a_bad_value_as_in_arrow():
    assert_same_as_arrow([b"1,\xff", b"1,2\xc3\xa9"], [KIND_INT, KIND_FLOAT])


def test_to_arrow_selects_rows_zero_copy_without_them():
    kinds = [KIND_FLOAT, KIND_STRING, KIND_BOOL, KIND_INT]
    lines = [f"{i / 4},s{i},{'true' if i % 3 else 'NA'},{i}".encode() for i in range(20)]
    fast = fast_parse(lines, kinds)
    rows = np.array([19, 0, 5, 5])
    got = csv_parse.to_arrow(fast, kinds, rows)
    full = csv_parse.to_arrow(fast, kinds)
    for g, f in zip(got, full, strict=True):
        assert g.to_pylist() == f.take(pa.array(rows)).to_pylist()
    assert full[0].buffers()[1].address == fast.values[0].ctypes.data
    with pytest.raises(ValueError):
        csv_parse.to_arrow(fast, kinds, np.array([20]))


def test_argument_checks():
    data = np.frombuffer(b"1,2\n", dtype=np.uint8)
    with pytest.raises(ValueError):
        csv_parse.parse_block_fast(data, np.array([0]), np.array([9]), np.array([KIND_INT]), ())
    with pytest.raises(ValueError):
        csv_parse.parse_block_fast(data, np.array([0]), np.array([3]), np.array([7]), ())
    with pytest.raises(ValueError):
        csv_parse.parse_block_fast(data, np.array([0]), np.array([3]), np.array([]), ())
    empty = csv_parse.parse_block_fast(data, np.array([]), np.array([]), np.array([1, 1]), ())
    assert empty.num_rows == 0


# --------------------------------------------------------------------------------------------
# The word-at-a-time paths: every length, every offset, the buffer's end
# --------------------------------------------------------------------------------------------


def test_field_scanning_around_word_boundaries_and_the_buffer_end():
    # Fields are scanned eight bytes at a time: put each special byte at every offset of
    # fields up to 19 bytes long, as the last line with and without a final line feed.
    kinds = [KIND_STRING, KIND_STRING]
    for length in range(20):
        for pos in range(length):
            plain = b"x" * length
            accented = plain[:pos] + b"\xc3\xa9" + plain[pos + 1 :]
            lines = [b"ab," + plain, plain + b",cd", b"," + accented, accented + b","]
            assert_same_as_arrow(lines, kinds)
            for special in (b'"', b"\r", b"\xff"):
                odd = plain[:pos] + special + plain[pos + 1 :]
                for line in (b"ab," + odd, odd + b",cd"):
                    assert fast_parse([line], kinds) is None, line
                    data = b"ok,ok\n" + line  # no final line feed: the buffer ends here
                    arr = np.frombuffer(data, dtype=np.uint8)
                    got = csv_parse.parse_block_fast(
                        arr, np.array([0, 6]), np.array([5, len(data)]), np.array(kinds), NULLS
                    )
                    assert got is None, line
            data = b"ok,ok\n" + b"ab," + accented
            arr = np.frombuffer(data, dtype=np.uint8)
            got = csv_parse.parse_block_fast(
                arr, np.array([0, 6]), np.array([5, len(data)]), np.array(kinds), NULLS
            )
            assert csv_parse.to_arrow(got, kinds)[1].to_pylist() == ["ok", accented.decode()]


def test_plain_numerals_of_every_length_like_arrow():
    # The byte-loop path for `-`? digits [. digits] (18 digits at most) ending at a comma or
    # the line end, and the numerals just outside it, at every length up to and past 18
    # digits, with leading zeros (which push the exponent far down for few digits).
    rng = np.random.default_rng(17)
    numerals = []
    for n_int in range(0, 21):
        for n_frac in [*range(0, 21), None]:
            for sign in ("", "-"):
                for _ in range(3):
                    digits = "".join(map(str, rng.integers(0, 10, n_int + (n_frac or 0))))
                    text = sign + digits[:n_int]
                    if n_frac is not None:
                        text += "." + digits[n_int:]
                    numerals.append(text.encode())
                    if n_frac:  # the same fraction behind leading zeros: 0.000ddd
                        zeros = "0" * int(rng.integers(1, n_frac + 1))
                        numerals.append(f"{sign}0.{zeros}{digits[n_int:]}".encode())
    numerals = [v for v in numerals if v not in (b"", b"-", b".", b"-.")]
    valid = list(numerals)
    for tail in (b"x", b" ", b"e3", b".", b"-", b"0x1"):
        numerals += [v + tail for v in numerals[:: len(tail) + 7]]
    _in_both_positions(numerals, KIND_FLOAT)
    assert_block_same_as_arrow([v + b",1" for v in valid] * 3, [KIND_FLOAT, KIND_INT])
    integers = [v for v in numerals if b"." not in v]
    _in_both_positions(integers, KIND_INT)
    fits = [v for v in integers if v.lstrip(b"-").isdigit() and len(v.lstrip(b"-")) <= 18]
    assert_block_same_as_arrow([b"1," + v for v in fits], [KIND_INT] * 2)


def test_line_ranges_that_end_inside_a_number():
    # parse_block_fast reads only [start, end) even when digits continue past the end.
    cases = [
        ([b"12345678901,0.123456789", b"-1,-2.5", b"7,123456"], [KIND_INT, KIND_FLOAT]),
        ([b"0.5,12345678901", b"-2.5,-1234", b"1,12345678"], [KIND_FLOAT, KIND_INT]),
    ]
    for lines, kinds in cases:
        data = b"".join(line + b"\n" for line in lines) + b" " * 32
        lengths = np.array([len(line) for line in lines], dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1])).astype(np.int64)
        for cut in range(1, 5):
            fast = csv_parse.parse_block_fast(
                np.frombuffer(data, dtype=np.uint8),
                starts,
                starts + lengths - cut,
                np.array(kinds),
                NULLS,
            )
            for i, line in enumerate(lines):
                truncated = line[: len(line) - cut]
                try:
                    table, _ = arrow_read([truncated], kinds)
                except pa.ArrowInvalid:
                    assert fast.row_status[i] == STATUS_BAD_VALUE, truncated
                    continue
                assert fast.row_status[i] == STATUS_OK, truncated
                got = csv_parse.to_arrow(fast, kinds, np.array([i]))
                for g, w in zip(got, table.columns, strict=True):
                    assert _column_summary(g) == _column_summary(w), truncated


# --------------------------------------------------------------------------------------------
# Wired into the sharder: parse_block gives the same Batch with and without the fast path
# --------------------------------------------------------------------------------------------

SCHEMA = Schema(
    columns=(
        Column("id", "string"),
        Column("level", "int"),
        Column("score", "float"),
        Column("weekend", "bool"),
        Column("cls", "string"),
        Column("cleared", "int"),
    ),
    label="cleared",
)


def _batch_summary(batch: Batch) -> dict:
    return {
        "columns": [_column_summary(c) for c in batch.table.columns],
        "names": batch.table.column_names,
        "row_hash": batch.row_hash.tolist(),
        "rejects": batch.rejects,
        "counts": (batch.rows_read, batch.blank_lines, batch.lines, batch.bytes_read),
    }


def _parse_both(
    block: bytes, schema: Schema, monkeypatch, dialect: CsvDialect | None = None
) -> tuple[dict, bool]:
    """``(summary, fell_back)``: the same summary (or error) with the fast path off, and
    whether the fast path left the block to Arrow."""
    key_index = schema.names.index(schema.key) if schema.key else None
    results = []
    arrow_calls = []
    real_read_arrow = readers.read_arrow
    monkeypatch.setattr(
        readers, "read_arrow", lambda *a: arrow_calls.append(1) or real_read_arrow(*a)
    )
    for fast in (True, False):
        try:
            batch = csv_source.parse_block(
                block,
                schema,
                lines_before=7,
                key_index=key_index,
                source="f.csv",
                fast=fast,
                dialect=dialect,
            )
            results.append(_batch_summary(batch))
        except Exception as exc:  # the same failure both ways is the same behaviour
            results.append((type(exc), str(exc)))
    assert results[0] == results[1], block
    return results[0], len(arrow_calls) == 2


def _utf8(values: list[bytes]) -> list[bytes]:
    return [v for v in values if v.decode("utf-8", "replace").encode() == v]


def _random_block(rng: np.random.Generator, n: int, extras: list[bytes]) -> bytes:
    """Lines of SCHEMA's shape from every (UTF-8) edge-case list, with given lines mixed in."""
    ints, floats, bools = _utf8(INT_VALUES), _utf8(FLOAT_VALUES), _utf8(BOOL_VALUES)
    lines = []
    for _ in range(n):
        r = rng.random()
        level = ints[rng.integers(len(ints))] if r < 0.05 else str(rng.integers(-9, 99))
        score = floats[rng.integers(len(floats))] if r > 0.95 else f"{rng.normal():.4f}"
        weekend = bools[rng.integers(len(bools))] if 0.5 < r < 0.53 else "true"
        cls = STRING_VALUES[rng.integers(len(STRING_VALUES))] if rng.random() < 0.05 else "mage"
        label = rng.choice(["0", "1", "", "NA", "2"], p=[0.45, 0.45, 0.04, 0.03, 0.03])
        fields = [f"a{rng.integers(10**6)}", level, score, weekend, cls, label]
        line = b",".join(f if isinstance(f, bytes) else str(f).encode() for f in fields)
        if rng.random() < 0.01:
            line += b",extra"
        elif rng.random() < 0.01:
            line = line.rsplit(b",", 1)[0]
        lines.append(line)
        if rng.random() < 0.02:
            lines.append(b"")
    for extra in extras:
        lines.insert(int(rng.integers(len(lines) + 1)), extra)
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("seed", range(6))
def test_parse_block_is_the_same_with_and_without_the_fast_path(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    block = _random_block(rng, 400, [])
    summary, fell_back = _parse_both(block, SCHEMA, monkeypatch)
    assert not fell_back and summary["rejects"]  # the kernel read it, rejects and all
    # The same block with an int key column (converted from text after parsing).
    keyed = Schema(columns=SCHEMA.columns, label="cleared", key="level")
    _parse_both(block, keyed, monkeypatch)


def test_parse_block_clean_and_crlf_blocks_take_the_fast_path(monkeypatch):
    rng = np.random.default_rng(99)
    clean = b"".join(
        f"a{i},{rng.integers(100)},{rng.normal():.5g},false,mage,{i % 2}\n".encode()
        for i in range(300)
    )
    for block in (clean, clean.replace(b"\n", b"\r\n"), clean + b"\n\n", clean.rstrip(b"\n")):
        summary, fell_back = _parse_both(block, SCHEMA, monkeypatch)
        assert not fell_back and not summary["rejects"]
        assert summary["counts"][0] == 300


@pytest.mark.parametrize(
    "odd_line",
    [
        b'a1,1,2.5,true,"quoted, comma",1',  # quotes: Arrow
        b'a1,1,2.5,true,"multi',  # a quoted field spanning lines: Arrow, line by line
        b"a1,1,2.5\r,true,x,1",  # a bare carriage return
        b"a1,1,2.5,true,caf\xe9,1",  # not UTF-8 in a string column
        b"a1,1,2.5,true,caf\xe9,1,extra",  # ... in a line with the wrong field count
        b"a1,1\xe9,2.5,true,x,1",  # ... in a number
    ],
)
def test_parse_block_odd_lines_give_the_same_result_through_arrow(odd_line, monkeypatch):
    rng = np.random.default_rng(5)
    for extras in ([odd_line], [odd_line, b"a2,x,1,true,y,1"]):  # and with a bad value
        block = _random_block(rng, 50, extras)
        _parse_both(block, SCHEMA, monkeypatch)


def test_parse_block_starting_with_a_byte_order_mark(monkeypatch):
    block = b"\xef\xbb\xbfa1,1,2.5,true,x,1\na2,2,3.5,false,y,0\n"
    summary, fell_back = _parse_both(block, SCHEMA, monkeypatch)
    assert fell_back and summary["columns"][0][1] == ["a1", "a2"]


def test_fast_path_follows_the_environment(monkeypatch):
    monkeypatch.delenv(csv_source.FAST_PATH_ENV, raising=False)
    assert csv_source.fast_path_enabled()
    monkeypatch.setenv(csv_source.FAST_PATH_ENV, "0")
    assert not csv_source.fast_path_enabled()
    monkeypatch.setenv(csv_source.FAST_PATH_ENV, "1")
    assert csv_source.fast_path_enabled()


def _line_bounds_reference(block: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Lines the obvious NumPy way: split at every line feed, drop one trailing \\r."""
    arr = np.frombuffer(block, dtype=np.uint8)
    newlines = np.flatnonzero(arr == 10)
    starts = np.concatenate(([0], newlines + 1)).astype(np.int64)
    ends = np.concatenate((newlines, [arr.size])).astype(np.int64)
    if starts[-1] == arr.size:
        starts, ends = starts[:-1], ends[:-1]
    ends = ends - ((ends > starts) & (arr[np.maximum(ends - 1, 0)] == 13))
    return starts, ends


@pytest.mark.parametrize("seed", range(40))
def test_line_bounds_match_a_numpy_reference(seed):
    """Random blocks of short and long lines, blank lines, CRLF, lone CRs, line feeds at
    every offset inside an eight-byte word and at the block's edges, with and without a
    final line feed; several blocks have more lines than the first guess of capacity."""
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"ab,1.\r\n\n\x0b\x8a\x0a\x7f\xff", dtype=np.uint8)
    n = int(rng.integers(0, 3000))
    block = alphabet[rng.integers(0, len(alphabet), n)].tobytes()
    if seed % 3 == 0:
        block += b"\n"
    if seed % 5 == 0:
        block = b"\r\n" * int(rng.integers(0, 40)) + block
    want = _line_bounds_reference(block)
    got = csv_parse.line_bounds(block)
    assert got[0].dtype == got[1].dtype == np.int64
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize(
    "block",
    [b"", b"\n", b"\r", b"\r\n", b"abc", b"abc\r", b"abc\n", b"a\n\nb", b"\n" * 9, b"x" * 17],
)
def test_line_bounds_edge_cases(block):
    want = _line_bounds_reference(block)
    got = csv_parse.line_bounds(block)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


# --------------------------------------------------------------------------------------------
# Other delimiters and quote characters (the dialect as kernel parameters)
# --------------------------------------------------------------------------------------------

OTHER_DELIMITERS = [b";", b"\t", b"|"]
#: Values that hold another dialect's delimiter (a European decimal comma, a pipe, a tab).
DELIMITER_VALUES = [b"1,5", b"a,b", b"1;5", b" ;1", b"x|y", b"|", b"1\t", b"\t1.5", b";"]


@pytest.mark.parametrize("delim", OTHER_DELIMITERS, ids=["semicolon", "tab", "pipe"])
@pytest.mark.parametrize(
    "values, kind",
    [
        (INT_VALUES, KIND_INT),
        (FLOAT_VALUES, KIND_FLOAT),
        (BOOL_VALUES, KIND_BOOL),
        (STRING_VALUES, KIND_STRING),
    ],
    ids=["int", "float", "bool", "string"],
)
def test_other_delimiters_value_by_value_like_arrow(delim, values, kind):
    _in_both_positions(values + DELIMITER_VALUES, kind, delim)


def test_blank_and_empty_fields_between_tabs_like_arrow():
    """Arrow trims spaces and tabs around numbers, but a tab delimiter is never a blank: an
    empty field stays empty (missing) instead of reaching into the next field."""
    lines = [b"\t\t", b"1\t\t", b"\t2.5\t", b" \t 2\t x", b"1 \t2 \t", b"\t\t\t", b" 1 \t \tNA"]
    for kinds in ([KIND_INT, KIND_FLOAT, KIND_STRING], [KIND_FLOAT, KIND_INT, KIND_BOOL]):
        assert_same_as_arrow(lines, kinds, delim=b"\t")


def test_a_block_of_every_type_with_semicolons_and_decimal_commas():
    kinds = [KIND_STRING, KIND_INT, KIND_FLOAT, KIND_BOOL, KIND_STRING]
    lines = [b"r1;1;0.5;true;1,5", b"r2;-7;-2.25;false;a, b", b"r3;;1000;;NA", b"r4;2;1e39;TRUE;x"]
    assert_block_same_as_arrow(lines, kinds, delim=b";")
    fast = assert_same_as_arrow([*lines, b"r5;1;1,5;true;x"], kinds, delim=b";")
    assert fast.row_status.tolist() == [STATUS_OK] * 4 + [STATUS_BAD_VALUE]
    assert csv_parse.to_arrow(fast, kinds)[4].to_pylist()[:3] == ["1,5", "a, b", None]


def test_without_quoting_a_quote_is_text_and_another_quote_char_falls_back():
    kinds = [KIND_STRING, KIND_INT]
    lines = [b'say "hi",1', b'"x",2', b"it's,3"]
    fast = assert_same_as_arrow(lines, kinds, quote=None)
    assert csv_parse.to_arrow(fast, kinds)[0].to_pylist() == ['say "hi"', '"x"', "it's"]
    assert fast_parse(lines, kinds) is None  # quoted with ": Arrow's
    assert fast_parse([b"it's,3"], kinds, quote=b"'") is None  # quoted with ': Arrow's
    assert fast_parse([b'say "hi",1'], kinds, quote=b"'") is not None
    with pytest.raises(ValueError, match="delimiter"):
        fast_parse(lines, kinds, delim=b".")
    with pytest.raises(ValueError, match="quote"):
        fast_parse(lines, kinds, delim=b";", quote=b";")


@pytest.mark.parametrize(
    "delim", [b",", *OTHER_DELIMITERS], ids=["comma", "semicolon", "tab", "pipe"]
)
def test_parse_block_with_other_delimiters_is_the_same_with_and_without_the_fast_path(
    delim, monkeypatch
):
    rng = np.random.default_rng(11)
    block = _random_block(rng, 400, [b"a9,1,1e39,true,mage,1", b"a8,2,1e-50,true,x,0"])
    if delim != b",":  # fields holding the delimiter become extra fields, as in the original
        block = block.replace(b",", delim)
    dialect = CsvDialect(delimiter=delim.decode())
    summary, fell_back = _parse_both(block, SCHEMA, monkeypatch, dialect)
    assert not fell_back and summary["rejects"]
    keyed = Schema(columns=SCHEMA.columns, label="cleared", key="level")
    _parse_both(block, keyed, monkeypatch, dialect)
    # Without quoting, a block with quotes is the kernel's too.
    quoted = block.replace(b"mage", b'"mage"')
    no_quote = CsvDialect(delimiter=delim.decode(), quote_char="")
    _, fell_back = _parse_both(quoted, SCHEMA, monkeypatch, no_quote)
    assert not fell_back


# --------------------------------------------------------------------------------------------
# Floats beyond float32's range: flagged by the kernel, reported as before
# --------------------------------------------------------------------------------------------


def _beyond_float32(text: bytes, value: float) -> bool:
    """The reference: a finite numeral whose float32 is ±inf or ±0 but whose value is not 0."""
    if not (np.isinf(value) or value == 0):
        return False
    mantissa = text.lower().split(b"e")[
        0
    ]  # (Decimal refuses exponents such as 1e99999999999999999999)
    return any(c in b"123456789" for c in mantissa)  # not zero, not an inf spelling


def test_the_kernel_flags_rows_with_floats_beyond_float32():
    kinds = [KIND_FLOAT, KIND_INT]
    lines = [v + b",1" for v in _utf8(FLOAT_VALUES)] + [b"1e39,1,extra", b"1e39,x"]
    fast = fast_parse(lines, kinds)
    assert fast is not None
    want = []
    for i, line in enumerate(lines):
        ok = fast.row_status[i] == STATUS_OK and fast.valid[0][i]
        want.append(bool(ok) and _beyond_float32(line.split(b",")[0], float(fast.values[0][i])))
    assert fast.out_of_range.tolist() == want
    flagged = {lines[i].split(b",")[0] for i in np.flatnonzero(fast.out_of_range)}
    for text in (b"1e39", b"-1e400", b"3.4028236e38", b"1e-46", b"7e-46", b"-1e-400"):
        assert text in flagged  # overflow, underflow, and values only exact conversion decides
    for text in (b"inf", b"-Infinity", b"0e99999999999999999999", b"1.4e-45", b"3.4028235e38"):
        assert text not in flagged
    assert not fast.out_of_range[-2:].any()  # rejected rows are not flagged


@pytest.mark.parametrize("delim", [b",", b";"], ids=["comma", "semicolon"])
def test_parse_block_reports_floats_beyond_float32_the_same_on_both_paths(delim, caplog):
    clean = b"a1,1,1e39,true,x,1\na2,2,0.5,true,x,0\na3,3,-2.5e-50,true,x,1\na4,4,0e-9,true,x,1\n"
    clean += b"a5,5,inf,true,x,1\na6,6,-1e400,true,y,1\na7,7,1e39,true,x,1,extra\n"
    dialect = CsvDialect(delimiter=delim.decode())
    # The clean block (the kernel's flags) and one with a bad value (converted from text).
    for block, count in ((clean, 3), (clean + b"a8,x,1e39,true,bad,1\n", 4)):
        block = block.replace(b",", delim)
        messages = []
        for fast in (True, False):
            caplog.clear()
            with caplog.at_level("WARNING"):
                csv_source.parse_block(
                    block, SCHEMA, lines_before=1, source="f.csv", fast=fast, dialect=dialect
                )
            messages.append([r.getMessage() for r in caplog.records if "float32" in r.getMessage()])
        assert messages[0] == messages[1]
        assert len(messages[0]) == 1
        assert f"f.csv: {count} value(s) of column 'score' beyond the float32" in messages[0][0]
        assert "first: line 2, 1e39" in messages[0][0]


# --------------------------------------------------------------------------------------------
# Blocks with quoted records: the unquoted ones by the kernel, the quoted ones by Arrow
# --------------------------------------------------------------------------------------------

QUOTED_FIELDS = [
    b'"Thanks!\nRegards, Bob"', b'"fine, ""really"" fine"', b'"line one\r\nline two"', b'""',
    b'"NA"', b'"x"', b'"a""b"', b'"tail"ed', b'"\xc3\xa9, \xe2\x9c\x93"',
]  # fmt: skip


def _quoted_block(rng: np.random.Generator, n: int, share: float, extras: list[bytes]) -> bytes:
    """SCHEMA's lines (every edge-case list) with a quoted ``cls`` (or number) in ``share``
    of them: commas, doubled quotes, line breaks, quoted empty and null words."""
    lines = _random_block(rng, n, extras).split(b"\n")
    for k, line in enumerate(lines):
        fields = line.split(b",")
        if len(fields) < 6 or rng.random() >= share:
            continue
        r = rng.random()
        if r < 0.8:
            fields[4] = QUOTED_FIELDS[rng.integers(len(QUOTED_FIELDS))]
        elif r < 0.9:
            fields[1] = b'"' + fields[1] + b'"'  # a quoted number
        else:
            fields[2] = b'""'  # a quoted empty number: missing
        lines[k] = b",".join(fields)
    return b"\n".join(lines)


def _parse_mixed(block: bytes, schema: Schema, monkeypatch, dialect=None) -> tuple[dict, bool]:
    """:func:`_parse_both`, and whether the fast side went through ``read_mixed``."""
    used = []
    real = readers.read_mixed
    monkeypatch.setattr(readers, "read_mixed", lambda *a: used.append(r := real(*a)) or r)
    summary, _ = _parse_both(block, schema, monkeypatch, dialect)
    return summary, bool(used) and used[0] is not None


@pytest.mark.parametrize("seed", range(8))
def test_blocks_with_quoted_records_are_the_same_through_the_kernel_and_arrow(seed, monkeypatch):
    rng = np.random.default_rng(100 + seed)
    # Clean, with bad values, with wrong field counts (quoted or not), with blank lines.
    extras = [
        [],
        [b"a1,x,1,true,mage,1"],
        [b'a2,1,2.5,true,"x, y",1,extra'],
        [b"a3,1,2.5,true,mage"],
        [b'a4,"x",2.5,true,"q",1'],
    ][seed % 5]
    block = _quoted_block(rng, 300, 0.1, extras)
    summary, mixed = _parse_mixed(block, SCHEMA, monkeypatch)
    assert mixed, "the block went to Arrow whole"
    assert summary["counts"][0] > 290
    assert summary["counts"][2] == block.count(b"\n") + (not block.endswith(b"\n"))
    # The record bounds the reader found while cutting the block give the same batch.
    bounds = csv_records.record_bounds(block, delim=44, quote=34, escape=-1)
    given = csv_source.parse_block(
        block, SCHEMA, lines_before=7, source="f.csv", bounds=RecordBounds(*bounds[:3])
    )
    assert _batch_summary(given) == summary
    keyed = Schema(columns=SCHEMA.columns, label="cleared", key="level")
    _parse_mixed(block, keyed, monkeypatch)
    semi = CsvDialect(delimiter=";")
    _, mixed = _parse_mixed(block.replace(b",", b";"), SCHEMA, monkeypatch, semi)
    assert mixed


def test_mostly_quoted_blocks_and_escapes_go_to_arrow_whole(monkeypatch):
    rng = np.random.default_rng(7)
    block = _quoted_block(rng, 200, 0.9, [])
    _, mixed = _parse_mixed(block, SCHEMA, monkeypatch)
    assert not mixed
    escaped = CsvDialect(delimiter=",", escape_char="\\")
    _, mixed = _parse_mixed(_quoted_block(rng, 200, 0.1, []), SCHEMA, monkeypatch, escaped)
    assert not mixed


def test_the_kernel_defers_quoted_lines_instead_of_failing_the_block():
    kinds = [KIND_STRING, KIND_INT]
    lines = [b"a,1", b'"b, c",2', b"d,3", b"e\r,4", b"f,x"]
    assert fast_parse(lines, kinds) is None
    data = b"".join(line + b"\n" for line in lines)
    lengths = np.array([len(line) for line in lines], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1])).astype(np.int64)
    fast = csv_parse.parse_block_fast(
        np.frombuffer(data, np.uint8), starts, starts + lengths, np.array(kinds), NULLS,
        defer=True,
    )  # fmt: skip
    assert fast is not None
    assert fast.row_status.tolist() == [0, 3, 0, 3, 2]
    assert csv_parse.to_arrow(fast, kinds, np.array([0, 2]))[0].to_pylist() == ["a", "d"]
    assert not fast.valid[0][1] and not fast.valid[1][3]


def test_mixed_blocks_report_floats_beyond_float32_like_arrow(caplog):
    """Out-of-range floats in unquoted records (the kernel's flags) and in quoted ones
    (Arrow's, checked the whole way) are reported as when Arrow reads the whole block."""
    lines = [f"a{i},{i},{i * 0.25},true,mage,1" for i in range(40)]
    lines[3] = "a3,3,1e39,true,mage,1"  # the kernel's
    lines[10] = 'a10,10,-2.5e-50,true,"x, y",1'  # Arrow's
    lines[20] = 'a20,20,1e40,true,"q",1'  # Arrow's
    lines[30] = "a30,30,0e-9,true,mage,1"  # a zero, not out of range
    block = ("\n".join(lines) + "\n").encode()
    messages = []
    for fast in (True, False):
        caplog.clear()
        with caplog.at_level("WARNING"):
            csv_source.parse_block(block, SCHEMA, lines_before=1, source="f.csv", fast=fast)
        messages.append([r.getMessage() for r in caplog.records if "float32" in r.getMessage()])
    assert messages[0] == messages[1]
    assert len(messages[0]) == 1
    assert "f.csv: 3 value(s) of column 'score' beyond the float32" in messages[0][0]
    assert "first: line 5, 1e39" in messages[0][0]


def test_a_float_key_beyond_float32_is_reported_on_both_paths(caplog):
    """The kernel reads the key as text (it is hashed as text), so it cannot flag the key's
    values: a float key is checked the whole way after its conversion."""
    schema = Schema(columns=SCHEMA.columns, label="cleared", key="score")
    block = b"a1,1,1e39,true,x,1\na2,2,0.5,true,x,0\na3,3,2.5,true,x,1\n"
    messages = []
    for fast in (True, False):
        caplog.clear()
        with caplog.at_level("WARNING"):
            csv_source.parse_block(
                block, schema, lines_before=1, key_index=2, source="f.csv", fast=fast
            )
        messages.append([r.getMessage() for r in caplog.records if "float32" in r.getMessage()])
    assert messages[0] == messages[1] and len(messages[0]) == 1
    assert "1 value(s) of column 'score'" in messages[0][0]


def test_type_counts_of_plain_numerals_are_the_type_pass_counts():
    """The counts the fast path keeps as it parses (``count_types``) are those of
    ``csv_types.classify_block`` on numerals it parses itself: signs, leading zeros (``07``,
    ``-00.5``, but not ``0``, ``0.5`` or ``-0``), ints in a float column and floats in an int
    column's place, fields at the line's and the block's end."""
    from shardtrain.kernels import csv_types

    rng = np.random.default_rng(5)
    words = b"0 -0 00 07 -07 0.5 -0.5 00.5 -00.5 05. 5 -5 50 5.0 -5.25 10 100.001 0. -0.0 9".split()
    kinds = [KIND_FLOAT, KIND_INT, KIND_FLOAT, KIND_STRING, KIND_FLOAT]
    expect = {KIND_FLOAT: csv_types.FLOAT, KIND_INT: csv_types.INT, KIND_STRING: csv_types.TEXT}
    lines = []
    for _ in range(3000):
        fields = [bytes(rng.choice(words)) for _ in kinds]
        if fields[1].count(b".") or fields[1] == b"-0":  # the int column: an int or a bad value
            fields[1] = b"1"
        lines.append(b",".join(fields))
    data = b"".join(line + b"\n" for line in lines)
    lengths = np.array([len(line) for line in lines], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1])).astype(np.int64)
    fast = csv_parse.parse_block_fast(
        np.frombuffer(data, dtype=np.uint8)[:-1],  # the last field ends the buffer
        starts,
        starts + lengths,
        np.array(kinds),
        NULLS,
        count_types=(np.array([expect[k] for k in kinds], dtype=np.int64), 4),
    )
    assert fast is not None and fast.type_counts is not None
    tally = csv_types.new_tally(len(kinds))
    csv_types.classify_block(
        data, tally, label=4, delim=ord(","), quote=ord('"'), escape=-1, nulls=NULLS
    )
    assert (tally[:, csv_types.INT | csv_types.LEADING_ZERO] > 0).all()
    assert fast.type_counts.tolist() == tally.tolist()
