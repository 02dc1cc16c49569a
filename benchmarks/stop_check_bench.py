"""Per-step cost of step-granular SIGTERM: the training loop with and without its stop check.

Usage (from the repository root, in the project environment)::

    .venv/bin/python benchmarks/stop_check_bench.py            # batch 1024, 7 rounds x 300 steps

``build_train_loop(..., stop_requested=var)`` reads a local flag at the end of every step, adds
it to the step's existing all-reduce and leaves the ``tf.range`` loop when the sum is non-zero.
This times the tabular model (the fastest step there is: ~400 k examples/s on 2 CPUs, so a
per-step cost shows most) on one cached batch, the two loops alternating round by round so
that the host's load hits both alike; it reports the median microseconds per step of each.
Record the figures in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300, help="steps per timed call")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "stop-bench"))
    args = parser.parse_args()

    from shardtrain.data import datagen, sharding

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    csv, uri = work / "quest.csv", str(work / "ds")
    if not (work / "ds" / "metadata.json").exists():
        datagen.generate_quest_logs(str(csv), 20_000, numeric=30, categorical=5, seed=5)
        sharding.shard(
            sharding.ShardConfig(
                sources=(str(csv),), output=uri, label="cleared", key="attempt_id", overwrite=True
            )
        )

    import keras
    import tensorflow as tf

    from shardtrain.data.metadata import DatasetMetadata
    from shardtrain.train import dataset, loop
    from shardtrain.train.config import ModelConfig
    from shardtrain.train.features import FeatureSpec
    from shardtrain.train.models import build_model

    strategy = tf.distribute.MirroredStrategy()
    meta = DatasetMetadata.load(uri)
    spec = FeatureSpec.from_metadata(meta)
    one = dataset.train_dataset(uri, meta, spec, split="train", batch_size=args.batch)
    one = one.take(1).cache()
    with strategy.scope():
        model = build_model("tabular", spec, ModelConfig().hparams())
        optimizer = keras.optimizers.Adam()
        optimizer.build(model.trainable_variables)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    stop_requested = loop.stop_request_variable()
    loops = {
        "without stop check": loop.build_train_loop(
            strategy, model, optimizer, spec, args.batch, step
        ),
        "with stop check": loop.build_train_loop(
            strategy, model, optimizer, spec, args.batch, step, stop_requested=stop_requested
        ),
    }
    it = iter(strategy.experimental_distribute_dataset(one.repeat()))
    steps = tf.constant(args.steps, tf.int64)
    for train_loop in loops.values():
        train_loop(it, tf.constant(20, tf.int64))  # trace and warm up
    micros: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(args.rounds):
        for name, train_loop in loops.items():
            started = time.perf_counter()
            train_loop(it, steps)
            micros[name].append((time.perf_counter() - started) / args.steps * 1e6)

    print(f"batch {args.batch}, {args.rounds} rounds x {args.steps} steps, cores {os.cpu_count()}")
    base = statistics.median(micros["without stop check"])
    for name, values in micros.items():
        med = statistics.median(values)
        print(
            f"{name:20} median {med:8.1f} us/step ({args.batch / med * 1e6:10,.0f} examples/s), "
            f"{med - base:+6.1f} us ({(med - base) / base:+.1%}); rounds: "
            + ", ".join(f"{v:.0f}" for v in values)
        )


if __name__ == "__main__":
    main()
