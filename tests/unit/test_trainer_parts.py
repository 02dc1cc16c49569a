"""The trainer's parts on tiny data: features, metrics, configuration, checkpoint store, models."""

from __future__ import annotations

import copy
import os
import textwrap

import numpy as np
import pytest

from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ConfigError, DataError, StorageError
from shardtrain.train.checkpoints import CheckpointStore
from shardtrain.train.config import CONFIG_NAME, TrainConfig, load_saved_config, resolve_config
from shardtrain.train.evaluation import MetricsAccumulator
from shardtrain.train.features import FeatureSpec


def test_feature_spec_from_metadata(all_types):
    _, meta = all_types
    spec = FeatureSpec.from_metadata(meta)
    assert spec.label == "cleared" and spec.classes == ("0", "1") and spec.is_binary
    assert [f.name for f in spec.numeric] == ["level", "score", "weekend"]
    assert [f.name for f in spec.categorical] == ["cls", "note"]
    assert spec.excluded == ("id",)  # the split key identifies rows: never a feature
    level = spec.numeric[0]
    assert level.has_missing and level.std > 0
    assert "mage" in spec.categorical[0].vocabulary
    without = FeatureSpec.from_metadata(meta, exclude=["note"])
    assert [f.name for f in without.categorical] == ["cls"]
    with pytest.raises(ConfigError, match="cannot exclude unknown column"):
        FeatureSpec.from_metadata(meta, exclude=["nope"])
    with pytest.raises(DataError, match="not a shardtrain dataset"):
        DatasetMetadata.from_dict({"schema": {}})


def test_label_tasks_float_labels_and_a_single_class(all_types):
    _, meta = all_types
    bad = copy.deepcopy(meta.to_dict())  # to_dict shares the fixture's dicts
    bad["label_info"]["classes"] = ["1"]
    bad["stats"]["label"]["counts"] = {"1": 5}
    with pytest.raises(DataError, match="at least 2"):
        FeatureSpec.from_metadata(DatasetMetadata.from_dict(bad), where="ds")
    floats = copy.deepcopy(meta.to_dict())
    for col in floats["schema"]["columns"]:
        if col["name"] == "cleared":
            col["type"] = "float"
    # 0.0/1.0: still a binary label (a float column of two values).
    spec = FeatureSpec.from_metadata(DatasetMetadata.from_dict(floats))
    assert spec.is_binary and spec.output_width == 1 and spec.label_type == "float"
    # Many values: a regression on the standardised label, with the statistics' moments.
    floats["stats"]["label"] = {
        "missing": 0,
        "counts": {},
        "many_values": True,
        "numeric": {"kind": "numeric", "count": 9, "missing": 0, "mean": 40.0, "std": 8.0},
    }
    spec = FeatureSpec.from_metadata(DatasetMetadata.from_dict(floats))
    assert (spec.task, spec.classes, spec.output_width) == ("regression", (), 1)
    assert (spec.label_mean, spec.label_std) == (40.0, 8.0)
    floats["stats"]["label"]["numeric"]["nan"] = 3
    with pytest.raises(DataError, match="holds 3 NaN or infinite value"):
        FeatureSpec.from_metadata(DatasetMetadata.from_dict(floats))
    floats["stats"]["label"]["numeric"]["nan"] = 0
    with pytest.raises(DataError, match=r"^ds: label 'cleared' \(float, more than 1,000"):
        FeatureSpec.from_metadata(DatasetMetadata.from_dict(floats), where="ds", task="binary")
    # An int label trained as a regression: its moments from the counts of an older dataset.
    ints = copy.deepcopy(meta.to_dict())
    ints["stats"]["label"] = {"missing": 0, "counts": {"0": 1, "1": 3}}
    spec = FeatureSpec.from_metadata(DatasetMetadata.from_dict(ints), task="regression")
    assert spec.is_regression and spec.label_mean == 0.75
    assert spec.label_std == pytest.approx(np.std([0, 1, 1, 1]))


def _exact_auc(p, y):
    pos, neg = p[y == 1], p[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


def test_binary_metrics_match_exact_computations():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 5000)
    p = np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0, 1)
    acc = MetricsAccumulator(["0", "1"])
    for start in range(0, 5000, 777):  # uneven batches
        acc.update(p[start : start + 777], y[start : start + 777])
    m = acc.result()
    assert m["num_examples"] == 5000
    assert m["auc"] == pytest.approx(_exact_auc(p, y), abs=2e-4)
    assert m["accuracy"] == pytest.approx(((p >= 0.5) == y).mean())
    true_p = np.clip(np.where(y == 1, p, 1 - p), 1e-7, 1)
    assert m["log_loss"] == pytest.approx(-np.log(true_p).mean(), rel=1e-9)
    cm = np.array(m["confusion_matrix"]["matrix"])
    assert cm.sum() == 5000 and cm[1, 1] == ((p >= 0.5) & (y == 1)).sum()
    roc = m["roc"]
    assert roc["fpr"][0] == 0 and roc["tpr"][-1] == 1 and roc["fpr"][-1] == 1
    assert all(a <= b for a, b in zip(roc["tpr"], roc["tpr"][1:], strict=False))


def test_multiclass_metrics():
    acc = MetricsAccumulator(["a", "b", "c"])
    probs = np.array([[0.8, 0.1, 0.1], [0.1, 0.7, 0.2], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]])
    acc.update(probs, np.array([0, 1, 2, 1]))
    m = acc.result()
    assert m["accuracy"] == 0.75
    assert m["confusion_matrix"]["matrix"] == [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    assert m["auc"] == pytest.approx(1.0)  # every class ranks its own examples first
    with pytest.raises(ValueError, match="out of range"):
        acc.update(probs[:1], np.array([3]))


def test_config_defaults_file_then_flags(tmp_path):
    cfg_file = tmp_path / "train.yaml"
    cfg_file.write_text(
        textwrap.dedent(
            """
            train_steps: 50
            batch_size: 64
            model: {hidden_units: [16, 8], dropout: 0.1}
            input: {cache_mb: 64}
            """
        )
    )
    cfg = resolve_config(
        str(cfg_file),
        {"data": "d", "model_dir": str(tmp_path / "m"), "batch_size": 32, "learning_rate": None},
    )
    assert cfg.train_steps == 50 and cfg.batch_size == 32  # flag beats file
    assert cfg.learning_rate == TrainConfig().learning_rate  # unset flag keeps the default
    assert cfg.model.hidden_units == [16, 8] and cfg.input.cache_mb == 64
    cfg = resolve_config(None, {"data": "d", "model_dir": "m", "model.hidden_units": "32,4"})
    assert cfg.model.hidden_units == [32, 4]
    saved = resolve_config(str(cfg_file), {"data": "d", "model_dir": str(tmp_path / "m")})
    saved.save()
    assert (tmp_path / "m" / CONFIG_NAME).exists()
    assert load_saved_config(str(tmp_path / "m")) == saved


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"train_stepz": 5}, "unknown setting 'train_stepz'"),
        ({"train_steps": 0}, "train_steps must be a positive integer"),
        ({"train_steps": "many"}, "expected int"),
        ({"model": {"dropout": 1.5}}, "dropout"),
        ({"data": ""}, "--data"),
    ],
)
def test_config_errors_are_one_clear_line(values, message):
    base = {"data": "d", "model_dir": "m"}
    with pytest.raises(ConfigError, match=message):
        resolve_config(None, {**base, **values})


def test_checkpoint_store_publishes_pointer_last_and_prunes(tmp_path):
    model_dir = str(tmp_path / "model")
    store = CheckpointStore(model_dir, str(tmp_path / "stage"), max_to_keep=2)
    assert store.latest() is None
    with pytest.raises(StorageError, match="no staged checkpoint"):
        store.publish(1)
    for step in (10, 20, 30):
        for suffix in (".index", ".data-00000-of-00001"):
            with open(store.local_prefix(step) + suffix, "w") as f:
                f.write(f"step {step}")
        store.publish(step, final=step == 30)
    latest = store.latest()
    assert (latest.step, latest.prefix, latest.final) == (30, "ckpt-30", True)
    remote = sorted(os.listdir(os.path.join(model_dir, "checkpoints")))
    assert remote == [
        "ckpt-20.data-00000-of-00001",
        "ckpt-20.index",
        "ckpt-30.data-00000-of-00001",
        "ckpt-30.index",
        "latest.json",
    ]
    reader = CheckpointStore(model_dir, str(tmp_path / "other"))
    prefix = reader.fetch(latest)
    with open(prefix + ".index") as f:
        assert f.read() == "step 30"


def test_steps_per_loop_auto_runs_about_100k_examples_a_call():
    assert TrainConfig(batch_size=128).loop_steps == 782
    assert TrainConfig(batch_size=1024).loop_steps == 98
    assert TrainConfig(batch_size=1 << 20).loop_steps == 20  # at least 20
    assert TrainConfig(batch_size=8).loop_steps == 1000  # at most 1000
    assert TrainConfig(batch_size=128, steps_per_loop=7).loop_steps == 7  # as given


def test_sample_predictions_predict_about_200_rows_per_call_whatever_the_record_format():
    from shardtrain.data.column_blocks import BLOCK_ROWS
    from shardtrain.train.evaluator import SAMPLE_SIZE, sample_chunk_records

    assert sample_chunk_records("example", False) == SAMPLE_SIZE  # a row per record
    columnar = sample_chunk_records("columnar", False)  # up to BLOCK_ROWS rows per record
    assert columnar * BLOCK_ROWS >= SAMPLE_SIZE > (columnar - 1) * BLOCK_ROWS
    assert sample_chunk_records("example", True) == 32


def test_columnar_input_permutes_rows_only_when_whole_blocks_would_mix_too_little():
    """Rows in hash order and a step of >= 4 blocks: whole blocks, no permutation; a smaller
    step or shuffle buffer, a dataset written in source order, or ``--permute-rows always``:
    permuted."""
    from types import SimpleNamespace

    from shardtrain.data.column_blocks import BLOCK_ROWS, ROW_ORDER
    from shardtrain.train.dataset import MIN_MIXED_BLOCKS, permute_columnar_rows

    hashed = SimpleNamespace(options={"record_format": "columnar", "row_order": ROW_ORDER})
    source_order = SimpleNamespace(options={"record_format": "columnar"})
    enough = MIN_MIXED_BLOCKS * BLOCK_ROWS
    assert enough == 1024  # the default --batch-size takes the fast path
    assert not permute_columnar_rows(hashed, enough)
    assert permute_columnar_rows(hashed, enough - 1)
    assert permute_columnar_rows(source_order, 1 << 20)
    assert permute_columnar_rows(hashed, enough, "auto", shuffle_buffer=enough - 1)
    assert permute_columnar_rows(hashed, enough, "always")
    with pytest.raises(ConfigError, match="permute_rows"):
        permute_columnar_rows(hashed, enough, "sometimes")
