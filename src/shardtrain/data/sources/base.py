"""The seam between the sharder and its sources: the :class:`Source` interface and the types
both sides share.

A source is what the sharder reads rows from: CSV files (:mod:`.csv`), Parquet files
(:mod:`.parquet`), JSON lines (:mod:`.jsonl`), images in a directory tree or named by manifests
(:mod:`.images`). The sharder (:mod:`shardtrain.data.sharding`)
plans, splits, encodes, writes, resumes and finalizes every dataset the same way; a source only
answers four questions:

1. **What is there?** :meth:`Source.plan_inputs` lists the inputs (:class:`SourceFile`: URI,
   size, a version tag that changes with the content), settles the schema and estimates sizes,
   once, while the run is planned.
2. **What are the rows of one piece?** The plan cuts the inputs into :class:`Piece` s, byte
   ranges of a source (:func:`plan_pieces`); a task calls :meth:`Source.read_piece` for each
   of its pieces and gets :class:`Batch` es of typed rows in bounded memory, each with a 64-bit
   hash per row (the split key) and the rows it rejected (:class:`Reject`), with their reason.
3. **Which statistics describe its columns?** :meth:`Source.new_statistics`.
4. **What should a fresh process load before its first task?** :meth:`Source.warm_up`.

Every row a source reads is either accepted into ``Batch.table`` or reported in
``Batch.rejects``: ``rows_read == table.num_rows + len(rejects)`` for every batch, and the
sharder checks it.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import math
import os
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from gzip import BadGzipFile
from typing import IO, Any, ClassVar, Required, TypedDict

import numpy as np
import pyarrow as pa

from shardtrain import storage
from shardtrain.data.histogram import HistogramBins
from shardtrain.data.schema import Schema
from shardtrain.data.statistics import ColumnStats, new_stats
from shardtrain.errors import DataError, ShardtrainError, StorageError

#: Longest raw text kept for one rejected row.
MAX_REJECT_TEXT = 1000


@dataclass(frozen=True)
class SourceFile:
    """One input file (or one directory tree of images) and what identifies its content."""

    uri: str
    size: int
    version: str

    @property
    def gzip(self) -> bool:
        return self.uri.endswith(".gz")


@dataclass(frozen=True)
class Piece:
    """A byte range ``[start, end)`` of one source file, read by one task."""

    uri: str
    start: int
    end: int
    gzip: bool = False

    def to_dict(self) -> dict:
        return {"uri": self.uri, "start": self.start, "end": self.end, "gzip": self.gzip}

    @classmethod
    def from_dict(cls, d: dict) -> Piece:
        return cls(uri=d["uri"], start=d["start"], end=d["end"], gzip=d.get("gzip", False))


@dataclass
class Reject:
    """One rejected row.

    ``line`` is the 1-based line counted from the start of the piece (the sharder turns it into
    the file's line number), or None where a row has no line (an image of a directory tree).
    """

    line: int | None
    reason: str  # wrong_field_count | bad_value | missing_label | (images) missing_image ...
    detail: str
    text: str

    @property
    def extra(self) -> dict[str, Any]:
        """Fields written to ``rejects.jsonl`` besides line, reason, detail and text."""
        return {}

    @property
    def where(self) -> str:
        """Where the row is, for error messages: its line, or what the source says."""
        return f"line {self.line}" if self.line is not None else ""


@dataclass
class Batch:
    """The rows of one block: accepted rows as typed Arrow columns, plus the rejects."""

    table: pa.Table  # accepted rows, columns in schema order
    row_hash: np.ndarray  # uint64 per accepted row: xxh64 of the key (or of the whole row)
    rejects: list[Reject] = field(default_factory=list)
    rows_read: int = 0  # non-blank data rows seen in this block
    blank_lines: int = 0
    lines: int = 0  # physical lines in the block (0 where rows have no lines)
    bytes_read: int = 0
    #: The kinds of the block's fields, counted as a type pass counts them, when the plan's
    #: types are a guess the tasks check (see :mod:`shardtrain.data.sharding.settle`); else None.
    type_counts: np.ndarray | None = None


def sparse_counts(counts: np.ndarray) -> list[list[int]]:
    """A piece's Batch.type_counts (added up) as JSON: ``[column, code, count]`` per nonzero
    count (most of a tally is zeros)."""
    columns, codes = np.nonzero(counts)
    return [[int(a), int(b), int(counts[a, b])] for a, b in zip(columns, codes, strict=True)]


def dense_counts(sparse: list[list[int]], width: int, n_codes: int) -> np.ndarray:
    """Inverse of :func:`sparse_counts`, for a schema of ``width`` columns."""
    counts = np.zeros((width, n_codes), dtype=np.int64)
    for column, code, count in sparse:
        counts[column, code] = count
    return counts


@dataclass(frozen=True)
class PlanInputs:
    """What a source tells the plan.

    Attributes:
        sources: the inputs with their sizes and versions (pieces are byte ranges of them).
        schema: the dataset's schema.
        input_bytes: about how many bytes the run will read.
        estimated_rows: about how many rows the run will read.
        options: settings the source's readers need, stored in the plan (and so part of its
            fingerprint); ``data_kind`` names a non-tabular dataset. Read-only: a later hook
            returns the options it adds to (:class:`AlignedPieces`, :class:`FinalSchema`).
        output_ratio: shard bytes per input byte when the source knows it (encoded images do
            not compress further); None: the sharder measures it by encoding ``sample``.
        sample: some parsed rows, and ``sample_bytes`` the input bytes they came from.
    """

    sources: list[SourceFile]
    schema: Schema
    input_bytes: int
    estimated_rows: int
    options: Mapping[str, Any] = field(default_factory=dict)
    output_ratio: float | None = None
    sample: pa.Table | None = None
    sample_bytes: int = 0


@dataclass(frozen=True)
class AlignedPieces:
    """What :meth:`Source.align_pieces` returns: the pieces cut where rows can be cut, and the
    source's plan options with what aligning found (for :meth:`Source.recall`)."""

    pieces: list[Piece]
    options: Mapping[str, Any]


@dataclass(frozen=True)
class FinalSchema:
    """What :meth:`Source.final_schema` returns: the schema the tasks write with, and the
    source's plan options with what finding it found (CSV: the types by all rows)."""

    schema: Schema
    options: Mapping[str, Any]


@dataclass(frozen=True)
class SourceLayout:
    """What a task reads its pieces with: the planned sources, schema and source options,
    and the record starts found so far (per URI, a piece's start -> the start of its first
    record, where a reader's guess was found wrong: see ``sharding.alignment``)."""

    sources: tuple[SourceFile, ...]
    schema: Schema
    options: Mapping[str, Any]
    record_starts: Mapping[str, Mapping[int, int]] = field(default_factory=dict)


class Source(abc.ABC):
    """A kind of input the sharder reads. See the module docstring.

    Instances carry the user's settings for the source (patterns, label, ...) and must be
    cheap to create: the sharder creates one in every process that runs tasks.
    """

    #: ``data_kind`` of the datasets made from this source (``tabular`` or ``image``).
    data_kind: ClassVar[str]
    #: Lines of every file before its first row (a CSV header): rejects' line numbers count
    #: them. 0 for sources without a header (JSON lines; Parquet numbers rows, not lines).
    header_lines: ClassVar[int] = 1

    @abc.abstractmethod
    def plan_inputs(self) -> PlanInputs:
        """List the inputs, settle the schema and estimate sizes (once per run).

        Raises:
            DataError: inputs are missing, empty or unreadable, or lack the label.
            ConfigError: the settings contradict each other or the data.
        """

    @abc.abstractmethod
    def read_piece(self, piece: Piece, layout: SourceLayout, block_bytes: int) -> Iterator[Batch]:
        """Stream one piece as batches of about ``block_bytes`` of input each."""

    def piece_extent(self, piece: Piece) -> dict[str, int]:
        """Where the last :meth:`read_piece` of ``piece`` (read to its end) began and stopped
        reading rows, in bytes of the source: ``{"first": ..., "stop": ...}`` for a source
        whose pieces find their own rows (CSV: the records that begin in the piece), checked
        to chain across the pieces of a file once all are read (``sharding.alignment``); by
        default ``{}``: a piece's rows are its bytes' own."""
        return {}

    def recall(self, stored: Mapping[str, Any] | None) -> None:  # noqa: B027 - optional hook
        """Receive the plan already stored at the output (``_plan.json`` as a dict), if any,
        before :meth:`plan_inputs`: a source whose planning reads all the data (JSON lines'
        type pass) takes its findings from there when the inputs are the same. By default
        nothing is kept: the plan must come out the same with or without it."""

    def align_pieces(self, pieces: list[Piece], inputs: PlanInputs) -> AlignedPieces:
        """Move the boundaries :func:`plan_pieces` placed to where this source's rows can be
        cut, without reading the data (CSV: gzip files and files that cannot be cut stay
        whole; each piece finds its records when read, see :meth:`piece_extent`). By default
        they stay.

        Returns the pieces and ``inputs.options`` with what was found here added (for
        :meth:`recall`)."""
        return AlignedPieces(pieces, inputs.options)

    def final_schema(self, pieces: list[Piece], inputs: PlanInputs) -> FinalSchema:
        """The schema the tasks write with, once the pieces are aligned (``inputs``: with the
        options :meth:`align_pieces` returned): by default the one :meth:`plan_inputs`
        inferred. A source may refine it by reading every piece (CSV's type pass over all
        rows, run in parallel over ``pieces``) and return the options with what it found
        added (stored in the plan, so :meth:`recall` can take it back)."""
        return FinalSchema(inputs.schema, inputs.options)

    def new_statistics(
        self, schema: Schema, bins: Mapping[str, HistogramBins] | None = None
    ) -> dict[str, ColumnStats]:
        """Empty statistics for every feature column (merged across tasks by the sharder);
        numeric columns count into their ``bins`` (the plan's)."""
        bins = bins or {}
        return {c.name: new_stats(c.type, bins.get(c.name)) for c in schema.features}

    def warm_up(self) -> None:  # noqa: B027 - optional hook: nothing to load by default
        """Load what the first task would otherwise load (compiled kernels): a head start for
        the sharder's pool processes."""


class TabularSettings(TypedDict, total=False):
    """The keyword arguments of :class:`TabularSource` (for sources that add their own)."""

    label: Required[str]
    key: str | None
    schema_file: str | None


class TabularSource(Source):
    """The settings every tabular source shares: which files, which label, which split key,
    which schema overrides.

    Args:
        patterns: files or globs.
        label: the label column.
        key: the column hashed for the split; None hashes the whole row.
        schema_file: YAML/JSON overrides of the schema (see
            :class:`~shardtrain.data.schema.SchemaOverrides`).
    """

    data_kind = "tabular"

    def __init__(
        self,
        patterns: tuple[str, ...] | list[str],
        *,
        label: str,
        key: str | None = None,
        schema_file: str | None = None,
    ):
        self.patterns = list(patterns)
        self.label = label
        self.key = key
        self.schema_file = schema_file


@contextlib.contextmanager
def open_source(uri: str, *, gzip: bool, block_size: int | None = None) -> Iterator[IO[bytes]]:
    """Open a source file for reading; a damaged file ends in one line naming it.

    A gzip stream that ends early (``EOFError``: a truncated download or copy) or does not
    decompress (a flipped byte, a CRC or length mismatch, not gzip at all) raises a
    :class:`DataError` with how far the reader got, in compressed and uncompressed bytes; any
    other ``OSError`` from a read raises a :class:`StorageError`. Without this an
    ``EOFError`` reaches Click, which prints only ``Aborted!``.
    """
    compression = "gzip" if gzip else None
    with storage.open(uri, "rb", compression=compression, block_size=block_size) as f:
        try:
            yield f
        except ShardtrainError:
            raise
        except (EOFError, zlib.error, OSError) as exc:
            raise _read_error(uri, f, gzip, exc) from exc


def _read_error(uri: str, f: IO[bytes], gzip: bool, exc: BaseException) -> ShardtrainError:
    """The one-line error for a failed read of ``f`` (see :func:`open_source`)."""
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not gzip or not isinstance(exc, EOFError | zlib.error | BadGzipFile):
        return StorageError(f"{uri}: cannot read ({reason})")
    where = ""
    with contextlib.suppress(Exception):  # positions are a courtesy; never hide the error
        raw = getattr(f, "fileobj", None)
        compressed = raw.tell() if raw is not None else None
        where = f" after {f.tell():,} uncompressed bytes"
        if compressed is not None:
            where += f" ({compressed:,} compressed bytes read)"
    what = "truncated" if isinstance(exc, EOFError) else "corrupt"
    return DataError(
        f"{uri}: {what} gzip file: {reason}{where}; replace the file and re-run with --overwrite"
    )


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask, bounded by a cgroup v2 CPU quota (a
    container's CPU limit), at least 1. ``os.cpu_count()`` is the node's count in a pod."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, count)


def plan_pieces(sources: list[SourceFile], piece_bytes: int) -> list[Piece]:
    """Cut plain files into byte ranges of at most ``piece_bytes``; one piece per gzip file."""
    pieces = []
    for src in sources:
        if src.gzip or src.size <= piece_bytes:
            pieces.append(Piece(src.uri, 0, src.size, src.gzip))
            continue
        n = math.ceil(src.size / piece_bytes)
        bounds = [src.size * i // n for i in range(n + 1)]
        pieces.extend(Piece(src.uri, a, b) for a, b in itertools.pairwise(bounds))
    return pieces
