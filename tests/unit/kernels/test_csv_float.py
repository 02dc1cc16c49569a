"""Float32 fields: the compiled parser against NumPy's correctly rounded conversion, and the
exact conversion of the values it leaves pending. The whole parser is checked against
Arrow in ``tests/unit/data/sources/csv/test_readers.py``."""

from __future__ import annotations

import numpy as np
import pytest

from shardtrain.kernels.csv_fields import NOT_PARSED, OUT_OF_RANGE, PARSED, TOO_CLOSE
from shardtrain.kernels.csv_float import (
    PENDING_BITS,
    convert_pending,
    decimal_to_float32_bits,
    parse_float,
    powers_of_ten,
)


def _parse(field: bytes) -> tuple[int, int]:
    block = np.frombuffer(field + b";" + b"\0" * 8, dtype=np.uint8)
    q, bits, code = parse_float(block.ctypes.data, 0, len(field), powers_of_ten().ctypes.data, 59)
    assert code == NOT_PARSED or q == len(field)
    return bits, code


@pytest.mark.parametrize(
    "field",
    [
        *(b"1.5", b"-0.4128", b" 3 ", b"1e5", b".5", b"5.", b"123456789012345678901234", b"-0"),
        *(b"0.000001234567890123456789", b"3.4028234e38", b"1.17549435e-38", b"2.5E-3"),
    ],
)
def test_parse_float_is_correctly_rounded(field):
    bits, code = _parse(field)
    if code == TOO_CLOSE:  # e.g. below float32's normal range: converted exactly later
        bits, code = decimal_to_float32_bits(field), PARSED
    assert code == PARSED
    assert bits == int(np.float32(field.decode()).view(np.uint32))


def test_parse_float_words_and_failures():
    assert _parse(b"inf") == (0x7F800000, PARSED)
    assert _parse(b"-Infinity") == (0xFF800000, PARSED)
    assert _parse(b"nan(x_1)") == (0x7FC00000, PARSED)
    for bad in (b"", b"1e", b"+", b"1.2.3", b"infx", b"1 2"):
        assert _parse(bad)[1] == NOT_PARSED, bad
    assert _parse(b"1e39") == (0x7F800000, OUT_OF_RANGE)
    assert _parse(b"1.000000178813934326171875")[1] == TOO_CLOSE  # an exact midpoint


def test_convert_pending_replaces_pending_values_and_reports_those_out_of_range():
    lines = [b"a;1.000000178813934326171875", b"b;2", b"c;1e-50", b"d;1e-45"]
    block = np.frombuffer(b"\n".join(lines), dtype=np.uint8)
    starts = np.cumsum([0] + [len(x) + 1 for x in lines[:-1]])
    ends = starts + [len(x) for x in lines]
    bits = np.array([PENDING_BITS, 0x40000000, PENDING_BITS, PENDING_BITS], dtype=np.uint32)
    beyond = convert_pending(block, starts, ends, 1, ord(";"), bits)
    assert beyond.tolist() == [2]
    assert bits.tolist() == [
        decimal_to_float32_bits("1.000000178813934326171875"),
        0x40000000,
        0,
        1,  # the smallest subnormal
    ]
