"""``gs://`` end to end against the live fake-gcs-server: shard, train, export, publish, and
the whole pipeline with kfp.local.

Under the emulator (``STORAGE_EMULATOR_HOST``, set by the ``gcs`` fixture) TensorFlow never
sees a ``gs://`` URI: its GCS file system has no endpoint override and would go to
storage.googleapis.com (unreachable here, so any slip fails these tests). Shards are staged
through the trainer's shard cache, summaries and checkpoints through the storage layer, as for
``s3://``. The runs are kept short: what is tested is the storage path, not model quality
(``test_trainer.py`` and ``kubeflow/pipelines/test_csv_to_model.py`` hold the quality bars).
"""

from __future__ import annotations

import json

import pytest

from helpers import kill_then_resume, run_cli
from shardtrain import storage
from shardtrain.data import datagen
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.kubeflow import client, steps

pytestmark = [pytest.mark.gcs, pytest.mark.slow]


def _check(proc) -> str:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    return text


def test_shard_train_export_and_publish_on_gs(gcs):
    base = gcs.uri("e2e")
    source = f"{base}/raw/quest.csv"
    datagen.generate_quest_logs(source, 6_000, seed=5)
    data, model_dir, serving = f"{base}/dataset", f"{base}/model", f"{base}/serving"

    _check(
        run_cli(
            "shard", source, "--output", data, "--label", "cleared", "--key", "attempt_id",
            "--num-shards", "3",
        )
    )  # fmt: skip
    meta = DatasetMetadata.load(data)
    assert meta.rows_read == 6_000
    assert len(meta.shard_uris(data, "train")) == 3
    assert all(storage.exists(u) for u in meta.shard_uris(data, "train"))

    train = ("train", "--data", data, "--model-dir", model_dir)
    text = _check(
        run_cli(*train, "--train-steps", "40", "--batch-size", "64", "--checkpoint-every", "20")
    )
    assert "gs:// shards are not read by TensorFlow directly" in text
    latest = storage.read_json(f"{model_dir}/checkpoints/latest.json")
    assert latest["step"] == 40 and latest["final"]
    assert storage.read_json(f"{model_dir}/eval/metrics.json")["step"] == 40
    assert storage.walk_files(f"{model_dir}/logs/train")  # TensorBoard events, synced up
    export = storage.read_json(f"{model_dir}/export/latest.json")
    assert export["step"] == 40
    assert storage.exists(f"{model_dir}/{export['path']}/saved_model.pb")

    served = steps.publish_export(f"{model_dir}/{export['path']}", serving, step=40)
    assert served.startswith(f"{serving}/")
    manifest = storage.read_committed(served)
    assert manifest["step"] == 40
    assert storage.exists(f"{served}/saved_model.pb")
    assert storage.read_json(f"{serving}/latest.json")["version"] == storage.basename(served)


def test_kill_9_mid_shard_then_rerun_gives_every_row_once_on_gs(gcs, tmp_path):
    """The sharder's resume on gs://: task markers listed from the emulator, shards of
    unfinished tasks rewritten, every row exactly once (the MinIO test's procedure)."""
    csv_path = tmp_path / "quest.csv"
    datagen.generate_quest_logs(str(csv_path), 150_000, seed=6)
    src = gcs.uri("crash", "quest.csv")
    storage.upload_file(str(csv_path), src)
    info = kill_then_resume(src, gcs.uri("crash", "ds"), csv_path, kill_when=3)
    assert 3 <= info["done_before_kill"] < info["tasks"]


@pytest.mark.cluster
def test_the_pipeline_runs_locally_on_gs(gcs, tmp_path, capfd):
    """The csv_to_model pipeline with kfp.local, every location on gs://: two shard workers,
    the TFJob manifest's chief as a local process, evaluation, the export published."""
    base = gcs.uri("pipeline")
    source = f"{base}/raw/quest.csv"
    datagen.generate_quest_logs(source, 8_000, seed=7)
    arguments = client.parse_arguments([f"sources={source}"]) | {
        "dataset_uri": f"{base}/dataset",
        "model_dir": f"{base}/model",
        "serving_uri": f"{base}/serving",
        "key": "attempt_id",
        "task_mb": 0.4,  # ~1 MB of CSV → 3 tasks: both shard workers get work
        "shard_workers": 2,
        "shard_cpu": "1",
        "tfjob_workers": 0,
        "evaluator": False,
        "gpus_per_worker": 0,
        "train_steps": 40,
        "batch_size": 64,
        "checkpoint_every": 20,
        "secret_name": "",
    }

    run = client.run_local(arguments, pipeline_root=str(tmp_path / "runs"))
    text = "".join(capfd.readouterr())

    run_dir = next((tmp_path / "runs").iterdir())
    plan = json.loads((run_dir / "plan-shards" / "executor_output.json").read_text())
    assert plan["parameterValues"]["Output"] == [0, 1]
    meta = DatasetMetadata.load(arguments["dataset_uri"])
    assert meta.rows_read == 8_000
    assert "[chief-0]" in text
    assert "gs:// shards are not read by TensorFlow directly" in text
    assert run.model_dir == arguments["model_dir"]
    assert run.metrics["step"] == 40
    assert run.metrics["num_examples"] == meta.splits["eval"].num_records
    assert run.served.startswith(arguments["serving_uri"] + "/")
    assert storage.read_committed(run.served)["step"] == 40
    assert storage.exists(f"{run.served}/saved_model.pb")
