"""Record alignment: byte-range pieces cut at record starts (never inside a quoted field, which
may hold line breaks), and a piece read in blocks of whole records.

Whether a byte is inside quotes depends on everything before it; the quote state machine
(:mod:`shardtrain.kernels.csv_records`) reads the bytes once, skipping stretches without a
quote or escape character in bulk.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import Schema, parse_header
from shardtrain.data.sources.base import Piece, open_source
from shardtrain.data.sources.csv.listing import decode_errors, open_text
from shardtrain.errors import DataError
from shardtrain.kernels import csv_records

#: Bytes read at once by :func:`align_pieces`.
ALIGN_READ_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Alignment:
    """Pieces cut at record starts, and the record starts found for them.

    Attributes:
        pieces: the aligned pieces, none empty.
        record_starts: per URI cut into several pieces, ``(offset, start)`` for each boundary
            offset: the first record start at or after it (a stored plan keeps them, so a
            later run over the same files need not read them again).
    """

    pieces: list[Piece]
    record_starts: dict[str, tuple[tuple[int, int], ...]]


def align_pieces(
    pieces: list[Piece],
    dialect: CsvDialect,
    *,
    known: Mapping[str, Mapping[int, int]] | None = None,
) -> Alignment:
    """Move each boundary between two pieces of one file to the first record starting at or
    after it, so that no piece boundary splits a record -- a quoted field with line breaks
    included -- and drop pieces left empty.

    Whether a byte is inside quotes depends on everything before it, so a file cut into
    several pieces is read once here, from its start, with the quote state machine
    (:mod:`shardtrain.kernels.csv_records`). Stretches without a quote or escape character
    (found at memchr speed) are skipped in bulk: on unquoted data the cost is reading the file
    (measured in ``benchmarks/RESULTS.md``). Without quoting (``--quote-char ''``) a boundary
    moves to the next line start without reading more than that line.

    Files in another encoding are cut the same way when the dialect is
    :attr:`~shardtrain.data.csv_dialect.CsvDialect.cuttable` (latin-1, cp1252, Shift_JIS/cp932
    with the usual delimiters...: the scan runs on the source bytes, and each piece is
    transcoded on its own); otherwise (UTF-16, a ``|`` delimiter in Shift_JIS) their pieces
    merge into one.

    ``known`` gives record starts already found (per URI, offset -> start: a stored plan of
    the same files): a file all of whose offsets it holds is not read.
    """
    by_file: dict[str, list[Piece]] = {}
    for piece in pieces:
        by_file.setdefault(piece.uri, []).append(piece)
    out: list[Piece] = []
    found: dict[str, tuple[tuple[int, int], ...]] = {}
    for uri, group in by_file.items():
        if len(group) == 1 or group[0].gzip:
            out.extend(group)
            continue
        if not dialect.cuttable:
            out.append(Piece(uri, group[0].start, group[-1].end, group[0].gzip))
            continue
        offsets = [p.start for p in group[1:]]
        recalled = (known or {}).get(uri, {})
        if all(o in recalled for o in offsets):
            bounds = [recalled[o] for o in offsets]
        else:
            bounds = _record_starts_after(uri, offsets, dialect)
        found[uri] = tuple(zip(offsets, bounds, strict=True))
        starts = [group[0].start, *bounds]
        ends = [*bounds, group[-1].end]
        out.extend(Piece(uri, a, b) for a, b in zip(starts, ends, strict=True) if b > a)
    return Alignment(out, found)


def _record_starts_after(uri: str, offsets: list[int], dialect: CsvDialect) -> list[int]:
    """For each offset (ascending), the first record start at or after it (or the file size)."""
    delim, quote, escape = dialect.delim_byte, dialect.quote_byte, dialect.escape_byte
    special = dialect.special_bytes
    out: list[int] = []
    with open_source(uri, gzip=False) as f:
        if not special:  # no quoting: a record is a line; only the line at each offset is read
            for offset in offsets:
                f.seek(offset - 1)
                out.append(offset - 1 + len(f.readline()))
            return out
        pos, state = 0, csv_records.RECORD_START  # the state before byte `pos`
        chunk, chunk_pos = b"", 0  # chunk holds bytes [chunk_pos, chunk_pos + len(chunk))
        for offset in offsets:
            while True:
                if pos >= chunk_pos + len(chunk):
                    chunk_pos += len(chunk)
                    chunk = f.read(ALIGN_READ_BYTES)
                    if not chunk:  # the rest of the file is one record
                        return out + [pos] * (len(offsets) - len(out))
                if pos < offset:  # bring the state to the offset
                    j = min(offset, chunk_pos + len(chunk)) - chunk_pos
                    i, state = _skip(
                        chunk, pos - chunk_pos, j, state, delim, quote, escape, special
                    )
                    pos = chunk_pos + i
                    continue
                if state == csv_records.RECORD_START:
                    break
                i, state = csv_records.advance(  # run to the end of the record
                    chunk,
                    state,
                    delim=delim,
                    quote=quote,
                    escape=escape,
                    position=pos - chunk_pos,
                    stop_at_record=True,
                )
                pos = chunk_pos + i
            out.append(pos)
    return out


def _skip(
    chunk: bytes, i: int, j: int, state: int, delim: int, quote: int, escape: int, special: bytes
) -> tuple[int, int]:
    """The state after ``chunk[i:j]``; runs without special bytes are skipped in bulk."""
    outside = state in (csv_records.RECORD_START, csv_records.FIELD_START, csv_records.IN_FIELD)
    if outside and not any(chunk.find(c, i, j) >= 0 for c in special):
        if j == i:
            return j, state
        last = chunk[j - 1]
        if last == 0x0A:
            return j, csv_records.RECORD_START
        return j, csv_records.FIELD_START if last == delim else csv_records.IN_FIELD
    view = np.frombuffer(chunk, dtype=np.uint8, count=j)
    return csv_records.advance(view, state, delim=delim, quote=quote, escape=escape, position=i)


#: The longest record the reader accepts: a quoted field left open (a missing closing quote)
#: would otherwise make the rest of the file one record, held in memory.
MAX_RECORD_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class RecordBounds:
    """The records of a block that holds quotes (:func:`csv_records.record_bounds`): where
    each starts and ends, and the line of the block (0-based) it starts on."""

    starts: np.ndarray
    ends: np.ndarray
    first_lines: np.ndarray


@dataclass(frozen=True)
class RecordBlock:
    """Whole data records of a piece, as :func:`iter_record_blocks` cuts them.

    Attributes:
        data: the records' bytes.
        bounds: the records' bounds, when cutting the block needed them (it holds quotes).
        unquoted: the block is known to hold no quote or escape character: its records are
            its lines. Neither this nor ``bounds``: not known (the piece's last record).
    """

    data: bytes
    bounds: RecordBounds | None = None
    unquoted: bool = False


def iter_record_blocks(
    piece: Piece, schema: Schema, block_bytes: int, dialect: CsvDialect
) -> Iterator[RecordBlock]:
    """Yield blocks of whole data records owned by the piece (after the header, if it has
    one), each with what cutting it found out about its quotes (:class:`RecordBlock`).

    Piece boundaries are record starts (:func:`align_pieces`). Lines are not counted here:
    :func:`~shardtrain.data.sources.csv.parse.read_piece` adds up the line counts that
    parsing finds anyway.

    Raises:
        DataError: a record longer than :data:`MAX_RECORD_BYTES` (an unclosed quote).
    """
    special = dialect.special_bytes
    delim, quote, escape = dialect.delim_byte, dialect.quote_byte, dialect.escape_byte

    def scan(data: bytes, state: int, position: int = 0, stop: bool = False) -> int:
        """The quote state after ``data[position:]`` (or after its first record end)."""
        return csv_records.advance(
            data,
            state,
            delim=delim,
            quote=quote,
            escape=escape,
            position=position,
            stop_at_record=stop,
        )[1]

    # A piece of a file in another encoding is transcoded on its own: the stream holds the
    # UTF-8 text of its bytes only, so it needs no seek and no end.
    transcoded = not dialect.utf8
    ranged = transcoded and not piece.gzip
    with (
        decode_errors(piece.uri, dialect),
        open_text(
            piece.uri,
            gzip=piece.gzip,
            dialect=dialect,
            block_size=block_bytes,
            start=piece.start if ranged else 0,
            end=piece.end if ranged else None,
        ) as f,
    ):
        pos = piece.start
        if piece.start == 0 and dialect.header:
            header = f.readline()
            pos = len(header)
            line = header.rstrip(b"\r\n")
            names = parse_header(line, piece.uri, dialect) if line.strip() else []
            if names != schema.names:
                raise DataError(
                    f"{piece.uri}: the header differs from the first source's "
                    f"({', '.join(names[:6])}, ... vs {', '.join(schema.names[:6])}, ...)"
                )
        elif piece.start > 0 and not ranged:
            f.seek(piece.start)
        end = math.inf if piece.gzip or transcoded else piece.end
        carry = b""  # the start of a record that begins at `pos` but is not complete yet
        carry_state: int | None = None  # the quote state after `carry`, once scanned
        if piece.start == 0 and not dialect.header:
            carry = f.read(3)
            if carry == b"\xef\xbb\xbf":  # a byte-order mark is not data
                carry, pos = b"", pos + 3
        while True:
            want = block_bytes if end == math.inf else int(min(block_bytes, end - pos - len(carry)))
            chunk = f.read(want) if want > 0 else b""
            if not chunk:
                if carry:  # the last record, without a trailing newline
                    yield RecordBlock(carry)
                return
            if len(carry) > MAX_RECORD_BYTES:
                raise DataError(
                    f"{piece.uri}: a record starting at byte {pos:,} is longer than "
                    f"{MAX_RECORD_BYTES >> 20} MiB: a quoted field that is never closed? "
                    "(or the wrong --quote-char/--escape-char)"
                )
            if special and (
                carry_state is not None
                or any(chunk.find(c) >= 0 for c in special)
                or any(carry.find(c) >= 0 for c in special)
            ):
                data = carry + chunk
                # Only the new bytes can end a carried record: scan them alone (a record longer
                # than a block is then scanned once, not once per block).
                state = csv_records.RECORD_START
                if carry_state is not None:
                    state = scan(data, carry_state, len(carry), stop=True)
                if state != csv_records.RECORD_START:  # no record end yet: state at data's end
                    carry_state, carry = state, data
                    continue
                starts, ends, first_lines, cut, _ = csv_records.record_bounds(
                    data, delim=delim, quote=quote, escape=escape, at_eof=False
                )
                if cut == 0:
                    carry_state = scan(data, csv_records.RECORD_START)
                    carry = data
                    continue
                carry_state = None
                complete: bytes = data[:cut]
                carry = data[cut:]
                yield RecordBlock(complete, bounds=RecordBounds(starts, ends, first_lines))
            else:
                nl = chunk.rfind(b"\n")
                if nl < 0:
                    carry += chunk
                    continue
                # One copy of the block's bytes: the carried record start + the chunk up to
                # its last newline (bytes + memoryview concatenates without slicing first).
                complete = carry + memoryview(chunk)[: nl + 1]
                carry = chunk[nl + 1 :]
                yield RecordBlock(complete, unquoted=True)
            pos += len(complete)
