"""Which CSV files there are and how their text is opened: listing with content tags, the
planning sample, and streams transcoded to UTF-8."""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Iterator
from typing import IO, Any

from shardtrain import storage
from shardtrain.data import listing
from shardtrain.data.csv_dialect import CsvDialect, Utf8Transcoder
from shardtrain.data.sources.base import SourceFile, open_source
from shardtrain.errors import DataError, StorageError
from shardtrain.kernels import csv_records, xxh64


def list_sources(patterns: list[str]) -> list[SourceFile]:
    """Expand files and globs into source files with their size and version tag.

    Raises:
        DataError: a pattern matches nothing, or no source is given.
        StorageError: a named file is missing or unreadable.
    """
    sources = []
    for meta in listing.expand(patterns):
        version = meta.version
        if storage.is_local(meta.uri):  # mtime alone misses an edit that restores it
            version = f"{version}-{content_tag(meta.uri, meta.size)}"
        sources.append(SourceFile(uri=meta.uri, size=meta.size, version=version))
    return sources


#: Bytes of one block sampled by :func:`content_tag`.
TAG_BLOCK = 64 * 1024
#: Blocks sampled per file by :func:`content_tag`: one per 16 MiB, within these bounds.
TAG_MIN_BLOCKS, TAG_MAX_BLOCKS = 16, 64


def content_tag(path: str, size: int) -> str:
    """A cheap content check of a local file, part of its :attr:`SourceFile.version`.

    Local files carry only their mtime as a version: an edit that keeps the size and restores
    the mtime (``touch -r``, ``rsync --inplace --times``, a restored backup) would otherwise go
    unnoticed by a resumed run, which would mix rows of both contents. This is the XXH64 of
    the whole file up to ``TAG_MIN_BLOCKS`` blocks of 64 KiB, else of ``TAG_MIN_BLOCKS`` to
    ``TAG_MAX_BLOCKS`` evenly spaced blocks (the first and the last among them): a few MiB
    per file however large, about 1 ms per GB from the page cache (figures in
    ``benchmarks/RESULTS.md``). It catches every edit of a small file, and of a large one
    every edit touching a sampled block; an edit elsewhere still goes unnoticed.

    Raises:
        StorageError: the file cannot be read.
    """
    local = storage.local_path(path)
    blocks = min(TAG_MAX_BLOCKS, max(TAG_MIN_BLOCKS, size // (16 << 20)))
    try:
        with open(local, "rb", buffering=0) as f:
            if size <= blocks * TAG_BLOCK:
                data = f.read()
            else:
                last = size - TAG_BLOCK
                offsets = [last * i // (blocks - 1) for i in range(blocks)]
                data = b"".join(os.pread(f.fileno(), TAG_BLOCK, o) for o in offsets)
    except OSError as exc:
        raise StorageError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    return f"{xxh64.xxh64(data):016x}"


def read_sample(source: SourceFile, max_bytes: int, dialect: CsvDialect | None = None) -> bytes:
    """The first ``max_bytes`` of a source (decompressed, transcoded to UTF-8), cut after the
    last full line.

    Raises:
        DataError: the file is empty, binary, not text in the dialect's encoding, or ends its
            lines with bare carriage returns.
    """
    dialect = dialect or CsvDialect()
    with open_text(source.uri, gzip=source.gzip, dialect=dialect) as f:
        try:
            data = f.read(max_bytes)
        except UnicodeDecodeError as exc:
            raise DataError(f"{source.uri}: not {dialect.encoding} text ({exc.reason})") from exc
    if not data:
        raise DataError(f"{source.uri}: the file is empty")
    if b"\x00" in data[:65536]:
        hint = (
            "" if dialect.encoding.startswith("utf_16") else "; UTF-16 text needs --encoding utf-16"
        )
        raise DataError(f"{source.uri}: not a text CSV file (binary content{hint})")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark is not data
    if b"\r" in data and b"\n" not in data[: 1 << 20]:
        raise DataError(
            f"{source.uri}: lines end with bare carriage returns (old Mac line ends), which "
            "are not supported; convert them first, e.g. tr '\\r' '\\n' < IN > OUT"
        )
    if len(data) == max_bytes:
        # Cut after the last complete record: a quoted field may span the last line feeds.
        _, _, _, cut, _ = csv_records.record_bounds(
            data,
            delim=dialect.delim_byte,
            quote=dialect.quote_byte,
            escape=dialect.escape_byte,
            at_eof=False,
        )
        if cut <= 0:
            cut = data.rfind(b"\n") + 1
        if cut > 0:
            data = data[:cut]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 4:  # a multi-byte character cut at the end is fine
            raise DataError(
                f"{source.uri}: not UTF-8 text (byte {exc.start}); give its encoding with "
                "--encoding (e.g. cp932, latin-1, cp1252)"
            ) from exc
    return data


@contextlib.contextmanager
def open_text(
    uri: str,
    *,
    gzip: bool,
    dialect: CsvDialect,
    block_size: int | None = None,
    start: int = 0,
    end: int | None = None,
) -> Iterator[IO[bytes]]:
    """:func:`open_source`, transcoded to UTF-8 when the dialect's encoding is another.

    ``start``/``end`` (plain files in another encoding only) bound the *source* bytes read:
    the stream is the UTF-8 text of ``[start, end)``, which must begin at a character
    boundary (a record start of a :attr:`~CsvDialect.cuttable` dialect is one).
    """
    with open_source(uri, gzip=gzip, block_size=block_size) as f:
        if dialect.utf8:
            yield f
            return
        raw: Any = f
        if start or end is not None:
            f.seek(start)
            raw = _Limited(f, (end if end is not None else math.inf) - start)
        yield io.BufferedReader(Utf8Transcoder(raw, dialect.encoding, offset=start), 1 << 20)


class _Limited(io.RawIOBase):
    """The next ``size`` bytes of a binary stream."""

    def __init__(self, raw: IO[bytes], size: float):
        self._raw, self._left = raw, size

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        want = self._left if n is None or n < 0 else min(n, self._left)
        if want <= 0:
            return b""
        data = self._raw.read(int(want) if want != math.inf else -1)
        self._left -= len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


@contextlib.contextmanager
def decode_errors(uri: str, dialect: CsvDialect) -> Iterator[None]:
    """A byte sequence that is not text in the dialect's encoding: one line naming the file."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise DataError(f"{uri}: not {dialect.encoding} text ({exc.reason})") from exc
