"""A run with a bad parameter ends in the pipeline's first step, in one line.

Run with kfp.local (the component bodies from the compiled spec, as the end-to-end tests run
them) on a small local CSV: a threshold that does not parse is refused by ``plan_shards``,
before any shard worker, training or evaluation starts, and the step's log holds the error's
one line, not a Python traceback. Cheap: no step after the first one runs.
"""

from __future__ import annotations

import pytest

from shardtrain.data import datagen
from shardtrain.errors import ShardtrainError
from shardtrain.kubeflow import client


def _arguments(tmp_path, **more) -> dict:
    """A local run's arguments on 500 generated quest rows, with ``more``."""
    source = tmp_path / "q.csv"
    datagen.generate_quest_logs(str(source), 500, seed=3)
    return {
        "sources": [str(source)],
        "dataset_uri": str(tmp_path / "dataset"),
        "model_dir": str(tmp_path / "model"),
        "serving_uri": str(tmp_path / "serving"),
        **more,
    }


def test_a_bad_threshold_stops_the_run_in_the_plan_step(tmp_path, capfd):
    arguments = _arguments(
        tmp_path,
        shard_workers=1,
        shard_cpu="1",
        train_steps=10,
        thresholds="auc>>0.8",  # what a mistyped '>=' gives
    )
    capfd.readouterr()
    with pytest.raises(ShardtrainError, match="Inner task failed: 'plan-shards'"):
        client.run_local(arguments, pipeline_root=str(tmp_path / "runs"))
    text = "".join(capfd.readouterr())
    assert "error: thresholds: 'auc>>0.8': '>0.8' is not a number" in text
    assert "Traceback" not in text
    assert "Task 'shard'" not in text.replace("\x1b[96m", "").replace("\x1b[0m", "")
    started = {p.name for p in (tmp_path / "runs").rglob("*") if p.is_dir()}
    assert not started & {"shard", "settle-shards", "train", "evaluate"}
    assert not (tmp_path / "dataset").exists() and not (tmp_path / "model").exists()


@pytest.mark.parametrize("which", ["label", "key"])
def test_a_column_the_sources_lack_stops_a_local_run_before_any_step(tmp_path, capfd, which):
    """A local run reads its sources: a label or key they lack is the shard worker's own one
    line, raised before kfp.local starts a step, with nothing written at the dataset URI."""
    arguments = _arguments(tmp_path, **{"label": "cleared", which: "nosuch"})
    with pytest.raises(ShardtrainError, match=f"{which} column 'nosuch' not found") as caught:
        client.run_local(arguments, pipeline_root=str(tmp_path / "runs"))
    assert str(tmp_path / "q.csv") in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "dataset").exists()
