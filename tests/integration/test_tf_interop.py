"""TensorFlow reads what the sharder writes: TFRecordDataset, parse_example with defaults."""

from __future__ import annotations

import numpy as np

from helpers import ALL_TYPES
from shardtrain.data import sharding
from shardtrain.data.metadata import DatasetMetadata


def test_parse_example_batched_reads_the_csv_values(tmp_path):
    """The standard TF path: TFRecordDataset → batch → tf.io.parse_example with defaults."""
    import tensorflow as tf

    out = tmp_path / "ds"
    sharding.shard(
        sharding.ShardConfig(
            sources=(str(ALL_TYPES),), output=str(out), label="cleared", key="id",
            splits=(("all", 1.0),), min_shards=1, processes=1,
        )
    )  # fmt: skip
    meta = DatasetMetadata.load(str(out)).to_dict()
    spec = {
        "id": tf.io.FixedLenFeature([], tf.string),
        "level": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "score": tf.io.FixedLenFeature([], tf.float32, default_value=-99.0),
        "cls": tf.io.FixedLenFeature([], tf.string, default_value="<missing>"),
        "weekend": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
        "cleared": tf.io.FixedLenFeature([], tf.int64),
    }
    files = [str(out / s["path"]) for s in meta["splits"]["all"]["shards"]]
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(16)
    parsed = [tf.io.parse_example(b, spec) for b in ds]
    got = {k: np.concatenate([p[k].numpy() for p in parsed]) for k in spec}
    by_id = {i.decode(): n for n, i in enumerate(got["id"])}
    assert got["level"][by_id["r3"]] == -1 and got["level"][by_id["r2"]] == -7
    assert got["score"][by_id["r4"]] == -99.0 and got["score"][by_id["r1"]] == np.float32(0.5)
    assert got["cls"][by_id["r3"]] == b"<missing>" and got["weekend"][by_id["r4"]] == -1
