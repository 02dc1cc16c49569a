"""The sharder: CSV far larger than memory → TFRecord shards of ``tf.train.Example`` in storage.

Layout of a sharded dataset at ``URI``::

    URI/metadata.json                                  written last: the commit marker
    URI/<split>/part-00000-of-00016.tfrecord.gz        one tf.train.Example per row
    URI/rejects/rejects.jsonl                          every rejected row: file, line, reason
    URI/_plan.json, URI/_tasks/...                     bookkeeping for resume and scale-out

How a run works
---------------
1. **Plan** (deterministic, identical on every worker): list the sources with their sizes and
   version tags, infer the schema from a sample of the first source (or apply a schema file),
   estimate the output size, choose the number of shards per split (``--num-shards``, or
   ~``target_shard_bytes`` each and never fewer than ``min_shards``), and cut the input into
   *tasks*: runs of byte-range pieces of about ``task_bytes``. Each task owns a fixed range of
   shard indices of every split, so the layout does not depend on how many workers run.
2. **Tasks**: worker ``i`` of ``n`` runs the tasks ``t`` with ``t % n == i`` (each in
   ``processes`` local processes). A task streams its pieces in blocks, parses and validates
   rows column-wise (:mod:`shardtrain.data.sources.csv`), hashes each row's key — or the whole row —
   with xxHash64 to choose its split (the same row lands in the same split on every run, on
   every machine, with any number of workers) and a shard inside the task's range, encodes
   Examples and TFRecord frames in compiled code (:mod:`shardtrain.kernels.example_encode`)
   and streams them to its shard objects from a writer thread (gzip level 1 through ISA-L;
   local files with ``O_DIRECT``, see :func:`shardtrain.storage.open`). It then writes its
   manifest ``_tasks/task-NNNNN.json`` with counts, checksums and partial statistics — the
   task's commit. The extra local processes are forked from the parent once it has loaded the
   compiled kernels (:class:`_WorkerPool`), so they start with nothing to import or load.
3. **Finalize** (``shardtrain finalize URI``, automatic with one worker): check that every task
   committed, merge statistics, write ``rejects/rejects.jsonl`` with file line numbers, enforce
   ``max_bad_fraction``, and publish ``metadata.json``.

Image datasets (a directory tree ``ROOT/<class>/*.jpg`` or a manifest of image paths) go
through the same plan, tasks, shards, rejects and finalize:
:mod:`shardtrain.data.sources.images` only
supplies the plan's inputs and reads each piece into the same batches (one row per image).

Crash safety: every shard object is atomic (see :mod:`shardtrain.storage`); a task commits by
writing its manifest after its shards; the dataset commits by writing ``metadata.json`` after
everything else. Re-running the same command after a crash (``kill -9`` at any point) skips
committed tasks and redoes the others from scratch, overwriting their shards, so every input row
ends up in exactly one shard exactly once. Re-running after success finds ``metadata.json`` and
does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import json
import logging
import math
import multiprocessing
import os
import queue as queue_module
import re
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardtrain import __version__, storage
from shardtrain.data.schema import SAMPLE_BYTES, Schema, SchemaOverrides, infer_schema
from shardtrain.data.sources import csv as csv_source
from shardtrain.data.sources import images
from shardtrain.data.sources.csv import Batch, Piece, SourceFile
from shardtrain.data.statistics import (
    MANIFEST_TOP,
    CategoricalStats,
    ImageStats,
    LabelStats,
    NumericStats,
    new_stats,
    stats_from_dict,
)
from shardtrain.errors import ConfigError, DataError, ShardtrainError
from shardtrain.kernels import arrow, crc32c, example_encode

log = logging.getLogger(__name__)

METADATA_NAME = "metadata.json"
PLAN_NAME = "_plan.json"
FORMAT = "shardtrain.train.dataset/v1"
MIB = 1024 * 1024

#: At most this many shards of one split are written by one task (bounds open uploads).
MAX_SHARDS_PER_TASK = 16

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardConfig:
    """Everything a sharding run needs. Fields marked *plan* change the output layout.

    Attributes:
        sources: CSV files or globs (local, s3://, gs://; ``.gz`` files are decompressed); for
            images, the ROOT of a directory tree, or manifest CSV files.
        output: the dataset URI.
        label: the label column (*plan*); a directory tree's defaults to ``label``.
        key: column hashed to choose each row's split; None hashes the whole row (*plan*).
        splits: split names and fractions, in order; fractions sum to 1 (*plan*).
        schema_file: YAML/JSON overrides of inferred types, dropped columns (*plan*).
        compression: 'gzip' or 'none' for the shards (*plan*).
        compression_level: gzip level 1-9: 1 (the default) is ISA-L's deflate, ~4.7x zlib's
            level 1 (see :func:`_gzip_compressor`); 2-9 are zlib's, smaller and slower.
        num_shards: shards per split; None derives it from the estimated size (*plan*).
        target_shard_bytes: size aimed at per shard when ``num_shards`` is None (*plan*).
        min_shards: never fewer shards per split than this (*plan*).
        task_bytes: input bytes per task: the unit of parallelism and of resume (*plan*). A
            task keeps its shards open until it ends, each with an upload buffer on object
            storage: 128 MiB tasks hold half the buffers of 256 MiB ones (~25 MB less per
            process when sharding 1 GB into S3) at the same speed.
        block_bytes: bytes parsed at once; bounds memory per process. Small blocks keep the
            working set in the CPU caches: 4 MiB is ~1.5x faster than 16 MiB here.
        max_bad_fraction: fail when more than this fraction of rows is rejected.
        top_k: vocabulary entries kept per categorical column in the statistics.
        worker_index: this worker's index in ``[0, num_workers)``.
        num_workers: workers sharing the job; with more than one, run ``finalize`` after all.
        processes: local processes for this worker's tasks (default: CPU count).
        overwrite: delete an existing, different dataset at ``output`` first.
        images: the source is a directory tree of images ``ROOT/<class>/*.{jpg,jpeg,png}``
            (see :mod:`shardtrain.data.sources.images`) (*plan*).
        image_column: the sources are manifests (CSV) whose column of this name holds image
            paths or URIs; implies ``images`` (*plan*).
        resize: ``(width, height)`` every image is re-encoded to; None stores the files as
            they are (*plan*).
    """

    sources: tuple[str, ...]
    output: str
    label: str = ""
    key: str | None = None
    splits: tuple[tuple[str, float], ...] = (("train", 0.9), ("eval", 0.1))
    schema_file: str | None = None
    compression: str = "gzip"
    compression_level: int = 1
    num_shards: int | None = None
    target_shard_bytes: int = 128 * MIB
    min_shards: int = 8
    task_bytes: int = 128 * MIB
    block_bytes: int = 4 * MIB
    max_bad_fraction: float = 0.001
    top_k: int = 100
    worker_index: int = 0
    num_workers: int = 1
    processes: int | None = None
    overwrite: bool = False
    images: bool = False
    image_column: str | None = None
    resize: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not self.sources:
            raise ConfigError("give at least one source CSV file or glob")
        if self.data_kind == "image":
            if not self.label and self.image_column is None:
                object.__setattr__(self, "label", images.TREE_LABEL)
            if self.key is not None:
                raise ConfigError("--key does not apply to images: their path is the split key")
            if self.schema_file is not None:
                raise ConfigError("--schema applies to CSV sources only")
            if self.resize is not None and min(self.resize) < 1:
                raise ConfigError("--resize must be WIDTHxHEIGHT with both at least 1")
        elif self.resize is not None:
            raise ConfigError("--resize applies to image datasets only")
        if not self.label:
            raise ConfigError("--label is required: name the label column")
        if self.compression not in ("gzip", "none"):
            raise ConfigError(f"--compression must be gzip or none, not '{self.compression}'")
        if not 1 <= self.compression_level <= 9:
            raise ConfigError("--compression-level must be between 1 and 9")
        if self.num_workers < 1 or not 0 <= self.worker_index < self.num_workers:
            raise ConfigError(
                f"--worker-index must be in [0, {self.num_workers}) "
                f"(got {self.worker_index} of {self.num_workers})"
            )
        if self.num_shards is not None and self.num_shards < 1:
            raise ConfigError("--num-shards must be at least 1")
        if not 0.0 <= self.max_bad_fraction <= 1.0:
            raise ConfigError("--max-bad-fraction must be between 0 and 1")
        if self.overwrite and self.num_workers > 1:
            raise ConfigError("--overwrite is only allowed with a single worker")
        validate_splits(self.splits)

    @property
    def gzip(self) -> bool:
        return self.compression == "gzip"

    @property
    def data_kind(self) -> str:
        """``image`` for a directory tree or manifest of images, else ``tabular`` (CSV)."""
        return "image" if self.images or self.image_column is not None else "tabular"

    def plan_options(self) -> dict[str, Any]:
        """The options that determine the output layout (part of the plan fingerprint)."""
        return {
            "label": self.label,
            "key": self.key,
            "splits": [list(s) for s in self.splits],
            "compression": self.compression,
            "num_shards": self.num_shards,
            "target_shard_bytes": self.target_shard_bytes,
            "min_shards": self.min_shards,
            "task_bytes": self.task_bytes,
        }


def parse_splits(text: str) -> tuple[tuple[str, float], ...]:
    """Parse ``train=0.9,eval=0.1`` into ``(("train", 0.9), ("eval", 0.1))``."""
    out = []
    for part in text.split(","):
        name, sep, value = part.strip().partition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = math.nan
        if not sep or math.isnan(fraction):
            raise ConfigError(f"--split: '{part.strip()}' is not NAME=FRACTION (e.g. train=0.9)")
        out.append((name.strip(), fraction))
    splits = tuple(out)
    validate_splits(splits)
    return splits


def validate_splits(splits: tuple[tuple[str, float], ...]) -> None:
    """Split names are path-safe and unique; fractions are positive and sum to 1."""
    names = [n for n, _ in splits]
    if not splits:
        raise ConfigError("--split needs at least one NAME=FRACTION")
    for name, fraction in splits:
        if not _SPLIT_NAME.match(name):
            raise ConfigError(f"--split: '{name}' is not a valid split name (letters, digits, _-)")
        if not 0 < fraction <= 1:
            raise ConfigError(f"--split: the fraction of '{name}' must be in (0, 1]")
    if len(set(names)) != len(names):
        raise ConfigError("--split: split names must be unique")
    total = sum(f for _, f in splits)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"--split: fractions must sum to 1 (they sum to {total:g})")


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """A unit of work: consecutive pieces of input and the shard indices they fill."""

    index: int
    pieces: tuple[Piece, ...]
    #: For each split (in plan order): [first, end) of the global shard indices it writes.
    shard_ranges: tuple[tuple[int, int], ...]

    @property
    def input_bytes(self) -> int:
        return sum(p.end - p.start for p in self.pieces)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pieces": [p.to_dict() for p in self.pieces],
            "shard_ranges": [list(r) for r in self.shard_ranges],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(
            index=d["index"],
            pieces=tuple(Piece.from_dict(p) for p in d["pieces"]),
            shard_ranges=tuple(tuple(r) for r in d["shard_ranges"]),  # type: ignore[misc]
        )


@dataclass(frozen=True)
class Plan:
    """The deterministic layout of a sharding run; identical on every worker."""

    output: str
    sources: tuple[SourceFile, ...]
    schema: Schema
    splits: tuple[tuple[str, float], ...]
    num_shards: tuple[int, ...]  # per split
    tasks: tuple[Task, ...]
    compression: str
    options: dict[str, Any]
    estimated_rows: int
    fingerprint: str = ""

    def shard_path(self, split_index: int, shard: int) -> str:
        """Path of a shard relative to the dataset URI."""
        name, _ = self.splits[split_index]
        total = self.num_shards[split_index]
        ext = ".tfrecord.gz" if self.compression == "gzip" else ".tfrecord"
        return f"{name}/part-{shard:05d}-of-{total:05d}{ext}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "fingerprint": self.fingerprint,
            "sources": [asdict(s) for s in self.sources],
            "schema": self.schema.to_dict(),
            "splits": [list(s) for s in self.splits],
            "num_shards": list(self.num_shards),
            "compression": self.compression,
            "options": self.options,
            "estimated_rows": self.estimated_rows,
            "tasks": [t.to_dict() for t in self.tasks],
        }

    @classmethod
    def from_dict(cls, output: str, d: dict[str, Any]) -> Plan:
        return cls(
            output=output,
            sources=tuple(SourceFile(**s) for s in d["sources"]),
            schema=Schema.from_dict(d["schema"]),
            splits=tuple((n, f) for n, f in d["splits"]),
            num_shards=tuple(d["num_shards"]),
            tasks=tuple(Task.from_dict(t) for t in d["tasks"]),
            compression=d["compression"],
            options=d["options"],
            estimated_rows=d["estimated_rows"],
            fingerprint=d["fingerprint"],
        )


def _fingerprint(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def _estimate_output_ratio(sample: bytes, schema: Schema, gzip_level: int | None) -> float:
    """Bytes of (compressed) TFRecords per byte of CSV, measured on the sample."""
    body = sample[sample.find(b"\n") + 1 :]
    if not body:
        return 2.0
    batch = csv_source.parse_block(body, schema, lines_before=1)
    if batch.table.num_rows == 0:
        return 2.0
    framed, _ = _encode(batch.table, schema, framed=True)
    out = len(framed)
    if gzip_level is not None:
        # zlib whatever compresses the shards: the estimate sets the shard counts, which are
        # part of the plan, so it must not depend on whether isal is installed.
        out = len(zlib.compress(framed.tobytes(), gzip_level))
    return max(out / len(body), 0.01)


def build_plan(config: ShardConfig) -> Plan:
    """List sources, settle the schema and lay out shards and tasks. Deterministic.

    Raises:
        DataError: no sources match, a source is empty/unreadable, the label is missing.
        ConfigError: a schema file or an option is invalid.
    """
    extra_options: dict[str, Any] = {}
    if config.data_kind == "image":  # the image hook: a tree listing or manifests
        inputs = images.plan_inputs(config)
        sources, schema, input_bytes = inputs.sources, inputs.schema, inputs.input_bytes
        ratio, estimated_rows = inputs.output_ratio, inputs.estimated_rows
        extra_options = inputs.options
    else:
        sources = csv_source.list_sources(list(config.sources))
        sample = csv_source.read_sample(sources[0], SAMPLE_BYTES)
        overrides = SchemaOverrides.load(config.schema_file) if config.schema_file else None
        schema = infer_schema(
            sample, sources[0].uri, label=config.label, key=config.key, overrides=overrides
        )
        # Gzip sources: their uncompressed size is unknown up front; 4x is typical for CSV.
        input_bytes = sum(s.size * (4 if s.gzip else 1) for s in sources)
        ratio = _estimate_output_ratio(
            sample, schema, config.compression_level if config.gzip else None
        )
        sample_lines = max(sample.count(b"\n") - 1, 1)
        estimated_rows = int(input_bytes / (len(sample) / (sample_lines + 1)))

    num_shards = []
    for _, fraction in config.splits:
        if config.num_shards:
            num_shards.append(config.num_shards)
        else:
            est = input_bytes * ratio * fraction
            num_shards.append(max(config.min_shards, math.ceil(est / config.target_shard_bytes)))

    # Tasks: enough to keep each task's open shards bounded, few enough that every task owns
    # at least one shard of every split.
    wanted = math.ceil(input_bytes / config.task_bytes)
    wanted = max(wanted, max(math.ceil(m / MAX_SHARDS_PER_TASK) for m in num_shards))
    n_tasks = max(1, min(wanted, min(num_shards)))
    plain_bytes = sum(s.size for s in sources if not s.gzip)
    piece_bytes = max(64 * 1024, math.ceil(plain_bytes / n_tasks)) if plain_bytes else MIB
    pieces = csv_source.plan_pieces(sources, piece_bytes)
    n_tasks = min(n_tasks, len(pieces))
    groups = _group_pieces(pieces, n_tasks)
    tasks = tuple(
        Task(
            index=t,
            pieces=tuple(group),
            shard_ranges=tuple((m * t // n_tasks, m * (t + 1) // n_tasks) for m in num_shards),
        )
        for t, group in enumerate(groups)
    )
    options = {**config.plan_options(), **extra_options}
    plan = Plan(
        output=config.output,
        sources=tuple(sources),
        schema=schema,
        splits=config.splits,
        num_shards=tuple(num_shards),
        tasks=tasks,
        compression=config.compression,
        options=options,
        estimated_rows=estimated_rows,
    )
    payload = plan.to_dict()
    payload.pop("fingerprint")
    return Plan(**{**plan.__dict__, "fingerprint": _fingerprint(payload)})


def _group_pieces(pieces: list[Piece], n_tasks: int) -> list[list[Piece]]:
    """Split pieces, in order, into ``n_tasks`` non-empty runs of about equal bytes."""
    total = sum(p.end - p.start for p in pieces) or 1
    groups: list[list[Piece]] = [[] for _ in range(n_tasks)]
    t, acc = 0, 0
    for i, piece in enumerate(pieces):
        remaining_pieces = len(pieces) - i
        remaining_tasks = n_tasks - t
        # Move on when this task has its share, or when every later task needs a piece.
        if (
            groups[t]
            and t < n_tasks - 1
            and (acc >= total * (t + 1) / n_tasks or remaining_pieces <= remaining_tasks - 1)
        ):
            t += 1
        groups[t].append(piece)
        acc += piece.end - piece.start
    return groups


# --------------------------------------------------------------------------------------------
# Encoding and writing
# --------------------------------------------------------------------------------------------


def _feature_columns(schema: Schema) -> list[example_encode.FeatureColumn]:
    return [example_encode.FeatureColumn(c.name, c.example_kind) for c in schema.written]  # type: ignore[arg-type]


def _column_data(values: pa.Array, kind: str) -> tuple:
    values = arrow.contiguous(values)
    valid = None
    if values.null_count:
        valid = arrow.valid_mask(values)
    if kind == "bytes":
        if values.type not in (pa.string(), pa.binary()):  # binary: encoded images
            values = pc.cast(values, pa.string())
        return (*arrow.string_buffers(values), valid)
    if values.type not in arrow.NUMPY_TYPES:  # bool (bit-packed in Arrow), or a type the
        # parsers do not produce
        values = pc.cast(values, pa.float64() if kind == "float" else pa.int64())
    # The values buffer as it is (the encoder skips missing values, so what a null's slot
    # holds does not matter): no copy, no filling.
    return arrow.to_numpy(values), valid


def _encoder_input(table: pa.Table, schema: Schema) -> tuple[list, list]:
    """The features and their column data, as :func:`example_encode.encode_examples` takes them."""
    columns = _feature_columns(schema)
    return columns, [_column_data(table.column(c.name), c.kind) for c in columns]


def _encode(
    table: pa.Table, schema: Schema, *, order: np.ndarray | None = None, framed: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    columns, arrays = _encoder_input(table, schema)
    return example_encode.encode_examples(
        columns, arrays, table.num_rows, order=order, framed=framed
    )


def _gzip_compressor(level: int) -> Any:
    """A streaming gzip compressor (``compress``/``flush``) at ``level`` (1-9).

    Level 1, the default, is ISA-L's deflate (the ``isal`` package, Intel's igzip): 4.7x
    zlib's level 1 on Examples (663 vs 142 MB/s of input on the benchmark VM) for slightly
    smaller output (23.6% vs 23.9%), which takes gzip shards from ~25 to ~5.5 CPU-seconds
    per GB of CSV. Its output is ordinary gzip: TensorFlow's ``GZIP`` readers, ``gzip`` and
    ``zlib`` read it. Levels 2-9 trade speed for size with zlib, as before; so does every
    level where ``isal`` is not installed.
    """
    if level == 1:
        try:
            from isal import isal_zlib
        except ImportError:  # a platform without wheels: zlib is always there
            pass
        else:
            return isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)
    return zlib.compressobj(level, zlib.DEFLATED, 31)


class _ShardWriter:
    """Streams framed records into one shard object, gzip-compressing and checksumming.

    Uncompressed local shards written with ``O_DIRECT`` are written *in place*: the
    encoder puts each shard's records of a block at the page phase its file has reached
    (:attr:`phase`), so that whole pages go to the disk straight from the encoder's buffer
    (see ``storage._DirectWriter.write_in_place``).
    """

    def __init__(self, uri: str, path: str, gzip_level: int | None, stack: contextlib.ExitStack):
        self.uri = uri
        self.path = path
        self.records = 0
        self.bytes = 0
        self.crc = 0
        # The S3 minimum part size: a task keeps several shards open at once, each with one
        # part in memory. Local shards bypass the page cache (see storage._DirectWriter).
        self._f = stack.enter_context(storage.open(uri, "wb", block_size=5 * MIB, direct=True))
        self._z = _gzip_compressor(gzip_level) if gzip_level else None
        self.in_place = self._z is None and hasattr(self._f, "write_in_place")
        self.queued = 0  # bytes handed to write() so far, counted where jobs are made

    @property
    def phase(self) -> int:
        """Where in its last page the file will end once every queued write is done."""
        return self.queued % example_encode.PAGE

    def write(self, buffer: np.ndarray, start: int, end: int, records: int) -> None:
        """Write the framed records ``buffer[start:end]`` (on the writer thread)."""
        self.records += records
        if self._z is not None:
            self._emit(self._z.compress(memoryview(buffer)[start:end]))
        elif end > start:
            self._count(buffer[start:end])
            if self.in_place:
                self._f.write_in_place(buffer, start, end)
            else:
                self._f.write(memoryview(buffer)[start:end])

    def _emit(self, data: bytes | memoryview) -> None:
        if len(data):
            self._f.write(data)
            self._count(np.frombuffer(data, dtype=np.uint8))

    def _count(self, data: np.ndarray) -> None:
        """Add bytes written to the shard's size and checksum."""
        self.bytes += len(data)
        self.crc = crc32c.crc32c(data, self.crc)

    def finish(self) -> None:
        if self._z is not None:
            self._emit(self._z.flush())
            self._z = None

    def manifest(self, split: str, index: int) -> dict[str, Any]:
        return {
            "split": split,
            "index": index,
            "path": self.path,
            "num_records": self.records,
            "bytes": self.bytes,
            "crc32c": f"{self.crc:08x}",
        }


@dataclass
class TaskResult:
    """What a task reports in its manifest."""

    task: int
    rows_read: int = 0
    rows_accepted: int = 0
    rows_rejected: int = 0
    rejects_by_reason: dict[str, int] = field(default_factory=dict)
    blank_lines: int = 0
    bytes_read: int = 0
    pieces: list[dict[str, Any]] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    label: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _task_uri(output: str, index: int, suffix: str = ".json") -> str:
    return storage.join(output, "_tasks", f"task-{index:05d}{suffix}")


Progress = Callable[[int, int], None]  # (rows, bytes) done since the last call


def run_task(
    plan: Plan, task: Task, config: ShardConfig, progress: Progress | None = None
) -> TaskResult:
    """Shard one task's pieces into its shards and commit the task manifest.

    During the task, everything alive before it (modules, compiled kernels, the plan) is
    kept out of the cyclic garbage collector, whose full passes over those objects cost ~4%
    of a run otherwise (a block makes hundreds of short-lived objects); it goes back to the
    collector afterwards, so a long-lived caller (a notebook) loses nothing.

    Raises:
        DataError: a source is malformed beyond repair, or this task alone already holds
            more rejected rows than the whole run may have.
    """
    gc.freeze()
    try:
        return _run_task(plan, task, config, progress)
    finally:
        gc.unfreeze()


def _run_task(plan: Plan, task: Task, config: ShardConfig, progress: Progress | None) -> TaskResult:
    started = time.monotonic()
    schema = plan.schema
    result = TaskResult(task=task.index)
    column_stats = {c.name: new_stats(c.type) for c in schema.features}
    label_stats = LabelStats()
    fractions = np.cumsum([f for _, f in plan.splits])
    fractions[-1] = 1.0
    # Writer slots: for split s, local shard j → slot base[s] + j.
    counts = [b - a for a, b in task.shard_ranges]
    base = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    counts_arr = np.asarray(counts, dtype=np.uint64)
    gzip_level = config.compression_level if plan.compression == "gzip" else None
    reject_budget = max(1000, int(2 * config.max_bad_fraction * max(plan.estimated_rows, 1)))

    _remove_stale_temporaries(plan, task)
    with contextlib.ExitStack() as stack:
        writers: list[_ShardWriter] = []
        for s, (first, end) in enumerate(task.shard_ranges):
            for shard in range(first, end):
                path = plan.shard_path(s, shard)
                writers.append(
                    _ShardWriter(storage.join(plan.output, path), path, gzip_level, stack)
                )
        rejects_file = stack.enter_context(
            storage.open(_task_uri(plan.output, task.index, ".rejects.jsonl"), "w")
        )
        # Joined before the ExitStack commits (or discards) the shards.
        background = stack.enter_context(_BackgroundWriter())
        for piece_no, piece in enumerate(task.pieces):
            piece_lines = 1 if piece.start == 0 else 0
            for batch in _read_piece(plan, piece, config.block_bytes):
                piece_lines += batch.lines
                _account(result, batch, piece_no, rejects_file)
                if result.rows_rejected > reject_budget:
                    raise DataError(
                        f"{piece.uri}: {result.rows_rejected} of the first {result.rows_read} "
                        f"rows were rejected, more than --max-bad-fraction "
                        f"{config.max_bad_fraction:g} of the ~{plan.estimated_rows} input rows "
                        f"allows; first rejects: {_describe_rejects(batch)}"
                    )
                table = batch.table
                n = table.num_rows
                if n:
                    background.submit(
                        _write_batch(
                            table, batch.row_hash, schema, fractions, base, counts_arr, writers
                        )
                    )
                    for name, stats in column_stats.items():
                        if isinstance(stats, ImageStats):
                            stats.update_table(table, name)
                        else:
                            stats.update(table.column(name))
                    label_stats.update(table.column(schema.label))
                if progress:
                    progress(batch.rows_read, batch.bytes_read)
            result.pieces.append({**piece.to_dict(), "lines": piece_lines})
        background.close()
        for w in writers:
            w.finish()
        shard_split = [
            (s, shard) for s, (a, b) in enumerate(task.shard_ranges) for shard in range(a, b)
        ]
    # Every shard and the rejects are committed (the ExitStack closed them): commit the task.
    result.shards = [
        w.manifest(plan.splits[s][0], shard)
        for w, (s, shard) in zip(writers, shard_split, strict=True)
    ]
    result.stats = {
        name: s.to_dict(MANIFEST_TOP) if isinstance(s, CategoricalStats) else s.to_dict()
        for name, s in column_stats.items()
    }
    result.label = label_stats.to_dict()
    result.seconds = round(time.monotonic() - started, 3)
    manifest = {
        "plan": plan.fingerprint,
        # Not part of the plan, but finalize applies what the workers were told.
        "max_bad_fraction": config.max_bad_fraction,
        "top_k": config.top_k,
        **result.__dict__,  # plain JSON values; asdict() would deep-copy large statistics
    }
    # Internal, and large (the top values of every categorical column): compact JSON.
    storage.write_json(_task_uri(plan.output, task.index), manifest, compact=True)
    return result


def _read_piece(plan: Plan, piece: Piece, block_bytes: int) -> Iterator[Batch]:
    """The source hook: a piece's rows as batches, from CSV or from images."""
    if plan.options.get("data_kind") == "image":
        return images.read_piece(piece, plan, block_bytes=block_bytes)
    return csv_source.read_piece(piece, plan.schema, block_bytes=block_bytes)


def _describe_rejects(batch: Batch, limit: int = 3) -> str:
    return "; ".join(
        f"{f'line {r.line}' if r.line is not None else getattr(r, 'path', '')} "
        f"{r.reason} ({r.detail})"
        for r in batch.rejects[:limit]
    )


def _account(result: TaskResult, batch: Batch, piece_no: int, rejects_file) -> None:
    result.rows_read += batch.rows_read
    result.rows_accepted += batch.table.num_rows
    result.rows_rejected += len(batch.rejects)
    result.blank_lines += batch.blank_lines
    result.bytes_read += batch.bytes_read
    for r in batch.rejects:
        result.rejects_by_reason[r.reason] = result.rejects_by_reason.get(r.reason, 0) + 1
        rejects_file.write(
            json.dumps(
                {
                    "piece": piece_no,
                    "line": r.line,
                    "reason": r.reason,
                    "detail": r.detail,
                    "text": r.text,
                    **getattr(r, "extra", {}),  # images: the image's source URI and path
                },
                ensure_ascii=False,
            )
            + "\n"
        )
    if batch.rows_read != batch.table.num_rows + len(batch.rejects):
        raise AssertionError("row accounting broke: read != accepted + rejected")


def _write_batch(
    table: pa.Table,
    row_hash: np.ndarray,
    schema: Schema,
    fractions: np.ndarray,
    base: np.ndarray,
    counts: np.ndarray,
    writers: list[_ShardWriter],
) -> list[tuple[_ShardWriter, np.ndarray, int, int, int]]:
    """Encode a batch into TFRecord frames grouped by shard; returns the writes to do:
    ``(writer, buffer, start, end, records)``."""
    # High 53 bits → split (uniform in [0, 1)); low 32 bits → shard inside the task's range.
    unit = (row_hash >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
    split = np.minimum(np.searchsorted(fractions, unit, side="right"), len(fractions) - 1)
    low = row_hash & np.uint64(0xFFFFFFFF)
    local = ((low * counts[split]) >> np.uint64(32)).astype(np.int64)
    slot = base[split] + local
    # Stable, so rows keep their input order within a shard. NumPy radix-sorts 16-bit keys
    # (8x faster than its merge sort of int64 keys here).
    keys = slot.astype(np.uint16) if len(writers) <= 1 << 16 else slot
    order = np.argsort(keys, kind="stable")
    per_slot = np.bincount(slot, minlength=len(writers))
    bounds = np.concatenate(([0], np.cumsum(per_slot)))
    columns, arrays = _encoder_input(table, schema)
    if all(w.in_place for w in writers):
        phases = np.array([w.phase for w in writers], dtype=np.int64)
        framed, starts, ends = example_encode.encode_example_groups(
            columns, arrays, table.num_rows, order=order, bounds=bounds, phases=phases
        )
    else:
        framed, offsets = example_encode.encode_examples(
            columns, arrays, table.num_rows, order=order, framed=True
        )
        starts, ends = offsets[bounds[:-1]], offsets[bounds[1:]]
    jobs = []
    for s in np.flatnonzero(per_slot).tolist():
        start, end = int(starts[s]), int(ends[s])
        writers[s].queued += end - start
        jobs.append((writers[s], framed, start, end, int(per_slot[s])))
    return jobs


class _BackgroundWriter:
    """Compresses and writes shard data on a thread while the next block is parsed.

    Writing is mostly kernel time (page cache copies, network sends) and zlib releases the
    GIL, so it overlaps with parsing and encoding. At most ``depth`` blocks wait in the queue,
    which bounds memory: each is ~15 MB of encoded Examples per 4 MiB of CSV, and a deeper
    queue measured no faster (1 GB, 2 processes: 6.1-6.3 s either way). An error on the
    thread is raised on the next submit or on close.
    """

    def __init__(self, depth: int = 1):
        self._queue: queue_module.Queue = queue_module.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="shard-writer", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        while (jobs := self._queue.get()) is not None:
            if self._error is not None:
                continue  # drain without writing after a failure
            try:
                for writer, buffer, start, end, records in jobs:
                    writer.write(buffer, start, end, records)
            except BaseException as exc:  # handed to the producing thread
                self._error = exc

    def submit(self, jobs: list) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(jobs)

    def close(self) -> None:
        """Wait for every queued write; raise the writer thread's error, if any."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> _BackgroundWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()


def _remove_stale_temporaries(plan: Plan, task: Task) -> None:
    """Delete temporary files a killed run left for this task's shards (local output only)."""
    if not storage.is_local(plan.output):
        return  # S3/GCS: an unfinished upload is invisible and expires on its own
    for s, (first, end) in enumerate(task.shard_ranges):
        for shard in range(first, end):
            path = storage.local_path(storage.join(plan.output, plan.shard_path(s, shard)))
            directory, name = os.path.split(path)
            if os.path.isdir(directory):
                for leftover in os.listdir(directory):
                    if leftover.startswith(name + ".tmp-"):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(directory, leftover))


# --------------------------------------------------------------------------------------------
# Running a worker
# --------------------------------------------------------------------------------------------


@dataclass
class ShardOutcome:
    """What :func:`shard` did."""

    status: str  # "complete" | "already-complete" | "worker-done"
    output: str
    tasks_run: int = 0
    tasks_skipped: int = 0
    rows_read: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    metadata: dict[str, Any] | None = None


def _check_existing(config: ShardConfig, plan: Plan) -> str | None:
    """Compare with what is already at the output; returns 'complete' if nothing to do."""
    plan_uri = storage.join(config.output, PLAN_NAME)
    meta_uri = storage.join(config.output, METADATA_NAME)
    existing_plan = storage.read_json(plan_uri) if storage.exists(plan_uri) else None
    if existing_plan is None:
        occupied = storage.exists(meta_uri) or storage.walk_files(config.output)
        if occupied and storage.exists(plan_uri):
            # Another worker of the same job wrote its plan (then files) since we looked.
            existing_plan = storage.read_json(plan_uri)
    if existing_plan is None:
        if occupied and not config.overwrite:
            raise DataError(
                f"{config.output}: not empty and not a shardtrain dataset in progress; "
                "choose an empty --output or pass --overwrite"
            )
        return None
    if existing_plan.get("fingerprint") == plan.fingerprint:
        return "complete" if storage.exists(meta_uri) else "resume"
    if not config.overwrite:
        raise DataError(
            f"{config.output}: holds a dataset sharded from other inputs or options "
            f"(plan {existing_plan.get('fingerprint')} vs {plan.fingerprint}); "
            "use another --output or pass --overwrite"
        )
    return None


def shard(
    config: ShardConfig, progress_factory: Callable[[int], Any] | None = None
) -> ShardOutcome:
    """Run this worker's share of a sharding job; finalize when it is the only worker.

    Args:
        config: the run's configuration.
        progress_factory: called with the worker's input bytes; returns a context manager
            with an ``advance(rows, bytes)`` method (the CLI passes a rich progress bar).

    Returns:
        What happened: ``complete`` (finalized), ``already-complete`` (nothing to do) or
        ``worker-done`` (this worker's tasks are committed; run finalize after all workers).
    """
    started = time.monotonic()
    plan = build_plan(config)
    state = _check_existing(config, plan)
    if state == "complete":
        meta = storage.read_json(storage.join(config.output, METADATA_NAME))
        log.info("%s is already complete (metadata.json present); nothing to do", config.output)
        return ShardOutcome("already-complete", config.output, metadata=meta)
    if state is None and config.overwrite:
        log.info("--overwrite: deleting the previous content of %s", config.output)
        storage.delete(config.output, recursive=True)
    storage.write_json(storage.join(config.output, PLAN_NAME), plan.to_dict())

    mine = [t for t in plan.tasks if t.index % config.num_workers == config.worker_index]
    done = {t.index for t in mine if _task_committed(plan, t.index)}
    todo = [t for t in mine if t.index not in done]
    log.info(
        "plan %s: %d source file(s), %d task(s), shards per split: %s; worker %d/%d runs %d "
        "task(s) (%d already committed)",
        plan.fingerprint[:8],
        len(plan.sources),
        len(plan.tasks),
        ", ".join(f"{n}={m}" for (n, _), m in zip(plan.splits, plan.num_shards, strict=True)),
        config.worker_index,
        config.num_workers,
        len(todo),
        len(done),
    )
    outcome = ShardOutcome("worker-done", config.output, tasks_skipped=len(done))
    total_bytes = sum(t.input_bytes for t in todo)
    # The pool first: forking is only safe before the progress bar starts its thread.
    with _WorkerPool(config, len(todo)) as pool:
        bar = progress_factory(total_bytes) if progress_factory else contextlib.nullcontext()
        with bar as reporter:
            advance = reporter.advance if reporter is not None else None
            results = _run_tasks(plan, todo, config, advance, pool)
    outcome.tasks_run = len(results)
    outcome.rows_read = sum(r.rows_read for r in results)
    outcome.bytes_read = sum(r.bytes_read for r in results)
    if config.num_workers == 1:
        outcome.metadata = finalize(
            config.output, max_bad_fraction=config.max_bad_fraction, top_k=config.top_k
        )
        outcome.status = "complete"
    outcome.seconds = time.monotonic() - started
    return outcome


def _task_committed(plan: Plan, index: int) -> bool:
    uri = _task_uri(plan.output, index)
    if not storage.exists(uri):
        return False
    return storage.read_json(uri).get("plan") == plan.fingerprint


class _WorkerPool:
    """The processes that run tasks beside the parent: ``min(processes, tasks) - 1`` of them.

    Where it is safe they are *forked*, right after the parent has loaded the compiled
    kernels (:func:`_warm_up`): each child starts with everything imported and compiled,
    where a spawned interpreter spends ~1 CPU-second importing shardtrain and loading the
    kernels from numba's cache (a tenth of the whole job's CPU for 1 GB on 2 cores).
    Arrow, jemalloc, OpenBLAS and fsspec reset their own threads in a forked child. Forking
    is not safe when other threads may hold locks the child would need, so the pool spawns
    instead when the process runs threads of its own (fsspec's I/O thread aside) or has
    TensorFlow loaded, and where there is no ``fork`` (macOS, Windows).
    """

    def __init__(self, config: ShardConfig, tasks: int):
        self.workers = max(0, min(config.processes or os.cpu_count() or 1, tasks) - 1)
        self.executor: ProcessPoolExecutor | None = None
        self.progress = None
        if self.workers:
            fork = _fork_is_safe()
            if fork and config.data_kind == "tabular":
                try:
                    _warm_up()
                except Exception:  # only a head start: each task loads what it needs
                    log.debug("warm-up failed", exc_info=True)
            ctx = multiprocessing.get_context("fork" if fork else "spawn")
            log.debug("%d pool process(es), %s", self.workers, ctx.get_start_method())
            self.progress = ctx.SimpleQueue()  # (rows, bytes) per block from the processes
            self.executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=ctx,
                initializer=_init_pool_process,
                initargs=(self.progress, "" if fork else config.data_kind),
            )
            # A forking executor starts all its processes at the first submission, a
            # spawning one a process per submission: either way, every process starts now.
            for _ in range(self.workers):
                self.executor.submit(int)

    def __enter__(self) -> _WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)


def _run_tasks(
    plan: Plan,
    tasks: list[Task],
    config: ShardConfig,
    advance: Progress | None,
    pool: _WorkerPool,
) -> list[TaskResult]:
    """Run tasks here and in the pool's processes, taking them in turn.

    The parent works too (it has the plan and its imports loaded already), so N processes
    cost N process footprints, not N + 1. Tasks are handed out one at a time from a shared
    queue: a process that finishes early simply takes the next task.
    """
    helpers = min(pool.workers, len(tasks) - 1)
    if helpers <= 0 or pool.executor is None:
        return [run_task(plan, t, config, advance) for t in tasks]
    executor = pool.executor
    todo: queue_module.Queue[Task] = queue_module.Queue()
    for t in tasks:
        todo.put(t)
    results: dict[int, TaskResult] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    local_advance = advance
    if advance is not None:

        def local_advance(rows: int, nbytes: int) -> None:
            with lock:
                advance(rows, nbytes)

    progress = pool.progress

    def pump() -> None:
        while (item := progress.get()) is not None:
            if local_advance:
                local_advance(*item)

    def feed() -> None:
        plan_dict = plan.to_dict()
        while not errors:
            try:
                task = todo.get_nowait()
            except queue_module.Empty:
                return
            try:
                result = executor.submit(
                    _run_task_in_process, plan.output, plan_dict, task.index, config
                ).result()
                results[task.index] = result
            except BaseException as exc:  # re-raised by the caller
                errors.append(exc)

    pumper = threading.Thread(target=pump, daemon=True)
    pumper.start()
    try:
        feeders = [threading.Thread(target=feed, daemon=True) for _ in range(helpers)]
        for f in feeders:
            f.start()
        while not errors:
            try:
                task = todo.get_nowait()
            except queue_module.Empty:
                break
            try:
                results[task.index] = run_task(plan, task, config, local_advance)
            except BaseException as exc:
                errors.append(exc)
        for f in feeders:
            f.join()
    finally:
        progress.put(None)
        pumper.join()
    if errors:
        raise errors[0]
    return [results[t.index] for t in tasks]


def tune_process_memory() -> None:
    """Have glibc keep freed memory for reuse instead of returning it to the OS at once.

    A block allocates and frees tens of MB of NumPy buffers (the encoded Examples alone are
    ~15 MB per 4 MiB of CSV). With glibc's defaults a freed buffer is often given back
    (``munmap``, or trimming the heap top) and the next block's comes back as fresh pages
    that the kernel zeroes: ~7% of a run's CPU. Raising the mmap and trim thresholds keeps
    them in the heap (1 GB, 2 processes: 160k → 102k page faults, 1.2 → 0.9 s of system
    time, ~20 MB more RSS per process). Process-wide, so the CLI and the pipeline's shard
    step call it for their own process; library callers decide for theirs. No-op without
    glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
        libc.mallopt(m_mmap_threshold, 64 * MIB)
        libc.mallopt(m_trim_threshold, 256 * MIB)
    except (OSError, AttributeError):
        pass


def _fork_is_safe() -> bool:
    """Whether this process can fork pool processes (see :class:`_WorkerPool`)."""
    if "fork" not in multiprocessing.get_all_start_methods() or "tensorflow" in sys.modules:
        return False
    main = threading.main_thread()
    return all(t is main or t.name == "fsspecIO" for t in threading.enumerate())


def _die_with_parent() -> None:
    """Make a pool process exit when the parent dies (kill -9 of the CLI).

    A watcher thread polls the parent pid. (``PR_SET_PDEATHSIG`` would be simpler but fires
    when the *thread* that spawned the process exits, and the pool spawns processes from its
    feeder threads, which end early: that killed healthy workers with 3+ processes.)
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(137)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


_progress_queue = None


def _init_pool_process(queue, data_kind: str) -> None:
    global _progress_queue
    _die_with_parent()
    _progress_queue = queue
    logging.basicConfig(level=logging.WARNING)
    if data_kind == "tabular":
        try:
            _warm_up()
        except Exception:  # only a head start: the first task loads what it needs anyway
            log.debug("warm-up failed", exc_info=True)


def _warm_up() -> None:
    """Load the compiled CSV, statistics and encoding kernels from numba's cache (~0.3 s),
    by sharding two rows of every column type in memory."""
    sample = b"f,i,b,s,label\n1.5,2,true,x,1\n-0.25,3,false,y,0\n"
    schema = infer_schema(sample, "warm-up", label="label")
    batch = csv_source.parse_block(sample[sample.index(b"\n") + 1 :], schema, lines_before=1)
    for column in schema.features:
        new_stats(column.type).update(batch.table.column(column.name))
    _encode(batch.table, schema, framed=True)


def _run_task_in_process(
    output: str, plan_dict: dict, index: int, config: ShardConfig
) -> TaskResult:
    plan = Plan.from_dict(output, plan_dict)
    queue = _progress_queue

    def report(rows: int, nbytes: int) -> None:
        if queue is not None:
            queue.put((rows, nbytes))

    return run_task(plan, plan.tasks[index], config, report)


# --------------------------------------------------------------------------------------------
# Finalize
# --------------------------------------------------------------------------------------------


def finalize(
    output: str, *, max_bad_fraction: float | None = None, top_k: int | None = None
) -> dict[str, Any]:
    """Merge the committed tasks of a run into ``metadata.json`` (the dataset's commit).

    Args:
        output: the dataset URI.
        max_bad_fraction: fail when more rows than this fraction were rejected
            (default: the value the workers were given).
        top_k: vocabulary entries kept per categorical column (default: the workers').

    Returns:
        The metadata written.

    Raises:
        DataError: tasks are missing, the rejected fraction is too high, or no row survived.
    """
    plan_uri = storage.join(output, PLAN_NAME)
    if not storage.exists(plan_uri):
        raise DataError(f"{output}: no sharding run found ({PLAN_NAME} is missing)")
    plan = Plan.from_dict(output, storage.read_json(plan_uri))
    manifests = []
    missing = []
    for task in plan.tasks:
        uri = _task_uri(output, task.index)
        m = storage.read_json(uri) if storage.exists(uri) else None
        if m is None or m.get("plan") != plan.fingerprint:
            missing.append(task.index)
        else:
            manifests.append(m)
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise DataError(
            f"{output}: {len(missing)} of {len(plan.tasks)} task(s) have not finished "
            f"(tasks {shown}); run the missing workers (task t belongs to worker t % n) first"
        )

    rows_read = sum(m["rows_read"] for m in manifests)
    rejected = sum(m["rows_rejected"] for m in manifests)
    accepted = sum(m["rows_accepted"] for m in manifests)
    reasons: dict[str, int] = {}
    for m in manifests:
        for reason, n in m["rejects_by_reason"].items():
            reasons[reason] = reasons.get(reason, 0) + n
    rejects_uri = _write_rejects(plan, manifests)

    limit = (
        manifests[0].get("max_bad_fraction", 0.001)
        if max_bad_fraction is None
        else max_bad_fraction
    )
    top_k = manifests[0].get("top_k", 100) if top_k is None else top_k
    if rows_read == 0:
        raise DataError(
            f"{output}: the input has no data rows ({len(plan.sources)} source file(s))"
        )
    if rejected / rows_read > limit:
        top = ", ".join(f"{k}={v}" for k, v in sorted(reasons.items()))
        raise DataError(
            f"{output}: {rejected} of {rows_read} rows ({rejected / rows_read:.2%}) were "
            f"rejected ({top}), more than --max-bad-fraction {limit:g}; see {rejects_uri}"
        )
    if accepted == 0:
        raise DataError(f"{output}: no row was accepted; see {rejects_uri}")

    schema = plan.schema
    stats: dict[str, Any] = {}
    for col in schema.features:
        merged = new_stats(col.type)
        for m in manifests:
            merged.merge(stats_from_dict(m["stats"][col.name]))  # type: ignore[arg-type]
        stats[col.name] = (
            merged.to_dict(top_k) if isinstance(merged, CategoricalStats) else merged.to_dict()
        )
    label = LabelStats()
    for m in manifests:
        label.merge(LabelStats.from_dict(m["label"]))
    label_info = _label_info(schema, label, output)

    splits: dict[str, Any] = {}
    for s, (name, fraction) in enumerate(plan.splits):
        shards = sorted(
            (sh for m in manifests for sh in m["shards"] if sh["split"] == name),
            key=lambda sh: sh["index"],
        )
        if [sh["index"] for sh in shards] != list(range(plan.num_shards[s])):
            raise DataError(f"{output}: shards of split '{name}' are incomplete")
        splits[name] = {
            "fraction": fraction,
            "num_records": sum(sh["num_records"] for sh in shards),
            "num_shards": len(shards),
            "bytes": sum(sh["bytes"] for sh in shards),
            "shards": [
                {k: sh[k] for k in ("path", "num_records", "bytes", "crc32c")} for sh in shards
            ],
        }
    metadata = {
        "format": FORMAT,
        **({"data_kind": "image"} if plan.options.get("data_kind") == "image" else {}),
        "tool_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "plan": plan.fingerprint,
        "label": schema.label,
        "key": schema.key,
        "label_info": label_info,
        "schema": schema.to_dict(),
        "stats": {"columns": stats, "label": label.to_dict(), "num_rows": accepted},
        "rows_read": rows_read,
        "rows_accepted": accepted,
        "rows_rejected": rejected,
        "rejects_by_reason": dict(sorted(reasons.items())),
        "blank_lines": sum(m["blank_lines"] for m in manifests),
        "rejects": rejects_uri.removeprefix(output.rstrip("/") + "/"),
        "compression": "GZIP" if plan.compression == "gzip" else "NONE",
        "splits": splits,
        "sources": [asdict(s) for s in plan.sources],
        "options": plan.options,
    }
    storage.publish(output, metadata, name=METADATA_NAME)
    log.info(
        "committed %s: %d rows read, %d accepted, %d rejected; %s",
        output,
        rows_read,
        accepted,
        rejected,
        ", ".join(f"{n}={v['num_records']}" for n, v in splits.items()),
    )
    return metadata


def _label_info(schema: Schema, label: LabelStats, output: str) -> dict[str, Any]:
    classes = sorted(label.counts, key=_class_sort_key)
    if len(classes) > 1000:
        raise DataError(
            f"{output}: label '{schema.label}' has {len(classes)} distinct values; "
            "a classification label has at most 1000"
        )
    column = schema.column(schema.label)
    return {
        "type": column.type,
        "task": "binary" if len(classes) <= 2 else "multiclass",
        "classes": classes,
    }


def _class_sort_key(value: str) -> tuple:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def _write_rejects(plan: Plan, manifests: list[dict[str, Any]]) -> str:
    """Merge the tasks' rejects into one file with line numbers of the source files."""
    # Lines before each piece: the lines of the earlier pieces of the same file.
    pieces = sorted(
        ((p["uri"], p["start"], p["lines"]) for m in manifests for p in m["pieces"]),
    )
    offset: dict[tuple[str, int], int] = {}
    running: dict[str, int] = {}
    for uri, start, lines in pieces:
        offset[(uri, start)] = running.get(uri, 0)
        running[uri] = running.get(uri, 0) + lines
    target = storage.join(plan.output, "rejects", "rejects.jsonl")
    with storage.open(target, "w") as out:
        for m in sorted(manifests, key=lambda m: m["task"]):
            if not m["rows_rejected"]:
                continue
            with storage.open(_task_uri(plan.output, m["task"], ".rejects.jsonl"), "r") as f:
                for line in f:
                    r = json.loads(line)
                    piece = m["pieces"][r.pop("piece")]
                    line = r["line"]  # None: an image of a directory tree
                    r = {
                        "source": r.get("source") or piece["uri"],
                        "line": None
                        if line is None
                        else offset[(piece["uri"], piece["start"])] + line,
                        **{k: r[k] for k in ("reason", "detail", "text")},
                        # Images: the path, and the manifest the line number refers to.
                        **({"path": r["path"]} if "path" in r else {}),
                        **({"manifest": piece["uri"]} if "path" in r and line is not None else {}),
                    }
                    out.write(json.dumps(r, ensure_ascii=False) + "\n")
    return target


# --------------------------------------------------------------------------------------------
# Reading back
# --------------------------------------------------------------------------------------------


def load_metadata(uri: str) -> dict[str, Any]:
    """The committed metadata of a sharded dataset.

    Raises:
        NotCommittedError: the dataset is not complete (metadata.json missing).
    """
    return storage.read_committed(uri, name=METADATA_NAME)


def shard_uris(uri: str, metadata: dict[str, Any], split: str) -> list[str]:
    """Absolute URIs of the shards of one split."""
    if split not in metadata["splits"]:
        raise ShardtrainError(
            f"{uri}: no split '{split}' (splits: {', '.join(metadata['splits'])})"
        )
    return [storage.join(uri, s["path"]) for s in metadata["splits"][split]["shards"]]


def iter_rejects(uri: str, metadata: dict[str, Any], limit: int = 10) -> Iterator[dict[str, Any]]:
    """The first ``limit`` rejected rows of a dataset."""
    if not metadata.get("rows_rejected"):
        return
    with storage.open(storage.join(uri, metadata["rejects"]), "r") as f:
        for i, line in enumerate(f):
            if i >= limit:
                return
            yield json.loads(line)


__all__ = [
    "METADATA_NAME",
    "NumericStats",
    "Plan",
    "ShardConfig",
    "ShardOutcome",
    "build_plan",
    "finalize",
    "iter_rejects",
    "load_metadata",
    "parse_splits",
    "run_task",
    "shard",
    "shard_uris",
]
