"""Compile every kernel a job uses ahead of the job: ``shardtrain warm-up``.

The compiled (numba) kernels are compiled on first use for the argument types they meet and
cached on disk (:mod:`shardtrain.kernels.cache`). Without a warm cache, the first
``shardtrain shard`` in a fresh environment spends ~20 s of CPU compiling before it reads a
row, and so does every shard pod and TFJob replica started from an image that did not ship
the cache. :func:`warm_up` pays that once, at install time (the Dockerfile and ``make env``
run it): it runs the real code paths on tiny generated data in a temporary folder, so
every signature a job meets is compiled and saved:

* a quest CSV (float, integer, boolean and string columns, malformed rows, a gzip copy),
  sharded split by a key column, and again split by the whole row into uncompressed shards,
  and once more cut into byte-range pieces (the quote-aware record alignment), and with
  ``;`` between fields (the compiled parser takes the delimiter as a parameter); every CSV
  run counts the kinds of its fields as it parses them, to type its columns by all rows (the
  default ``--infer-types all``: :mod:`shardtrain.kernels.csv_types` and the parser's
  ``count_types``);
* a CSV with quoted fields holding delimiters, quotes and line breaks, and floats beyond
  float32's range (the record-bounds and range-check kernels);
* the quest CSV again in columnar records (an Example per block of rows), and as Parquet
  (several row groups) and JSON lines, each cut into pieces;
* a tree of JPEG and PNG images, sharded as is and re-encoded to another size;
* the CRC-32C check the trainer runs over a downloaded shard;
* the pruning of the categorical statistics' value counts
  (:mod:`shardtrain.kernels.value_counts`), which only a column with more distinct values
  than the statistics track reaches: called directly, with tiny limits; and their counting
  of a table too large for the CPU caches (hashed ahead, prefetched), which only a
  high-cardinality column reaches: called directly too.

Every compiled kernel of :mod:`shardtrain.kernels` is thereby compiled, except the software
CRC-32C, which runs only on CPUs without SSE4.2 (below the x86-64-v2 baseline).

Run it with the same ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` as the jobs (the image sets
them), or the jobs will not find what it compiled.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from shardtrain.kernels import cache

__all__ = ["WarmUpReport", "warm_up"]


@dataclass(frozen=True)
class WarmUpReport:
    """What :func:`warm_up` did."""

    target: cache.Target
    """The CPU the kernels were compiled for."""
    stats: cache.CompileStats
    """Kernel signatures compiled now and loaded from an existing cache."""


def warm_up() -> WarmUpReport:
    """Compile (or load) every kernel signature a sharding job or a trainer uses.

    Safe to run again: what is cached already is loaded, not compiled. Runs in one process
    (no pool) and writes only to a temporary folder and numba's cache.
    """
    from shardtrain.data import datagen, sharding
    from shardtrain.data.shard_config import ShardConfig
    from shardtrain.kernels import arrow
    from shardtrain.kernels.crc32c import crc32c
    from shardtrain.kernels.value_counts import ValueCounts

    with tempfile.TemporaryDirectory(prefix="shardtrain-warm-up-") as tmp:
        csv = os.path.join(tmp, "quest.csv")
        csv_gz = os.path.join(tmp, "quest-more.csv.gz")
        images = os.path.join(tmp, "images")
        datagen.generate_quest_logs(csv, 2000, seed=1, bad_fraction=0.02)
        datagen.generate_quest_logs(csv_gz, 500, seed=2)
        datagen.generate_images(images, 12, size=32, seed=1, manifest=True, threads=1)
        quoted = os.path.join(tmp, "quoted.csv")
        with open(quoted, "w", encoding="utf-8") as f:
            f.write("id,text,value,label\n")
            for i in range(1000):
                text = f'"line {i}, with ""quotes""\nand a second line"' if i % 3 else f"plain {i}"
                f.write(f"{i},{text},{'1e-50' if i % 7 == 0 else i * 0.5},{i % 2}\n")
        semicolon = os.path.join(tmp, "quest-semicolon.csv")
        with open(csv, "rb") as src, open(semicolon, "wb") as dst:
            dst.write(src.read().replace(b",", b";"))
        parquet, jsonl = _columnar_copies(csv_gz, tmp)
        runs = [
            ShardConfig(sources=(csv, csv_gz), output=f"{tmp}/out-keyed", label="cleared",
                        key="attempt_id", processes=1, max_bad_fraction=0.5),
            ShardConfig(sources=(csv,), output=f"{tmp}/out-rows", label="cleared", processes=1,
                        compression="none", max_bad_fraction=0.5),
            ShardConfig(sources=(csv,), output=f"{tmp}/out-pieces", label="cleared",
                        processes=1, task_bytes=64 * 1024, max_bad_fraction=0.5),
            ShardConfig(sources=(semicolon,), output=f"{tmp}/out-semicolon", label="cleared",
                        processes=1, delimiter=";", max_bad_fraction=0.5),
            ShardConfig(sources=(quoted,), output=f"{tmp}/out-quoted", label="label",
                        key="id", processes=1, task_bytes=16 * 1024),
            ShardConfig(sources=(csv,), output=f"{tmp}/out-columnar", label="cleared",
                        processes=1, record_format="columnar", max_bad_fraction=0.5),
            ShardConfig(sources=(parquet,), output=f"{tmp}/out-parquet", label="cleared",
                        key="attempt_id", processes=1, task_bytes=16 * 1024),
            ShardConfig(sources=(jsonl,), output=f"{tmp}/out-jsonl", label="cleared",
                        key="attempt_id", processes=1, task_bytes=16 * 1024),
            ShardConfig(sources=(images,), output=f"{tmp}/out-images", images=True,
                        label="label", processes=1),
            ShardConfig(sources=(os.path.join(images, "manifest.csv"),),
                        output=f"{tmp}/out-resized", image_column="image", label="label",
                        resize=(16, 16), processes=1),
        ]  # fmt: skip
        for config in runs:
            sharding.shard(config)
        # The trainer's check of a downloaded shard (shardtrain.train.dataset.verify_shard).
        crc32c(b"warm-up", 0)
        # The statistics of a column with more distinct values than they track: pruning.
        ValueCounts(max_values=2, max_bytes=1 << 10).add(arrow.strings(["a", "b", "c"]))
        # A table that outgrows the CPU caches is hashed ahead and prefetched: as a task
        # counts strings, and as a worker's summary merges its tasks' values with counts.
        ids = arrow.strings([str(i) for i in range(20_000)])
        tasks, merged = ValueCounts(1 << 20, 1 << 24), ValueCounts(1 << 20, 1 << 24)
        for _ in range(2):
            tasks.add(ids)
        top = tasks.table()
        for _ in range(2):
            merged.add(top.column("value").chunk(0), arrow.to_numpy(top.column("count")))
    return WarmUpReport(target=cache.target(), stats=cache.compile_stats())


def _columnar_copies(csv: str, tmp: str) -> tuple[str, str]:
    """The rows of ``csv`` as a Parquet file of several row groups and as JSON lines."""
    import json

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    table = pacsv.read_csv(csv)
    parquet = os.path.join(tmp, "quest.parquet")
    pq.write_table(table, parquet, row_group_size=100)
    jsonl = os.path.join(tmp, "quest.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for row in table.to_pylist():
            f.write(json.dumps(row, default=str) + "\n")
    return parquet, jsonl
