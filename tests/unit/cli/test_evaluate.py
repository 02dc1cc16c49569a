"""``shardtrain evaluate`` reads --data whatever else it does: a candidate is never blessed
against a dataset that is not there, not committed, or labelled otherwise than its model.

The model directory is a fake (files, not a SavedModel) with the trainer's metrics and a
``shardtrain_model.json``: without a baseline or slices, on the data the metrics are of
(their ``data_plan``), nothing is scored, so no TensorFlow runs here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import cli_exit_code
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata

VERSION = "1700000000"
METRICS = {"auc": 0.84, "accuracy": 0.77, "log_loss": 0.48, "num_examples": 40, "step": 300}


@pytest.fixture(scope="module")
def quest(tmp_path_factory) -> str:
    """A committed quest dataset (label ``cleared``)."""
    base = tmp_path_factory.mktemp("quest")
    csv = str(base / "quest.csv")
    datagen.generate_quest_logs(csv, 300, seed=3)
    out = str(base / "ds")
    sharding.shard(
        sharding.ShardConfig(
            sources=(csv,), output=out, label="cleared", key="attempt_id", processes=1
        )
    )
    return out


def _model_dir(
    root: Path, label: str = "cleared", task: str = "binary", trained_on: str | None = None
) -> str:
    """A fake model directory; its metrics are of ``trained_on`` (a dataset URI), if given."""
    model_dir = root / "model"
    export = f"{model_dir}/export/{VERSION}"
    storage.write_bytes(f"{export}/saved_model.pb", b"graph")
    storage.write_bytes(f"{export}/variables/variables.index", b"index")
    storage.write_json(
        f"{export}/shardtrain_model.json",
        {
            "inputs": [{"input": "gear_score", "column": "gear_score", "dtype": "float32"}],
            "feature_spec": {"label": label, "task": task, "classes": ["0", "1"]},
        },
    )
    storage.write_json(f"{model_dir}/export/latest.json", {"path": f"export/{VERSION}"})
    plan = {"data_plan": DatasetMetadata.load(trained_on).plan} if trained_on else {}
    storage.write_json(f"{model_dir}/eval/metrics.json", {**METRICS, "task": task, **plan})
    return str(model_dir)


def _evaluate(model_dir: str, data: str) -> int:
    return cli_exit_code(
        "evaluate", "--model-dir", model_dir, "--data", data, "--thresholds", "auc>=0.8"
    )


def test_evaluate_blesses_on_its_own_data(tmp_path, quest, capsys):
    assert _evaluate(_model_dir(tmp_path, trained_on=quest), quest) == 0
    assert "blessed" in capsys.readouterr().out


def test_evaluate_refuses_an_eval_split_that_lost_a_shard(tmp_path, quest, capsys):
    """Checked before the trainer's metrics are stood on: one line naming the shard."""
    import shutil

    damaged = str(tmp_path / "damaged")
    shutil.copytree(quest, damaged)
    (shard, *_) = [s for s in DatasetMetadata.load(damaged).splits["eval"].shards if s.num_records]
    (Path(damaged) / shard.path).unlink()
    assert _evaluate(_model_dir(tmp_path, trained_on=quest), damaged) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{shard.path} missing" in line and "--overwrite" in line, line


def test_evaluate_refuses_a_dataset_that_is_not_there(tmp_path, capsys):
    missing = str(tmp_path / "no-such-dataset")
    assert _evaluate(_model_dir(tmp_path), missing) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and missing in err, err
    assert not (tmp_path / "model" / "eval" / "blessing.json").exists()


def test_evaluate_refuses_a_dataset_with_another_label(tmp_path, quest, capsys):
    model_dir = _model_dir(tmp_path, label="difficulty")
    assert _evaluate(model_dir, quest) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "the model predicts 'difficulty', the dataset's label is 'cleared'" in line
    assert not (tmp_path / "model" / "eval" / "blessing.json").exists()
