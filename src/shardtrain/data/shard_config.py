"""The sharding configuration: every option of a run, typed and checked in one place."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from shardtrain.data.sources.base import Source
from shardtrain.data.sources.csv import CsvSource
from shardtrain.data.sources.images import TREE_LABEL, ImageSource
from shardtrain.errors import ConfigError

MIB = 1024 * 1024

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


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
                object.__setattr__(self, "label", TREE_LABEL)
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

    def source(self) -> Source:
        """The source this run reads: CSV files, or images (a tree or manifests)."""
        if self.data_kind == "image":
            return ImageSource(
                self.sources, label=self.label, image_column=self.image_column, resize=self.resize
            )
        return CsvSource(self.sources, label=self.label, key=self.key, schema_file=self.schema_file)

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
