"""The CSV corpus shared by the corpus and type-pass tests: crafted and encoded files, and the
comparison of what the sharder wrote with what pandas reads."""

from __future__ import annotations

import collections
import math
import re

import numpy as np
import pandas as pd

from helpers import read_examples
from shardtrain.data import sharding
from shardtrain.data.schema import FALSE_VALUES, TRUE_VALUES

_INT = re.compile(r"^[ \t]*-?[0-9]+[ \t]*$")


def _shard(path, out, **kw) -> dict:
    kw.setdefault("processes", 1)
    kw.setdefault("compression", "none")
    kw.setdefault("max_bad_fraction", 1.0)
    kw.setdefault("min_shards", 1)
    kw.setdefault("splits", (("train", 1.0),))
    config = sharding.ShardConfig(sources=(str(path),), output=str(out), **kw)
    return sharding.shard(config).metadata.to_dict()


def _typed(text, typ, decimal="."):
    """``text`` (pandas' string, or None) as the sharder stores a value of ``typ`` (floats
    written with the decimal mark ``decimal``); raises ValueError when it does not fit (the
    sharder then rejects the row)."""
    if text is None:
        return None
    if typ == "string":
        return text.encode()
    if typ == "int":
        if not _INT.match(text) or not -(2**63) <= int(text) < 2**63:
            raise ValueError(text)
        return int(text)
    if typ == "float":
        if decimal != ".":
            if "." in text:
                raise ValueError(text)  # 1.5 is no number with a decimal comma (pandas)
            text = text.replace(decimal, ".")
        with np.errstate(over="ignore"):
            value = np.float32(float(text))
        return "nan" if math.isnan(value) else float(value)
    if typ == "bool":
        if text not in TRUE_VALUES + FALSE_VALUES:
            raise ValueError(text)
        return int(text in TRUE_VALUES)
    raise AssertionError(typ)


def _compare(path, out, shard_kw: dict, pandas_kw: dict, *, expect_rejected: int = 0) -> dict:
    """Shard ``path``, read every Example back and compare with pandas; returns metadata."""
    meta = _shard(path, out, **shard_kw)
    schema = meta["schema"]
    types = {c["name"]: c["type"] for c in schema["columns"]}
    nulls = list(schema["null_values"])
    decimal = pandas_kw.get("decimal", ".")
    frame = pd.read_csv(
        path, dtype=str, keep_default_na=False, na_values=nulls, **pandas_kw
    ).astype(object)
    frame = frame.where(frame.notna(), None)
    assert list(frame.columns) == list(types)
    expected, unfit = collections.Counter(), 0
    for record in frame.to_dict("records"):
        try:
            row = tuple(sorted((k, _typed(v, types[k], decimal)) for k, v in record.items()))
        except ValueError:
            unfit += 1
            continue
        if record[schema["label"]] is None:
            unfit += 1  # a missing label is rejected
            continue
        expected[tuple((k, v) for k, v in row if v is not None)] += 1
    got = collections.Counter()
    for example in read_examples(str(out)):
        example.pop("__split__")
        row = []
        for k, v in example.items():
            if types[k] == "float":
                v = "nan" if math.isnan(v) else float(np.float32(v))
            row.append((k, v))
        got[tuple(sorted(row))] += 1
    assert meta["rows_read"] == len(frame), (meta["rows_read"], len(frame))
    assert meta["rows_accepted"] + meta["rows_rejected"] == meta["rows_read"]
    assert meta["rows_rejected"] == unfit == expect_rejected
    assert got == expected
    return meta


def _types(meta: dict) -> dict:
    return {c["name"]: c["type"] for c in meta["schema"]["columns"]}


# --------------------------------------------------------------------------------------------
# Real data
# --------------------------------------------------------------------------------------------


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


CASES = {
    # 1. quoted fields spanning lines
    "multiline": (
        'name,comment,rating,label\nAlice,"Thanks!\nRegards, Bob",5,yes\nDave,fine,4,yes\n',
        {},
        {},
    ),
    # 4. quoted empty numbers and quoted null words are missing, in every block
    "quoted_everything": (
        '"a","b","c","label"\n"2","","b","x"\n"3","NA","c","y"\n"4","5","","z"\n',
        {},
        {},
    ),
    "quoted_na_beside_multiline": ('a,b,label\n"NA","x\ny",1\n"",z,0\nNA,"",1\n', {}, {}),
    # 2. types: R's 1e+05 in an integer column, zip codes, fees
    "r_export": (
        "id,count,fee,zip,label\n1,100,0,07919,a\n2,1e+05,0,10001,b\n"
        "3,7,45.12,98115-4820,a\n4,8,0,K1A 0B1,b\n",
        {},
        {},
    ),
    # 3. integers beyond int64 stay exact (strings)
    "huge_ints": (
        "id,small,label\n18446744073709551616,1,a\n9223372036854775807,2,b\n"
        "-9223372036854775809,3,a\n",
        {},
        {},
    ),
    # 5. floats outside float32, a trailing comma in the data, spaces after the delimiter
    "float_range": ("x,y,label\n1e39,1e-50,a\n-1e39,3.5,b\n1.5,-0.0,a\n", {}, {}),
    "spaces_after_delimiter": (
        'a,b,c,label\n1, 3, a,x\n2, "q, r", b,y\n',
        {"skip_initial_space": True},
        {"skipinitialspace": True},
    ),
    # 6. dialects
    "semicolon": ("id;name;price;label\n1;a;2.5;x\n2;b;3;y\n", {}, {"sep": ";"}),
    "tab": ("id\tname\tprice\tlabel\n1\ta b\t2.5\tx\n2\tc,d\t3\ty\n", {}, {"sep": "\t"}),
    "pipe": ('id|name|label\n1|"a|b"|x\n2|c|y\n', {}, {"sep": "|"}),
    "escape_char": (
        'id,text,label\n1,"say \\"hi\\", ok",x\n2,plain,y\n',
        {"escape_char": "\\"},
        {"escapechar": "\\"},
    ),
    "no_header": (
        "1,a,x\n2,b,y\n3,,x\n",
        {"no_header": True, "columns": ("n", "s", "label")},
        {"header": None, "names": ["n", "s", "label"]},
    ),
    "null_values": ("a,b,label\n-,x,1\n3,-,0\nNA,y,1\n", {"null_values": ("", "-")}, {}),
    # encodings and line ends
    "bom": ("\ufeffid,name,label\n1,a,x\n2,b,y\n", {}, {}),
    "crlf": ('id,text,label\r\n1,"two\r\nlines",x\r\n2,plain,y\r\n\r\n3,last,x', {}, {}),
    "japanese_utf8": ('名前,値,ラベル\n東京,1,はい\n大阪,2,いいえ\n"京都,奈良",3,はい\n', {}, {}),
    "odd_quotes": ('a,b,label\n5" screen,"ab"cd,x\nx""y,"p""q",y\n', {}, {}),
    "blank_lines_no_final_newline": ("a,b,label\n\n1,2,x\n\n\n3,4,y", {}, {}),
    # decimal commas (European Excel, pandas decimal=",", R write.csv2)
    "decimal_comma": (
        "id;fee;rate;code;label\n1;1,5;-0,25;1.5;x\n2;0;1,5e3;2;y\n3;;,5;3;x\n4;-12,75;1E-3;4;y\n",
        {"decimal": ","},
        {"sep": ";", "decimal": ","},
    ),
    "r_write_csv2": (  # R: write.csv2(df, row.names = FALSE)
        '"id";"fee";"big";"flag";"kind";"label"\n1;1,5;1e+05;TRUE;"a";"yes"\n'
        '2;NA;-2,5e-07;FALSE;"b; c";"no"\n3;-0,25;123456,789;NA;"say ""hi""";"yes"\n',
        {"decimal": ","},
        {"sep": ";", "decimal": ","},
    ),
    "excel_de_thousands": (  # German Excel "CSV UTF-8": BOM, CRLF, thousands separators
        "\ufeffKunde;Betrag;Anteil;Datum;label\r\nMüller;1.234,50;12,5;24.11.2026;ja\r\n"
        "Schmidt;45,12;0,5;01.02.2026;nein\r\nWeiß;-3,00;100;03.03.2026;ja\r\n",
        {"decimal": ","},
        {"sep": ";", "decimal": ","},
    ),
    "decimal_comma_quoted_tab": (
        'id\tfee\tlabel\n"1"\t"0,0"\t"a"\n"2"\t"45,12"\t"b"\n"3"\t""\t"c"\n',
        {"decimal": ",", "delimiter": "tab"},
        {"sep": "\t", "decimal": ","},
    ),
}
ENCODED = {
    "shift_jis": ('名前,値,label\n東京,1,はい\n"大阪,梅田",2,いいえ\n', "cp932"),
    "latin1": ("nom,prix,label\ncafé,1.5,oui\nnaïve,2,non\n", "latin-1"),
    "cp1252": ("nom,prix,label\n“quotes”,1.5,oui\n€uro,2,non\n", "cp1252"),
    "utf16": ('a,b,label\n1,é,x\n2,"ü\nv",y\n', "utf-16"),
}
LABELS = {"japanese_utf8": "ラベル", "no_header": "label"}


def exact_pieces(pieces, dialect):
    """``pieces`` with every start inside a file moved to the first record start at or after
    it, found by reading the file from its start (as planning did before pieces found their
    own records): for tests of a pass over pieces that must not depend on a reader's guess."""
    import itertools

    from shardtrain.data.sources.base import Piece, open_source
    from shardtrain.data.sources.csv.align import scan_record_start

    out = []
    for uri, group in itertools.groupby(pieces, key=lambda p: p.uri):
        group = list(group)
        if len(group) == 1:
            out.extend(group)
            continue
        with open_source(uri, gzip=False) as f:
            starts = [0] + [scan_record_start(f, 0, p.start, dialect) for p in group[1:]]
        ends = [*starts[1:], group[-1].end]
        out.extend(Piece(uri, a, b) for a, b in zip(starts, ends, strict=True) if b > a)
    return out
