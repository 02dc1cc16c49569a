"""Training input speed: examples/s the input pipeline delivers from local disk and from MinIO,
and examples/s the tabular model consumes on the CPU.

Usage (from the repository root, in the project environment)::

    .venv/bin/python benchmarks/input_bench.py                  # 1 M rows, local + MinIO
    .venv/bin/python benchmarks/input_bench.py --rows 200000 --no-minio

Targets (issue "Distributed trainer"): from MinIO at least 80% of the local-disk rate, and the
input pipeline at least 3x what the model consumes, so input is never the bottleneck. The
input is measured alone (``shardtrain.train.dataset.train_dataset``: interleave, shuffle, batch,
``parse_example``, prefetch — through the bounded shard cache for ``s3://``); the model is
measured alone on one cached batch fed again and again, with the trainer's own distributed
loop (``shardtrain.train.loop.build_train_loop``). Record the figures in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from shard_bench import _minio_env  # noqa: E402  (the same private MinIO as the shard bench)

NUMERIC, CATEGORICAL = 30, 5


def input_rate(uri: str, batch: int, batches: int, warmup: int = 20) -> float:
    """Examples/s delivered by one input pipeline reading ``uri``'s train split."""
    from shardtrain import storage
    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.train import dataset
    from shardtrain.train.features import FeatureSpec

    meta = DatasetMetadata.load(uri)
    spec = FeatureSpec.from_metadata(meta)
    cache = None if storage.tf_can_open(uri) else dataset.ShardCache(max_bytes=512 << 20)
    try:
        ds = dataset.train_dataset(uri, meta, spec, split="train", batch_size=batch, cache=cache)
        it = iter(ds)
        for _ in range(warmup):
            next(it)
        started = time.monotonic()
        for _ in range(batches):
            next(it)
        return batches * batch / (time.monotonic() - started)
    finally:
        if cache is not None:
            cache.close()


def model_rate(uri: str, batch: int, steps: int) -> float:
    """Examples/s the tabular model trains on, one batch fed repeatedly (input excluded)."""
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
    started = time.monotonic()
    loop(it, tf.constant(steps, tf.int64))
    return steps * batch / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1024, help="batch size (examples)")
    parser.add_argument("--batches", type=int, default=400, help="batches timed per source")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "input-bench"))
    parser.add_argument("--no-minio", action="store_true")
    args = parser.parse_args()

    from shardtrain.data import datagen, sharding

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    csv = work / "quest.csv"
    if not csv.exists():
        datagen.generate_quest_logs(
            str(csv), args.rows, numeric=NUMERIC, categorical=CATEGORICAL, seed=5
        )
    local = str(work / "ds")

    def shard(out: str) -> None:
        sharding.shard(
            sharding.ShardConfig(
                sources=(str(csv),), output=out, label="cleared", key="attempt_id", overwrite=True
            )
        )

    if not (work / "ds" / "metadata.json").exists():
        shard(local)
    results = {"local disk": input_rate(local, args.batch, args.batches)}
    if not args.no_minio:
        state = work / "minio-state"
        os.environ.update(_minio_env(state))  # its bucket "bench" exists
        try:
            shard("s3://bench/ds")
            results["MinIO (s3://, shard cache)"] = input_rate(
                "s3://bench/ds", args.batch, args.batches
            )
        finally:
            subprocess.run(
                [str(REPO / "scripts" / "minio-down")],
                env={**os.environ, "SHARDTRAIN_MINIO_STATE": str(state)},
                check=False,
            )
    consumed = model_rate(local, args.batch, steps=200)

    print(
        f"\nrows {args.rows:,} ({NUMERIC} numeric + {CATEGORICAL} categorical), "
        f"batch {args.batch}, cores {os.cpu_count()}"
    )
    print(f"{'source':32} {'examples/s':>12} {'vs local':>9} {'vs model':>9}")
    base = results["local disk"]
    for name, rate in results.items():
        print(f"{name:32} {rate:12,.0f} {rate / base:9.2f} {rate / consumed:9.2f}")
    print(f"{'tabular model (training, CPU)':32} {consumed:12,.0f}")


if __name__ == "__main__":
    main()
