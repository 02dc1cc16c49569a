"""The compiled type pass (``kernels/csv_types``, ``sources.csv.type_pass``) against the
reference (every value converted to text by the sharder's own reader and counted by
``TypeTally``): the same counts, hence the same types, on every corpus file and on random
adversarial files in several dialects; and the issue's reproductions sharded with the
default options (types by all rows) with no row rejected."""

from __future__ import annotations

import importlib.resources
import random

import numpy as np
import pytest

from csv_corpus import CASES, ENCODED, LABELS, _compare, _types, exact_pieces
from helpers import quoted_text_csv
from shardtrain.data import sharding
from shardtrain.data.schema import TypeTally
from shardtrain.data.sharding.plan import build_plan
from shardtrain.data.sources import csv as csv_source
from shardtrain.data.sources.base import Piece, plan_pieces
from shardtrain.data.sources.csv import plan_options
from shardtrain.data.sources.csv import source as csv_source_hooks
from shardtrain.data.sources.csv import types as csv_types_pass
from shardtrain.kernels import csv_types
from shardtrain.kernels.arrow import contiguous


def _planned(path, **kw):
    """The source, its plan inputs and its pieces, cut as planning cuts them and moved to
    record starts (the pass is compared with a reader of whole files: a piece's guess of its
    first record is checked by the sharder, not here)."""
    kw.setdefault("label", "label")
    config = sharding.ShardConfig(sources=(str(path),), output="unused", processes=2, **kw)
    source = config.source()
    inputs = source.plan_inputs()
    piece_bytes = max(1024, inputs.sources[0].size // 5)
    aligned = source.align_pieces(plan_pieces(inputs.sources, piece_bytes), inputs)
    return (
        source,
        inputs,
        exact_pieces(aligned.pieces, plan_options.CsvPlanOptions.from_dict(inputs.options).dialect),
    )


def _reference_tallies(inputs, dialect) -> list[TypeTally]:
    """:func:`csv_source.all_row_types`'s tallies (it returns only the types)."""
    text = csv_types_pass.as_text(inputs.schema)
    tallies = [TypeTally(decimal=dialect.decimal) for _ in text.columns]
    for src in inputs.sources:
        piece = Piece(src.uri, 0, src.size, src.gzip)
        for batch in csv_source.read_piece(piece, text, block_bytes=1 << 20, dialect=dialect):
            for tally, values in zip(tallies, batch.table.columns, strict=True):
                tally.add(contiguous(values))
    return tallies


def _compiled_tallies(inputs, pieces, dialect) -> list[TypeTally]:
    decimal = dialect.decimal
    return [csv_source.type_tally(r, decimal) for r in _compiled_counts(inputs, pieces, dialect)]


def _compiled_counts(inputs, pieces, dialect) -> np.ndarray:
    """The type pass's counts of every field of the pieces (``classify_block``)."""
    schema = inputs.schema
    total = csv_types.new_tally(len(schema.columns))
    for piece in pieces:
        text = csv_types_pass.as_text(schema)
        for block in csv_source.iter_record_blocks(piece, text, 4096, dialect):
            csv_types.classify_block(
                block.data,
                total,
                label=schema.names.index(schema.label),
                delim=dialect.delim_byte,
                quote=dialect.quote_byte,
                escape=dialect.escape_byte,
                nulls=tuple(v.encode() for v in schema.null_values),
                decimal=ord(dialect.decimal),
            )
    return total


def _assert_same(path, **kw) -> dict:
    """The compiled pass and the reference agree on every column's counts and type."""
    _, inputs, pieces = _planned(path, **kw)
    dialect = csv_source.plan_dialect(inputs.options)
    reference = _reference_tallies(inputs, dialect)
    names = inputs.schema.names
    expected = {n: t.type() for n, t in zip(names, reference, strict=True)}
    assert csv_source.all_row_types(inputs.sources, inputs.schema, dialect) == expected
    assert csv_source.type_pass(pieces, inputs.schema, dialect, threads=2) == expected
    if not dialect.skip_initial_space:  # that dialect is read by the reference itself
        compiled = _compiled_tallies(inputs, pieces, dialect)
        assert dict(zip(names, compiled, strict=True)) == dict(zip(names, reference, strict=True))
        # What the tasks count as they read (the parser's own counting where its fast path
        # reads a block): the same counts, code for code.
        assert (
            _read_counts(inputs, pieces, dialect).tolist()
            == _compiled_counts(inputs, pieces, dialect).tolist()
        )
    return expected


def _read_counts(inputs, pieces, dialect) -> np.ndarray:
    """The type counts of the tasks' reading (``read_piece(count_types=True)``)."""
    schema = inputs.schema
    total = csv_types.new_tally(len(schema.columns))
    for piece in pieces:
        for batch in csv_source.read_piece(
            piece, schema, block_bytes=4096, dialect=dialect, count_types=True
        ):
            total += batch.type_counts
    return total


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_types_on_the_crafted_corpus(tmp_path, case):
    text, shard_kw, _ = CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_bytes(text.encode())
    _assert_same(path, **{"label": LABELS.get(case, "label"), **shard_kw})


@pytest.mark.parametrize("case", sorted(ENCODED))
def test_same_types_on_other_encodings(tmp_path, case):
    text, encoding = ENCODED[case]
    path = tmp_path / f"{case}.csv"
    path.write_bytes(text.encode(encoding))
    _assert_same(path, encoding=encoding)


@pytest.mark.parametrize("name", ["penguins.csv", "penguins-raw.csv"])
def test_same_types_on_palmerpenguins(name):
    path = importlib.resources.files("palmerpenguins") / "data" / name
    types = _assert_same(path, label="species" if name == "penguins.csv" else "Species")
    if name == "penguins.csv":
        assert types["bill_length_mm"] == "float" and types["year"] == "int"


def test_same_types_on_a_quoted_multiline_file_in_pieces(tmp_path):
    path = tmp_path / "tweets.csv"
    path.write_text(quoted_text_csv(3000))
    types = _assert_same(path)
    assert types == {
        "id": "int",
        "user": "string",
        "text": "string",
        "retweets": "int",
        "label": "int",
    }


# --------------------------------------------------------------------------------------------
# Random adversarial files
# --------------------------------------------------------------------------------------------

_VALUES = {
    "int": ["0", "7", "-3", "42", "9223372036854775807", "-9223372036854775808", " 5", "6\t"],
    "float": ["1.5", "-0.25", ".5", "5.", "1e+05", "2E-3", "inf", "-Infinity", "NaN", " 3.0 "],
    "bool": ["true", "False", "TRUE", "false"],
    "odd": [
        "07919", "+5", "+1.5", "9223372036854775808", "-9223372036854775809",
        "18446744073709551616", "00", "-01", "InF", "infinit", "1e", "1e+", ".", "-", "e5",
        "1.2.3", "0x1F", "tru", "true ", " true", "98115-4820", "K1A 0B1", "1,5", "1e39",
        "-1e-50", "1" * 40, "0." + "0" * 50 + "1", "N/A", "null", "NULL", "NA", "", "-",
        "é", "日本", "1 2",
    ],
}  # fmt: skip


def _field(rng: random.Random, value: str, quote: str | None, escape: str | None, delim: str):
    """``value`` written as a CSV field, sometimes quoted, with dialect-specific oddities."""
    roll = rng.random()
    if quote and (roll < 0.3 or delim in value or quote in value or "\n" in value):
        inner = value.replace(quote, quote * 2)
        if escape and rng.random() < 0.3:
            inner = value.replace(quote, escape + quote)
        text = quote + inner + quote
        if rng.random() < 0.05:
            text += rng.choice(["x", "5", quote, "  "])  # text after the closing quote
        return text
    if escape and rng.random() < 0.05:
        return escape + value
    if quote and rng.random() < 0.02:
        return value + quote + "z"  # a quote inside an unquoted field is text
    return value


def _random_file(
    rng: random.Random, rows: int, delim: str, quote, escape, decimal: str = "."
) -> str:
    families = [rng.choice(["int", "float", "bool", "int", "float"]) for _ in range(4)]
    lines = [delim.join(["a", "b", "c", "label", "d"])]
    for _ in range(rows):
        fields = []
        for fam in families:
            pool = _VALUES["odd"] if rng.random() < 0.02 else _VALUES[fam]
            value = rng.choice(pool)
            if decimal != "." and rng.random() < 0.9:
                value = value.replace(".", decimal)
            fields.append(_field(rng, value, quote, escape, delim))
        label = rng.choice(["0", "1", "1", "1", "", "NA"])
        fields.insert(3, _field(rng, label, quote, escape, delim))
        roll = rng.random()
        if roll < 0.01:
            fields.append("extra")  # wrong field count
        elif roll < 0.02:
            fields.pop()
        elif roll < 0.03 and quote:
            fields[4] = quote + "two\nlines, one field" + quote
        elif roll < 0.035:
            fields[4] = "bare\rcarriage"
        elif roll < 0.04:
            lines.append("")  # a blank line
        lines.append(delim.join(fields))
    end = "\r\n" if rng.random() < 0.3 else "\n"
    return end.join(lines) + (end if rng.random() < 0.8 else "")


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    "dialect",
    [
        {},
        {"delimiter": ";"},
        {"delimiter": "\t"},
        {"escape_char": "\\"},
        {"quote_char": ""},
        {"null_values": ("", "-", "0")},
        {"delimiter": ";", "decimal": ","},
    ],
    ids=["default", "semicolon", "tab", "escape", "no-quotes", "null-words", "decimal-comma"],
)
def test_same_counts_on_random_adversarial_files(tmp_path, monkeypatch, seed, dialect):
    monkeypatch.setattr(csv_source_hooks, "SAMPLE_BYTES", 8192)  # invalid UTF-8 after the sample
    rng = random.Random(seed)
    delim = dialect.get("delimiter", ",")
    quote = dialect.get("quote_char", '"') or None
    escape = dialect.get("escape_char")
    text = _random_file(rng, 1500, delim, quote, escape, dialect.get("decimal", "."))
    path = tmp_path / "random.csv"
    data = text.encode()
    if seed % 4 == 3:  # a record with an invalid UTF-8 byte (and the right field count)
        cut = data.index(b"\n", len(data) // 2) + 1
        bad = delim.join(["7", "8", "x\udcff", "1", "9"]).encode("utf-8", "surrogateescape")
        data = data[:cut] + bad + b"\n" + data[cut:]
    path.write_bytes(data)
    _assert_same(path, **dialect)


def test_classify_block_codes():
    """The codes of single fields, as the module docstring lists them."""
    tally = csv_types.new_tally(2)
    block = (
        b'1,l\n07919,l\n+5,l\n18446744073709551616,l\n1e39,l\n-1e-50,l\n"2.5",l\n'
        b'"NA",l\ntrue,l\n" true",l\nx,\n'
    )
    rows, rejected = csv_types.classify_block(
        block, tally, label=1, delim=44, quote=34, escape=-1, nulls=(b"", b"NA")
    )
    assert (rows, rejected) == (10, 1)  # the last row has no label
    found = {csv_types.describe(c): int(n) for c, n in enumerate(tally[0]) if n}
    assert found == {
        "INT": 1,
        "INT|LEADING_ZERO": 1,
        "INT|BEYOND_INT64": 2,
        "FLOAT|F32_OVERFLOW": 1,
        "FLOAT|F32_UNDERFLOW": 1,
        "FLOAT": 1,
        "missing": 1,
        "BOOL": 1,
        "TEXT": 1,
    }


# --------------------------------------------------------------------------------------------
# The reproductions, with the default options
# --------------------------------------------------------------------------------------------


def test_default_options_type_by_all_rows_and_reject_nothing(tmp_path):
    """Issue 14, case 2 with the DEFAULT options: a zip column numeric for 180,000 rows
    and then ``98115-4820``; a fee ``0`` and then ``45.12``; R's ``1e+05`` among ints;
    zip codes with leading zeros; an id beyond int64. No row is rejected, and every value
    reads back exactly as pandas reads it (cut into pieces read by 2 processes)."""
    n = 180_000  # 4.5 MiB: the last rows lie beyond the sample
    rows = ["zip,fee,count,code,id,label"]
    rows += [
        f"{10000 + i % 89999},0,{i % 1000},{'0' if i % 2 else '1'}{i % 9999:04d},{i},{i % 2}"
        for i in range(n)
    ]
    rows += [
        "98115-4820,45.12,1e+05,07919,18446744073709551616,1",
        "K1A 0B1,0,7,00501,12,0",
    ]
    path = tmp_path / "late.csv"
    path.write_text("\n".join(rows) + "\n")
    assert path.stat().st_size > 4 * 1024 * 1024  # beyond the 4 MB sample
    meta = _compare(
        path,
        tmp_path / "ds",
        {"label": "label", "processes": 2, "task_bytes": 1 << 20},
        {},
    )
    assert meta["rows_rejected"] == 0 and meta["rows_read"] == n + 2
    types = _types(meta)
    assert (types["zip"], types["fee"], types["count"], types["code"], types["id"]) == (
        "string",
        "float",
        "float",
        "string",
        "string",
    )
    config = sharding.ShardConfig(sources=(str(path),), output=str(tmp_path / "x"), label="label")
    assert config.infer_types == "all"
    plan = build_plan(config)  # planning reads the sample only: its types, checked by the tasks
    assert plan.options[plan_options.VERIFY_TYPES_OPTION] == {"forced": []}
    assert plan.schema.column("zip").type == "int"
