"""Real and adversarial CSV files, sharded and read back Example by Example, against pandas.

Each case is one file and the options a user would give; the reference is what
``pandas.read_csv`` reads with the equivalent options (every value as text, the same null
words), converted to the column types the sharder chose. For every case:

* accepted + rejected == the data rows pandas reads; no row is invented;
* the accepted Examples are exactly the reference rows whose values fit their column types
  (as a multiset, value by value: ints exact, floats as float32, strings byte for byte,
  missing values absent);
* types the issue names (codes, huge ints, R's ``1e+05``) come out as documented.

Small ``task_mb``/``block_mb`` cut the larger files into many pieces and blocks, so piece and
block boundaries fall inside quoted fields (issue 14).
"""

from __future__ import annotations

import collections
import importlib.resources
import io
import json
import random
import re

import numpy as np
import pandas as pd
import pytest

from csv_corpus import CASES, ENCODED, LABELS, _compare, _quote, _shard, _types
from helpers import european_export_csv, pandas_examples, read_examples
from helpers import quoted_text_csv as _tweets
from shardtrain.data.schema import DEFAULT_NULL_VALUES
from shardtrain.data.sources import csv as csv_source
from shardtrain.data.sources.csv import align as csv_align
from shardtrain.data.sources.csv import source as csv_source_hooks
from shardtrain.errors import DataError


@pytest.mark.parametrize("name", ["penguins.csv", "penguins-raw.csv"])
def test_palmerpenguins(tmp_path, name):
    path = importlib.resources.files("palmerpenguins") / "data" / name
    label = "species" if name == "penguins.csv" else "Species"
    meta = _compare(path, tmp_path / "ds", {"label": label}, {}, expect_rejected=0)
    assert meta["rows_read"] == 344
    if name == "penguins.csv":
        assert _types(meta)["bill_length_mm"] == "float" and _types(meta)["year"] == "int"


# --------------------------------------------------------------------------------------------
# Crafted files: one per failure class of issue 14, and the usual suspects
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_crafted_file(tmp_path, case):
    text, shard_kw, pandas_kw = CASES[case]
    path = tmp_path / f"{case}.csv"
    path.write_bytes(text.encode())
    meta = _compare(
        path, tmp_path / "ds", {"label": LABELS.get(case, "label"), **shard_kw}, pandas_kw
    )
    types = _types(meta)
    if case == "r_export":
        assert (types["count"], types["fee"], types["zip"]) == ("float", "float", "string")
    if case == "huge_ints":
        assert types["id"] == "string" and types["small"] == "int"
    if case == "quoted_everything":
        assert types["a"] == "int" and types["b"] == "int"
    if case == "decimal_comma":  # 1.5 is text when the decimal mark is a comma, as in pandas
        assert (types["fee"], types["rate"], types["code"]) == ("float", "float", "string")
    if case == "r_write_csv2":
        assert (types["fee"], types["big"], types["flag"]) == ("float", "float", "bool")
    if case == "excel_de_thousands":  # 1.234,50 is no number: the column stays text
        assert (types["Betrag"], types["Anteil"], types["Datum"]) == ("string", "float", "string")
    if case == "decimal_comma_quoted_tab":
        assert types["fee"] == "float"


@pytest.mark.parametrize("case", sorted(ENCODED))
def test_encodings(tmp_path, case):
    text, encoding = ENCODED[case]
    path = tmp_path / f"{case}.csv"
    path.write_bytes(text.encode(encoding))
    _compare(
        path, tmp_path / "ds", {"label": "label", "encoding": encoding}, {"encoding": encoding}
    )


def test_one_megabyte_fields(tmp_path):
    rng = random.Random(5)
    big = "".join(rng.choice('ab, "\n') for _ in range(1 << 20))
    text = f"id,blob,label\n1,{_quote(big)},x\n2,small,y\n3,{_quote(big[::-1])},x\n"
    path = tmp_path / "big.csv"
    path.write_text(text)
    _compare(path, tmp_path / "ds", {"label": "label", "block_bytes": 64 * 1024}, {})


@pytest.mark.parametrize("block_bytes", [11_000, 100_000])
def test_piece_and_block_boundaries_inside_quoted_fields(tmp_path, block_bytes):
    """A tweet-like file with a free-text column (newlines, commas, quotes in ~10% of rows),
    cut into 64 KiB pieces and small blocks: every boundary the plan places is a record
    start, and every row comes back exactly."""
    path = tmp_path / "tweets.csv"
    path.write_text(_tweets(15000))
    assert path.stat().st_size > 8 * 64 * 1024
    meta = _compare(
        path,
        tmp_path / "ds",
        {
            "label": "label",
            "task_bytes": 64 * 1024,
            "block_bytes": block_bytes,
            "processes": 2,
            "min_shards": 16,
        },
        {},
    )
    assert meta["rows_read"] == 15000
    plan_pieces = [p for t in meta_plan_tasks(tmp_path / "ds") for p in t["pieces"]]
    assert len(plan_pieces) > 4
    # The pieces tile the file.
    assert [p["end"] for p in plan_pieces[:-1]] == [p["start"] for p in plan_pieces[1:]]
    _assert_read_chained(tmp_path / "ds", path.read_bytes(), len(plan_pieces))


def _assert_read_chained(ds, data: bytes, n_pieces: int) -> None:
    """Each piece of the task manifests at ``ds`` was read from a record start (of ``data``,
    the one file) and stopped where the next one began; the last at the file's end."""
    read = sorted(
        (
            p
            for f in (ds / "_tasks").glob("task-?????.json")
            for p in json.loads(f.read_text())["pieces"]
        ),
        key=lambda p: p["start"],
    )
    assert len(read) == n_pieces
    for piece in read:
        assert piece["first"] == 0 or data[piece["first"] - 1 : piece["first"]] == b"\n"
    assert [p["stop"] for p in read[:-1]] == [p["first"] for p in read[1:]]
    assert read[-1]["stop"] == len(data)


@pytest.mark.parametrize("infer_types", ["sample", "all"])
def test_european_excel_export_with_decimal_commas(tmp_path, infer_types):
    """The file found by hand (issue 14): every value was exact except the decimal-comma fee
    column, read as text (``0,0``). With ``--decimal , --encoding cp1252`` every Example
    equals what ``pandas.read_csv(sep=";", decimal=",", encoding="cp1252")`` reads, floats
    cast to float32, in byte-range pieces and blocks cut between quoted multi-line notes."""
    path = tmp_path / "export.csv"
    european_export_csv(path, 3000)
    assert b"\r\n" in path.read_bytes() and "€".encode("cp1252") in path.read_bytes()
    meta = _shard(
        path,
        tmp_path / "ds",
        label="label",
        decimal=",",
        encoding="cp1252",
        infer_types=infer_types,
        task_bytes=64 * 1024,
        block_bytes=16 * 1024,
        processes=2,
        min_shards=8,
    )
    assert len([p for t in meta_plan_tasks(tmp_path / "ds") for p in t["pieces"]]) > 2
    assert meta["options"]["csv_dialect"]["delimiter"] == ";"  # detected, never the comma
    assert meta["options"]["csv_dialect"]["decimal"] == ","
    types = _types(meta)
    assert types == {
        "id": "int",
        "name": "string",
        "zip": "string",
        "notes": "string",
        "fee": "float",
        "amount": "int",
        "ratio": "float",
        "label": "string",
    }
    frame = pd.read_csv(path, sep=";", decimal=",", encoding="cp1252", dtype={"zip": str})
    assert frame["fee"].dtype == np.float64 and frame["fee"].isna().any()
    assert frame["zip"].str.startswith("0").any()
    expected = collections.Counter(tuple(sorted(e.items())) for e in pandas_examples(frame, types))
    got = collections.Counter()
    for example in read_examples(str(tmp_path / "ds")):
        example.pop("__split__")
        got[tuple(sorted(example.items()))] += 1
    assert meta["rows_read"] == meta["rows_accepted"] == 3000
    assert got == expected


def test_decimal_comma_file_read_with_the_point_gets_a_hint(tmp_path, caplog):
    """Without ``--decimal ,`` the fee column is text, as before, and the sharder says why."""
    path = tmp_path / "export.csv"
    european_export_csv(path, 50)
    with caplog.at_level("WARNING"):
        meta = _shard(path, tmp_path / "ds", label="label", encoding="cp1252")
    assert _types(meta)["fee"] == "string"
    hints = [r.getMessage() for r in caplog.records if "--decimal ," in r.getMessage()]
    assert len(hints) == 1
    assert (
        "export.csv: column(s) 'fee', 'ratio' hold numbers written with a decimal comma"
        in (hints[0])
    )


def test_fields_padded_after_the_delimiter_get_a_hint(tmp_path, caplog):
    """A file padded after each comma (``"Usain Bolt",   "JAM",   "GOLD",    9.63``) read
    without ``--skip-initial-space`` keeps the spaces and quotes as text: the sharder says
    so once, naming the columns; with the option the values are clean and nothing is said."""
    rows = [
        f'"Runner {i}",   "{c}",   "{m}",    {9.6 + i / 100:.2f}'
        for i, (c, m) in enumerate([("JAM", "GOLD"), ("USA", "SILVER"), ("CAN", "BRONZE")] * 10)
    ]
    path = tmp_path / "sprint.csv"
    path.write_text("Name,Country,Medal,Time\n" + "\n".join(rows) + "\n")
    with caplog.at_level("WARNING"):
        _shard(path, tmp_path / "ds", label="Medal")
    hints = [r.getMessage() for r in caplog.records if "--skip-initial-space" in r.getMessage()]
    assert len(hints) == 1
    assert "sprint.csv: every value of column(s) 'Country', 'Medal' starts with spaces" in hints[0]
    caplog.clear()
    with caplog.at_level("WARNING"):
        meta = _shard(path, tmp_path / "ds2", label="Medal", skip_initial_space=True)
    assert not [r for r in caplog.records if "--skip-initial-space" in r.getMessage()]
    assert sorted(meta["label_info"]["classes"]) == ["BRONZE", "GOLD", "SILVER"]


@pytest.mark.parametrize(
    ("encoding", "words"),
    [
        # ソ and 表 end in 0x5C (a backslash byte), 東 in 0x8C: second bytes of Shift_JIS
        # characters that the record scan must never take for ASCII.
        ("cp932", "ソ表 東京、「引用」"),
        ("cp1252", "café “quoted” €"),
    ],
)
def test_files_in_other_encodings_are_cut_into_pieces(tmp_path, encoding, words):
    """A Shift_JIS (or cp1252) file is cut into byte-range pieces like a UTF-8 one: each piece
    begins at a record start found in the source bytes and is transcoded on its own, and
    every row comes back exactly (a 100 GB Excel export is not one task)."""
    path = tmp_path / "tweets.csv"
    path.write_bytes(_tweets(15000).replace("é✓", words).encode(encoding))
    shard_kw = {
        "label": "label",
        "encoding": encoding,
        "task_bytes": 64 * 1024,
        "block_bytes": 20_000,
        "processes": 2,
        "min_shards": 16,
    }
    meta = _compare(path, tmp_path / "ds", shard_kw, {"encoding": encoding})
    assert meta["rows_read"] == 15000
    pieces = [p for t in meta_plan_tasks(tmp_path / "ds") for p in t["pieces"]]
    assert len(pieces) > 4
    assert [p["end"] for p in pieces[:-1]] == [p["start"] for p in pieces[1:]]
    _assert_read_chained(tmp_path / "ds", path.read_bytes(), len(pieces))


def test_utf16_and_a_pipe_in_shift_jis_stay_one_piece_per_file(tmp_path):
    """Where an ASCII byte can be part of a character (UTF-16; ``|`` = 0x7C is a second byte
    of Shift_JIS kanji), a file is not cut: read whole by one task, still exact."""
    for name, encoding, delimiter in [("u16", "utf-16", ","), ("sjis", "cp932", "|")]:
        text = _tweets(3000).replace("é✓", "表ソ|").replace(",", delimiter)
        if delimiter == "|":
            text = text.replace("表ソ|", "表ソ")
        path = tmp_path / f"{name}.csv"
        path.write_bytes(text.encode(encoding))
        shard_kw = {
            "label": "label",
            "encoding": encoding,
            "delimiter": delimiter,
            "task_bytes": 16 * 1024,
            "min_shards": 4,
        }
        _compare(path, tmp_path / name, shard_kw, {"encoding": encoding, "sep": delimiter})
        pieces = [p for t in meta_plan_tasks(tmp_path / name) for p in t["pieces"]]
        assert len(pieces) == 1, pieces


def test_a_bad_byte_deep_in_a_piece_fails_with_one_line_naming_the_file(tmp_path):
    """Bytes that are not text in the encoding, past the schema sample, in a later piece."""
    text = "名前,値,label\n" + "東京,1,はい\n" * 40000
    data = bytearray(text.encode("cp932"))
    where = len(data) - 100
    data[where] = 0xFF  # not a Shift_JIS byte (nor a second byte after a first one)
    path = tmp_path / "bad.csv"
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"bad\.csv: not cp932 text .*at byte (\d+)\)$") as err:
        _shard(path, tmp_path / "ds", label="label", encoding="cp932", task_bytes=64 * 1024)
    # The offset in the file: the bad byte, or the first byte of the character it ends.
    assert int(re.search(r"at byte (\d+)", str(err.value)).group(1)) in (where - 1, where)


def meta_plan_tasks(out) -> list[dict]:
    import json

    return json.loads((out / "_plan.json").read_text())["tasks"]


# --------------------------------------------------------------------------------------------
# One clear error line naming the file
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kw", "message"),
    [
        (
            b"a,,label\n1,2,3\n",
            {},
            r"bad\.csv: the CSV header has an empty column name at position 2",
        ),
        (b"a,b,label,\n1,2,3,\n", {}, r"bad\.csv: .*empty column name at position 4 \(a delimiter"),
        (
            b'"";"x";"label"\n"1";1,5;"a"\n',  # R's write.csv2 with its row names
            {"decimal": ","},
            r"bad\.csv: .*empty column name at position 1 \(R's row names\? .*row.names = FALSE",
        ),
        (b"a,b,a,label\n1,2,3,4\n", {}, r"bad\.csv: duplicate column names in the CSV header: a"),
        (b"a,b,label\r1,2,3\r4,5,6\r", {}, r"bad\.csv: lines end with bare carriage returns"),
        (
            b"id;name;label2\n1;a;x\n",
            {"delimiter": ","},
            r"bad\.csv: label column 'label' not found .*inside the column name 'id;name;label2'",
        ),
        ("名前,label\n東京,はい\n".encode("cp932"), {}, r"bad\.csv: not UTF-8 text .*--encoding"),
    ],
)
def test_bad_files_fail_with_one_line_naming_the_file(tmp_path, text, kw, message):
    path = tmp_path / "bad.csv"
    path.write_bytes(text)
    with pytest.raises(DataError, match=message):
        _shard(path, tmp_path / "ds", label="label", **kw)


def test_delimiter_is_detected_and_defaults_are_documented(tmp_path):
    path = tmp_path / "semi.csv"
    path.write_text("id;name;price;label\n1;a;2,5;x\n2;b;3;y\n")
    meta = _shard(path, tmp_path / "ds", label="label")
    assert meta["options"]["csv_dialect"]["delimiter"] == ";"
    assert tuple(meta["schema"]["null_values"]) == DEFAULT_NULL_VALUES


def test_floats_beyond_float32_are_reported(tmp_path, caplog):
    path = tmp_path / "f.csv"
    path.write_text("x,y,label\n1e39,inf,a\n-1e39,3.5,b\n1.5,2.5e-50,a\n2,0e-3,b\n3,0,a\n")
    with caplog.at_level("WARNING"):
        _shard(path, tmp_path / "ds", label="label")
    messages = [r.getMessage() for r in caplog.records if "float32" in r.getMessage()]
    # At planning, by the type pass over all rows (before any shard is written)...
    planned = [m for m in messages if m.startswith("column ")]
    assert planned == [
        "column 'x': 2 value(s) beyond the float32 range will be stored as ±inf or 0 (make the "
        "column a string in --schema to keep them exact)",
        "column 'y': 1 value(s) beyond the float32 range will be stored as ±inf or 0 (make the "
        "column a string in --schema to keep them exact)",
    ]
    # ... and while sharding, with the first line of each.
    warnings = [m for m in messages if m not in planned]
    assert len(warnings) == 2, warnings
    assert "f.csv: 2 value(s) of column 'x' beyond the float32 range" in warnings[0]
    assert "line 2, 1e39" in warnings[0]
    assert "f.csv: 1 value(s) of column 'y' beyond the float32 range" in warnings[1]
    assert "line 4, 2.5e-50" in warnings[1]


def test_the_schema_sample_ends_at_a_record_end(tmp_path, monkeypatch):
    """The 4 MB sample of a large file is cut after its last complete record, not at a line
    feed inside a quoted field (which would fail the sample's parse)."""

    path = tmp_path / "tweets.csv"
    path.write_text(_tweets(3000, seed=4))
    data = path.read_bytes()
    cuts = 0
    for size in range(20_000, 30_000, 97):
        cut = data.rfind(b"\n", 0, size)
        cuts += data[:cut].count(b'"') % 2  # an odd count: that line feed is inside quotes
        monkeypatch.setattr(csv_source_hooks, "SAMPLE_BYTES", size)
        sample = csv_source.read_sample(csv_source.list_sources([str(path)])[0], size)
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        assert pd.read_csv(io.BytesIO(sample), dtype=str, keep_default_na=False).equals(
            frame.head(len(pd.read_csv(io.BytesIO(sample), dtype=str)))
        )
    assert cuts > 0  # some plain cuts would have split a quoted field
    monkeypatch.setattr(csv_source_hooks, "SAMPLE_BYTES", 25_000)
    _compare(path, tmp_path / "ds", {"label": "label"}, {})


def test_an_unclosed_quote_fails_with_one_line_not_unbounded_memory(tmp_path, monkeypatch):

    monkeypatch.setattr(csv_align, "MAX_RECORD_BYTES", 200_000)
    path = tmp_path / "open.csv"
    path.write_text('id,text,label\n1,ok,x\n2,"never closed,y\n' + "3,z,x\n" * 100_000)
    with pytest.raises(DataError, match=r"open\.csv: a record starting at byte 21 is longer"):
        _shard(path, tmp_path / "ds", label="label", block_bytes=64 * 1024)


def test_types_from_all_rows_accept_what_the_sample_did_not_show(tmp_path, monkeypatch):
    """Issue 14, case 2: a zip column numeric for the sample and then ``98115-4820``, a fee
    column ``0`` and then ``45.12``, an id that later exceeds int64. ``--infer-types
    sample`` rejects those rows (documented: bad_value, nothing changed); ``all`` (the
    default) types the columns by every row and accepts them all, exactly as pandas reads
    them."""

    monkeypatch.setattr(csv_source_hooks, "SAMPLE_BYTES", 4096)
    rows = ["zip,fee,id,label"]
    rows += [f"{10000 + i},0,{i},{i % 2}" for i in range(2000)]
    rows += ["98115-4820,45.12,18446744073709551616,1", "K1A 0B1,0,7,0"]
    path = tmp_path / "late.csv"
    path.write_text("\n".join(rows) + "\n")
    sample = _shard(path, tmp_path / "sample", label="label", infer_types="sample")
    assert _types(sample)["zip"] == "int" and sample["rows_rejected"] == 2
    meta = _compare(path, tmp_path / "all", {"label": "label", "infer_types": "all"}, {})
    assert (_types(meta)["zip"], _types(meta)["fee"], _types(meta)["id"]) == (
        "string",
        "float",
        "string",
    )
    assert meta["rows_rejected"] == 0


@pytest.mark.parametrize(
    "bad",
    [
        b'999999,"x\xff,y",1,1,extra\n',  # quoted block, not UTF-8 and a field too many
        b"999999,x\xff,1,1,extra\n",  # unquoted
        b'999999,"x\xff,y",1,1\n',  # not UTF-8 only
    ],
)
def test_a_row_that_is_not_utf8_is_one_reject_whatever_else_is_wrong(tmp_path, monkeypatch, bad):
    """Past the schema sample, a row with a byte that is not UTF-8 is rejected with its line,
    also when its field count is wrong too (Arrow then raised its row error instead of calling
    the invalid-row handler: the whole run failed, naming a line of the piece)."""

    monkeypatch.setattr(csv_source_hooks, "SAMPLE_BYTES", 4096)
    quoted = '"a, b"'
    lines = [f"{i},{quoted if i % 10 == 0 else 'plain'},{i % 7},{i % 2}" for i in range(3000)]
    data = ("id,text,n,label\n" + "\n".join(lines) + "\n").encode()
    cut = data.index(b"\n", 30_000) + 1
    path = tmp_path / "bad.csv"
    path.write_bytes(data[:cut] + bad + data[cut:])
    meta = _shard(path, tmp_path / "ds", label="label", block_bytes=11_000)
    assert (meta["rows_read"], meta["rows_rejected"]) == (3001, 1)
    line = data[:cut].count(b"\n") + 1
    (reject,) = [
        json.loads(r)
        for f in (tmp_path / "ds" / "rejects").iterdir()
        for r in f.read_text().splitlines()
    ]
    assert reject["line"] == line and reject["text"].startswith("999999,")
