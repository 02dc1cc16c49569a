"""The quote state machine: record bounds and piece boundaries (kernels.csv_records)."""

from __future__ import annotations

import csv
import io
import itertools
import random

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.sources.base import Piece, SourceFile, plan_pieces
from shardtrain.data.sources.csv import align_pieces
from shardtrain.kernels import csv_records

COMMA, QUOTE = ord(","), ord('"')


def _random_csv(rng: random.Random, rows: int) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\r\n")  # quotes every field with \r or \n
    for i in range(rows):
        text = "".join(rng.choice('ab ,"\n\r') for _ in range(rng.randint(0, 12)))
        writer.writerow([i, text, rng.choice(["", "x", '"'])])
    return out.getvalue().encode()


def test_record_bounds_are_the_records_python_csv_reads():
    rng = random.Random(1)
    for _ in range(20):
        data = _random_csv(rng, 50)
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


def test_piece_boundaries_move_to_record_starts_outside_quotes(tmp_path):
    rng = random.Random(2)
    data = b"id,text,flag\n" + _random_csv(rng, 3000)
    path = tmp_path / "q.csv"
    path.write_bytes(data)
    pieces = plan_pieces([SourceFile(str(path), len(data), "v")], 4096)
    aligned = align_pieces(pieces, CsvDialect(delimiter=","))
    assert aligned[0].start == 0 and aligned[-1].end == len(data)
    for a, b in itertools.pairwise(aligned):
        assert a.end == b.start
    # Each piece parses into whole records on its own, and together they are the file.
    rows = []
    for piece in aligned:
        text = data[piece.start : piece.end].decode()
        rows.extend(csv.reader(io.StringIO(text, newline="")))
    assert rows == list(csv.reader(io.StringIO(data.decode(), newline="")))
    moved = [p for p, q in zip(pieces[1:], aligned[1:], strict=False) if p.start != q.start]
    assert moved  # some nominal boundaries fell inside records


def test_without_quoting_a_boundary_moves_to_the_next_line(tmp_path):
    data = b"a,b\n" + b"".join(b'%d,"x\n' % i for i in range(2000))
    path = tmp_path / "plain.csv"
    path.write_bytes(data)
    pieces = plan_pieces([SourceFile(str(path), len(data), "v")], 1000)
    aligned = align_pieces(pieces, CsvDialect(delimiter=",", quote_char=""))
    assert all(data[p.start - 1 : p.start] == b"\n" for p in aligned[1:])
    assert len(aligned) == len(pieces)
    assert isinstance(aligned[0], Piece)
