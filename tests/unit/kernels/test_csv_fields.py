"""The field-level pieces of the compiled CSV readers, called on their own.

The block parser and the type pass are checked against Arrow and Python references in
``tests/unit/data/sources/csv/test_readers.py`` and ``test_types.py``; here the shared pieces
are checked directly: the null-token match both use, UTF-8 validation, int64 and bool fields.
The helpers take the address of the bytes, so each test keeps its array alive while they run.
"""

from __future__ import annotations

import numpy as np
import pytest

from shardtrain.kernels.csv_fields import (
    NOT_PARSED,
    PARSED,
    is_null,
    null_addresses,
    null_tokens,
    parse_bool,
    parse_int,
    utf8_valid,
)

TOKEN_SETS = [
    (b"", b"NA", b"null"),
    (b"NA", b"N/A", b"#N/A", b"-nan", b"1.#IND"),  # no empty token
    (b"", b"x" * 63, b"y" * 70),  # tokens beyond the length mask
    (),
]


@pytest.mark.parametrize("tokens", TOKEN_SETS)
def test_is_null_is_membership(tokens):
    nulls = null_tokens(tokens)
    addresses = null_addresses(nulls)
    fields = [*tokens, b"", b"N", b"NA ", b"nul", b"nulL", b"x" * 62, b"x" * 64, b"y" * 70]
    fields += [b"y" * 69 + b"z", b"NaN", b"-nan", b"1.#IN"]
    block = np.frombuffer(b"|".join(fields) + b"\0" * 8, dtype=np.uint8)
    start = 0
    for field in fields:
        got = is_null(block.ctypes.data, start, start + len(field), addresses)
        assert got == (field in tokens), (tokens, field)
        start += len(field) + 1


def test_null_tokens_summary():
    nulls = null_tokens((b"NA", b"", b"null", b"NA", b"z" * 63))
    assert nulls.length_mask == (1 << 0) | (1 << 2) | (1 << 4)
    assert nulls.long_tokens and nulls.longest == 63 and not nulls.numeric
    assert np.flatnonzero(nulls.first).tolist() == [ord("N"), ord("n"), ord("z")]
    assert null_tokens((b"-1",)).numeric and null_tokens((b"NaN",)).numeric


@pytest.mark.parametrize(
    "text",
    [
        *(b"plain", "é ß € 🙂".encode(), b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b""),
        *(b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xef\xbf\xbf", b"\xf0\x9f\x99\x82x"),
    ],
)
def test_utf8_valid_agrees_with_python(text):
    block = np.frombuffer(b"<" + text + b">", dtype=np.uint8)
    try:
        text.decode("utf-8")
        want = True
    except UnicodeDecodeError:
        want = False
    assert utf8_valid(block.ctypes.data, 1, 1 + len(text)) == want


@pytest.mark.parametrize(
    "field, value",
    [
        (b"42", 42),
        (b" -17\t", -17),
        (b"007", 7),
        (b"-9223372036854775808", -(2**63)),
        (b"9223372036854775807", 2**63 - 1),
        (b"0xff", 255),
        (b"0XFFFFFFFFFFFFFFFF", -1),
        (b"9223372036854775808", None),
        (b"+1", None),
        (b"1.5", None),
        (b"", None),
        (b"0x", None),
    ],
)
def test_parse_int_as_arrow(field, value):
    block = np.frombuffer(field + b",next" + b"\0" * 8, dtype=np.uint8)
    end = len(field)
    q, got, code = parse_int(block.ctypes.data, 0, end, ord(","))
    if value is None:
        assert code == NOT_PARSED
    else:
        assert (code, got, q) == (PARSED, value, end)


def test_parse_bool_spellings():
    words = [b"true", b"True", b"TRUE", b"false", b"False", b"FALSE", b"tRUE", b"FALSe", b"yes"]
    block = np.frombuffer(b"".join(words) + b"\0" * 8, dtype=np.uint8)
    got, start = [], 0
    for word in words:
        got.append(parse_bool(block.ctypes.data, start, start + len(word)))
        start += len(word)
    assert got == [1, 1, 1, 0, 0, 0, -1, -1, -1]
