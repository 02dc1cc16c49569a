"""The sharding configuration: every option of a run, typed, documented and checked in one
place; the ``shard`` command's flags and the pipeline's sharding parameters derive from it.

:class:`ShardConfig` is the input of the sharder (:mod:`shardtrain.data.sharding`, which
re-exports it), but lives outside its package: importing this module loads neither the
sources nor pyarrow, so ``shardtrain shard --help`` builds its flags from it in a few
milliseconds. The source of a run is imported when :meth:`ShardConfig.source` makes it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from shardtrain.errors import ConfigError
from shardtrain.options import check, option

if TYPE_CHECKING:
    from shardtrain.data.csv_dialect import CsvDialect
    from shardtrain.data.sources.base import Source

MIB = 1024 * 1024

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


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


def parse_resize(text: str) -> tuple[int, int]:
    """``--resize 224x224`` → ``(224, 224)``: the image source's parser
    (:func:`shardtrain.data.sources.images.parse_resize`), imported when a size is given."""
    from shardtrain.data.sources.images import parse_resize

    size = parse_resize(text)
    assert size is not None  # text is not None
    return size


def _megabytes(mb: int, name: str, *, min: float, help: str) -> Any:
    """An option given in MB (flag ``--NAME-mb``, pipeline parameter ``NAME_mb``), held in
    bytes; ``mb`` is its default."""
    return option(
        mb * MIB,
        flags=(f"--{name.replace('_', '-')}-mb",),
        unit=MIB,
        min=min,
        help=help,
        pipeline=f"{name}_mb",
    )


def format_splits(splits: tuple[tuple[str, float], ...]) -> str:
    """``(("train", 0.9), ("eval", 0.1))`` as ``train=0.9,eval=0.1``: the inverse of
    :func:`parse_splits`."""
    return ",".join(f"{name}={fraction:g}" for name, fraction in splits)


#: What ``--format auto`` reads files named ``*<suffix>`` (``.gz`` removed first) as.
FORMAT_SUFFIXES: dict[str, str] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".parq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "csv",
}


def detect_format(sources: tuple[str, ...] | list[str]) -> str:
    """The tabular format of ``sources`` (files or globs) from their names: ``parquet`` for
    ``*.parquet``/``*.pq``/``*.parq``, ``jsonl`` for ``*.jsonl``/``*.ndjson`` (also ``.gz``),
    else ``csv``.

    Raises:
        ConfigError: the sources name files of different formats.
    """
    found: dict[str, str] = {}
    for source in sources:
        name = source.rstrip("/").rsplit("/", 1)[-1].lower().removesuffix(".gz")
        suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
        found.setdefault(FORMAT_SUFFIXES.get(suffix, "csv"), source)
    if len(found) > 1:
        shown = ", ".join(f"{fmt} ({src})" for fmt, src in found.items())
        raise ConfigError(f"the sources mix formats: {shown}; shard each format separately")
    return next(iter(found), "csv")


@dataclass(frozen=True)
class ShardConfig:
    """Everything a sharding run needs: every option of ``shardtrain shard`` and of the
    pipeline's sharding steps, defined once.

    Each field is declared with :func:`shardtrain.options.option`: its help (also the flag's
    help, ``shardtrain shard --help``), its flag and the pipeline parameter that carries it
    (``shardtrain pipeline params``). The ``shard`` command's flags are generated from these
    fields, and so are the pipeline's sharding parameters and its components' signatures,
    each described by its option's help (:mod:`shardtrain.kubeflow.parameters`).

    The options that decide the output layout (:meth:`plan_options`, and the source's schema
    and options) are in the plan's fingerprint: re-running into the same output with other
    values fails unless ``overwrite``. How a run is spread (``worker_index``, ``num_workers``,
    ``processes``) is no pipeline parameter: the pipeline's graph sets it, from
    ``shard_workers`` and ``shard_cpu``; nor are ``overwrite`` and ``overwrite_foreign`` (a
    pipeline never deletes data).
    """

    sources: tuple[str, ...] = option(
        argument=True,
        help="CSV, Parquet or JSON-lines files or globs (local, s3://, gs://; .gz files are "
        "decompressed); for images, the ROOT of a directory tree, or manifest CSV files.",
        pipeline="sources",
    )
    output: str = option(
        flags=("--output", "-o"),
        help="Dataset URI (local path, s3://, gs://).",
        pipeline="dataset_uri",
    )
    label: str = option("", help="Label column [images tree: label].", pipeline="label")
    key: str | None = option(
        None, help="Column hashed for the split [default: whole row].", pipeline="key"
    )
    splits: tuple[tuple[str, float], ...] = option(
        (("train", 0.9), ("eval", 0.1)),
        flags=("--split",),
        help="Named splits and fractions (summing to 1).",
        parse=parse_splits,
        format=format_splits,
        pipeline="splits",
    )
    source_format: str = option(
        "auto",
        flags=("--format",),
        choices=("auto", "csv", "parquet", "jsonl"),
        help="Format of tabular SOURCES: auto picks it from their names (.parquet/.pq, "
        ".jsonl/.ndjson[.gz], else CSV).",
        pipeline="source_format",
    )
    schema_file: str | None = option(
        None,
        flags=("--schema",),
        help="YAML/JSON file overriding inferred types and dropping columns (not images).",
        pipeline="schema_file",
    )
    delimiter: str | None = option(
        None,
        help="CSV field delimiter: one character, or tab/comma/semicolon/pipe "
        "[default: detected from the first lines among , ; tab |].",
        pipeline="delimiter",
    )
    quote_char: str = option(
        '"',
        help="CSV quote character; '' reads quotes as text (and lets large files be cut "
        "without reading them at planning).",
        pipeline="quote_char",
    )
    escape_char: str | None = option(
        None,
        help="CSV escape character (e.g. \\) [default: none; quotes in quoted fields are doubled].",
        pipeline="escape_char",
    )
    encoding: str = option(
        "utf-8",
        help="Text encoding of the CSV files (utf-8, cp932, shift_jis, latin-1, cp1252, "
        "utf-16...); others than UTF-8 are transcoded while read (UTF-16 files one task each).",
        pipeline="encoding",
    )
    no_header: bool = option(
        False,
        help="The CSV files have no header line; name the columns with --columns.",
        pipeline="no_header",
    )
    columns: tuple[str, ...] | None = option(
        None,
        metavar="A,B,...",
        help="Column names of CSV files without a header (with --no-header) [default: the "
        "columns of --schema, in order].",
        parse=lambda text: tuple(n.strip() for n in text.split(",")),
        format=",".join,
        pipeline="columns",
    )
    null_values: tuple[str, ...] | None = option(
        None,
        metavar="V,V,...",
        help="CSV values read as missing, quoted or not (e.g. ',NA,-' for the empty field, "
        "NA and -) [default: '', NA, N/A, NULL, null, or the --schema file's].",
        parse=lambda text: tuple(text.split(",")),
        format=",".join,
        pipeline="null_values",
    )
    skip_initial_space: bool = option(
        False,
        help='Ignore spaces after each CSV delimiter (1, 2, "a").',
        pipeline="skip_initial_space",
    )
    decimal: str = option(
        ".",
        choices=(".", ","),
        help="Decimal mark of CSV numbers: , reads 1,5 and -0,25e3 as floats (European "
        "Excel, pandas decimal=',', R write.csv2; fields then split by ; or another "
        "delimiter, and 1.5 is text). No thousands separators: 1.234,5 is text.",
        pipeline="decimal",
    )
    infer_types: str = option(
        "all",
        choices=("all", "sample"),
        help="CSV column types from every row of every file (all: the first 4 MB's types are "
        "checked by the tasks as they read, and when a later value does not fit them -- a "
        "zip code 98115-4820 after numbers -- every task runs again with the types of all "
        "rows: no row rejected for a type the first rows did not show), or from the first "
        "4 MB of the first file only (sample: a later value that does not fit is rejected "
        "as bad_value).",
        pipeline="infer_types",
    )
    compression: str = option(
        "auto",
        choices=("auto", "gzip", "none"),
        help="Shard compression. auto: none for columnar blocks (uncompressed they are already "
        "smaller than gzip per-row shards, and the training input reads them faster than "
        "gzip ones), gzip for per-row Examples (several times smaller).",
        pipeline="compression",
    )
    # Level 1 is ISA-L's deflate, several times faster than zlib's level 1 (see the writer's
    # _gzip_compressor; figures in benchmarks/RESULTS.md).
    compression_level: int = option(
        1,
        min=1,
        max=9,
        help="gzip level: 1 is fastest (ISA-L); 2-9 are zlib's, smaller and slower.",
        pipeline="compression_level",
    )
    record_format: str = option(
        "auto",
        choices=("auto", "columnar", "example"),
        help="columnar: one tf.train.Example per block of up to 256 rows (one list per "
        "column), parsed several times faster by `shardtrain train` (tabular data only); "
        "example: one tf.train.Example per row, for readers that parse Examples themselves "
        "(TFX, TFDV, a plain TFRecordDataset). auto: columnar for tabular data, example for "
        "images.",
        pipeline="record_format",
    )
    num_shards: int | None = option(
        None,
        min=1,
        help="Shards per split [default: from the data size].",
        pipeline="num_shards",
    )
    target_shard_bytes: int = _megabytes(
        128,
        "target_shard",
        min=1,
        help="Shard size (MB) aimed at when the number of shards is not given.",
    )
    min_shards: int = option(8, min=1, help="Never fewer shards per split.", pipeline="min_shards")
    # A task keeps its shards open until it ends, each with an upload buffer on object
    # storage: 128 MiB tasks hold half the buffers of 256 MiB ones at the same speed.
    task_bytes: int = _megabytes(
        128, "task", min=0.01, help="Input MB per task (the unit of parallelism and resume)."
    )
    # Small blocks keep the working set in the CPU caches: 4 MiB is faster than 16 MiB.
    block_bytes: int = _megabytes(
        4, "block", min=0.01, help="Input MB parsed at once; bounds the memory of each process."
    )
    max_bad_fraction: float = option(
        0.001,
        min=0,
        max=1,
        help="Fail when more than this fraction of rows is rejected.",
        pipeline="max_bad_fraction",
    )
    top_k: int = option(
        100,
        min=1,
        help="Vocabulary entries kept per categorical column in the statistics.",
        pipeline="top_k",
    )
    worker_index: int = option(
        0,
        min=0,
        envvar="SHARDTRAIN_WORKER_INDEX",
        help="This worker's index in [0, --num-workers).",
    )
    num_workers: int = option(
        1,
        min=1,
        envvar="SHARDTRAIN_NUM_WORKERS",
        help="Workers sharing the job; with more than one, run `finalize` after all.",
    )
    processes: int | None = option(
        None, min=1, help="Local processes of this worker [default: CPU count]."
    )
    overwrite: bool = option(
        False,
        help="Replace the shardtrain dataset at --output, whatever its state (complete, "
        "partly written, damaged, made from other inputs or options): shard it afresh. "
        "Deletes only what a dataset consists of (its plan, metadata, shards, rejects and "
        "_tasks) and refuses when --output holds other files too (see --overwrite-foreign).",
    )
    overwrite_foreign: bool = option(
        False,
        help="With --overwrite: also delete every file under --output that is not part of a "
        "shardtrain dataset (without it, such files make --overwrite refuse).",
    )
    images: bool = option(
        False,
        help="SOURCE is an image tree ROOT/<class>/*.jpg|png.",
        pipeline="images",
    )
    image_column: str | None = option(
        None,
        help="SOURCES are manifests (CSV); this column has image paths or URIs.",
        pipeline="image_column",
    )
    resize: tuple[int, int] | None = option(
        None,
        metavar="WxH",
        help="Re-encode images to this size [default: keep the files as they are].",
        parse=parse_resize,
        format=lambda size: f"{size[0]}x{size[1]}",
        pipeline="resize",
    )

    #: The options given as ``auto`` and resolved by the constructor (``record_format``,
    #: ``compression``), set on each instance: a dataset written when ``auto`` meant per-row
    #: Examples is kept so only when the run left them to ``auto``
    #: (:func:`shardtrain.data.sharding.stored_layout.keep_stored_layout`). No field, so no
    #: option: it follows from the others.
    auto_resolved: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if not self.sources:
            raise ConfigError("give at least one source CSV file or glob")
        if self.data_kind == "image":
            if not self.label and self.image_column is None:
                from shardtrain.data.sources.images import TREE_LABEL

                object.__setattr__(self, "label", TREE_LABEL)
            if self.key is not None:
                raise ConfigError("--key does not apply to images: their path is the split key")
            if self.schema_file is not None:
                raise ConfigError("--schema applies to tabular sources only")
            if self.source_format not in ("auto", "csv"):
                raise ConfigError(f"--format {self.source_format} does not apply to images")
            if self.resize is not None and min(self.resize) < 1:
                raise ConfigError("--resize must be WIDTHxHEIGHT with both at least 1")
        elif self.resize is not None:
            raise ConfigError("--resize applies to image datasets only")
        if self.data_kind == "image" and self.record_format == "columnar":
            raise ConfigError("--record-format columnar applies to tabular data only, not images")
        resolved = []
        if self.record_format == "auto":
            chosen = "example" if self.data_kind == "image" else "columnar"
            object.__setattr__(self, "record_format", chosen)
            resolved.append("record_format")
        if self.compression == "auto":
            chosen = "none" if self.record_format == "columnar" else "gzip"
            object.__setattr__(self, "compression", chosen)
            resolved.append("compression")
        object.__setattr__(self, "auto_resolved", tuple(resolved))
        if self.data_kind == "tabular":
            self.csv_dialect()  # checks the dialect options
            if self.no_header and not self.columns and not self.schema_file:
                raise ConfigError("--no-header needs the column names: --columns a,b,c or --schema")
        if not self.label:
            raise ConfigError("--label is required: name the label column")
        check(self)  # every option's range and choices
        if not self.worker_index < self.num_workers:
            raise ConfigError(
                f"--worker-index must be in [0, {self.num_workers}) "
                f"(got {self.worker_index} of {self.num_workers})"
            )
        if self.overwrite and self.num_workers > 1:
            raise ConfigError("--overwrite is only allowed with a single worker")
        if self.overwrite_foreign and not self.overwrite:
            raise ConfigError("--overwrite-foreign goes with --overwrite")
        validate_splits(self.splits)

    @property
    def gzip(self) -> bool:
        return self.compression == "gzip"

    @property
    def data_kind(self) -> str:
        """``image`` for a directory tree or manifest of images, else ``tabular`` (CSV)."""
        return "image" if self.images or self.image_column is not None else "tabular"

    @property
    def tabular_format(self) -> str:
        """``csv``, ``parquet`` or ``jsonl``: ``--format``, or detected from the sources'
        names (:func:`detect_format`)."""
        if self.source_format != "auto":
            return self.source_format
        return detect_format(self.sources)

    def source(self) -> Source:
        """The source this run reads: CSV, Parquet or JSON-lines files, or images (a tree or
        manifests)."""
        if self.data_kind == "image":
            from shardtrain.data.sources.images import ImageSource

            return ImageSource(
                self.sources, label=self.label, image_column=self.image_column, resize=self.resize
            )
        fmt = self.tabular_format
        if fmt == "parquet":
            from shardtrain.data.sources.parquet import ParquetSource

            return ParquetSource(
                self.sources, label=self.label, key=self.key, schema_file=self.schema_file
            )
        if fmt == "jsonl":
            from shardtrain.data.sources.jsonl import JsonLinesSource

            return JsonLinesSource(
                self.sources, label=self.label, key=self.key, schema_file=self.schema_file
            )
        from shardtrain.data.sources.csv import CsvSource

        return CsvSource(
            self.sources,
            label=self.label,
            key=self.key,
            schema_file=self.schema_file,
            dialect=self.csv_dialect(),
            infer_types=self.infer_types,
            processes=self.processes,
            max_bad_fraction=self.max_bad_fraction,
        )

    def csv_dialect(self) -> CsvDialect:
        """The CSV dialect the options describe (the delimiter None: detected).

        Raises:
            ConfigError: contradictory or malformed dialect options.
        """
        from shardtrain.data.csv_dialect import CsvDialect

        return CsvDialect(
            delimiter=self.delimiter,
            quote_char=self.quote_char,
            escape_char=self.escape_char,
            encoding=self.encoding,
            header=not self.no_header,
            columns=self.columns,
            null_values=self.null_values,
            skip_initial_space=self.skip_initial_space,
            decimal=self.decimal,
        )

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
            # Only for columnar blocks: per-row datasets sharded before the option existed
            # keep their plan.
            **({"record_format": self.record_format} if self.record_format != "example" else {}),
            # Columnar blocks hold rows in hash order (column_blocks.ROW_ORDER); recorded so a
            # reader knows, and so a run begun by a version that kept source order is not
            # resumed into a mix of both.
            **({"row_order": "hashed"} if self.record_format == "columnar" else {}),
        }


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
