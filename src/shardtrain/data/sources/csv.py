"""Reading CSV sources for the sharder: byte-range pieces, bounded blocks, typed batches, rejects.

The sharder (:mod:`shardtrain.data.sharding`) is source-agnostic; this module supplies its CSV hook:

* :func:`~shardtrain.data.sources.base.plan_pieces` cuts plain CSV files into byte ranges
  so that many tasks (on one machine or many pods) read one large file in parallel, and
  :func:`align_pieces` moves every boundary to the start of a record -- never inside a quoted
  field, which may hold line breaks -- by reading the file once with the quote state machine
  (:mod:`shardtrain.kernels.csv_records`). Gzip files and files in another encoding than
  UTF-8 cannot be cut and form one piece each.
* :func:`type_pass` (``--infer-types all``, the default) types every column by all of its
  values at planning, before any shard is written: the aligned pieces are read once more, in
  threads, and every field is classified from its raw bytes by a compiled kernel
  (:mod:`shardtrain.kernels.csv_types`) without being converted.
* :func:`read_piece` streams one piece in blocks of about ``block_bytes`` (never the whole
  file), cut at record ends, parses each block into typed columns and yields
  :class:`Batch` es: the accepted rows, a 64-bit hash per row for the split, and the
  rejected rows with their reason and line number.

Blocks with ``,``, ``;``, tab or ``|`` between fields are parsed by a compiled kernel
(:mod:`shardtrain.kernels.csv_parse`) at about twice the speed of Arrow's CSV reader. In a
block that holds quotes, the kernel reads the records without a quote character and Arrow
the quoted ones, merged back in order (:func:`_read_mixed`; a block mostly quoted goes to
Arrow whole). Every other block -- other delimiters, an escape character,
``--skip-initial-space``, a bare carriage return, invalid UTF-8 -- is read by Arrow (with
line breaks in values), and what Arrow cannot map back to records by Python's csv module.
All give the same rows, values, rejects and line numbers; ``SHARDTRAIN_CSV_FAST=0`` turns
the kernel off, to compare or to rule it out. The dialect
(:class:`~shardtrain.data.csv_dialect.CsvDialect`) is stored in the plan, so every task reads
the same way.
Numbers with a decimal comma (``--decimal ,``, never with ``,`` between fields) are read by
Arrow (``decimal_point``), with the same correctly rounded float32 values as the point.

Rejected rows never vanish: a row with the wrong number of fields, a value that does not parse
as its column's type, or a missing label is reported with its line (the line its record starts
on, counted from the start of the piece; the sharder turns that into the file's line number)
and the raw text.

Null values are the same quoted or not (``""`` and ``"NA"`` are missing, as in pandas). See
the README's "CSV dialects, types, nulls" for the whole contract.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import io
import itertools
import logging
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from shardtrain import storage
from shardtrain.data.csv_dialect import CsvDialect, Utf8Transcoder, detect_delimiter
from shardtrain.data.schema import (
    FALSE_VALUES,
    FLOAT_PATTERN,
    INT_PATTERN,
    SAMPLE_BYTES,
    TRUE_VALUES,
    TYPE_NOTES_OPTION,
    Column,
    ColumnType,
    Schema,
    SchemaOverrides,
    TypeTally,
    infer_schema,
    number_pattern,
    parse_header,
    type_notes,
)
from shardtrain.data.sources.base import (
    MAX_REJECT_TEXT,
    Batch,
    Piece,
    PlanInputs,
    Reject,
    Source,
    SourceFile,
    SourceLayout,
    available_cpus,
    open_source,
)
from shardtrain.errors import DataError, StorageError
from shardtrain.kernels import arrow, csv_parse, csv_records, csv_types, xxh64

log = logging.getLogger(__name__)

#: Environment variable that turns the compiled CSV fast path off when set to ``0``.
FAST_PATH_ENV = "SHARDTRAIN_CSV_FAST"

#: The fast path's code for each Arrow type the reader converts columns to.
_FAST_KINDS = {
    pa.float32(): csv_parse.KIND_FLOAT,
    pa.int64(): csv_parse.KIND_INT,
    pa.bool_(): csv_parse.KIND_BOOL,
    pa.string(): csv_parse.KIND_STRING,
}


# --------------------------------------------------------------------------------------------
# Listing sources
# --------------------------------------------------------------------------------------------


def list_sources(patterns: list[str]) -> list[SourceFile]:
    """Expand files and globs into source files with their size and version tag.

    Raises:
        DataError: a pattern matches nothing, or no source is given.
        StorageError: a named file is missing or unreadable.
    """
    if not patterns:
        raise DataError("no source given")
    seen: dict[str, SourceFile] = {}
    for pattern in patterns:
        uris = storage.glob(pattern) if storage.has_magic(pattern) else [pattern]
        if not uris:
            raise DataError(f"{pattern}: no file matches this pattern")
        for uri in uris:
            if storage.is_local(uri):  # one file named two ways (relative, glob) is one source
                uri = os.path.abspath(storage.local_path(uri))
            if uri in seen:
                continue
            meta = storage.info(uri)
            version = meta.version
            if storage.is_local(uri):  # mtime alone misses an edit that restores it
                version = f"{version}-{content_tag(uri, meta.size)}"
            seen[uri] = SourceFile(uri=uri, size=meta.size, version=version)
    return list(seen.values())


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


# --------------------------------------------------------------------------------------------
# The source
# --------------------------------------------------------------------------------------------


class CsvSource(Source):
    """CSV files (plain or ``.gz``, local or in object storage), in one dialect.

    Args:
        patterns: files or globs.
        label: the label column.
        key: the column hashed for the split; None hashes the whole row.
        schema_file: YAML/JSON overrides of the inferred types (see
            :class:`~shardtrain.data.schema.SchemaOverrides`).
        dialect: delimiter, quoting, encoding, header, null values (see
            :class:`~shardtrain.data.csv_dialect.CsvDialect`); None: the defaults,
            with the delimiter detected.
        infer_types: ``all`` (the default) types each column by all of its values: the
            planner's pieces are read once more, in parallel, by the compiled type pass
            (:func:`type_pass`) before any shard is written; ``sample`` types them from the
            first 4 MB of the first file (faster to plan; a later value that does not fit is
            rejected as ``bad_value``).
        processes: threads of the type pass (None: the CPUs this process may use).
        max_bad_fraction: the run's ``--max-bad-fraction``: with ``infer_types='all'``, a
            column of numbers may hold this fraction of values that are not numbers (none
            shaped like a code) and stay numeric, their rows rejected (see :func:`type_pass`).
    """

    data_kind = "tabular"

    def __init__(
        self,
        patterns: tuple[str, ...] | list[str],
        *,
        label: str,
        key: str | None = None,
        schema_file: str | None = None,
        dialect: CsvDialect | None = None,
        infer_types: str = "all",
        processes: int | None = None,
        max_bad_fraction: float = 0.0,
    ):
        self.patterns = list(patterns)
        self.label = label
        self.key = key
        self.schema_file = schema_file
        self.dialect = dialect or CsvDialect()
        self.infer_types = infer_types
        self.processes = processes
        self.max_bad_fraction = max_bad_fraction
        self._overrides: SchemaOverrides | None = None
        self._recalled_types: dict[str, ColumnType | None] | None = None
        self._recalled_evidence: dict[str, TypeTally] | None = None
        self._stored: Mapping[str, Any] | None = None
        self._known_starts: dict[str, dict[int, int]] = {}

    def recall(self, stored: Mapping[str, Any] | None) -> None:
        """Keep a stored plan (``_plan.json``): when it was made from exactly these files
        (same URIs, sizes and versions) in the same dialect, with the same label and key,
        :meth:`plan_inputs` takes its all-rows types and :meth:`align_pieces` its record
        starts instead of reading the files again."""
        self._stored = stored

    def _recalled_options(
        self, sources: list[SourceFile], dialect: CsvDialect
    ) -> Mapping[str, Any] | None:
        """The stored plan's options when they describe these files read this way, else None."""
        stored = self._stored
        if not stored:
            return None
        try:
            options = stored["options"]
            same = (
                [SourceFile(**d) for d in stored["sources"]] == sources
                and options.get(DIALECT_OPTION) == dialect.to_dict()
                and options.get("label") == self.label
                and options.get("key") == self.key
            )
        except (KeyError, TypeError, AttributeError):
            return None  # another kind of plan, or another version's
        return options if same and isinstance(options, Mapping) else None

    def plan_inputs(self) -> PlanInputs:
        """List the files, settle the dialect and infer the schema from a sample of the first.

        Gzip files count four times their size (their uncompressed size is unknown up front;
        4x is typical for CSV); rows are estimated from the sample's mean line length.
        The schema here is the sample's; with ``infer_types='all'``, :meth:`final_schema`
        types the columns by all rows once the pieces are known.
        """
        sources = list_sources(self.patterns)
        dialect = self.dialect
        sample = read_sample(sources[0], SAMPLE_BYTES, dialect)
        if dialect.delimiter is None:
            candidates = dialect.candidate_delimiters
            found = detect_delimiter(sample.decode("utf-8", "replace"), candidates)
            dialect = dataclasses.replace(dialect, delimiter=found or candidates[0])
        overrides = SchemaOverrides.load(self.schema_file) if self.schema_file else None
        if overrides is not None and not dialect.header and not dialect.columns:
            dialect = dataclasses.replace(dialect, columns=tuple(overrides.types))
        schema = infer_schema(
            sample,
            sources[0].uri,
            label=self.label,
            key=self.key,
            overrides=overrides,
            dialect=dialect,
        )
        recalled = self._recalled_options(sources, dialect)
        self._known_starts = _record_starts_option(recalled)
        self._recalled_types = _types_option(recalled, schema)
        self._recalled_evidence = _evidence_option(recalled)
        self._overrides = overrides
        options: dict[str, Any] = {DIALECT_OPTION: dialect.to_dict()}
        input_bytes = sum(s.size * (4 if s.gzip else 1) for s in sources)
        sample_lines = max(sample.count(b"\n") - 1, 1)
        body = sample[sample.find(b"\n") + 1 :] if dialect.header else sample
        parsed = (
            parse_block(body, schema, lines_before=1, dialect=dialect, report=False).table
            if body
            else None
        )
        return PlanInputs(
            sources=sources,
            schema=schema,
            input_bytes=input_bytes,
            estimated_rows=int(input_bytes / (len(sample) / (sample_lines + 1))),
            options=options,
            sample=parsed,
            sample_bytes=len(body),
        )

    def align_pieces(self, pieces: list[Piece], inputs: PlanInputs) -> list[Piece]:
        """Move every boundary inside a file to the start of a record (see
        :func:`align_pieces`), with the record starts of a stored plan of the same files
        (:meth:`recall`), and store the record starts found in ``inputs.options``."""
        found: dict[str, list[list[int]]] = {}
        aligned = align_pieces(
            pieces, _dialect(inputs.options), known=self._known_starts, found=found
        )
        if found:
            inputs.options[RECORD_STARTS_OPTION] = found
        return aligned

    def final_schema(self, pieces: list[Piece], inputs: PlanInputs) -> Schema:
        """With ``infer_types='all'``: the sample's schema with every column typed by all of
        its values (not those a ``--schema`` file sets), by :func:`type_pass` over the
        aligned pieces -- or taken from a stored plan of the same files (:meth:`recall`).
        The types are stored in the plan's options (:data:`TYPES_OPTION`), with the tallies
        of the columns whose values that are not numbers decided their type
        (:data:`TYPE_EVIDENCE_OPTION`: a run with another ``--max-bad-fraction`` decides
        again from them) and a line per such column
        (:data:`~shardtrain.data.schema.TYPE_NOTES_OPTION`)."""
        if self.infer_types != "all":
            return inputs.schema
        types = self._recalled_types
        mbf = self.max_bad_fraction
        found: dict[str, TypeTally] = {}
        forced = self._overrides.types if self._overrides is not None else {}
        if types is None or self._recalled_evidence is None:
            types = type_pass(
                pieces,
                inputs.schema,
                _dialect(inputs.options),
                threads=self.processes,
                max_bad_fraction=mbf,
                found=found,
            )
            for name, tally in found.items():
                if name not in forced:  # a --schema type is what it is: nothing to explain
                    level = logging.WARNING if tally.junk_numeric(mbf) else logging.INFO
                    log.log(level, tally.note(name, mbf))
        else:
            found = self._recalled_evidence
            types = {**types, **{n: t.type(mbf) for n, t in found.items()}}
            log.info(
                "CSV types by all rows taken from the stored plan (same files%s)",
                f"; {len(found)} column note(s), see inspect" if found else "",
            )
        inputs.options[TYPES_OPTION] = types
        inputs.options[TYPES_BASIS_OPTION] = _types_basis(inputs.schema)
        if found:
            inputs.options[TYPE_EVIDENCE_OPTION] = {n: t.to_dict() for n, t in found.items()}
            noted = {n: t for n, t in found.items() if n not in forced}
            if noted:
                inputs.options[TYPE_NOTES_OPTION] = type_notes(noted, mbf)
        return apply_all_row_types(inputs.schema, types, self._overrides)

    def read_piece(self, piece: Piece, layout: SourceLayout, block_bytes: int) -> Iterator[Batch]:
        return read_piece(
            piece, layout.schema, block_bytes=block_bytes, dialect=_dialect(layout.options)
        )

    def warm_up(self) -> None:
        """Load the compiled CSV, statistics and encoding kernels from numba's cache by
        parsing, describing and encoding two rows of every column type in memory."""
        from shardtrain.data import examples

        sample = b'f,i,b,s,label\n1.5,2,true,x,1\n-0.25,3,false,"y",0\n'
        schema = infer_schema(sample, "warm-up", label="label")
        for block in (sample, sample.replace(b'"y"', b"y")):
            batch = parse_block(block[block.index(b"\n") + 1 :], schema, lines_before=1)
        for name, stats in self.new_statistics(schema).items():
            stats.update_table(batch.table, name)
        examples.encode(batch.table, schema, framed=True)


def infer_types_from_all_rows(
    sources: list[SourceFile],
    schema: Schema,
    dialect: CsvDialect,
    overrides: SchemaOverrides | None = None,
    block_bytes: int = 4 * 1024 * 1024,
    max_bad_fraction: float = 0.0,
) -> Schema:
    """``schema`` with every column not set by ``overrides`` typed by all of its values.

    Every file is read once, every column as text, and each value counted by a
    :class:`~shardtrain.data.schema.TypeTally` (same rules as the sample's inference): a zip
    code column that turns ``98115-4820`` after 230,000 rows is a string, a fee column that is
    ``0`` for thousands of rows and then ``45.12`` is a float, and no valid row is rejected
    for a type the sample did not see; a column of numbers with a few values that are not
    (at most ``max_bad_fraction``, none shaped like a code) is numeric. Costs one parse of the
    data, in one process: planning uses :func:`type_pass` instead, which finds the same types
    far faster.
    """
    types = all_row_types(sources, schema, dialect, block_bytes, max_bad_fraction=max_bad_fraction)
    return apply_all_row_types(schema, types, overrides)


def all_row_types(
    sources: list[SourceFile],
    schema: Schema,
    dialect: CsvDialect,
    block_bytes: int = 4 * 1024 * 1024,
    *,
    max_bad_fraction: float = 0.0,
    found: dict[str, TypeTally] | None = None,
) -> dict[str, ColumnType | None]:
    """Every column's type by all of its values (None: only nulls), reading every file once
    (see :func:`infer_types_from_all_rows`).

    The reference: every value converted to an Arrow string by the sharder's own reader and
    counted by :class:`~shardtrain.data.schema.TypeTally`, in one process. :func:`type_pass`
    finds the same types at a fraction of the cost (tests check both agree) and is what
    planning runs, except with ``--skip-initial-space``, which only this path reads.
    ``max_bad_fraction`` and ``found`` as in :func:`type_pass` (the values that are not
    numbers are named without their line here)."""
    text = _text_schema(schema)
    tallies = [TypeTally(decimal=dialect.decimal) for _ in schema.columns]
    for src in sources:
        piece = Piece(src.uri, 0, src.size, src.gzip)
        for batch in read_piece(piece, text, block_bytes=block_bytes, dialect=dialect):
            for tally, values in zip(tallies, batch.table.columns, strict=True):
                tally.add(arrow.contiguous(values))
    for col, tally in zip(schema.columns, tallies, strict=True):
        _keep(col.name, tally, found)
    return {
        col.name: tally.type(max_bad_fraction)
        for col, tally in zip(schema.columns, tallies, strict=True)
    }


#: Bytes of one block of the type pass: small enough to stay in the CPU cache between the read
#: and the kernel (2 MiB: ~5% less CPU than 8 MiB blocks on the quest CSV).
TYPE_PASS_BLOCK_BYTES = 2 * 1024 * 1024


def type_pass(
    pieces: list[Piece],
    schema: Schema,
    dialect: CsvDialect,
    *,
    threads: int | None = None,
    block_bytes: int = TYPE_PASS_BLOCK_BYTES,
    max_bad_fraction: float = 0.0,
    found: dict[str, TypeTally] | None = None,
) -> dict[str, ColumnType | None]:
    """Every column's type by all of its values (None: only nulls): the same answer as
    :func:`all_row_types`, found by classifying the raw bytes of every field without
    converting it (:mod:`shardtrain.kernels.csv_types`), over the planner's pieces in
    parallel.

    Pieces start at record starts (:func:`align_pieces`); each is read in blocks of whole
    records as the tasks will read it (gzip files whole, other encodings transcoded to
    UTF-8), classified by a compiled kernel that releases the GIL -- so ``threads`` threads
    run on as many cores without a process pool -- and the per-column counts are added up.
    Only rows the sharder accepts are counted (right field count, label present). Values
    beyond float32's range are logged here, per column, before any shard is written.

    A column of numbers holding a few values that are not (at most ``max_bad_fraction`` of
    them) is numeric unless one of those looks like a code (see
    :meth:`~shardtrain.data.schema.TypeTally.type`): the pieces whose counts show such values
    are looked at again (:func:`_look_at_non_numbers`). The tallies of such columns are put
    in ``found``: their :meth:`~shardtrain.data.schema.TypeTally.note` says what was decided,
    and with them the types can be decided again for another fraction without reading the
    data.

    With ``--skip-initial-space`` (read by Python's csv module) this is :func:`all_row_types`.
    """
    if dialect.skip_initial_space:
        ends: dict[str, int] = {}
        for p in pieces:
            ends[p.uri] = max(ends.get(p.uri, 0), p.end)
        return all_row_types(
            [SourceFile(u, e, "") for u, e in ends.items()],
            schema,
            dialect,
            max_bad_fraction=max_bad_fraction,
            found=found,
        )
    from concurrent.futures import ThreadPoolExecutor

    text = _text_schema(schema)
    decimal = getattr(dialect, "decimal", ".") or "."
    classify = _classify_options(schema, dialect)

    def count(piece: Piece) -> np.ndarray:
        tally = csv_types.new_tally(len(schema.columns))
        for block, _ in _iter_record_blocks(piece, text, block_bytes, dialect):
            csv_types.classify_block(block, tally, **classify)
        return tally

    workers = max(1, min(threads or available_cpus(), len(pieces)))
    if workers == 1:
        tallies = [count(p) for p in pieces]
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="type-pass") as pool:
            tallies = list(pool.map(count, pieces))
    total = np.sum(tallies, axis=0) if tallies else csv_types.new_tally(len(schema.columns))
    columns = [type_tally(counts, decimal) for counts in total]
    if any(t.needs_shapes() for t in columns):
        _look_at_non_numbers(pieces, tallies, columns, schema, dialect, block_bytes)
    types: dict[str, ColumnType | None] = {}
    for col, counts, tally in zip(schema.columns, total, columns, strict=True):
        types[col.name] = tally.type(max_bad_fraction)
        _keep(col.name, tally, found)
        beyond = int(counts[_BEYOND_FLOAT32_CODES].sum())
        if beyond and types[col.name] == "float":
            log.warning(
                "column '%s': %d value(s) beyond the float32 range will be stored as ±inf or 0 "
                "(make the column a string in --schema to keep them exact)",
                col.name,
                beyond,
            )
    return types


#: The codes (see :mod:`shardtrain.kernels.csv_types`) of numbers beyond float32's range.
_BEYOND_FLOAT32_CODES = np.flatnonzero(
    np.arange(csv_types.N_CODES) & (csv_types.F32_OVERFLOW | csv_types.F32_UNDERFLOW)
)
#: The codes of fields that are neither missing nor numbers (text and booleans).
_NON_NUMBER_CODES = np.flatnonzero(
    np.isin(np.arange(csv_types.N_CODES) & csv_types.KIND_MASK, (csv_types.TEXT, csv_types.BOOL))
)


def _text_schema(schema: Schema) -> Schema:
    """``schema`` with every column read as text."""
    return Schema(
        columns=tuple(Column(c.name, "string") for c in schema.columns),
        label=schema.label,
        null_values=schema.null_values,
    )


def _classify_options(schema: Schema, dialect: CsvDialect) -> dict[str, Any]:
    """The keyword arguments of :func:`csv_types.classify_block` for this schema and dialect:
    the label's index, the dialect's bytes, the null words and the decimal mark."""
    return {
        "label": schema.names.index(schema.label),
        "delim": dialect.delim_byte,
        "quote": dialect.quote_byte,
        "escape": dialect.escape_byte,
        "nulls": tuple(v.encode() for v in schema.null_values),
        "decimal": ord(getattr(dialect, "decimal", ".") or "."),
    }


def _keep(name: str, tally: TypeTally, found: dict[str, TypeTally] | None) -> None:
    """Keep in ``found`` the tally of a column whose non-numbers decided its type
    (:meth:`~shardtrain.data.schema.TypeTally.noteworthy`)."""
    if found is not None and tally.noteworthy():
        found[name] = tally


#: The values that are not numbers of mostly numeric columns are looked for in parts of about
#: this many bytes of whole records (:func:`_look_at_non_numbers`): the kernel finds the parts
#: that hold some, and only those are read field by field in Python.
NON_NUMBER_PART_BYTES = 16 * 1024
#: At most this many parts are read field by field (16 MiB); a column whose non-numbers are
#: spread wider is decided by those found in them.
NON_NUMBER_PARTS = 1024
#: Lines before a piece are counted (to name a value's line in its file) when the piece starts
#: at most this far into its file; past it, the line is given from the piece's start.
LINE_COUNT_BYTES = 1 << 30


def _look_at_non_numbers(
    pieces: list[Piece],
    piece_counts: list[np.ndarray],
    tallies: list[TypeTally],
    schema: Schema,
    dialect: CsvDialect,
    block_bytes: int,
) -> None:
    """Find the values that are not numbers of the columns whose type may depend on them
    (:meth:`TypeTally.needs_shapes`, whatever the run's ``--max-bad-fraction``) and show
    them to their tallies (:meth:`TypeTally.see`), with their file and line.

    The type pass counts kinds, not values: the pieces whose counts (``piece_counts``) hold
    such values are read again, each block classified by the kernel; a block that holds some
    is cut at record starts (:func:`csv_records.record_bounds`) into parts of about
    :data:`NON_NUMBER_PART_BYTES`, each classified again, and the records of the parts that
    hold some are read field by field (Python's csv module, in the dialect). Only rows the
    type pass counts are looked at (right field count, label present, valid UTF-8). It stops
    when every such value has been seen, when a column's values include a code (it is a
    string whatever the others are), or after :data:`NON_NUMBER_PARTS` parts.
    """
    wanted = {i for i, t in enumerate(tallies) if t.needs_shapes()}
    left = {i: tallies[i].non_numbers for i in wanted}
    text = _text_schema(schema)
    label, width = schema.names.index(schema.label), len(schema.columns)
    number = re.compile(number_pattern(dialect.decimal))
    budget = NON_NUMBER_PARTS
    counted: dict[str, tuple[int, int]] = {}  # URI -> (bytes, line feeds) counted so far
    classify = _classify_options(schema, dialect)

    def holds(data: np.ndarray) -> bool:
        counts = csv_types.new_tally(len(schema.columns))
        csv_types.classify_block(data, counts, **classify)
        return any(counts[i, _NON_NUMBER_CODES].any() for i in left)

    def look(record: bytes, where: str) -> None:
        try:
            fields = next(dialect.python_reader(record.decode("utf-8")), [])
        except UnicodeDecodeError:
            return  # rejected by the reader, not counted by the type pass
        if len(fields) != width or fields[label] in schema.null_values:
            return  # not a row the type pass counted
        for i in list(left):
            value = fields[i]
            if value in schema.null_values or number.match(value):
                continue
            tallies[i].see(value, where)
            left[i] -= 1
            if not left[i] or tallies[i].codes:
                del left[i]  # all seen, or a code: a string whatever the rest

    for p, piece in enumerate(pieces):
        if not left or not budget:
            return
        if not any(piece_counts[p][i, _NON_NUMBER_CODES].any() for i in left):
            continue
        lines_before = 1 if piece.start == 0 and dialect.header else 0
        for block, _ in _iter_record_blocks(piece, text, block_bytes, dialect):
            arr = np.frombuffer(block, np.uint8)
            if holds(arr):
                starts, ends, first_lines, _, _ = csv_records.record_bounds(
                    arr,
                    delim=dialect.delim_byte,
                    quote=dialect.quote_byte,
                    escape=dialect.escape_byte,
                )
                cuts = np.searchsorted(
                    starts, np.arange(NON_NUMBER_PART_BYTES, len(block), NON_NUMBER_PART_BYTES)
                )
                bounds = np.unique(np.concatenate([[0], cuts, [len(starts)]]))
                for a, b in itertools.pairwise(bounds.tolist()):
                    end = int(starts[b]) if b < len(starts) else len(block)
                    if a == b or not left or not budget or not holds(arr[int(starts[a]) : end]):
                        continue
                    budget -= 1
                    before = _lines_before(piece, counted)
                    for r in range(a, b):
                        line = lines_before + int(first_lines[r]) + 1  # from the piece's start
                        look(block[int(starts[r]) : int(ends[r])], _where(piece, before, line))
                if not left or not budget:
                    return
            lines_before += block.count(b"\n") + (1 if block[-1:] != b"\n" else 0)


def _lines_before(piece: Piece, counted: dict[str, tuple[int, int]]) -> int | None:
    """The lines of a piece's file before it (line feeds of the raw bytes, which no character
    of a file cut into pieces holds: :attr:`CsvDialect.cuttable`); None when the piece starts
    more than :data:`LINE_COUNT_BYTES` into the file (not worth reading it all again).
    ``counted`` keeps how far each file was counted, so pieces in order read it once."""
    if piece.start == 0:
        return 0
    if piece.start > LINE_COUNT_BYTES:
        return None
    pos, count = counted.get(piece.uri, (0, 0))
    if pos > piece.start:
        pos, count = 0, 0
    with open_source(piece.uri, gzip=False) as f:
        f.seek(pos)
        while pos < piece.start:
            chunk = f.read(min(16 << 20, piece.start - pos))
            if not chunk:
                break
            count, pos = count + chunk.count(b"\n"), pos + len(chunk)
    counted[piece.uri] = (pos, count)
    return count


def _where(piece: Piece, lines_before: int | None, line: int) -> str:
    """``URI line N``: line ``line`` of ``piece`` (counted from its start) in its file."""
    if lines_before is None:
        return f"{piece.uri} line {line} after byte {piece.start:,}"
    return f"{piece.uri} line {lines_before + line}"


def type_tally(counts: np.ndarray, decimal: str = ".") -> TypeTally:
    """A column's :class:`~shardtrain.data.schema.TypeTally` from its counts per code
    (a row of a :func:`csv_types.new_tally`), for numbers with the decimal mark ``decimal``."""
    codes = np.arange(csv_types.N_CODES)
    kind = codes & csv_types.KIND_MASK
    number = (kind == csv_types.INT) | (kind == csv_types.FLOAT)
    ints = kind == csv_types.INT
    return TypeTally(
        decimal=decimal,
        present=int(counts[codes != csv_types.MISSING].sum()),
        bools=int(counts[kind == csv_types.BOOL].sum()),
        numbers=int(counts[number].sum()),
        ints=int(counts[ints].sum()),
        leading_zero=bool(counts[number & ((codes & csv_types.LEADING_ZERO) != 0)].any()),
        beyond_int64=bool(counts[ints & ((codes & csv_types.BEYOND_INT64) != 0)].any()),
    )


def apply_all_row_types(
    schema: Schema, types: Mapping[str, ColumnType | None], overrides: SchemaOverrides | None = None
) -> Schema:
    """``schema`` with the types of :func:`all_row_types`, except where ``overrides`` set one
    (a column of only nulls is a string)."""
    forced = overrides.types if overrides is not None else {}
    columns = []
    for col in schema.columns:
        typ = col.type if col.name in forced else (types[col.name] or "string")
        if typ != col.type:
            log.info("column '%s': %s by all rows (%s by the sample)", col.name, typ, col.type)
        columns.append(dataclasses.replace(col, type=typ))
    return dataclasses.replace(schema, columns=tuple(columns))


#: The key of the dialect in the plan's source options.
DIALECT_OPTION = "csv_dialect"
#: The key of the types by all rows (``--infer-types all``): column -> type or None.
TYPES_OPTION = "csv_all_row_types"
#: The key of the record starts found by :func:`align_pieces`: URI -> [[offset, start], ...].
RECORD_STARTS_OPTION = "csv_record_starts"


#: The key of what the stored types were found under besides the files and the dialect: the
#: null words and the type pass's version (:func:`_types_basis`).
TYPES_BASIS_OPTION = "csv_all_row_types_basis"
#: The key of the tallies of the columns whose type their values that are not numbers decided
#: (:meth:`~shardtrain.data.schema.TypeTally.noteworthy`): column -> tally as JSON. They do
#: not depend on ``--max-bad-fraction`` (a recalled plan decides those columns again under
#: the run's), so changing it between runs changes the plan only when it changes a type.
TYPE_EVIDENCE_OPTION = "csv_type_evidence"
#: Bumped whenever the type pass's rules change, so a stored plan's types are found again
#: (2: a few values that are not numbers no longer make a column of numbers a string).
TYPE_PASS_VERSION = 2


def _types_basis(schema: Schema) -> dict[str, Any]:
    """What the all-rows types depend on besides the files, the dialect and
    ``--max-bad-fraction`` (see :data:`TYPE_EVIDENCE_OPTION`)."""
    return {"null_values": list(schema.null_values), "pass": TYPE_PASS_VERSION}


def _evidence_option(options: Mapping[str, Any] | None) -> dict[str, TypeTally] | None:
    """The stored :data:`TYPE_EVIDENCE_OPTION` (empty when the plan has none), or None when
    it cannot be read (then the types are found again)."""
    stored = options.get(TYPE_EVIDENCE_OPTION, {}) if options else {}
    try:
        return {str(n): TypeTally.from_dict(d) for n, d in stored.items()}
    except (TypeError, ValueError, AttributeError):
        return None


def _types_option(
    options: Mapping[str, Any] | None, schema: Schema
) -> dict[str, ColumnType | None] | None:
    """The stored all-rows types, when they name exactly the schema's columns and were found
    with the same null words by the same version of the pass (a ``--schema`` file's
    ``null_values`` changed between runs: the types are found again)."""
    types = options.get(TYPES_OPTION) if options else None
    if not isinstance(types, dict) or list(types) != [c.name for c in schema.columns]:
        return None
    if options is None or options.get(TYPES_BASIS_OPTION) != _types_basis(schema):
        return None
    if any(t not in (None, "int", "float", "bool", "string") for t in types.values()):
        return None
    return types


def _record_starts_option(options: Mapping[str, Any] | None) -> dict[str, dict[int, int]]:
    """The stored record starts, per URI: offset -> first record start at or after it."""
    found = options.get(RECORD_STARTS_OPTION) if options else None
    try:
        return {uri: {int(o): int(b) for o, b in pairs} for uri, pairs in (found or {}).items()}
    except (TypeError, ValueError, AttributeError):
        return {}


def _dialect(options: Mapping[str, Any]) -> CsvDialect:
    d = options.get(DIALECT_OPTION)
    return CsvDialect.from_dict(d) if d else CsvDialect(delimiter=",")


# --------------------------------------------------------------------------------------------
# Planning: byte-range boundaries at record starts
# --------------------------------------------------------------------------------------------

#: Bytes read at once by :func:`align_pieces`.
ALIGN_READ_BYTES = 16 * 1024 * 1024


def align_pieces(
    pieces: list[Piece],
    dialect: CsvDialect,
    *,
    known: Mapping[str, Mapping[int, int]] | None = None,
    found: dict[str, list[list[int]]] | None = None,
) -> list[Piece]:
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
    the same files): a file all of whose offsets it holds is not read. ``found`` receives, per
    URI read or known, ``[offset, start]`` for each of its offsets.
    """
    by_file: dict[str, list[Piece]] = {}
    for piece in pieces:
        by_file.setdefault(piece.uri, []).append(piece)
    out: list[Piece] = []
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
        if found is not None:
            found[uri] = [[o, b] for o, b in zip(offsets, bounds, strict=True)]
        starts = [group[0].start, *bounds]
        ends = [*bounds, group[-1].end]
        out.extend(Piece(uri, a, b) for a, b in zip(starts, ends, strict=True) if b > a)
    return out


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


# --------------------------------------------------------------------------------------------
# Reading one piece in blocks of whole records
# --------------------------------------------------------------------------------------------


#: The longest record the reader accepts: a quoted field left open (a missing closing quote)
#: would otherwise make the rest of the file one record, held in memory.
MAX_RECORD_BYTES = 256 * 1024 * 1024

#: Record bounds found while cutting a block: ``(starts, ends, first_lines)``; ``()`` for a
#: block known to hold no quote or escape character (its records are its lines).
Records = tuple[np.ndarray, np.ndarray, np.ndarray] | tuple[()]


def _iter_record_blocks(
    piece: Piece, schema: Schema, block_bytes: int, dialect: CsvDialect
) -> Iterator[tuple[bytes, Records | None]]:
    """Yield blocks of whole data records owned by the piece (after the header, if it has
    one), each with its record bounds when cutting it needed them (quotes), ``()`` when it
    holds no quote, else None (not known).

    Piece boundaries are record starts (:func:`align_pieces`). Lines are not counted here:
    :func:`read_piece` adds up the line counts that parsing finds anyway.

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
        _decode_errors(piece.uri, dialect),
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
                    yield carry, None
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
                yield complete, (starts, ends, first_lines)
            else:
                nl = chunk.rfind(b"\n")
                if nl < 0:
                    carry += chunk
                    continue
                # One copy of the block's bytes: the carried record start + the chunk up to
                # its last newline (bytes + memoryview concatenates without slicing first).
                complete = carry + memoryview(chunk)[: nl + 1]
                carry = chunk[nl + 1 :]
                yield complete, ()  # known to hold no quote
            pos += len(complete)


@contextlib.contextmanager
def _decode_errors(uri: str, dialect: CsvDialect) -> Iterator[None]:
    """A byte sequence that is not text in the dialect's encoding: one line naming the file."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise DataError(f"{uri}: not {dialect.encoding} text ({exc.reason})") from exc


def read_piece(
    piece: Piece,
    schema: Schema,
    *,
    block_bytes: int = 16 * 1024 * 1024,
    dialect: CsvDialect | None = None,
) -> Iterator[Batch]:
    """Stream one piece as typed batches with rejects; see the module docstring."""
    dialect = dialect or DEFAULT_DIALECT
    key_index = schema.names.index(schema.key) if schema.key else None
    # The header is line 1 of its file.
    lines_before = 1 if piece.start == 0 and dialect.header else 0
    for block, records in _iter_record_blocks(piece, schema, block_bytes, dialect):
        batch = parse_block(
            block,
            schema,
            lines_before=lines_before,
            key_index=key_index,
            source=piece.uri,
            dialect=dialect,
            records=records,
        )
        lines_before += batch.lines  # every block but the last ends with a line feed
        yield batch


#: Said of a rejected float with a point when the decimal mark is a comma: the point is neither
#: a decimal mark nor a thousands separator (Excel's 1.234,5), so the value is not a number.
_POINT_IN_DECIMAL_COMMA = (
    " (a '.' with --decimal ,: neither 1.5 nor thousands separators as in 1.234,5 are read)"
)

#: The dialect of blocks parsed without one: RFC 4180 with a comma.
DEFAULT_DIALECT = CsvDialect(delimiter=",")


# --------------------------------------------------------------------------------------------
# Parsing one block
# --------------------------------------------------------------------------------------------


def _convert_options(
    schema: Schema, types: dict[str, pa.DataType], decimal: str = "."
) -> pacsv.ConvertOptions:
    # Quoted null words are missing too ("" and "NA" as much as NA): pandas' rule, and the
    # same in every block whichever parser reads it. Arrow reads a decimal comma with the
    # same correctly rounded float32 conversion as the point (checked on 200,000 values).
    return pacsv.ConvertOptions(
        column_types=types,
        decimal_point=decimal,
        null_values=list(schema.null_values),
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
        true_values=list(TRUE_VALUES),
        false_values=list(FALSE_VALUES),
    )


@contextlib.contextmanager
def _undecodable_rows_unreported(handler: Any) -> Iterator[None]:
    """Keep quiet the one error pyarrow reports itself: a bad row whose text is not UTF-8
    cannot be decoded for ``handler``; pyarrow prints "Exception ignored in ..." with a
    traceback (``sys.unraisablehook``) and then raises the row error, which
    :func:`_read_arrow` handles (the block is read record by record, that record rejected)."""
    previous = sys.unraisablehook

    def hook(info: Any) -> None:
        if not (isinstance(info.exc_value, UnicodeDecodeError) and info.object is handler):
            previous(info)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _read(
    block: bytes,
    schema: Schema,
    types: dict[str, pa.DataType],
    invalid: list,
    dialect: CsvDialect,
    quoted: bool,
) -> pa.Table:
    def on_invalid(row: pacsv.InvalidRow) -> str:
        invalid.append((row.number, row.actual_columns, row.text))
        return "skip"

    with _undecodable_rows_unreported(on_invalid):
        return pacsv.read_csv(
            pa.py_buffer(block),
            read_options=pacsv.ReadOptions(
                column_names=schema.names, use_threads=False, block_size=len(block) + 1
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=dialect.delimiter or ",",
                quote_char=dialect.quote_char or False,
                escape_char=dialect.escape_char or False,
                invalid_row_handler=on_invalid,
                newlines_in_values=quoted,
            ),
            convert_options=_convert_options(schema, types, dialect.decimal),
        )


def _read_linewise(
    block: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    nonblank: np.ndarray,
    schema: Schema,
    dialect: CsvDialect,
) -> tuple[pa.Table, list]:
    """Slow path: each record read by Python's csv module; string columns and invalid rows."""
    import csv

    width = len(schema.names)
    rows: list[list[str]] = []
    invalid = []
    csv.field_size_limit(1 << 30)
    for number, li in enumerate(nonblank, start=1):
        raw = block[starts[li] : ends[li]]
        try:
            text = bytes(raw).decode("utf-8")
            records = list(dialect.python_reader(text))
        except (UnicodeDecodeError, csv.Error):  # not UTF-8; a bare carriage return in a field
            invalid.append((number, -1, bytes(raw).decode("utf-8", "replace")))
            continue
        if len(records) != 1:
            invalid.append((number, -1, text))
        elif len(records[0]) != width:
            invalid.append((number, len(records[0]), text))
        else:
            rows.append(records[0])
    nulls = arrow.strings(schema.null_values)
    columns = []
    for values in zip(*rows, strict=True) if rows else [[] for _ in range(width)]:
        arr = arrow.strings(values)
        columns.append(pc.if_else(pc.is_in(arr, value_set=nulls), arrow.null(pa.string()), arr))
    return pa.Table.from_arrays(columns, names=schema.names), invalid


def fast_path_enabled() -> bool:
    """Whether blocks may take the compiled fast path (``SHARDTRAIN_CSV_FAST`` is not ``0``)."""
    return os.environ.get(FAST_PATH_ENV, "1").strip() != "0"


def _read_fast(
    arr: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    schema: Schema,
    types: dict[str, pa.DataType],
    dialect: CsvDialect,
) -> tuple[pa.Table, list, bool, np.ndarray | None] | None:
    """The fast path's ``(table, invalid, converted, out_of_range)``: the first three as the
    Arrow path computes them, and the rows of the table with a float beyond float32's range
    (None when not known: the block was converted from text).

    ``starts``/``ends`` bound the block's non-blank lines. Returns None when the block must go
    to Arrow (see :func:`csv_parse.parse_block_fast`).
    """
    names = schema.names
    kinds = np.array([_FAST_KINDS[types[n]] for n in names], dtype=np.int8)
    nulls = tuple(v.encode() for v in schema.null_values)
    delimiter, quote = dialect.delim_byte, dialect.quote_byte
    parsed = csv_parse.parse_block_fast(
        arr, starts, ends, kinds, nulls, delimiter=delimiter, quote=quote
    )
    if parsed is None:
        return None
    converted = False
    if (parsed.row_status == csv_parse.STATUS_BAD_VALUE).any():
        # Arrow fails the typed read of a block with a bad value, and parse_block then reads
        # every column as text and converts each with _safe_convert. Reproduce that exactly:
        # the same text columns, then the same conversion code.
        kinds = np.full(len(names), csv_parse.KIND_STRING, dtype=np.int8)
        parsed = csv_parse.parse_block_fast(
            arr, starts, ends, kinds, nulls, delimiter=delimiter, quote=quote
        )
        if parsed is None:
            return None
        converted = True
    invalid = []
    for i in np.flatnonzero(parsed.row_status == csv_parse.STATUS_FIELD_COUNT).tolist():
        try:
            text = arr[starts[i] : ends[i]].tobytes().decode("utf-8")
        except UnicodeDecodeError:
            return None  # what Arrow does with such a line is Arrow's to decide
        invalid.append((i + 1, int(parsed.field_count[i]), text))
    rows = np.flatnonzero(parsed.row_status == csv_parse.STATUS_OK) if invalid else None
    flagged = parsed.out_of_range if rows is None else parsed.out_of_range[rows]
    return (
        pa.Table.from_arrays(csv_parse.to_arrow(parsed, kinds, rows), names=names),
        invalid,
        converted,
        None if converted else np.flatnonzero(flagged),
    )


#: A quoted block goes to Arrow whole when more than this share of its records is quoted.
MAX_DEFERRED_SHARE = 0.5


def _read_mixed(
    block: bytes,
    arr: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    nonblank: np.ndarray,
    schema: Schema,
    types: dict[str, pa.DataType],
    source: str,
    lines_before: int,
    dialect: CsvDialect,
) -> tuple[pa.Table, list, bool, np.ndarray | None, np.ndarray | None] | None:
    """A block with quotes: its records without a quote by the kernel, the others by Arrow.

    Gives the ``(table, invalid, converted)`` that :func:`_read_arrow` gives for the whole
    block, value for value, and the table rows that the kernel flagged for a float beyond
    float32's range and those Arrow read (both None when converted from text). The quoted
    records form a block of their own for Arrow, the kernel reads the rest (``defer``), and
    the two are merged back in record order. The
    whole-block rules are kept: a bad value anywhere makes every column text (converted
    afterwards), and a record with the wrong number of fields anywhere makes the block read
    record by record (:func:`_read_linewise`, whose text the kernel's string columns equal
    for unquoted records). Returns None when the block is better (or must be) read whole:
    most records are quoted, invalid UTF-8, an escape character.
    """
    if dialect.escape_char is not None:
        return None  # the kernel does not stop at escapes
    names = schema.names
    nulls = tuple(v.encode() for v in schema.null_values)
    rec_starts, rec_ends = starts[nonblank], ends[nonblank]

    def kernel(kinds: np.ndarray) -> csv_parse.FastColumns | None:
        return csv_parse.parse_block_fast(
            arr, rec_starts, rec_ends, kinds, nulls,
            delimiter=dialect.delim_byte, quote=dialect.quote_byte, defer=True,
        )  # fmt: skip

    typed_kinds = np.array([_FAST_KINDS[types[n]] for n in names], dtype=np.int8)
    parsed = kernel(typed_kinds)
    if parsed is None:
        return None
    status = parsed.row_status
    deferred = np.flatnonzero(status == csv_parse.STATUS_DEFERRED)
    if deferred.size > MAX_DEFERRED_SHARE * max(len(status), 1):
        return None
    # The quoted records, as a block of their own for Arrow.
    view = memoryview(block)
    sub = b"\n".join(view[rec_starts[i] : rec_ends[i]] for i in deferred.tolist())
    sub_starts, sub_ends, _, _, _ = csv_records.record_bounds(
        sub, delim=dialect.delim_byte, quote=dialect.quote_byte, escape=dialect.escape_byte
    )
    lengths = rec_ends[deferred] - rec_starts[deferred]
    if len(sub_starts) != deferred.size or not np.array_equal(sub_ends - sub_starts, lengths):
        return None  # the records do not come back as they were: read the block whole
    sub_all = np.arange(deferred.size)

    def empty(column_types: dict[str, pa.DataType]) -> pa.Table:
        return pa.table({n: pa.array([], column_types[n]) for n in names})

    if deferred.size:
        table_q, invalid_q, converted_q = _read_arrow(
            sub, sub_starts, sub_ends, sub_all, schema, types, source, lines_before, dialect, True
        )
    else:  # quote characters only in blank... or none left: nothing for Arrow
        table_q, invalid_q, converted_q = empty(types), [], False
    kernel_invalid = np.flatnonzero(status == csv_parse.STATUS_FIELD_COUNT)
    kernel_bad = bool((status == csv_parse.STATUS_BAD_VALUE).any())
    if kernel_invalid.size or invalid_q:
        # Whole, the block would be read record by record: the same for the quoted part.
        if not deferred.size:
            table_q = empty({n: pa.string() for n in names})
        elif not invalid_q:  # (with invalid records, _read_arrow read them one by one already)
            table_q, invalid_q = _read_linewise(sub, sub_starts, sub_ends, sub_all, schema, dialect)
        converted = True
    elif kernel_bad or converted_q:
        # Whole, the block would be read as text: the same for the quoted part.
        if not deferred.size:
            table_q = empty({n: pa.string() for n in names})
        elif not converted_q:
            invalid_q = []
            try:
                text_types = {n: pa.string() for n in names}
                table_q = _read(sub, schema, text_types, invalid_q, dialect, True)
            except pa.ArrowInvalid:
                table_q, invalid_q = _read_linewise(
                    sub, sub_starts, sub_ends, sub_all, schema, dialect
                )
        converted = True
    else:
        converted = False
    if converted:
        parsed = kernel(np.full(len(names), csv_parse.KIND_STRING, dtype=np.int8))
        if parsed is None or not np.array_equal(
            np.flatnonzero(parsed.row_status == csv_parse.STATUS_DEFERRED), deferred
        ):
            return None
    kinds = typed_kinds if not converted else np.full(len(names), csv_parse.KIND_STRING, np.int8)
    invalid = []
    for i in kernel_invalid.tolist():
        try:
            text = arr[rec_starts[i] : rec_ends[i]].tobytes().decode("utf-8")
        except UnicodeDecodeError:
            return None
        invalid.append((i + 1, int(parsed.field_count[i]), text))
    kernel_rows = np.flatnonzero(parsed.row_status == csv_parse.STATUS_OK)
    bad_q = np.array([number - 1 for number, _, _ in invalid_q], dtype=np.int64)
    invalid.extend(
        (int(deferred[number - 1]) + 1, actual, text) for number, actual, text in invalid_q
    )
    invalid.sort(key=lambda item: item[0])
    quoted_rows = np.delete(deferred, bad_q) if bad_q.size else deferred
    if table_q.num_rows != quoted_rows.size:
        return None
    # One take from both tables: every kernel line (zero-copy), then Arrow's rows.
    kernel_table = pa.Table.from_arrays(csv_parse.to_arrow(parsed, kinds), names=names)
    table_q = table_q.cast(kernel_table.schema)
    both = pa.concat_tables([kernel_table, table_q])
    keys = np.concatenate([kernel_rows, quoted_rows])
    sources = np.concatenate([kernel_rows, len(rec_starts) + np.arange(quoted_rows.size)])
    by_record = np.argsort(keys, kind="stable")
    table = both.take(arrow.from_numpy(sources[by_record])).combine_chunks()
    if converted:  # converted from text: the kernel's flags do not apply
        return table, invalid, converted, None, None
    # Table rows of the kernel's flagged records, and of Arrow's (to check the whole way).
    keys = keys[by_record]
    flagged = np.searchsorted(keys, np.flatnonzero(parsed.out_of_range))
    return table, invalid, converted, flagged, np.searchsorted(keys, quoted_rows)


def _with_decimal_point(strings: pa.Array, decimal: str) -> pa.Array:
    """Float text written with the decimal mark ``decimal`` as text with a decimal point:
    ``1,5`` becomes ``1.5``, and ``1.5`` becomes ``1;5``, which is no number (as in pandas)."""
    if decimal == ".":
        return strings
    return pc.replace_substring(pc.replace_substring(strings, ".", ";"), decimal, ".")


def _safe_convert(
    strings: pa.Array, column_type: str, decimal: str = "."
) -> tuple[pa.Array, np.ndarray]:
    """Convert strings to ``column_type`` (floats written with the decimal mark ``decimal``);
    return the values and a mask of unparsable rows."""
    if column_type == "float":
        strings = _with_decimal_point(strings, decimal)
    target = {"int": pa.int64(), "float": pa.float32(), "bool": pa.bool_()}[column_type]
    try:
        if column_type == "bool":
            raise pa.ArrowInvalid("booleans are matched explicitly")
        return pc.cast(strings, target), np.zeros(len(strings), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    if column_type == "bool":
        ok = pc.is_in(strings, value_set=arrow.strings(TRUE_VALUES + FALSE_VALUES))
    else:
        ok = pc.match_substring_regex(
            strings, INT_PATTERN if column_type == "int" else FLOAT_PATTERN
        )
    ok = pc.fill_null(ok, arrow.scalar(True))
    bad = ~arrow.to_bools(ok)
    cleaned = pc.if_else(ok, strings, arrow.null(pa.string()))
    if column_type == "bool":
        values = pc.is_in(cleaned, value_set=arrow.strings(TRUE_VALUES))
        values = pc.if_else(pc.is_null(cleaned), arrow.null(pa.bool_()), values)
    else:
        try:
            values = pc.cast(cleaned, target)
        except pa.ArrowInvalid:  # e.g. an int too large for int64: reject value by value
            out, more_bad = [], bad.copy()
            for i, s in enumerate(cleaned.to_pylist()):
                try:
                    out.append(
                        None if s is None else (int(s) if column_type == "int" else float(s))
                    )
                except (ValueError, OverflowError):
                    out.append(None)
                    more_bad[i] = True
                if column_type == "int" and out[-1] is not None and not -(2**63) <= out[-1] < 2**63:
                    out[-1] = None
                    more_bad[i] = True
            present = np.array([v is not None for v in out], dtype=bool)
            dtype = np.int64 if column_type == "int" else np.float32
            with np.errstate(over="ignore"):  # beyond float32: ±inf, as Arrow's cast
                filled = np.array([0 if v is None else v for v in out], dtype=dtype)
            return arrow.from_numpy(filled, present), more_bad
    return values, bad


def _is_utf8(block: bytes | memoryview) -> bool:
    try:
        codecs.utf_8_decode(block, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


def _read_arrow(
    block: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    nonblank: np.ndarray,
    schema: Schema,
    types: dict[str, pa.DataType],
    source: str,
    lines_before: int,
    dialect: CsvDialect,
    quoted: bool,
) -> tuple[pa.Table, list, bool]:
    """Arrow's ``(table, invalid, converted)`` for a block; see :func:`parse_block`."""
    invalid: list = []
    if dialect.skip_initial_space:  # Arrow has no such option: Python's csv module has
        table, invalid = _read_linewise(block, starts, ends, nonblank, schema, dialect)
        return table, invalid, True
    try:
        table = _read(block, schema, types, invalid, dialect, quoted)
        converted = False
    except pa.ArrowInvalid as exc:
        text = str(exc).lower()
        if "utf8" in text or "utf-8" in text or not _is_utf8(block):
            # Invalid UTF-8 (Arrow also raises its row error when the row it would hand to
            # the invalid-row handler is not UTF-8): record by record, that row rejected.
            table, invalid = _read_linewise(block, starts, ends, nonblank, schema, dialect)
            converted = True
        elif "conversion error" not in text and "invalid value" not in text:
            raise DataError(
                f"{source}: cannot parse the CSV near line {lines_before + 1} of this part "
                f"({str(exc).splitlines()[0]})"
            ) from exc
        else:
            invalid = []
            try:
                table = _read(
                    block, schema, {n: pa.string() for n in schema.names}, invalid, dialect, quoted
                )
            except pa.ArrowInvalid:  # a bad value *and* invalid UTF-8 in one block
                table, invalid = _read_linewise(block, starts, ends, nonblank, schema, dialect)
            converted = True

    if table.num_rows + len(invalid) != nonblank.size or (quoted and invalid):
        # The parser's rows do not map to our records (or, with line breaks in values, Arrow
        # does not number its invalid rows): read this block record by record instead.
        table, invalid = _read_linewise(block, starts, ends, nonblank, schema, dialect)
        converted = True
    return table, invalid, converted


def parse_block(
    block: bytes,
    schema: Schema,
    *,
    lines_before: int,
    key_index: int | None = None,
    source: str = "CSV",
    fast: bool | None = None,
    dialect: CsvDialect | None = None,
    report: bool = True,
    records: Records | None = None,
) -> Batch:
    """Parse a block of whole CSV records (no header) into a :class:`Batch`.

    Args:
        block: whole records of CSV, without the header.
        schema: the columns and their types.
        lines_before: lines of the piece before this block (for reject line numbers).
        key_index: index of the split key column, if any.
        source: names the file in error messages.
        fast: try the compiled fast path first (see the module docstring); None follows
            ``SHARDTRAIN_CSV_FAST``. Either way the result is the same.
        dialect: delimiter, quoting and escapes; None: :data:`DEFAULT_DIALECT`.
        report: log values stored changed (floats beyond float32: ±inf); False for samples
            parsed again later.
        records: the block's record bounds, when the caller has them already (see
            :func:`csv_records.record_bounds`), or ``()`` when it knows the block holds no
            quote or escape character.

    Raises:
        DataError: the block is not CSV the reader can parse.
    """
    dialect = dialect or DEFAULT_DIALECT
    arr = np.frombuffer(block, dtype=np.uint8)
    special = dialect.special_bytes
    if records == ():
        quoted, records = False, None
    else:
        quoted = records is not None or (bool(special) and any(block.find(c) >= 0 for c in special))
    first_lines: np.ndarray | None = None  # the line each record starts on; None: record = line
    if quoted:
        if records:
            starts, ends, first_lines = records
            # Line feeds: those before the last record (its first line) and from it on.
            last = int(starts[-1]) if len(starts) else 0
            n_lf = (int(first_lines[-1]) if len(starts) else 0) + block.count(b"\n", last)
        else:
            starts, ends, first_lines, _, n_lf = csv_records.record_bounds(
                arr, delim=dialect.delim_byte, quote=dialect.quote_byte, escape=dialect.escape_byte
            )
        n_physical = n_lf + (1 if len(block) and block[-1] != 0x0A else 0)
    else:
        starts, ends = csv_parse.line_bounds(arr)
        n_physical = int(starts.size)
    nonblank = np.flatnonzero(ends > starts)  # record indices (0-based) of rows

    def line_of(record: int) -> int:
        return int(first_lines[record]) if first_lines is not None else record

    batch = Batch(
        table=None,  # set below, once the columns are converted
        row_hash=np.empty(0, np.uint64),
        rows_read=int(nonblank.size),
        blank_lines=int(starts.size - nonblank.size),
        lines=n_physical,
        bytes_read=len(block),
    )
    typed = {c.name: c.arrow_type for c in schema.columns}
    if schema.key:
        typed[schema.key] = pa.string()  # hashed as text; converted below
    if fast is None:
        fast = fast_path_enabled()
    # Decimal commas are Arrow's (decimal_point); the kernel reads points.
    fast = (
        fast
        and dialect.delim_byte in csv_parse.FAST_DELIMITERS
        and dialect.decimal == "."
        and not dialect.skip_initial_space
    )
    out_of_range: np.ndarray | None = None  # rows with a float beyond float32, when known
    scan: np.ndarray | None = None  # rows to check the whole way besides those
    parsed = mixed = None
    if fast and not quoted:
        parsed = _read_fast(arr, starts[nonblank], ends[nonblank], schema, typed, dialect)
    elif fast:
        mixed = _read_mixed(
            block, arr, starts, ends, nonblank, schema, typed, source, lines_before, dialect
        )
    if parsed is not None:
        table, invalid, converted, out_of_range = parsed
    elif mixed is not None:
        table, invalid, converted, out_of_range, scan = mixed
    else:
        table, invalid, converted = _read_arrow(
            block, starts, ends, nonblank, schema, typed, source, lines_before, dialect, quoted
        )

    # Row i of the parser (valid or invalid, 1-based `number`) is the i-th non-blank line.
    invalid_rows = np.array([number - 1 for number, _, _ in invalid], dtype=np.int64)
    keep = np.ones(nonblank.size, dtype=bool)
    keep[invalid_rows] = False
    row_lines = nonblank[keep]  # line index of each parsed row

    for number, actual, text in invalid:
        line_idx = int(nonblank[number - 1])
        batch.rejects.append(
            Reject(
                line=lines_before + line_of(line_idx) + 1,
                reason="wrong_field_count" if actual >= 0 else "unreadable_line",
                detail=(
                    f"{actual} fields, expected {len(schema.names)}"
                    if actual >= 0
                    else "not UTF-8, or a carriage return inside a field"
                ),
                text=(text or "")[:MAX_REJECT_TEXT],
            )
        )

    bad = np.zeros(table.num_rows, dtype=bool)
    bad_detail: dict[int, str] = {}
    columns = []
    for col, arr_col in zip(schema.columns, table.columns, strict=True):
        values = arrow.contiguous(arr_col)
        want_string = col.type == "string" or col.name == schema.key
        if converted and not want_string:
            text = values
            values, col_bad = _safe_convert(values, col.type, dialect.decimal)
            for i in np.flatnonzero(col_bad & ~bad):
                bad_detail[int(i)] = f"column '{col.name}' is not {col.type}"
                if col.type == "float" and dialect.decimal == "," and "." in str(text[i]):
                    bad_detail[int(i)] += _POINT_IN_DECIMAL_COMMA
            bad |= col_bad
        columns.append(values)
    key_hash = None
    if key_index is not None:
        key_strings = columns[key_index]
        if schema.column(schema.key).type != "string":  # type: ignore[arg-type]
            converted_key, key_bad = _safe_convert(
                key_strings,
                schema.column(schema.key).type,  # type: ignore[arg-type]
                dialect.decimal,
            )
            for i in np.flatnonzero(key_bad & ~bad):
                bad_detail[int(i)] = (
                    f"column '{schema.key}' is not {schema.column(schema.key).type}"  # type: ignore[arg-type]
                )
            bad |= key_bad
            columns[key_index] = converted_key
        key_hash = _hash_string_array(key_strings)

    if report:  # after the key's conversion: a float key is read as text first
        floats = [
            (i, c.name, columns[i]) for i, c in enumerate(schema.columns) if c.type == "float"
        ]
        if schema.key and schema.column(schema.key).type == "float":
            out_of_range = scan = None  # the kernel read the key as text: it flagged none
        _warn_float32_overflow(
            floats,
            block,
            starts,
            ends,
            row_lines,
            dialect,
            source,
            lines_before,
            line_of,
            rows=out_of_range,
            scan=scan,
        )

    label_col = columns[schema.names.index(schema.label)]
    missing_label = arrow.to_bools(label_col.is_null()) & ~bad

    for i in np.flatnonzero(bad):
        line_idx = int(row_lines[i])
        batch.rejects.append(
            Reject(
                line=lines_before + line_of(line_idx) + 1,
                reason="bad_value",
                detail=bad_detail.get(int(i), "unparsable value"),
                text=bytes(block[starts[line_idx] : ends[line_idx]]).decode("utf-8", "replace")[
                    :MAX_REJECT_TEXT
                ],
            )
        )
    for i in np.flatnonzero(missing_label):
        line_idx = int(row_lines[i])
        batch.rejects.append(
            Reject(
                line=lines_before + line_of(line_idx) + 1,
                reason="missing_label",
                detail=f"label '{schema.label}' is empty",
                text=bytes(block[starts[line_idx] : ends[line_idx]]).decode("utf-8", "replace")[
                    :MAX_REJECT_TEXT
                ],
            )
        )
    batch.rejects.sort(key=lambda r: r.line or 0)  # CSV rejects always have a line

    accept = ~(bad | missing_label)
    table = pa.Table.from_arrays(columns, names=schema.names)
    if not accept.all():
        mask = arrow.from_numpy(accept)
        table = table.filter(mask)
        if key_hash is not None:
            key_hash = key_hash[accept]
    batch.table = table
    if key_hash is None:
        lines = row_lines[accept]
        key_hash = xxh64.hash_slices(arr, starts[lines], ends[lines])
    batch.row_hash = key_hash
    return batch


_INF_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


#: Zero values looked at again per column and block for underflow (a block of scientific
#: data full of zeros must not be re-read row by row).
MAX_ZERO_CHECKS = 1000


def _warn_float32_overflow(
    floats: list[tuple[int, str, pa.Array]],
    block: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    row_lines: np.ndarray,
    dialect: CsvDialect,
    source: str,
    lines_before: int,
    line_of: Any,
    rows: np.ndarray | None = None,
    scan: np.ndarray | None = None,
) -> None:
    """Log the values of the float columns ``(index, name, values)`` beyond float32's range:
    stored as ±inf (``1e39``) or as zero (``1e-50``).

    ``rows``, when given, are the only rows that can hold such a value apart from those of
    ``scan``: the compiled parser flags them while it converts
    (:attr:`csv_parse.FastColumns.out_of_range`), so a block without any costs nothing here,
    and ``scan`` holds the rows Arrow converted (the quoted records of a mixed block). Without
    ``rows`` (a block Arrow parsed) this runs over the whole block, so the work is vectorised
    and only candidate rows are looked at again:
    infinities whose text is not an ``inf`` spelling, and zeros whose record holds a
    negative exponent (``e-``, the one way to write such a small number short of 46 zeros;
    one compiled test for the block) and whose text is not zero (the first
    :data:`MAX_ZERO_CHECKS` per block).
    """
    if not floats or (rows is not None and rows.size == 0 and (scan is None or not scan.size)):
        return
    data = [arrow.to_numpy(values) for _, _, values in floats]  # views
    n = len(data[0])
    if rows is None:
        candidates = _range_candidates(data, np.arange(n), block, starts, ends, row_lines)
    else:
        candidates = np.zeros(n, dtype=bool)
        candidates[rows] = True
        if scan is not None and scan.size:
            candidates |= _range_candidates(data, scan, block, starts, ends, row_lines)
    _report_float32_overflow(
        floats, data, candidates, block, starts, ends, row_lines, dialect, source, lines_before,
        line_of,
    )  # fmt: skip


def _range_candidates(
    data: list[np.ndarray],
    subset: np.ndarray,
    block: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    row_lines: np.ndarray,
) -> np.ndarray:
    """The rows among ``subset`` (row indices) that may hold a float beyond float32's range:
    an infinity, or a zero whose record holds ``e-`` (the first :data:`MAX_ZERO_CHECKS`)."""
    out = np.zeros(len(data[0]), dtype=bool)
    any_inf = np.zeros(subset.size, dtype=bool)
    any_zero = np.zeros(subset.size, dtype=bool)
    for d in data:
        values = d[subset]
        any_inf |= np.isinf(values)
        any_zero |= values == 0
    out[subset[any_inf]] = True
    zero_rows = subset[any_zero]
    if zero_rows.size:
        zero_rows = zero_rows[
            csv_records.has_negative_exponent(block, starts, ends, row_lines[zero_rows])
        ][:MAX_ZERO_CHECKS]
        out[zero_rows] = True
    return out


def _report_float32_overflow(
    floats: list[tuple[int, str, pa.Array]],
    data: list[np.ndarray],
    rows: np.ndarray,
    block: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    row_lines: np.ndarray,
    dialect: CsvDialect,
    source: str,
    lines_before: int,
    line_of: Any,
) -> None:
    """Log, per float column, its ±inf or zero values in the candidate ``rows`` (a bool mask)
    whose text is neither an ``inf`` spelling nor zero."""
    if not rows.any():
        return
    for (index, name, values), d in zip(floats, data, strict=True):
        candidates = rows & (np.isinf(d) | (d == 0))
        if not candidates.any():
            continue
        found = []
        for i in np.flatnonzero(candidates & arrow.valid_mask(values)).tolist():
            record = row_lines[i]
            text = bytes(block[starts[record] : ends[record]]).decode("utf-8", "replace")
            fields = next(iter(dialect.python_reader(text)), [])
            field = fields[index].strip() if index < len(fields) else ""
            if field.lower() in _INF_WORDS:
                continue
            try:
                if d[i] == 0 and Decimal(field.replace(dialect.decimal, ".")) == 0:
                    continue
            except (InvalidOperation, ValueError):
                continue
            found.append((lines_before + line_of(int(record)) + 1, field))
        if found:
            line, field = found[0]
            log.warning(
                "%s: %d value(s) of column '%s' beyond the float32 range stored as ±inf or 0 "
                "(first: line %d, %s); make the column a string in --schema to keep them exact",
                source,
                len(found),
                name,
                line,
                field[:40],
            )


def _hash_string_array(values: pa.Array) -> np.ndarray:
    """xxh64 of each string's UTF-8 bytes (nulls hash like the empty string)."""
    values = pc.fill_null(values, arrow.scalar(""))
    if values.type != pa.string():
        values = pc.cast(values, pa.string())
    data, offsets = arrow.string_buffers(values)
    return xxh64.hash_slices(data, offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64))


__all__ = [
    "CsvSource",
    "content_tag",
    "list_sources",
    "parse_block",
    "read_piece",
    "read_sample",
]
