"""Piece boundaries moved to record starts (sources.csv.align), with the quote state machine."""

from __future__ import annotations

import csv
import io
import itertools
import random

from helpers import random_quoted_csv
from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.sources.base import Piece, SourceFile, plan_pieces
from shardtrain.data.sources.csv.align import align_pieces


def test_piece_boundaries_move_to_record_starts_outside_quotes(tmp_path):
    rng = random.Random(2)
    data = b"id,text,flag\n" + random_quoted_csv(rng, 3000)
    path = tmp_path / "q.csv"
    path.write_bytes(data)
    pieces = plan_pieces([SourceFile(str(path), len(data), "v")], 4096)
    aligned = align_pieces(pieces, CsvDialect(delimiter=",")).pieces
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
    aligned = align_pieces(pieces, CsvDialect(delimiter=",", quote_char="")).pieces
    assert all(data[p.start - 1 : p.start] == b"\n" for p in aligned[1:])
    assert len(aligned) == len(pieces)
    assert isinstance(aligned[0], Piece)
