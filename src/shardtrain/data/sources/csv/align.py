"""Record alignment: which records a byte-range piece owns, found while it is read.

A piece ``[start, end)`` of a file owns the records whose first byte is in it: its reader
begins at the first record start at or after ``start`` and reads past ``end`` until the record
that straddles it is complete. Without quoting a record is a line: exact. With quoting,
whether the byte at ``start`` is inside quotes depends on everything before it, so the reader
*guesses* from the bytes there (:func:`guess_record_start`, both states tried by the quote
state machine of :mod:`shardtrain.kernels.csv_records`) and reports where it began and
stopped (:class:`PieceExtent`); once every piece is read, the sharder checks that each
piece stopped where the next one began and has the pieces after a wrong guess read again
from their true start (``shardtrain.data.sharding.alignment``). Planning reads nothing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np

from shardtrain.data.csv_dialect import CsvDialect
from shardtrain.data.schema import Schema, parse_header
from shardtrain.data.sources.base import Piece, open_source
from shardtrain.data.sources.csv.listing import decode_errors, open_text
from shardtrain.errors import DataError
from shardtrain.kernels import csv_records

#: Bytes after a piece's start that :func:`guess_record_start` reads (more when no record
#: ends in them).
GUESS_BYTES = 64 * 1024

#: Bytes read at once while scanning source bytes for a record start (transcoded files).
SCAN_READ_BYTES = 16 * 1024 * 1024


def cut_pieces(pieces: list[Piece], dialect: CsvDialect) -> list[Piece]:
    """The byte-range pieces the tasks read, as planned: boundaries stay where
    :func:`~shardtrain.data.sources.base.plan_pieces` put them (each piece finds its records
    when read), gzip files stay whole, and the pieces of a file in an encoding that is not
    :attr:`~shardtrain.data.csv_dialect.CsvDialect.cuttable` (UTF-16, a ``|`` delimiter in
    Shift_JIS) merge into one. Empty pieces are dropped. Reads nothing."""
    by_file: dict[str, list[Piece]] = {}
    for piece in pieces:
        by_file.setdefault(piece.uri, []).append(piece)
    out: list[Piece] = []
    for uri, group in by_file.items():
        if len(group) > 1 and not group[0].gzip and not dialect.cuttable:
            group = [Piece(uri, group[0].start, group[-1].end, group[0].gzip)]
        out.extend(p for p in group if p.end > p.start or p.gzip)
    return out


@dataclass
class PieceExtent:
    """Where the reading of a piece began and stopped, in bytes of the source file.

    Attributes:
        first: the record start it began at (the piece's start for a piece at a file's
            start, a whole file, or a start the plan knows).
        stop: the first record start at or after the piece's end (or the file's end):
            where the next piece of the file must begin. A gzip file: the piece's end.
    """

    first: int | None = None
    stop: int | None = None


def guess_record_start(f: IO[bytes], start: int, n_fields: int, dialect: CsvDialect) -> int:
    """The first record start at or after ``start`` (> 0) of the raw file ``f``: exact
    without quoting (the next line), else guessed.

    The guess reads the bytes from ``start`` in both states -- outside quotes, and inside a
    quoted field -- and keeps the reading that finds fewer quotes where well-formed CSV has
    none and fewer records without ``n_fields`` fields after the first record end; then the
    one with more records of ``n_fields`` fields; then outside. The two readings agree from
    the first record start they share on, so only the bytes before it decide.
    """
    if not dialect.special_bytes:  # a record is a line
        f.seek(start - 1)
        return start - 1 + len(f.readline())
    delim, quote, escape = dialect.delim_byte, dialect.quote_byte, dialect.escape_byte
    window = GUESS_BYTES
    while True:
        f.seek(start - 1)
        data = f.read(window + 1)
        prev, body = data[:1], data[1:]
        at_eof = len(body) < window
        if prev == b"\n":
            outside = csv_records.RECORD_START
        else:
            outside = csv_records.FIELD_START if prev[0] == delim else csv_records.IN_FIELD
        states = [outside] if quote == csv_records.NO_BYTE else [outside, csv_records.IN_QUOTES]
        best: tuple[int, int, int] | None = None
        guess = -1
        for state in states:
            if state == csv_records.RECORD_START:
                first, irregular, matches, mismatches = csv_records.speculate(
                    b"\n" + body,
                    state,
                    delim=delim,
                    quote=quote,
                    escape=escape,
                    n_fields=n_fields,
                )
                first -= 1
            else:
                first, irregular, matches, mismatches = csv_records.speculate(
                    body, state, delim=delim, quote=quote, escape=escape, n_fields=n_fields
                )
            if first < 0:
                continue
            score = (irregular + mismatches, -matches, 0)
            if best is None or score < best:
                best, guess = score, first
        if guess >= 0:
            return start + guess
        if at_eof:  # no record ends before the file does: the piece owns none
            return start + len(body)
        if window >= MAX_RECORD_BYTES:  # the reader then names the over-long record
            return start + len(body)
        window *= 4


def scan_record_start(f: IO[bytes], first: int, offset: int, dialect: CsvDialect) -> int:
    """The first record start at or after ``offset`` of the raw file ``f``, scanned from the
    record start ``first`` (<= ``offset``) with the quote state machine, stretches without a
    quote or escape character skipped in bulk (the file's end when no record starts there)."""
    delim, quote, escape = dialect.delim_byte, dialect.quote_byte, dialect.escape_byte
    special = dialect.special_bytes
    if not special:
        if offset == 0:
            return 0
        f.seek(offset - 1)
        return offset - 1 + len(f.readline())
    f.seek(first)
    pos, state = first, csv_records.RECORD_START  # the state before byte `pos`
    chunk, chunk_pos = b"", first  # chunk holds bytes [chunk_pos, chunk_pos + len(chunk))
    while True:
        if pos >= chunk_pos + len(chunk):
            chunk_pos += len(chunk)
            chunk = f.read(SCAN_READ_BYTES)
            if not chunk:  # the rest of the file is one record
                return pos
        if pos < offset:  # bring the state to the offset
            j = min(offset, chunk_pos + len(chunk)) - chunk_pos
            i, state = _skip(chunk, pos - chunk_pos, j, state, delim, quote, escape, special)
            pos = chunk_pos + i
            continue
        if state == csv_records.RECORD_START:
            return pos
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
    piece: Piece,
    schema: Schema,
    block_bytes: int,
    dialect: CsvDialect,
    *,
    known_start: int | None = None,
    extent: PieceExtent | None = None,
) -> Iterator[RecordBlock]:
    """Yield blocks of whole data records owned by the piece -- those whose first byte is in
    ``[piece.start, piece.end)``, after the header if it has one -- each with what cutting it
    found out about its quotes (:class:`RecordBlock`).

    A piece that starts inside a file begins at ``known_start`` (a record start the plan
    knows), else at the first record start at or after its start (:func:`guess_record_start`);
    it reads past its end until the record straddling it is complete. ``extent`` receives
    where the reading began and stopped. A piece of a file in another encoding finds both on
    the source bytes (:func:`scan_record_start` for its stop: such a piece is scanned once
    before it is transcoded), then transcodes just those bytes. Lines are not counted here:
    :func:`~shardtrain.data.sources.csv.parse.read_piece` adds up the line counts that
    parsing finds anyway.

    Raises:
        DataError: a record longer than :data:`MAX_RECORD_BYTES` (an unclosed quote).
    """
    special = dialect.special_bytes
    delim, quote, escape = dialect.delim_byte, dialect.quote_byte, dialect.escape_byte
    extent = extent if extent is not None else PieceExtent()

    def scan(data: bytes, state: int, position: int = 0, stop: bool = False) -> tuple[int, int]:
        """The position and quote state after ``data[position:]`` (or its first record end)."""
        return csv_records.advance(
            data,
            state,
            delim=delim,
            quote=quote,
            escape=escape,
            position=position,
            stop_at_record=stop,
        )

    def too_long(start: int) -> DataError:
        return DataError(
            f"{piece.uri}: a record starting at byte {start:,} is longer than "
            f"{MAX_RECORD_BYTES >> 20} MiB: a quoted field that is never closed? "
            "(or the wrong --quote-char/--escape-char)"
        )

    def find_first(f: IO[bytes]) -> int:
        if piece.start == 0 or piece.gzip:
            return piece.start
        if known_start is not None:
            return known_start
        return guess_record_start(f, piece.start, len(schema.names), dialect)

    # A piece of a file in another encoding is transcoded on its own: the stream holds the
    # UTF-8 text of its records' source bytes only, so it needs no seek and no end.
    transcoded = not dialect.utf8
    ranged = transcoded and not piece.gzip
    first, stop = piece.start, piece.end
    if ranged:
        with open_source(piece.uri, gzip=False) as raw:
            first = find_first(raw)
            stop = scan_record_start(raw, first, max(first, piece.end), dialect)
        extent.first, extent.stop = first, stop
        if stop <= first:
            return
    with (
        decode_errors(piece.uri, dialect),
        open_text(
            piece.uri,
            gzip=piece.gzip,
            dialect=dialect,
            block_size=block_bytes,
            start=first if ranged else 0,
            end=stop if ranged else None,
        ) as f,
    ):
        if not ranged:
            first = find_first(f)
            extent.first = first
        pos = first
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
        elif first > 0 and not ranged:
            if first >= piece.end:  # a record that began before the piece spans it
                extent.stop = first
                return
            f.seek(first)
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
            if chunk and pos + len(carry) + len(chunk) >= end:
                # The piece's end: its last block also holds the rest of the record that
                # straddles it, read past the end (the blocks are then those of a piece that
                # ends at that record's end).
                data = carry + chunk
                chunk += _record_tail(
                    f,
                    data,
                    carry_state,
                    len(carry),
                    scan,
                    special,
                    functools.partial(too_long, pos),
                )
            if not chunk:
                if carry:  # the last record, without a trailing newline
                    yield RecordBlock(carry)
                if not ranged:
                    extent.stop = piece.end if piece.gzip else pos + len(carry)
                return
            if len(carry) > MAX_RECORD_BYTES:
                raise too_long(pos)
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
                    state = scan(data, carry_state, len(carry), stop=True)[1]
                if state != csv_records.RECORD_START:  # no record end yet: state at data's end
                    carry_state, carry = state, data
                    continue
                starts, ends, first_lines, cut, _ = csv_records.record_bounds(
                    data, delim=delim, quote=quote, escape=escape, at_eof=False
                )
                if cut == 0:
                    carry_state = scan(data, csv_records.RECORD_START)[1]
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


#: Bytes read at once to complete the record that straddles a piece's end.
TAIL_READ_BYTES = 64 * 1024


def _record_tail(
    f: IO[bytes],
    data: bytes,
    carry_state: int | None,
    carried: int,
    scan: Callable[..., tuple[int, int]],
    special: bytes,
    too_long: Callable[[], DataError],
) -> bytes:
    """The bytes after ``data`` (a piece's bytes up to its end, the first ``carried`` of them
    a record start whose quote state after them is ``carry_state``, if scanned) up to the
    line feed that ends the record straddling the end (or the file's end): none when the
    end is a record start. ``too_long`` is raised past :data:`MAX_RECORD_BYTES`."""
    if special:
        if carry_state is None:
            state = scan(data, csv_records.RECORD_START)[1]
        else:
            state = scan(data, carry_state, carried)[1]
        if state == csv_records.RECORD_START:
            return b""
    elif not data or data.endswith(b"\n"):
        return b""
    parts = []
    size = len(data) - carried
    while True:
        more = f.read(TAIL_READ_BYTES)
        if not more:
            break
        if special:
            p, state = scan(more, state, stop=True)
            done = state == csv_records.RECORD_START
        else:
            p = more.find(b"\n") + 1
            done = p > 0
        if done:
            parts.append(more[:p])
            break
        parts.append(more)
        size += len(more)
        if size > MAX_RECORD_BYTES:
            raise too_long()
    return b"".join(parts)
