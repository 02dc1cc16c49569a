"""``--decimal ,``: numbers written with a decimal comma (``1,5``), as European Excel, pandas'
``to_csv(decimal=",")`` and R's ``write.csv2`` write them.

The dialect's validation, the type inference (sample and all rows), the block parser's two
Arrow paths (typed, and text converted after a bad value) and the delimiter detection. The
whole-file comparisons with pandas are in ``test_corpus.py``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from shardtrain.data.csv_dialect import CsvDialect, detect_delimiter
from shardtrain.data.schema import Column, Schema, TypeTally, infer_schema
from shardtrain.data.shard_config import ShardConfig
from shardtrain.data.sources import csv as csv_source
from shardtrain.data.sources.csv import readers
from shardtrain.data.type_rule import infer_type
from shardtrain.errors import ConfigError
from shardtrain.kernels import csv_parse

COMMA = CsvDialect(delimiter=";", decimal=",")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"delimiter": ",", "decimal": ","}, r"--decimal ',' cannot also be the --delimiter"),
        ({"delimiter": ";", "quote_char": ",", "decimal": ","}, r"cannot also be the --quote-char"),
        ({"delimiter": ";", "escape_char": ".", "decimal": "."}, r"cannot also be the --escape"),
        ({"decimal": "'"}, r"--decimal must be '\.' or ',' \(got \"'\"\)"),
        ({"decimal": ",,"}, r"--decimal must be '\.' or ','"),
    ],
)
def test_the_decimal_mark_is_checked_with_one_clear_line(kw, message):
    with pytest.raises(ConfigError, match=message) as info:
        CsvDialect(**kw)
    assert "\n" not in str(info.value)


def test_the_decimal_mark_defaults_to_the_point_and_is_stored_only_when_a_comma():
    assert CsvDialect().decimal == "."
    assert "decimal" not in CsvDialect(delimiter=",").to_dict()  # older plans keep their print
    d = CsvDialect(delimiter=";", decimal="comma").to_dict()
    assert d["decimal"] == ","
    assert CsvDialect.from_dict(d) == COMMA
    assert CsvDialect.from_dict(CsvDialect(delimiter=",").to_dict()).decimal == "."
    config = ShardConfig(sources=("a.csv",), output="out", label="y", decimal=",")
    assert config.csv_dialect().decimal == ","


def test_detection_never_takes_the_decimal_comma_for_the_delimiter():
    # Every line splits into 2 fields at the comma: with the decimal point, ',' would win.
    sample = "fee,label\n1,5\n2,5\n"
    assert detect_delimiter(sample) == ","
    assert detect_delimiter(sample, COMMA.candidate_delimiters) is None
    semi = '"id";"fee";"label"\n"1";"0,5";"x"\n"2";"12,25";"y"\n'
    assert detect_delimiter(semi) == ";"
    assert detect_delimiter(semi, COMMA.candidate_delimiters) == ";"
    assert COMMA.candidate_delimiters == (";", "\t", "|")


@pytest.mark.parametrize(
    ("values", "decimal", "expected"),
    [
        (["1,5", "-0,25", "1,5e3", ",5", "7", None], ",", "float"),
        (["1", "2", "-3"], ",", "int"),
        (["1,5", "1.5"], ",", "string"),  # 1.5 is text with a decimal comma, as in pandas
        (["1.5", "-0.25"], ",", "string"),
        (["1,5", "-0,25"], ".", "string"),
        (["01,5", "2,5"], ",", "string"),  # a leading zero: a code
        (["0,5", " 2,5 ", "inf", "NaN"], ",", "float"),
    ],
)
def test_types_read_the_decimal_mark(values, decimal, expected):
    arr = pa.array(values, pa.string())
    assert infer_type(arr, decimal) == expected
    tally = TypeTally(decimal=decimal)
    tally.add(arr.slice(0, 1))
    tally.add(arr.slice(1))
    assert tally.type() == expected


def test_the_sample_infers_floats_with_a_decimal_comma():
    sample = b"id;fee;code;label\n1;0,0;07919;x\n2;45,12;00100;y\n3;;1,5e3;x\n"
    schema = infer_schema(sample, "s.csv", label="label", dialect=COMMA)
    assert [c.type for c in schema.columns] == ["int", "float", "string", "string"]


def _schema(*types: str) -> Schema:
    columns = tuple(Column(f"c{i}", t) for i, t in enumerate(types))  # type: ignore[arg-type]
    return Schema((*columns, Column("label", "string")), label="label")


def test_blocks_are_read_typed_with_the_decimal_comma_and_exactly_rounded():
    """The typed Arrow read takes the comma (no fallback to text); values equal the
    decimal-point path's correctly rounded float32, bit for bit."""
    rng = np.random.default_rng(3)
    pairs = zip(rng.normal(0, 1, 2000), rng.integers(-40, 38, 2000), strict=True)
    texts = [f"{m}e{e}" for m, e in pairs]
    texts += ["16777217.0000000001", "1.00000005960464477539062501", "-0.0", "3.4028235e38"]
    schema = _schema("float")
    block_dot = "".join(f"{t};x\n" for t in texts).encode()
    block_comma = block_dot.replace(b".", b",")
    dot_dialect = CsvDialect(delimiter=";")
    nonblank = np.arange(len(texts))
    starts, ends = csv_parse.line_bounds(np.frombuffer(block_comma, np.uint8))
    types = {"c0": pa.float32(), "label": pa.string()}
    inp = readers.BlockInput(block_comma, starts, ends, nonblank, schema, types, COMMA, "b.csv")
    parsed = readers.read_arrow(inp, quoted=False)
    assert not parsed.as_text and not parsed.invalid
    comma = csv_source.parse_block(block_comma, schema, lines_before=0, dialect=COMMA)
    dot = csv_source.parse_block(block_dot, schema, lines_before=0, dialect=dot_dialect)
    assert not comma.rejects and not dot.rejects
    a = comma.table.column("c0").to_numpy()
    b = dot.table.column("c0").to_numpy()
    assert a.dtype == np.float32 and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert np.array_equal(parsed.table.column("c0").to_numpy().view(np.uint32), a.view(np.uint32))


def test_a_point_in_a_decimal_comma_float_column_is_a_bad_value():
    """After one bad value the block is read as text and converted: the comma still reads,
    the point does not (the row is rejected with its line, as any unparsable value)."""
    schema = _schema("float", "int")
    block = b'1,5;1;a\n"-0,25";2;b\n1.5;3;c\n;4;d\n1,5e3;5;e\n'
    for fast in (True, False):
        batch = csv_source.parse_block(block, schema, lines_before=1, dialect=COMMA, fast=fast)
        assert [(r.line, r.reason, r.text) for r in batch.rejects] == [(4, "bad_value", "1.5;3;c")]
        assert batch.rejects[0].detail == (
            "column 'c0' is not float (a '.' with --decimal ,: neither 1.5 nor thousands "
            "separators as in 1.234,5 are read)"
        )
        assert batch.table.column("c0").to_pylist() == [1.5, -0.25, None, 1500.0]
        assert batch.table.column("c1").to_pylist() == [1, 2, 4, 5]


@pytest.mark.parametrize("dialect", [CsvDialect(delimiter=";"), COMMA])
def test_a_float_key_is_hashed_as_text_and_converted(dialect):
    """A float key column is read as text (hashed byte for byte), then converted; the float32
    range check runs on the converted values (it used to fail on the text: a TypeError)."""
    schema = Schema((Column("k", "float"), Column("label", "string")), label="label", key="k")
    block = b"0,5;a\n2,25;b\n1e39;c\n"
    if dialect.decimal == ".":
        block = block.replace(b",", b".")
    batch = csv_source.parse_block(block, schema, lines_before=0, dialect=dialect, key_index=0)
    assert not batch.rejects
    assert batch.table.column("k").to_pylist() == [0.5, 2.25, float("inf")]
