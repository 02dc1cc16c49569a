"""The quote state machine: record bounds (kernels.csv_records)."""

from __future__ import annotations

import csv
import io
import random

from helpers import random_quoted_csv
from shardtrain.kernels import csv_records

COMMA, QUOTE = ord(","), ord('"')


def test_record_bounds_are_the_records_python_csv_reads():
    rng = random.Random(1)
    for _ in range(20):
        data = random_quoted_csv(rng, 50)
        starts, ends, first_lines, complete, lines = csv_records.record_bounds(
            data, delim=COMMA, quote=QUOTE, escape=csv_records.NO_BYTE
        )
        assert complete == len(data) and lines == data.count(b"\n")
        records = [data[a:b].decode() for a, b in zip(starts, ends, strict=True)]
        expected = list(csv.reader(io.StringIO(data.decode(), newline="")))
        parsed = [list(csv.reader(io.StringIO(r, newline=""))) for r in records]
        assert [p[0] if p else [] for p in parsed] == expected
        assert all(len(p) <= 1 for p in parsed)
        assert [data[:a].count(b"\n") for a in starts] == first_lines.tolist()


def test_an_open_quote_leaves_the_record_incomplete():
    data = b'1,"open\n2,b\n'
    *_, complete, _ = csv_records.record_bounds(
        data, delim=COMMA, quote=QUOTE, escape=csv_records.NO_BYTE, at_eof=False
    )
    assert complete == 0
