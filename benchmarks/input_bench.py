"""Training input speed: every figure of issue 17's table, in one run, on the same data.

Usage (from the repository root, in the project environment)::

    .venv/bin/python benchmarks/input_bench.py            # 300 k rows, 3 rounds, MinIO, train runs
    .venv/bin/python benchmarks/input_bench.py --quick    # a sanity run: small, 1 round
    .venv/bin/python benchmarks/input_bench.py --no-minio --no-train

One 300 k-row quest CSV (``gen-data quest``: 30 numeric + 5 categorical columns) feeds:

* **the naive loader** our users come from: the CSV pre-split into 1000-row CSV files, read
  by a ``keras.utils.PyDataset`` with pandas (categorical columns hashed to ids: Keras takes
  no strings from it), 2 worker processes, consumed through Keras's own adapter (what
  ``model.fit`` does with it: ``PyDatasetAdapter.get_tf_dataset``);
* **a plain tf.data pipeline** on the per-row gzip shards (interleave 4, shuffle 10 k records,
  batch, parallel ``parse_example``, prefetch): the textbook recipe;
* **``shardtrain.train.dataset.train_dataset``** for every record format (``example``: one
  ``tf.train.Example`` per row, ``columnar``: one per block of rows) and compression, from
  local disk and from MinIO (``s3://`` through the shard cache; a private MinIO started with
  ``scripts/minio-up``, as the shard benchmark does);
* **the model alone**: the tabular model trained by the trainer's own distributed loop
  (``build_train_loop``) on one cached batch fed again and again (no input cost);
* **end to end**: ``shardtrain train`` examples/s (the trainer's own progress lines, the
  median of the logged loops after the first) for one process and for chief + worker
  (``shardtrain run-local --workers 1``), on per-row gzip and columnar shards;
* **default flags**: the CSV sharded by ``shardtrain shard`` given neither
  ``--record-format`` nor ``--compression``, its training input and one-process
  ``shardtrain train`` each set against the model alone (issue 29's targets: input >= 3x the
  model, training >= 0.8 of it), one line each at the end.

Every input figure is measured ``--rounds`` times, the variants interleaved round by round
(the 2 cores are shared: compare variants of the same run only), and the one-process
training runs once per round too; the table shows the best and the median rows/s, and the
CPU microseconds per row (every thread of the process: what the input and the model compete
for in one training process). Batches are pulled inside a ``tf.function``, as the trainer
does (``--consumer python`` pulls them from Python instead). Targets (issue 17): input
>= 2x the naive loader and >= 3x the model; MinIO >= 80% of local; one-process training
within 20% of min(input, model). Figures go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from shard_bench import _minio_env  # noqa: E402  (the same private MinIO as the shard bench)

NUMERIC, CATEGORICAL = 30, 5
LABEL, KEY = "cleared", "attempt_id"
NAIVE_FILE_ROWS = 1000
FORMATS = (("example", "gzip"), ("example", "none"), ("columnar", "gzip"), ("columnar", "none"))


@dataclass(frozen=True)
class Rate:
    """One measurement: rows/s (wall clock) and the CPU time the process spent per row.

    CPU per row is what the input and the model compete for in one process (every thread
    counted, ``time.process_time``); it moves far less than rows/s when other jobs load the
    machine, so it is the figure to compare across runs. (The naive loader's two worker
    processes are not counted: its figure is its main process's share only.)
    """

    rows_per_s: float
    cpu_us_per_row: float


#: How the timed loops consume batches: ``graph`` (the default) pulls them inside one
#: ``tf.function``, as the trainer's loop does (:func:`shardtrain.train.loop.build_train_loop`);
#: ``python`` pulls them one ``next()`` at a time in Python, which adds eager bookkeeping
#: for every tensor of every batch (measured: 1.35-1.44 M vs 2.08-2.28 M rows/s for the
#: same columnar pipeline, ~0.25 ms a batch of 37 tensors) that no training run pays.
CONSUMER = "graph"


def _timed(run: Callable[[], int]) -> Rate:
    wall, cpu = time.monotonic(), time.process_time()
    rows = run()
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    return Rate(rows / wall, cpu / rows * 1e6)


def _rate(dataset, count: int, warmup: int, rows_of: Callable | None = None, strategy=None) -> Rate:
    """Rows/s over ``count`` batches of ``dataset`` after ``warmup`` batches (see
    :data:`CONSUMER`). ``rows_of(element)`` counts an element's rows (default: the labels'
    length, or a vector of records' length); ``strategy``: ``dataset`` is its distributed
    dataset (one local replica)."""
    import tensorflow as tf

    def count_rows(element):
        if strategy is not None:
            element = strategy.experimental_local_results(element)[0]
        if rows_of is not None:
            return rows_of(element)
        rows = element[1] if isinstance(element, tuple) else element
        return tf.shape(rows, out_type=tf.int64)[0]

    it = iter(dataset)
    if CONSUMER == "python":

        def pull(n: int) -> int:
            return sum(int(count_rows(next(it))) for _ in range(n))

        pull(warmup)
        return _timed(lambda: pull(count))

    @tf.function
    def consume(n):
        total = tf.constant(0, tf.int64)
        for _ in tf.range(n):
            total += tf.cast(count_rows(next(it)), tf.int64)
        return total

    consume(tf.constant(warmup, tf.int64))
    return _timed(lambda: int(consume(tf.constant(count, tf.int64))))


# ------------------------------------------------------------------------------------------
# The naive loader
# ------------------------------------------------------------------------------------------


def split_csv(csv: Path, out: Path, rows: int = NAIVE_FILE_ROWS) -> list[str]:
    """The CSV cut into files of ``rows`` rows each (with the header): the naive layout."""
    if out.exists() and any(out.iterdir()):
        return sorted(str(p) for p in out.iterdir())
    out.mkdir(parents=True, exist_ok=True)
    files = []
    with open(csv) as f:
        header = f.readline()
        chunk: list[str] = []
        for line in f:
            chunk.append(line)
            if len(chunk) == rows:
                files.append(_write_chunk(out, len(files), header, chunk))
                chunk = []
        if chunk:
            files.append(_write_chunk(out, len(files), header, chunk))
    return files


def _write_chunk(out: Path, index: int, header: str, lines: list[str]) -> str:
    path = out / f"part-{index:05d}.csv"
    path.write_text(header + "".join(lines))
    return str(path)


def naive_dataset(files: list[str], workers: int = 2):
    """A ``keras.utils.PyDataset``: item ``i`` is CSV file ``i`` read with pandas, as
    ``({column: array}, label)``: numeric columns float32, categorical ones hashed to
    int64 bucket ids (Keras's adapters refuse string arrays)."""
    import keras
    import numpy as np
    import pandas as pd

    class CsvFiles(keras.utils.PyDataset):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, index: int):
            frame = pd.read_csv(files[index])
            label = frame.pop(LABEL).to_numpy(np.int64)
            frame.pop(KEY)
            features = {}
            for name in frame.columns:
                col = frame[name]
                if col.dtype.kind in "fiub":
                    features[name] = col.to_numpy(np.float32)
                else:  # Keras adapters take no strings: hashed into 1000 buckets
                    hashed = pd.util.hash_array(col.fillna("").to_numpy(object))
                    features[name] = (hashed % 1000).astype(np.int64)
            return features, label

    return CsvFiles(workers=workers, use_multiprocessing=True)


def naive_rate(files: list[str], batches: int, warmup: int) -> Rate:
    """Rows/s the naive loader delivers as tensors, through Keras's PyDataset adapter."""
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    adapter = PyDatasetAdapter(naive_dataset(files), shuffle=True)
    ds = adapter.get_tf_dataset().repeat()
    try:
        return _rate(ds, batches, warmup)
    finally:
        adapter.on_epoch_end()


# ------------------------------------------------------------------------------------------
# tf.data pipelines
# ------------------------------------------------------------------------------------------


def plain_tfdata_rate(uri: str, batch: int, batches: int, warmup: int) -> Rate:
    """The textbook pipeline on per-row shards: interleave 4, shuffle 10 k, batch, parse."""
    import tensorflow as tf

    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.train import dataset
    from shardtrain.train.features import FeatureSpec

    meta = DatasetMetadata.load(uri)
    spec = FeatureSpec.from_metadata(meta)
    files = [s.uri for s in dataset.split_shards(uri, meta, "train")]
    comp = "GZIP" if meta.compression == "GZIP" else ""
    ds = (
        tf.data.Dataset.from_tensor_slices(files)
        .repeat()
        .interleave(
            lambda p: tf.data.TFRecordDataset(p, compression_type=comp),
            cycle_length=4,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=False,
        )
        .shuffle(10_000)
        .batch(batch, drop_remainder=True)
        .map(spec.parse_examples, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    return _rate(ds, batches, warmup)


def input_rate(uri: str, batch: int, batches: int, warmup: int) -> Rate:
    """Rows/s delivered by ``train_dataset`` reading ``uri``'s train split (one pipeline)."""
    from shardtrain import storage
    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.train import dataset
    from shardtrain.train.features import FeatureSpec

    meta = DatasetMetadata.load(uri)
    spec = FeatureSpec.from_metadata(meta)
    cache = None if storage.tf_can_open(uri) else dataset.ShardCache(max_bytes=512 << 20)
    try:
        ds = dataset.train_dataset(uri, meta, spec, split="train", batch_size=batch, cache=cache)
        return _rate(ds, batches, warmup)
    finally:
        if cache is not None:
            cache.close()


def stage_rates(uri: str, batch: int, batches: int, warmup: int) -> dict[str, Rate]:
    """Rows/s (and CPU per row) after each stage of ``train_dataset``'s pipeline on ``uri``.

    Each stage is the pipeline up to it (one input pipeline). Per-row shards: read one record
    per element (the old reader), read blocks of records, + the block shuffle and group
    permutation, + parsing (= ``train_dataset``). Columnar shards: read and shuffle blocks
    (rows counted as 256 a block); ``train_dataset`` with each group's rows permuted (what
    batches under 4 blocks and datasets written before hash order get); ``train_dataset`` as
    it runs at this batch. Then ``train_dataset`` through
    ``distribute_datasets_from_function`` (MirroredStrategy on the CPU: what the trainer
    iterates, including the copy to the replica's device).
    """
    import tensorflow as tf

    from shardtrain.data.column_blocks import BLOCK_ROWS
    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.train import dataset
    from shardtrain.train.features import FeatureSpec

    meta = DatasetMetadata.load(uri)
    spec = FeatureSpec.from_metadata(meta)
    shards = [s for s in dataset.split_shards(uri, meta, "train") if s.num_records]
    block = dataset.block_records(shards)
    columnar = meta.record_format == "columnar"
    autotune = tf.data.AUTOTUNE
    permuted_here = dataset.permute_columnar_rows(meta, batch) if columnar else True

    def records(block_size: int):
        return dataset.record_dataset(
            shards, compression=meta.compression, block=block_size, repeat=True,
            shuffle_files=True, seed=0,
        )  # fmt: skip

    out = {}
    if columnar:
        group = -(-max(batch, dataset.COLUMNAR_GROUP_ROWS) // BLOCK_ROWS)
        blocks = records(1).shuffle(10_000 // BLOCK_ROWS).batch(group)
        out["read + shuffle blocks of rows"] = _rate(
            blocks, batches * batch // (group * BLOCK_ROWS), warmup,
            rows_of=lambda b: tf.shape(b, out_type=tf.int64)[0] * BLOCK_ROWS,
        )  # fmt: skip
        permuted = dataset.train_dataset(
            uri, meta, spec, split="train", batch_size=batch, permute_rows="always"
        )
        out["+ parse, rows permuted, batches (--permute-rows always)"] = _rate(
            permuted, batches, warmup
        )
        last = "train_dataset (" + (
            "rows permuted)" if permuted_here else "hash order, whole blocks: no permutation)"
        )
    else:
        per_record = records(1).batch(batch, drop_remainder=True)
        out["read, one record per element"] = _rate(per_record, batches, warmup)
        blocked = records(block).rebatch(batch, drop_remainder=True)
        out[f"read, blocks of {block} records"] = _rate(blocked, batches, warmup)
        group = max(batch, dataset.GROUP_RECORDS)
        mixed = (
            records(block).shuffle(10_000 // block).rebatch(group).enumerate()
            .map(dataset._permuted(0), num_parallel_calls=autotune)
            .rebatch(batch, drop_remainder=True)
        )  # fmt: skip
        out["+ block shuffle + group permutation"] = _rate(mixed, batches, warmup)
        last = "+ parse (train_dataset)"
    full = dataset.train_dataset(uri, meta, spec, split="train", batch_size=batch)
    out[last] = _rate(full, batches, warmup)
    strategy = tf.distribute.MirroredStrategy()
    distributed = strategy.distribute_datasets_from_function(
        lambda ctx: dataset.train_dataset(uri, meta, spec, split="train", batch_size=batch)
    )
    out["+ distribute_datasets_from_function"] = _rate(
        distributed, batches, warmup, strategy=strategy
    )
    return out


def model_rate(uri: str, batch: int, steps: int) -> Rate:
    """Rows/s the tabular model trains on, one batch fed repeatedly (input excluded)."""
    import keras
    import tensorflow as tf

    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.train import dataset
    from shardtrain.train.config import ModelConfig
    from shardtrain.train.features import FeatureSpec
    from shardtrain.train.loop import build_train_loop
    from shardtrain.train.models import build_model

    strategy = tf.distribute.MirroredStrategy()
    meta = DatasetMetadata.load(uri)
    spec = FeatureSpec.from_metadata(meta)
    one = dataset.train_dataset(uri, meta, spec, split="train", batch_size=batch).take(1).cache()
    with strategy.scope():
        model = build_model("tabular", spec, ModelConfig().hparams())
        optimizer = keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    loop = build_train_loop(strategy, model, optimizer, spec, batch, step)
    it = iter(strategy.experimental_distribute_dataset(one.repeat()))
    loop(it, tf.constant(20, tf.int64))  # trace and warm up

    def run() -> int:
        loop(it, tf.constant(steps, tf.int64))
        return steps * batch

    return _timed(run)


# ------------------------------------------------------------------------------------------
# End to end
# ------------------------------------------------------------------------------------------

_PROGRESS = re.compile(r"step (\d+)/\d+: loss [\d.naif]+, (\d+) examples/s")


def train_rate(
    data: str, model_dir: str, batch: int, steps: int, workers: int, extra: tuple[str, ...] = ()
) -> tuple[float, list[float], str]:
    """Examples/s of ``shardtrain train`` (``workers`` > 0: through ``run-local``).

    Returns the median of the logged loop rates after the first loop (its time includes
    tracing), every logged rate, and the log's tail on failure (else the chief's lines about
    the all-reduce).
    """
    train = [
        "train",
        "--data",
        data,
        "--model-dir",
        model_dir,
        "--train-steps",
        str(steps),
        "--batch-size",
        str(batch),
        "--checkpoint-every",
        str(steps),
        "--eval-every",
        str(steps),
        "--eval-steps",
        "5",
        *extra,
    ]
    command = train if not workers else ["run-local", "--workers", str(workers), "--", *train]
    proc = subprocess.run(
        [sys.executable, "-m", "shardtrain.cli", *command],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return float("nan"), [], text[-3000:]
    # A chief + worker job logs the same steps twice: the chief's lines are enough.
    lines = [ln for ln in text.splitlines() if "[worker-" not in ln]
    rates = [float(m.group(2)) for ln in lines if (m := _PROGRESS.search(ln))]
    later = rates[1:] or rates
    # The chief's measurement of the all-reduce, and its warning if the collective dominates.
    notes = [ln.split("] ", 1)[-1] for ln in lines if "all-reduce" in ln]
    return (statistics.median(later) if later else float("nan")), rates, "\n".join(notes)


# ------------------------------------------------------------------------------------------


def _shard(csv: Path, out: str, record_format: str, compression: str) -> None:
    from shardtrain.data import sharding
    from shardtrain.data.metadata import DatasetMetadata

    try:
        meta = DatasetMetadata.load(out)
        if (
            meta.record_format == record_format
            and meta.compression.lower() == ("gzip" if compression == "gzip" else "none")
            and (record_format == "example" or "row_order" in meta.options)
        ):
            return
    except Exception:  # not there yet
        pass
    sharding.shard(
        sharding.ShardConfig(
            sources=(str(csv),),
            output=out,
            label=LABEL,
            key=KEY,
            overwrite=True,
            compression=compression,
            record_format=record_format,
        )
    )


def _shard_with_default_flags(csv: Path, out: str) -> str:
    """Shard ``csv`` to ``out`` with the ``shard`` command given no ``--record-format`` and no
    ``--compression`` (again, ``--overwrite``, when ``out`` holds another layout than the
    defaults give now); returns the layout, e.g. ``columnar, none``."""
    from shardtrain.data import sharding
    from shardtrain.data.metadata import DatasetMetadata

    default = sharding.ShardConfig(sources=(str(csv),), output=out, label=LABEL, key=KEY)
    layout = f"{default.record_format}, {default.compression}"
    try:
        meta = DatasetMetadata.load(out)
        if f"{meta.record_format}, {meta.compression.lower()}" == layout:
            return layout
        again: tuple[str, ...] = ("--overwrite",)
    except Exception:  # not there yet
        again = ()
    command = ["shard", str(csv), "--output", out, "--label", LABEL, "--key", KEY, *again]
    subprocess.run([sys.executable, "-m", "shardtrain.cli", *command], check=True)
    return layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=1024, help="batch size (examples)")
    parser.add_argument("--batches", type=int, default=200, help="batches timed per figure")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--train-steps", type=int, default=2000, help="steps of each train run")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "input-bench"))
    parser.add_argument("--no-minio", action="store_true")
    parser.add_argument("--no-train", action="store_true", help="skip the end-to-end runs")
    parser.add_argument("--quick", action="store_true", help="small sanity run: 1 round")
    parser.add_argument("--stages", action="store_true", help="also rows/s after each stage")
    parser.add_argument(
        "--consumer",
        choices=("graph", "python"),
        default="graph",
        help="pull batches inside a tf.function as the trainer does (graph), or with next() "
        "in Python (adds eager per-batch costs no training run pays)",
    )
    args = parser.parse_args()
    global CONSUMER
    CONSUMER = args.consumer
    if args.quick:
        args.rows, args.batches, args.rounds, args.train_steps = 60_000, 40, 1, 300

    from shardtrain.data import datagen

    work = Path(args.workdir) / f"rows-{args.rows}"
    work.mkdir(parents=True, exist_ok=True)
    csv = work / "quest.csv"
    if not csv.exists():
        datagen.generate_quest_logs(
            str(csv), args.rows, numeric=NUMERIC, categorical=CATEGORICAL, seed=5
        )
    naive_files = split_csv(csv, work / "naive")
    local = {f"{fmt}, {comp}": str(work / f"ds-{fmt}-{comp}") for fmt, comp in FORMATS}
    for (fmt, comp), uri in zip(FORMATS, local.values(), strict=True):
        _shard(csv, uri, fmt, comp)
    default_uri = str(work / "ds-default-flags")
    default_layout = _shard_with_default_flags(csv, default_uri)
    default_input = f"train_dataset default flags ({default_layout}), local"
    warm = max(5, args.batches // 10)

    figures: dict[str, list[Rate]] = {}

    def reads(uri: str, warmup: int = warm) -> Callable[[], Rate]:
        return lambda: input_rate(uri, args.batch, args.batches, warmup)

    # One pass over the train split: MinIO is measured on the first pass (every shard
    # downloaded while read) and on later ones (a pipeline's shards that fit the cache are
    # kept: what a training run of several epochs sees).
    epoch = -(-int(args.rows * 0.9) // args.batch)

    naive_batches = max(20, args.batches * args.batch // NAIVE_FILE_ROWS)
    measures: list[tuple[str, Callable[[], Rate]]] = [
        (
            "naive loader (1000-row CSV files, PyDataset + pandas, 2 workers)",
            lambda: naive_rate(naive_files, naive_batches, warm),
        ),
        (
            "plain tf.data (example, gzip: interleave, shuffle 10k, batch, parse)",
            lambda: plain_tfdata_rate(local["example, gzip"], args.batch, args.batches, warm),
        ),
    ]
    measures += [(f"train_dataset {name}, local", reads(uri)) for name, uri in local.items()]
    measures.append((default_input, reads(default_uri)))

    minio_state = work / "minio-state"
    if not args.no_minio:
        os.environ.update(_minio_env(minio_state))  # its bucket "bench" exists
        for fmt, comp in FORMATS:
            uri = f"s3://bench/rows-{args.rows}/ds-{fmt}-{comp}"
            _shard(csv, uri, fmt, comp)
            measures.append((f"train_dataset {fmt}, {comp}, MinIO", reads(uri)))
            measures.append(
                (f"train_dataset {fmt}, {comp}, MinIO, after one pass", reads(uri, epoch + warm))
            )
    model_name = "tabular model alone (training on one cached batch, CPU)"
    measures.append(
        (
            model_name,
            lambda: model_rate(local["example, gzip"], args.batch, steps=max(50, args.batches)),
        )
    )
    # End to end on one process, in the rounds too: compared with the input and the model
    # of the same round (the machine's load moves all three).
    train_runs = [] if args.no_train else [
        ("example, gzip", local["example, gzip"]),
        ("columnar, none", local["columnar, none"]),
    ]  # fmt: skip
    default_train = f"default flags ({default_layout})"
    default_runs = [] if args.no_train else [(default_train, default_uri)]
    train_figures: list[tuple[str, float, list[float]]] = []

    def train_once(label: str, uri: str, workers: int, batch: int) -> float:
        model_dir = tempfile.mkdtemp(prefix="input-bench-model-", dir=work)
        rate, rates, error = train_rate(uri, model_dir, batch, args.train_steps, workers)
        who = "chief + worker" if workers else "1 process"
        name = f"shardtrain train, {who}, batch {batch}, {label}"
        print(f"{name}: {rate:,.0f} (logged: {[round(r) for r in rates]})", flush=True)
        if error:  # the log's tail on failure, else the all-reduce lines
            print(error, file=sys.stderr if math.isnan(rate) else sys.stdout)
        train_figures.append((name, rate, rates))
        return rate

    try:
        for round_no in range(args.rounds):
            for name, measure in measures:
                rate = measure()
                figures.setdefault(name, []).append(rate)
                print(
                    f"round {round_no + 1} {name}: {rate.rows_per_s:,.0f} rows/s, "
                    f"{rate.cpu_us_per_row:.2f} CPU us/row",
                    flush=True,
                )
            for label, uri in train_runs + default_runs:
                train_once(label, uri, 0, args.batch)

        if not args.no_train:
            for label, uri in train_runs:
                train_once(label, uri, 1, args.batch)
            # The multi-worker figure: chief + worker at batch 128.
            train_once("example, gzip", local["example, gzip"], 1, 128)
    finally:
        if not args.no_minio:
            subprocess.run(
                [str(REPO / "scripts" / "minio-down")],
                env={**os.environ, "SHARDTRAIN_MINIO_STATE": str(minio_state)},
                check=False,
            )

    stages: dict[str, dict[str, Rate]] = {}
    if args.stages:
        for name, uri in local.items():
            stages[name] = stage_rates(uri, args.batch, args.batches, warm)
            print(f"stages, {name}: {stages[name]}", flush=True)

    def best(name: str) -> float:
        return max(r.rows_per_s for r in figures[name])

    def cpu(name: str) -> float:
        return min(r.cpu_us_per_row for r in figures[name])

    naive, model = best(measures[0][0]), best(model_name)
    cores = len(os.sched_getaffinity(0))
    print(
        f"\nrows {args.rows:,} ({NUMERIC} numeric + {CATEGORICAL} categorical), batch "
        f"{args.batch}, cores {cores}, {args.rounds} interleaved round(s), consumer "
        f"{CONSUMER}; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "| input | best examples/s | median | CPU us/row (min) | vs naive | vs model |\n"
        "|---|---|---|---|---|---|"
    )
    for name, rates in figures.items():
        top = best(name)
        median = statistics.median(r.rows_per_s for r in rates)
        print(
            f"| {name} | {top:,.0f} | {median:,.0f} | {cpu(name):.2f} | {top / naive:.2f} | "
            f"{top / model:.2f} |"
        )
    by_name: dict[str, list[float]] = {}
    for name, rate, _ in train_figures:
        by_name.setdefault(name, []).append(rate)
    for name, rates in by_name.items():
        top = max(rates)
        print(f"| {name} | {top:,.0f} | {statistics.median(rates):,.0f} | | "
              f"{top / naive:.2f} | {top / model:.2f} |")  # fmt: skip
    for name, by_stage in stages.items():
        print(f"\nstages, {name}, local (one round):")
        for stage, rate in by_stage.items():
            rows, us = rate.rows_per_s, rate.cpu_us_per_row
            print(f"  {stage:45} {rows:12,.0f} rows/s {us:6.2f} CPU us/row")
    for fmt, comp in FORMATS:
        here, there = f"train_dataset {fmt}, {comp}, local", f"train_dataset {fmt}, {comp}, MinIO"
        if there in figures:
            ratio = best(there) / best(here)
            later = best(f"{there}, after one pass") / best(here)
            print(f"MinIO / local, {fmt}, {comp}: {ratio:.2f} first pass, {later:.2f} after")
    # End to end vs min(input, model), round by round (same load), and the bound of the
    # two sharing the cores: one row costs the input's CPU plus the model's CPU.
    for label, _ in train_runs:
        name = f"shardtrain train, 1 process, batch {args.batch}, {label}"
        here = f"train_dataset {label}, local"
        ratios = [
            rate / min(inp.rows_per_s, mod.rows_per_s)
            for rate, inp, mod in zip(
                by_name.get(name, []), figures[here], figures[model_name], strict=False
            )
        ]
        shared = cores * 1e6 / (cpu(here) + cpu(model_name))
        print(
            f"{name}: {max(by_name[name]):,.0f}; per round, of min(input alone, model alone): "
            f"{', '.join(f'{r:.2f}' for r in ratios)}; CPU bound when the input and the model "
            f"share {cores} cores: {shared:,.0f} = {shared / model:.2f} of the model alone"
        )
    # Issue 29: what a user gets without choosing a layout, against the model alone.
    inp = best(default_input)
    print(
        f"default flags ({default_layout}): training input {inp:,.0f} rows/s = "
        f"{inp / model:.2f}x the model alone (target >= 3)"
    )
    name = f"shardtrain train, 1 process, batch {args.batch}, {default_train}"
    if name in by_name:
        top = max(by_name[name])
        print(
            f"default flags ({default_layout}): shardtrain train, 1 process, {top:,.0f} "
            f"examples/s = {top / model:.2f} of the model alone (target >= 0.8)"
        )


if __name__ == "__main__":
    main()
