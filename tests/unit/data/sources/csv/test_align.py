"""Pieces that find their own records when read (sources.csv.align): the records that begin in
a piece, from a start guessed with the quote state machine (or known), read past its end."""

from __future__ import annotations

import csv
import io
import itertools
import random

from helpers import random_quoted_csv
from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import Schema
from shardtrain.data.sources.base import Piece, SourceFile, plan_pieces
from shardtrain.data.sources.csv import align
from shardtrain.data.sources.csv.align import (
    GUESS_BYTES,
    PieceExtent,
    cut_pieces,
    guess_record_start,
    iter_record_blocks,
)


def _schema(*names: str) -> Schema:
    return Schema.from_dict(
        {"columns": [{"name": n, "type": "string"} for n in names], "label": names[-1]}
    )


def _read(piece: Piece, schema: Schema, dialect: CsvDialect, **kw) -> tuple[bytes, PieceExtent]:
    extent = PieceExtent()
    blocks = iter_record_blocks(piece, schema, 1000, dialect, extent=extent, **kw)
    return b"".join(bytes(b.data) for b in blocks), extent


def test_pieces_read_the_records_that_begin_in_them(tmp_path):
    """Cut at arbitrary bytes, the pieces of a file full of quoted line breaks, commas and
    quotes each read whole records from a record start past their end, stop where the next
    one begins, and together read the file's records once each."""
    rng = random.Random(2)
    data = b"id,text,flag\r\n" + random_quoted_csv(rng, 3000)
    path = tmp_path / "q.csv"
    path.write_bytes(data)
    pieces = plan_pieces([SourceFile(str(path), len(data), "v")], 4096)
    dialect = CsvDialect(delimiter=",")
    schema = _schema("id", "text", "flag")
    read = [_read(p, schema, dialect) for p in pieces]
    extents = [e for _, e in read]
    assert extents[0].first == 0 and extents[-1].stop == len(data)
    for a, b in itertools.pairwise(extents):
        assert a.stop == b.first
    for piece, (text, extent) in zip(pieces, read, strict=True):
        assert piece.start <= extent.first and (text == b"" or extent.first < piece.end)
        assert extent.stop is not None and extent.stop >= piece.end
        begin = extent.first if piece.start else data.index(b"\n") + 1  # after the header
        assert text == data[begin : extent.stop]
    rows = [r for text, _ in read for r in csv.reader(io.StringIO(text.decode(), newline=""))]
    assert rows == list(csv.reader(io.StringIO(data.decode(), newline="")))[1:]
    # Some nominal starts fell inside records (quoted line breaks included).
    assert [e.first for e in extents] != [p.start for p in pieces]


def test_without_quoting_a_piece_begins_at_the_next_line(tmp_path):
    data = b"a,b\n" + b"".join(b'%d,"x\n' % i for i in range(2000))
    path = tmp_path / "plain.csv"
    path.write_bytes(data)
    pieces = plan_pieces([SourceFile(str(path), len(data), "v")], 1000)
    dialect = CsvDialect(delimiter=",", quote_char="")
    extents = [_read(p, _schema("a", "b"), dialect)[1] for p in pieces]
    for piece, extent in zip(pieces[1:], extents[1:], strict=True):
        assert extent.first is not None and data[extent.first - 1] == ord("\n")
        assert data.rfind(b"\n", 0, extent.first - 1) < piece.start
    for a, b in itertools.pairwise(extents):
        assert a.stop == b.first


def test_the_guess_inside_a_quoted_field_that_spans_lines(tmp_path):
    """A start inside a quoted multi-line field whose next line looks like a record of the
    right width: the quote in the middle of an unquoted field gives the wrong reading away."""
    rows = b"".join(b'%d,"Thanks!\nRegards, Bob",0\n%d,x,1\n' % (i, i) for i in range(20))
    data = b"id,text,label\n" + rows
    head = data.index(b"Regards")
    f = io.BytesIO(data)
    dialect = CsvDialect(delimiter=",")
    assert guess_record_start(f, head, 3, dialect) == data.index(b"0,x")
    # Outside quotes, at a line start: the record starts there.
    at = data.index(b"3,x")
    assert guess_record_start(f, at, 3, dialect) == at
    # Inside an unquoted field: the next line.
    assert guess_record_start(f, at + 1, 3, dialect) == data.index(b'4,"', at)


def _long_field_csv(inner_lines: int) -> tuple[bytes, int]:
    """A file with one quoted field spanning ``inner_lines`` lines that look like records of
    the right width; returns it and the start of the record after that field."""
    inner = b"".join(b"%d,inner,1\n" % i for i in range(inner_lines))
    data = b'id,text,label\n0,a,1\n1,"start\n' + inner + b'end",0\n2,after,1\n'
    return data, data.index(b"2,after")


def test_a_guess_can_be_wrong_and_a_known_start_is_exact(tmp_path):
    """A quoted field longer than the guess looks at, its lines shaped like records: the
    guess takes them for records (the sharder finds it out: sharding.alignment); a known
    start reads the piece right."""
    data, after = _long_field_csv(GUESS_BYTES // 10)
    assert data.index(b"end") - data.index(b"start") > GUESS_BYTES
    path = tmp_path / "long.csv"
    path.write_bytes(data)
    dialect = CsvDialect(delimiter=",")
    schema = _schema("id", "text", "label")
    cut = data.index(b"start") + 1000
    piece = Piece(str(path), cut, len(data))
    wrong, extent = _read(piece, schema, dialect)
    assert wrong.count(b",inner,1\n") > 1000  # the lines of the field, taken for records
    assert extent.first is not None and extent.first < after and extent.stop == len(data)
    right, extent = _read(piece, schema, dialect, known_start=after)
    assert (right, extent.first, extent.stop) == (b"2,after,1\n", after, len(data))
    # A known start at or after the piece's end: the piece owns no record.
    nothing, extent = _read(Piece(str(path), cut, cut + 10), schema, dialect, known_start=after)
    assert (nothing, extent.first, extent.stop) == (b"", after, after)
    # The piece before it reads the long record past its end, to where that one begins.
    text, extent = _read(Piece(str(path), 0, cut), schema, dialect)
    assert extent.stop == after and text.endswith(b'end",0\n')


def test_a_transcoded_piece_finds_its_records_in_the_source_bytes(tmp_path):
    text = "id,text,label\n" + "".join(f'{i},"ソ表\n{i}",東京\n' for i in range(500))
    data = text.encode("cp932")
    path = tmp_path / "sjis.csv"
    path.write_bytes(data)
    dialect = CsvDialect(delimiter=",", encoding="cp932")
    schema = _schema("id", "text", "label")
    pieces = plan_pieces([SourceFile(str(path), len(data), "v")], 997)
    read = [_read(p, schema, dialect) for p in pieces]
    for a, b in itertools.pairwise([e for _, e in read]):
        assert a.stop == b.first
    assert b"".join(t for t, _ in read).decode() == text.split("\n", 1)[1]


def test_cut_pieces_reads_nothing():
    """Gzip files whole, a file in an encoding that cannot be cut in one piece, empty pieces
    dropped: from the pieces alone (these files do not exist)."""
    pieces = [
        Piece("/none/a.csv", 0, 10),
        Piece("/none/a.csv", 10, 20),
        Piece("/none/b.csv.gz", 0, 50, gzip=True),
        Piece("/none/c.csv", 0, 0),
    ]
    assert cut_pieces(pieces, CsvDialect(delimiter=",")) == pieces[:3]
    utf16 = CsvDialect(delimiter=",", encoding="utf-16")
    assert cut_pieces(pieces, utf16) == [Piece("/none/a.csv", 0, 20), pieces[2]]
    assert align.MAX_RECORD_BYTES > GUESS_BYTES
