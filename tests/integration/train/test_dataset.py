"""The training input on both record formats: the same tensors, every row read, training.

``columnar`` shards (:mod:`shardtrain.data.column_blocks`) must parse to exactly the tensors
the per-row Example shards give, feed ``train_dataset``/``eval_dataset`` with every row, and
train a model end to end through ``shardtrain train``.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from helpers import DETERMINISTIC_TF, run_cli
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.train import dataset
from shardtrain.train.features import FeatureSpec

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The same 20 k quest rows sharded per row (gzip) and columnar (none, the default)."""
    root = tmp_path_factory.mktemp("formats")
    csv = str(root / "quest.csv")
    datagen.generate_quest_logs(csv, 20_000, seed=21)
    out = {}
    for fmt, comp in (("example", "gzip"), ("columnar", "none")):
        uri = str(root / fmt)
        sharding.shard(
            sharding.ShardConfig(
                sources=(csv,), output=uri, label="cleared", key="attempt_id", processes=1,
                compression=comp, record_format=fmt,
            )
        )  # fmt: skip
        out[fmt] = uri
    return out


def _equal(a, b) -> bool:
    a, b = a.numpy(), b.numpy()
    if a.dtype.kind == "f":
        return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    return a.shape == b.shape and bool((a == b).all())


def test_both_formats_parse_to_the_same_tensors(both):
    import tensorflow as tf

    metas = {fmt: DatasetMetadata.load(uri) for fmt, uri in both.items()}
    spec = FeatureSpec.from_metadata(metas["example"])
    assert spec == FeatureSpec.from_metadata(metas["columnar"])
    parsed = {}
    for fmt, uri in both.items():
        meta = metas[fmt]
        shard = dataset.split_shards(uri, meta, "eval")[0]
        comp = "GZIP" if meta.compression == "GZIP" else ""
        records = next(iter(tf.data.TFRecordDataset(shard.uri, comp).batch(1 << 20)))
        parsed[fmt] = dataset.record_parser(meta, spec)(records, with_key=True)
        assert parsed[fmt][1].shape[0] == shard.num_records
    # Columnar blocks hold a shard's rows in hash order: compare in key order.
    for fmt, (features, labels, keys) in parsed.items():
        order = np.argsort(keys.numpy(), kind="stable")
        parsed[fmt] = (
            {k: tf.gather(v, order) for k, v in features.items()},
            tf.gather(labels, order),
            tf.gather(keys, order),
        )
    rows, cols = parsed["example"], parsed["columnar"]
    assert set(rows[0]) == set(cols[0]) == set(spec.feature_names)
    assert all(_equal(rows[0][k], cols[0][k]) for k in rows[0])
    assert _equal(rows[1], cols[1]) and _equal(rows[2], cols[2])
    # Missing values are in this data: NaN in a numeric column.
    assert any(np.isnan(v.numpy()).any() for v in cols[0].values() if v.dtype == tf.float32)


@pytest.mark.parametrize(
    "fmt,batch", [("example", 128), ("columnar", 128), ("columnar", 1024)]
)  # columnar 128: rows permuted; 1024: whole blocks in hash order, no permutation
def test_train_and_eval_datasets_read_every_row(both, fmt, batch):
    uri = both[fmt]
    meta = DatasetMetadata.load(uri)
    spec = FeatureSpec.from_metadata(meta)
    evals = dataset.eval_dataset(uri, meta, spec, split="eval", batch_size=300)
    sizes = []
    for _features, labels in evals:
        assert labels.shape[0] <= 300
        sizes.append(labels.shape[0])
    assert sum(sizes) == meta.splits["eval"].num_records

    train = dataset.train_dataset(uri, meta, spec, split="train", batch_size=batch, seed=3)
    total = meta.splits["train"].num_records
    seen = 0
    positives = []
    for features, labels in train.take(3 * total // batch):  # three epochs, endless stream
        assert labels.shape == (batch,) and features["player_level"].shape == (batch,)
        positives.append(float(labels.numpy().mean()))
        seen += batch
    assert seen >= 2 * total
    # Shuffled: batches are not runs of one class (the label rate is ~0.5 in quest logs).
    assert 0.3 < float(np.mean(positives)) < 0.7 and max(positives) < 0.9


@pytest.mark.parametrize("fmt", ["columnar", "example"])
def test_shardtrain_train_on_columnar_and_per_row_shards_learns(both, fmt, tmp_path):
    """Either layout trains (a per-row dataset of before columnar blocks were the default
    too): AUC bar 0.80, as the runs of tests/integration/train/test_trainer.py (same data,
    same steps and batch)."""
    model_dir = str(tmp_path / "model")
    proc = run_cli(
        "train", "--data", both[fmt], "--model-dir", model_dir, "--train-steps", "300",
        "--batch-size", "128", "--checkpoint-every", "100",
        env=DETERMINISTIC_TF,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(model_dir, "eval", "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["step"] == 300 and metrics["auc"] >= 0.80, metrics
    with open(os.path.join(model_dir, "eval", "sample_predictions.jsonl")) as f:
        samples = [json.loads(line) for line in f]
    assert len(samples) == 200 and all(s["key"].startswith("a") for s in samples)
