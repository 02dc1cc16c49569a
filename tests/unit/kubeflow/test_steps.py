"""What each pipeline step runs (:mod:`shardtrain.kubeflow.steps`), without a server.

The steps' functions run on tiny real data; the only seam patched is the cluster submission of
the TFJob. The TFJob the train step renders is checked here too: GPUs on the training
replicas only, the storage Secret by name.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from kfp import dsl

from helpers import wide_csv
from model_dirs import EVAL_METRICS, EXPORT_VERSION, tiny_quest_dataset
from shardtrain import storage
from shardtrain.data import datagen, sharding
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import (
    ConfigError,
    NotCommittedError,
    ShardtrainError,
    StaleDecisionError,
    StorageError,
)
from shardtrain.kubeflow import pointers, steps
from shardtrain.kubeflow.jobs import tfjob, trainjob
from shardtrain.kubeflow.report import render_report


def test_cpu_count_from_kubernetes_quantities():
    assert [steps.cpu_count(q) for q in ("4", "3500m", "0.5", "250m", "16")] == [4, 3, 1, 1, 16]
    for bad in ("four", "-1", "0", ""):
        with pytest.raises(ConfigError):
            steps.cpu_count(bad)


def test_job_config_rounds_the_batch_to_the_training_replicas(caplog):
    """The pipeline's batch_size (1024 by default) cannot know the replica count of a run."""
    common = dict(
        data="s3://b/ds", model_dir="s3://b/m", run_id="r", image="reg/st:1", namespace="ns",
        evaluator=True, secret="", service_account="sa", cpu="2", memory="4Gi",
        train_steps=300, checkpoint_every=100,
    )  # fmt: skip
    three = steps.job_config(workers=2, gpus_per_worker=1, batch_size=1024, **common)
    assert three.train_args[2:4] == ("--batch-size", "1023") and three.replicas_in_sync == 3
    assert "batch_size 1024 does not split over the 3 training replicas: using 1023" in caplog.text
    four = steps.job_config(workers=1, gpus_per_worker=2, batch_size=1024, **common)
    assert four.train_args[2:4] == ("--batch-size", "1024")  # already a multiple: unchanged
    tiny = steps.job_config(workers=3, gpus_per_worker=2, batch_size=3, **common)
    assert tiny.train_args[2:4] == ("--batch-size", "8")  # at least one example per replica


def test_job_config_names_each_run_and_maps_the_parameters(monkeypatch, tmp_path):
    monkeypatch.setattr(steps, "_POD_NAMESPACE_FILE", "/nonexistent/namespace")
    kwargs = dict(
        data="s3://b/ds",
        model_dir="s3://b/m",
        image="reg/st:1",
        namespace="",
        workers=1,
        gpus_per_worker=2,
        evaluator=True,
        secret="",
        service_account="sa",
        cpu="2",
        memory="4Gi",
        train_steps=300,
        batch_size=128,
        checkpoint_every=100,
        train_flags="--learning-rate 0.003 --exclude 'player id'",
    )
    a = steps.job_config(run_id="run-a", **kwargs)
    b = steps.job_config(run_id="run-b", **kwargs)
    assert a.name != b.name and a.name == steps.job_config(run_id="run-a", **kwargs).name
    assert a.namespace == tfjob.JobConfig.default("namespace")  # not in a pod
    assert a.secret is None  # '' = no Secret (GCS with Workload Identity)
    assert a.train_args == (
        "--train-steps", "300", "--batch-size", "128", "--checkpoint-every", "100",
        "--learning-rate", "0.003", "--exclude", "player id",
    )  # fmt: skip
    pod_namespace = tmp_path / "namespace"  # what a pod finds in its service account mount
    pod_namespace.write_text("team-a\n")
    monkeypatch.setattr(steps, "_POD_NAMESPACE_FILE", str(pod_namespace))
    assert steps.job_config(run_id="r", **kwargs).namespace == "team-a"
    with pytest.raises(ConfigError, match="train_flags"):
        steps.job_config(run_id="r", **{**kwargs, "train_flags": "--x 'unclosed"})
    with pytest.raises(ConfigError, match="--data"):
        steps.job_config(run_id="r", **{**kwargs, "train_flags": "--data s3://other"})
    # The task parameter: passed on unless auto (the trainer's default).
    assert steps.job_config(run_id="r", task="auto", **kwargs).train_args == a.train_args
    task = steps.job_config(run_id="r", task="regression", **kwargs).train_args
    assert task[6:8] == ("--task", "regression")
    with pytest.raises(ConfigError, match="task 'regression' and train_flags' --task binary"):
        steps.job_config(
            run_id="r", task="regression", **{**kwargs, "train_flags": "--task binary"}
        )


def test_job_config_maps_the_queue_parameters():
    common = dict(
        data="s3://b/ds", model_dir="s3://b/m", run_id="r", image="reg/st:1", namespace="ns",
        workers=1, gpus_per_worker=1, evaluator=False, secret="", service_account="sa",
        cpu="2", memory="4Gi", train_steps=300, batch_size=128, checkpoint_every=100,
    )  # fmt: skip
    none = steps.job_config(**common)  # the pipeline's defaults: '' everywhere
    assert none.queue is none.gang_scheduler is none.priority_class is None
    kueue = steps.job_config(queue="gpu-team", priority_class="high", **common)
    assert (kueue.queue, kueue.gang_scheduler, kueue.priority_class) == ("gpu-team", None, "high")
    gang = steps.job_config(queue="research", gang_scheduler="volcano", **common)
    assert (gang.queue, gang.gang_scheduler) == ("research", "volcano")


# --------------------------------------------------------------------------------------------
# Steps on tiny data
# --------------------------------------------------------------------------------------------

METRICS = dict(EVAL_METRICS)
VERSION = EXPORT_VERSION


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory) -> str:
    return tiny_quest_dataset(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module", autouse=True)
def _metrics_of_the_tiny_dataset(tiny_dataset):
    """The trainer's metrics are of the tiny dataset (its plan, ``data_plan``), so the
    evaluate step stands on them rather than scoring the fake exports below."""
    plan = DatasetMetadata.load(tiny_dataset).plan
    METRICS["data_plan"] = REGRESSION_METRICS["data_plan"] = plan


def _model_dir(root: Path, metrics: dict | None = None) -> str:
    """A model directory as the trainer leaves it (a fake SavedModel: files, not a model)."""
    model_dir = root / "model"
    files = {
        f"export/{VERSION}/variables/variables.index": b"index",
        f"export/{VERSION}/variables/variables.data-00000-of-00001": b"\x00" * 1000,
        f"export/{VERSION}/saved_model.pb": b"graph",
        f"export/{VERSION}/fingerprint.pb": b"fp",
    }
    for rel, data in files.items():
        storage.write_bytes(str(model_dir / rel), data)
    storage.write_json(
        str(model_dir / "export/latest.json"), {"path": f"export/{VERSION}", "step": 300}
    )
    storage.write_json(str(model_dir / "eval/metrics.json"), metrics or METRICS)
    return str(model_dir)


def _artifact(kind, root: Path, name: str):
    return kind(name=name, uri=str(root / "artifacts" / name), metadata={})


def _inputs(root: Path, dataset_uri: str, model_dir: str):
    dataset = _artifact(dsl.Dataset, root, "dataset")
    pointers.write_pointer(dataset, dataset_uri)
    model = _artifact(dsl.Model, root, "model")
    pointers.write_pointer(
        model,
        model_dir,
        export=f"{model_dir}/export/{VERSION}",
        step=300,
        tensorboard=f"{model_dir}/logs",
    )
    return dataset, model


def _outputs(root: Path) -> dict:
    return {
        "metrics": _artifact(dsl.Metrics, root, "metrics"),
        "classification": _artifact(dsl.ClassificationMetrics, root, "classification"),
        "sliced": _artifact(dsl.SlicedClassificationMetrics, root, "sliced"),
        "report": _artifact(dsl.Markdown, root, "report"),
    }


def test_evaluate_step_logs_ui_metrics_and_writes_the_report(tmp_path, tiny_dataset):
    model_dir = _model_dir(tmp_path)
    dataset, model = _inputs(tmp_path, tiny_dataset, model_dir)
    outputs = _outputs(tmp_path)
    metrics, classification, report = (outputs[k] for k in ("metrics", "classification", "report"))
    assert steps.evaluate_step(dataset=dataset, model=model, **outputs) is True
    shown = ("auc", "accuracy", "log_loss", "num_examples", "step")
    assert metrics.metadata == {**{k: METRICS[k] for k in shown}, "blessed": 1.0}
    assert outputs["sliced"].metadata == {}  # no slice_by
    roc = classification.metadata["confidenceMetrics"]
    assert [(p["falsePositiveRate"], p["recall"], p["confidenceThreshold"]) for p in roc] == [
        (0.0, 0.0, 1.0),
        (0.25, 0.8, 0.5),
        (1.0, 1.0, 0.0),
    ]
    cm = classification.metadata["confusionMatrix"]
    assert [s["displayName"] for s in cm["annotationSpecs"]] == ["0", "1"]
    assert [r["row"] for r in cm["rows"]] == [[15, 5], [4, 16]]

    text = Path(report.path).read_text()
    meta = DatasetMetadata.load(tiny_dataset).to_dict()
    assert "| auc | 0.84 |" in text
    assert "| 1 | 4 | 16 |" in text  # confusion matrix row of class 1
    assert (
        f"{meta['rows_read']:,} rows read" in text and f"{meta['rows_rejected']:,} rejected" in text
    )
    for split, s in meta["splits"].items():
        assert f"| {split} | {s['fraction']:g} | {s['num_records']:,} |" in text
    assert "| player_level |" in text and "| player_class |" in text  # numeric, categorical
    assert f"tensorboard --logdir {model_dir}/logs" in text
    assert "**Blessed**. blessed: no thresholds" in text
    blessing = json.loads(Path(model_dir, "eval", "blessing.json").read_text())
    assert blessing["blessed"] is True and blessing["thresholds"] == []


def test_report_covers_columns_of_any_kind_and_a_multiclass_label(tiny_dataset):
    meta = DatasetMetadata.load(tiny_dataset).to_dict()
    meta["schema"]["columns"].append({"name": "photo", "type": "image", "drop": False})
    meta["stats"]["columns"]["photo"] = {
        "kind": "image",
        "count": 12,
        "bytes": 3_400_000,
        "height": {"min": 48, "max": 64, "mean": 60.5},
        "width": {"min": 32, "max": 64, "mean": 50.25},
        "formats": {"jpeg": 7, "png": 5},
    }
    meta["stats"]["label"]["counts"] = {"cat": 5, "dog": 4, "eel": 3}
    meta["label_info"]["task"] = "multiclass"
    metrics = {
        **METRICS,
        "confusion_matrix": {
            "labels": ["cat", "dog", "eel"],
            "matrix": [[4, 1, 0], [0, 4, 0], [1, 0, 2]],
        },
    }
    model = {
        "uri": "gs://b/m",
        "export": "gs://b/m/export/1",
        "step": 9,
        "tensorboard": "gs://b/m/logs",
    }
    text = render_report(
        metrics, DatasetMetadata.from_dict(meta), dataset_uri=tiny_dataset, model=model
    )
    assert "| photo | 12 | 32x48 | 64x64 | 50.25x60.5 | 3.4 | jpeg (7), png (5) |" in text
    assert "| true \\ predicted | cat | dog | eel |" in text and "| eel | 1 | 0 | 2 |" in text
    assert "Label `cleared` (multiclass, int)" in text and "| cat | 5 | 41.7% |" in text


def test_evaluate_step_leaves_out_non_finite_metrics_and_blesses_on_auc(tmp_path, tiny_dataset):
    """The thresholds replace min_auc: a model below them is not blessed, which is no error
    (the step returns False, the pipeline skips the export) and the UI says why."""
    model_dir = _model_dir(tmp_path, {**METRICS, "auc": math.nan})
    dataset, model = _inputs(tmp_path, tiny_dataset, model_dir)
    outputs = _outputs(tmp_path)
    steps.evaluate_step(dataset=dataset, model=model, **outputs)
    metrics = outputs["metrics"]
    assert "auc" not in metrics.metadata and metrics.metadata["accuracy"] == 0.77
    assert "| auc | n/a |" in Path(outputs["report"].path).read_text()
    json.dumps(metrics.metadata, allow_nan=False)  # what KFP's backend can parse

    model_dir = _model_dir(tmp_path / "low", {**METRICS, "auc": 0.61})
    dataset, model = _inputs(tmp_path / "low", tiny_dataset, model_dir)
    outputs = _outputs(tmp_path / "low")
    blessed = steps.evaluate_step(
        dataset=dataset,
        model=model,
        **outputs,
        serving_uri=str(tmp_path / "serving"),  # nothing published yet: no baseline
        thresholds="auc>=0.8,auc>=baseline-0.002",
    )
    assert blessed is False
    assert outputs["metrics"].metadata["blessed"] == 0.0
    text = Path(outputs["report"].path).read_text()  # the UI still shows why
    assert "**Not blessed**: not exported" in text
    assert "| auc>=0.8 | 0.61 | 0.8 | **no** |" in text
    assert "| auc>=baseline-0.002 | 0.61 | n/a | skipped (no baseline) |" in text
    assert "Nothing is served yet" in text
    blessing = json.loads(Path(model_dir, "eval", "blessing.json").read_text())
    assert blessing["blessed"] is False and blessing["baseline"] is None
    assert [c["pass"] for c in blessing["thresholds"]] == [False, None]


def test_the_report_shows_the_decision_both_models_and_the_slices(tiny_dataset):
    """What the evaluate step's Markdown card shows of blessing.json and of the slices."""
    meta = DatasetMetadata.load(tiny_dataset)
    model = {"uri": "s3://b/m", "export": "s3://b/m/export/2", "step": 9}
    slices = {
        "difficulty": [
            {"value": "hard", "num_examples": 30, "auc": 0.7, "accuracy": 0.6, "log_loss": 0.5},
            {"value": "(other)", "num_examples": 10, "auc": 0.9, "accuracy": 0.8},
        ]
    }
    blessing = {
        "blessed": False,
        "summary": "not blessed: auc 0.8000 is not >= 0.8480 (auc>=baseline-0.002)",
        "thresholds": [
            {"threshold": "auc>=0.7", "value": 0.8, "bound": 0.7, "pass": True},
            {"threshold": "auc>=baseline-0.002", "value": 0.8, "bound": 0.848, "pass": False},
        ],
        "candidate": {"export": "s3://b/m/export/2", "metrics": {"auc": 0.8, "num_examples": 40}},
        "baseline": {
            "uri": "s3://b/serving/1",
            "version": "1",
            "metrics": {"auc": 0.85, "num_examples": 40},
        },
    }
    text = render_report(
        {**METRICS, "slices": slices},
        meta,
        dataset_uri=tiny_dataset,
        model=model,
        blessing=blessing,
    )
    assert text.index("## Blessing") < text.index("## Evaluation") < text.index("## Data")
    assert "**Not blessed**: not exported. not blessed: auc 0.8000 is not >= 0.8480" in text
    assert "| auc>=baseline-0.002 | 0.8 | 0.848 | **no** |" in text
    assert "| auc>=0.7 | 0.8 | 0.7 | yes |" in text
    assert "served model `s3://b/serving/1` (version 1), on the same eval rows" in text
    assert "| auc | 0.8 | 0.85 |" in text and "| num_examples | 40 | 40 |" in text
    assert "### By `difficulty`" in text
    assert (
        "| hard | 30 | 0.7 | 0.6 | 0.5 |" in text and "| (other) | 10 | 0.9 | 0.8 | n/a |" in text
    )

    unusable = {**blessing, "baseline": {"uri": "s3://b/serving/1", "error": "it needs x"}}
    text = render_report(METRICS, meta, dataset_uri=tiny_dataset, model=model, blessing=unusable)
    assert "The served model `s3://b/serving/1` cannot score this data: it needs x." in text


REGRESSION_METRICS = {
    "task": "regression",
    "rmse": 2.75,
    "mae": 2.2,
    "r2": 0.83,
    "mse": 7.5625,
    "mean_error": 0.36,
    "label_mean": 15.7,
    "label_std": 6.6,
    "num_examples": 139,
    "step": 600,
}


def test_evaluate_step_shows_a_regression_and_blesses_on_rmse(tmp_path, tiny_dataset):
    """A regression's metrics table and report; no ROC or confusion matrix; rmse<=2.5 is not
    met (not blessed, no error), and a classifier's metric in the thresholds is one line."""
    model_dir = _model_dir(tmp_path, REGRESSION_METRICS)
    dataset, model = _inputs(tmp_path, tiny_dataset, model_dir)
    outputs = _outputs(tmp_path)
    assert steps.evaluate_step(dataset=dataset, model=model, **outputs, thresholds="rmse<=3")
    shown = ("rmse", "mae", "r2", "mean_error", "label_std", "num_examples", "step")
    expected = {**{k: REGRESSION_METRICS[k] for k in shown}, "blessed": 1.0}
    assert outputs["metrics"].metadata == expected
    assert outputs["classification"].metadata == {}  # no ROC / confusion matrix cards
    text = Path(outputs["report"].path).read_text()
    assert "| rmse | 2.75 |" in text and "| r2 | 0.83 |" in text and "| auc |" not in text
    assert "| label_std | 6.6 |" in text and "Confusion matrix" not in text
    assert "| rmse<=3 | 2.75 | 3 | yes |" in text
    assert not steps.evaluate_step(dataset=dataset, model=model, **outputs, thresholds="rmse<=2.5")
    with pytest.raises(ConfigError, match=r"^thresholds: 'auc>=0\.8': \S+ is a regression, "):
        steps.evaluate_step(dataset=dataset, model=model, **outputs, thresholds="auc>=0.8")


def test_the_data_summary_of_a_regression_label_shows_its_range(tiny_dataset):
    meta = copy.deepcopy(DatasetMetadata.load(tiny_dataset).to_dict())
    meta["label_info"] = {"type": "float", "task": "regression", "classes": []}
    meta["stats"]["label"] = {
        "missing": 0,
        "counts": {},
        "many_values": True,
        "numeric": {"count": 396, "min": 0.5, "max": 99.25, "mean": 41.5, "std": 12.25},
    }
    model = {"uri": "gs://b/m", "export": "gs://b/m/export/1", "step": 9}
    text = render_report(
        REGRESSION_METRICS, DatasetMetadata.from_dict(meta), dataset_uri=tiny_dataset, model=model
    )
    assert "Label `cleared` (regression, float)" in text
    assert "| count | missing | min | max | mean | std |" in text
    assert "| 396 | 0 | 0.5 | 99.25 | 41.5 | 12.25 |" in text and "Label classes" not in text


def test_evaluate_step_without_metrics_fails_with_one_line(tmp_path, tiny_dataset):
    model_dir = _model_dir(tmp_path)
    storage.delete(f"{model_dir}/eval", recursive=True)
    dataset, model = _inputs(tmp_path, tiny_dataset, model_dir)
    with pytest.raises(NotCommittedError, match="no evaluation metrics"):
        steps.evaluate_step(dataset=dataset, model=model, **_outputs(tmp_path))


def _blessed(model_dir: str, baseline: dict | None = None) -> None:
    """The evaluate step's blessing.json: this export blessed against ``baseline``."""
    storage.write_json(
        f"{model_dir}/eval/blessing.json",
        {
            "blessed": True,
            "candidate": {"export": f"{model_dir}/export/{VERSION}"},
            "baseline": baseline,
        },
    )


def test_export_step_publishes_variables_then_graph_then_manifest(tmp_path):
    model_dir = _model_dir(tmp_path)
    _blessed(model_dir)
    _, model = _inputs(tmp_path, "unused", model_dir)
    serving = str(tmp_path / "serving")
    served = _artifact(dsl.Model, tmp_path, "served")
    real_copy, real_publish = storage.copy, storage.publish
    order = []

    def copy(src, dst):
        order.append(dst)
        real_copy(src, dst)

    def publish(uri, manifest, name=storage.MANIFEST_NAME):
        order.append("MANIFEST")
        return real_publish(uri, manifest, name)

    with (
        mock.patch.object(storage, "copy", autospec=True, side_effect=copy),
        mock.patch.object(storage, "publish", autospec=True, side_effect=publish),
    ):
        target = steps.export_step(model=model, serving_uri=serving, served_model=served)

    assert target == f"{serving}/{VERSION}"
    names = [o.rsplit(f"/{VERSION}/", 1)[-1] for o in order]
    assert names[-2:] == ["saved_model.pb", "MANIFEST"]
    assert set(names[:-2]) == {
        "fingerprint.pb",
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
    }
    manifest = storage.read_committed(target)
    assert manifest["source"] == f"{model_dir}/export/{VERSION}" and manifest["step"] == 300
    assert {f["path"]: f["bytes"] for f in manifest["files"]}["saved_model.pb"] == 5
    assert storage.read_json(f"{serving}/latest.json") == {
        "version": VERSION,
        "path": VERSION,
        "step": 300,
        "source": f"{model_dir}/export/{VERSION}",
    }
    assert Path(f"{target}/variables/variables.data-00000-of-00001").read_bytes() == b"\x00" * 1000
    assert pointers.read_pointer(served)["uri"] == target

    # Again: already published from the same export, nothing is copied.
    with mock.patch.object(storage, "copy", autospec=True) as copy:
        assert steps.export_step(model=model, serving_uri=serving, served_model=served) == target
    copy.assert_not_called()


def test_export_step_refuses_when_the_served_model_changed_since_the_blessing(tmp_path):
    """Evaluate blessed the model with nothing served; another run published meanwhile."""
    model_dir = _model_dir(tmp_path)
    _blessed(model_dir)
    _, model = _inputs(tmp_path, "unused", model_dir)
    serving = str(tmp_path / "serving")
    other = _model_dir(tmp_path / "other")
    steps.publish_export(f"{other}/export/{VERSION}", serving)
    pointer = storage.read_json(f"{serving}/latest.json")
    served = _artifact(dsl.Model, tmp_path, "served")
    with pytest.raises(StaleDecisionError, match=rf"^{serving} serves version {VERSION}, not "):
        steps.export_step(model=model, serving_uri=serving, served_model=served)
    assert storage.read_json(f"{serving}/latest.json") == pointer


def test_export_step_without_an_export_fails(tmp_path):
    model_dir = _model_dir(tmp_path)
    storage.delete(f"{model_dir}/export", recursive=True)
    _, model = _inputs(tmp_path, "unused", model_dir)
    with pytest.raises(NotCommittedError, match="no exported model"):
        steps.export_step(
            model=model,
            serving_uri=str(tmp_path / "s"),
            served_model=_artifact(dsl.Model, tmp_path, "s"),
        )


def test_plan_and_shard_steps_use_only_workers_with_tasks(tmp_path):
    csv = str(tmp_path / "q.csv")
    datagen.generate_quest_logs(csv, 3000, seed=5)  # ~350 KB
    common = dict(
        sources=[csv],
        dataset_uri=str(tmp_path / "ds"),
        label="cleared",
        key="attempt_id",
        splits="train=0.9,eval=0.1",
        num_shards=0,
        task_mb=0.1,  # → 4 tasks (8 shards per split at least)
    )
    assert steps.plan_step(**common, num_workers=9) == [0, 1, 2, 3]
    assert steps.plan_step(**common, num_workers=2) == [0, 1]
    reports = [
        steps.shard_step(**common, max_bad_fraction=0.0, worker_index=i, num_workers=2, cpu="500m")
        for i in (0, 1)
    ]
    assert [json.loads(r)["status"] for r in reports] == ["worker-done", "worker-done"]
    assert sum(json.loads(r)["tasks_run"] for r in reports) == 4
    dataset = _artifact(dsl.Dataset, tmp_path, "dataset")
    meta = steps.finalize_step(
        dataset_uri=common["dataset_uri"], worker_reports=reports, dataset=dataset
    )
    assert meta.rows_accepted == 3000
    assert pointers.read_pointer(dataset)["splits"] == {
        n: s.num_records for n, s in meta.splits.items()
    }
    with pytest.raises(StorageError, match=r"missing\.csv: no such file"):
        steps.plan_step(**{**common, "sources": [str(tmp_path / "missing.csv")]}, num_workers=2)
    with pytest.raises(ConfigError, match="shard_workers"):
        steps.plan_step(**common, num_workers=0)


def test_settle_commits_checks_and_hands_both_to_a_finalize_step_that_reads_nothing(tmp_path):
    """When no worker runs again, the settle step commits the dataset, runs the data checks
    and hands both over (its ``settled`` output): the finalize pod then writes the same
    pointer and report as from the stored dataset, with no storage call -- its dataset can be
    gone -- and without importing the sharder (nor NumPy). Without the hand-over (workers ran
    again, or a re-run found the dataset complete) it reads the dataset, as before."""
    csv = str(tmp_path / "q.csv")
    datagen.generate_quest_logs(csv, 3000, seed=5)
    out = tmp_path / "ds"
    common = dict(sources=[csv], dataset_uri=str(out), label="cleared", task_mb=0.1)
    reports = [steps.shard_step(**common, worker_index=i, num_workers=2, cpu="1") for i in (0, 1)]
    checks = dict(serving_uri=str(tmp_path / "serving"), data_checks="fail", data_check_limits="")
    settled = tmp_path / "outputs" / "settled"
    again = steps.settle_step(
        **common, **checks, num_workers=2, worker_reports=reports, settled=str(settled)
    )
    assert again == []
    handed = json.loads(settled.read_text())
    assert handed["dataset_uri"] == str(out) and handed["facts"]["rows_accepted"] == 3000
    assert "first run" in handed["report"]  # nothing served yet: the checks pass with a note
    assert storage.read_json(str(out / "data_checks.json"))["passed"] is True

    # The finalize pod: what its body imports, with the dataset moved away.
    out.rename(tmp_path / "moved")
    code = (
        "import json, sys, types\n"
        "from shardtrain.kubeflow import shard_steps\n"
        "art = lambda p: types.SimpleNamespace(path=p, metadata={})\n"
        "d, r = art(sys.argv[3]), art(sys.argv[4])\n"
        "shard_steps.finalize_step(dataset_uri=sys.argv[1], worker_reports=[], dataset=d,\n"
        "    data_checks_report=r, settled=open(sys.argv[2]).read(), **json.loads(sys.argv[5]))\n"
        "print(json.dumps([m in sys.modules for m in ('shardtrain.data.sharding', 'numpy')]))\n"
    )
    pod = tmp_path / "pod"
    args = [str(out), str(settled), str(pod / "dataset"), str(pod / "report.md")]
    ran = subprocess.run(
        [sys.executable, "-c", code, *args, json.dumps(checks)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(ran.stdout) == [False, False]  # neither the sharder nor even NumPy
    (tmp_path / "moved").rename(out)

    # The same pointer and report as a finalize step that reads the stored dataset.
    dataset = _artifact(dsl.Dataset, tmp_path, "dataset")
    report = _artifact(dsl.Markdown, tmp_path, "report")
    meta = steps.finalize_step(
        dataset_uri=str(out), worker_reports=reports, dataset=dataset,
        data_checks_report=report, settled="", **checks,
    )  # fmt: skip
    assert meta is not None and meta.rows_accepted == 3000
    assert json.loads((pod / "dataset").read_text()) == pointers.read_pointer(dataset)
    assert (pod / "report.md").read_text() == Path(report.path).read_text()
    # A re-run of the whole pipeline: settle finds the dataset complete and hands nothing over.
    rerun = tmp_path / "outputs" / "rerun"
    assert steps.settle_step(**common, num_workers=2, worker_reports=[], settled=str(rerun)) == []
    assert rerun.read_text() == ""


def test_workers_pick_their_tasks_by_the_fan_outs_count_when_the_plan_has_more(tmp_path):
    """The fan-out counts tasks from the file sizes; a per-row, uncompressed, small-shard run
    of a wide CSV gets more tasks from its plan (see tests/unit/data/test_task_rule.py). The
    one worker started runs them all (it picks tasks by the fan-out's count, 1, not by the
    shard_workers asked for): no task is left to a worker that never starts."""
    wide_csv(tmp_path / "wide.csv", rows=20_000)
    common = dict(
        sources=[str(tmp_path / "wide.csv")],
        dataset_uri=str(tmp_path / "ds"),
        label="label",
        splits="train=0.9,eval=0.1",
        target_shard_mb=1,
        task_mb=1024,
        record_format="example",
        compression="none",
    )
    assert steps.plan_step(**common, num_workers=4) == [0]
    report = json.loads(steps.shard_step(**common, worker_index=0, num_workers=4, cpu="1"))
    assert report["tasks_run"] == 2  # both tasks of the plan
    # A worker the fan-out did not start (index >= its count) has nothing to do.
    idle = json.loads(steps.shard_step(**common, worker_index=1, num_workers=4, cpu="1"))
    assert idle["status"] == "no-tasks" and idle["tasks_run"] == 0
    assert steps.settle_step(**common, num_workers=4, worker_reports=[json.dumps(report)]) == []
    meta = DatasetMetadata.load(common["dataset_uri"])
    assert meta.rows_accepted == 20_000


def test_the_plan_step_plans_sources_whose_tasks_the_listing_cannot_count(tmp_path):
    """Parquet is cut by row groups: the fan-out plans the run (storing nothing) and starts
    one worker per task; the workers then pick tasks by the shard_workers asked for."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 60_000
    table = pa.table({"x": [float(i) for i in range(n)], "label": [i % 2 for i in range(n)]})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=20_000)
    common = dict(
        sources=[str(tmp_path / "t.parquet")],
        dataset_uri=str(tmp_path / "ds"),
        label="label",
        task_mb=0.01,
    )
    tasks = len(sharding.build_plan(steps.shard_config(common)).tasks)
    assert 1 < tasks < 8
    assert steps.plan_step(**common, num_workers=8) == list(range(tasks))
    assert not (tmp_path / "ds").exists()
    reports = [
        steps.shard_step(**common, worker_index=i, num_workers=8, cpu="1") for i in range(tasks)
    ]
    assert sum(json.loads(r)["tasks_run"] for r in reports) == tasks
    assert steps.settle_step(**common, num_workers=8, worker_reports=reports) == []
    assert DatasetMetadata.load(common["dataset_uri"]).rows_accepted == n


def test_the_plan_step_reads_no_data_and_loads_no_parser(tmp_path):
    """It lists the sources and stops: a file whose content no parser would accept fans out
    like any other (the workers report it), and the step's process -- importing what the
    plan_shards pod imports -- never loads the compiled kernels, Arrow or NumPy, nor writes
    a plan."""
    path = tmp_path / "q.csv"
    path.write_bytes((b"\x00\x01 not a csv \xff" * 80_000)[:1_000_000])  # 3.8 tasks of 0.25 MiB
    code = (
        "import json, sys\n"
        "from shardtrain.kubeflow import shard_steps\n"
        f"w = shard_steps.plan_step(num_workers=8, sources=[{str(path)!r}], "
        f"dataset_uri={str(tmp_path / 'ds')!r}, label='cleared', task_mb=0.25)\n"
        "print(json.dumps([w, *(m in sys.modules for m in ('numba', 'pyarrow', 'numpy'))]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out.splitlines()[-1]) == [[0, 1, 2, 3], False, False, False]
    assert not (tmp_path / "ds").exists()


# --------------------------------------------------------------------------------------------
# The train step: the TFJob it renders and how it ends
# --------------------------------------------------------------------------------------------

JOB = dict(
    image="reg/st:1",
    namespace="team-a",
    workers=1,
    gpus_per_worker=2,
    evaluator=True,
    secret="shardtrain-storage",
    service_account="shardtrain-trainer",
    cpu="4",
    memory="16Gi",
    train_steps=300,
    batch_size=128,
    checkpoint_every=100,
    train_flags="",
)


def test_train_step_submits_the_tfjob_with_gpus_on_training_replicas_only(tmp_path):
    model_dir = _model_dir(tmp_path, {**METRICS, "step": 100})  # not finished yet
    dataset, _ = _inputs(tmp_path, "s3://data/quest", model_dir)
    model = _artifact(dsl.Model, tmp_path, "trained")
    with mock.patch.object(tfjob, "submit_and_wait", autospec=True) as submit:
        pointer = steps.train_step(
            dataset=dataset,
            model=model,
            model_dir=model_dir,
            local=False,
            run_id="run-1",
            timeout=3600,
            job_api="tfjob",
            **JOB,
        )
    submit.assert_called_once()
    assert submit.call_args.kwargs["wait_timeout"] == 3600
    manifest = tfjob.to_manifest(submit.call_args.args[0])
    specs = manifest["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "Worker": 1, "Evaluator": 1}
    for rtype, rspec in specs.items():
        container = rspec["template"]["spec"]["containers"][0]
        gpus = container["resources"]["limits"].get("nvidia.com/gpu")
        assert gpus == (None if rtype == "Evaluator" else "2"), rtype
        assert container["image"] == "reg/st:1"
        assert container["args"][:5] == [
            "train",
            "--data",
            "s3://data/quest",
            "--model-dir",
            model_dir,
        ]
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"]["name"]
            for e in container["env"]
            if "valueFrom" in e
        }
        assert refs == {k: "shardtrain-storage" for k, _ in tfjob.STORAGE_ENV}
        assert not any(e.get("value") for e in container["env"] if e["name"].startswith("AWS_"))
    assert manifest["metadata"]["namespace"] == "team-a"
    assert pointer["uri"] == model_dir and pointer["export"] == f"{model_dir}/export/{VERSION}"
    assert model.metadata["job"] == f"TFJob team-a/{steps.tfjob_name('run-1')}"


@pytest.mark.parametrize(("job_api", "serves"), [("trainjob", None), ("auto", True)])
def test_train_step_submits_a_trainjob_where_the_cluster_has_trainer_v2(tmp_path, job_api, serves):
    model_dir = _model_dir(tmp_path, {**METRICS, "step": 100})
    dataset, _ = _inputs(tmp_path, "s3://data/quest", model_dir)
    model = _artifact(dsl.Model, tmp_path, "trained")
    with (
        mock.patch.object(trainjob, "submit_and_wait", autospec=True) as submit,
        mock.patch.object(trainjob, "serves_trainjobs", autospec=True, return_value=serves),
        # None: a launcher may not read cluster-scoped runtimes (Trainer's webhook checks).
        mock.patch.object(trainjob, "runtime_installed", autospec=True, return_value=None),
        mock.patch.object(tfjob, "submit_and_wait", autospec=True) as tfjob_submit,
    ):
        steps.train_step(
            dataset=dataset, model=model, model_dir=model_dir, local=False, run_id="run-1",
            timeout=3600, job_api=job_api, **JOB,
        )  # fmt: skip
    tfjob_submit.assert_not_called()
    job = submit.call_args.args[0]
    trainer = job["spec"]["trainer"]
    # The chief and one worker of the settings are two nodes; each node trains on 2 GPUs.
    assert (
        trainer["numNodes"] == 2 and trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "2"
    )
    assert trainer["args"][:5] == ["train", "--data", "s3://data/quest", "--model-dir", model_dir]
    assert job["metadata"] == {
        "name": steps.tfjob_name("run-1"),
        "namespace": "team-a",
        "labels": job["metadata"]["labels"],
    }
    assert model.metadata["job"] == f"TrainJob team-a/{steps.tfjob_name('run-1')}"


def test_auto_without_our_runtime_falls_back_to_the_tfjob_or_says_how_to_install_it(caplog):
    with (
        mock.patch.object(trainjob, "serves_trainjobs", autospec=True, return_value=True),
        mock.patch.object(trainjob, "runtime_installed", autospec=True, return_value=False),
        mock.patch.object(trainjob, "serves", autospec=True, return_value=True) as serves,
    ):
        assert steps.resolve_job_api("auto", "shardtrain-tensorflow") == "tfjob"
        serves.assert_called_once_with("kubeflow.org", "v1", "tfjobs")
        assert "kubectl apply --server-side -k k8s/trainer-v2" in caplog.text
        serves.return_value = False
        with pytest.raises(tfjob.ClusterError, match="not the ClusterTrainingRuntime"):
            steps.resolve_job_api("auto", "shardtrain-tensorflow")


def test_auto_picks_the_tfjob_where_the_cluster_has_no_trainer_v2():
    with mock.patch.object(trainjob, "serves_trainjobs", autospec=True, return_value=False):
        assert steps.resolve_job_api("auto") == "tfjob"
    assert steps.resolve_job_api("trainjob") == "trainjob"
    with pytest.raises(ConfigError, match="job_api 'mpijob' is not one of auto, trainjob, tfjob"):
        steps.resolve_job_api("mpijob")


def test_train_step_fails_when_the_tfjob_fails_and_skips_a_finished_model(tmp_path):
    model_dir = _model_dir(tmp_path, {**METRICS, "step": 100})
    dataset, _ = _inputs(tmp_path, "s3://data/quest", model_dir)
    model = _artifact(dsl.Model, tmp_path, "trained")
    args = dict(
        dataset=dataset,
        model=model,
        model_dir=model_dir,
        run_id="r",
        timeout=60,
        job_api="tfjob",
        **JOB,
    )
    failed = tfjob.JobFailedError("TFJob team-a/x failed: chief exited with code 1")
    with (
        mock.patch.object(tfjob, "submit_and_wait", autospec=True, side_effect=failed),
        pytest.raises(tfjob.JobFailedError, match="chief exited"),
    ):
        steps.train_step(local=False, **args)

    storage.write_json(f"{model_dir}/eval/metrics.json", METRICS)  # step 300: finished
    assert steps.trained_step(model_dir) == 300
    with mock.patch.object(tfjob, "submit_and_wait", autospec=True) as submit:
        assert steps.train_step(local=False, **args)["step"] == 300
    submit.assert_not_called()


def test_a_failing_local_tfjob_fails_the_step(tmp_path):
    config = steps.job_config(data="d", model_dir="m", run_id="r", **{**JOB, "workers": 0})
    manifest = tfjob.to_manifest(tfjob.build_tfjob(config))
    for rspec in manifest["spec"]["tfReplicaSpecs"].values():
        container = rspec["template"]["spec"]["containers"][0]
        container["command"] = ["python3", "-c", "import sys; sys.exit(7)"]
        container["args"] = []
    with pytest.raises(ShardtrainError, match=r"local TFJob shardtrain-\w+ failed: .*code 7"):
        steps.run_tfjob_locally(manifest, timeout=60)


def test_the_step_functions_import_without_tensorflow():
    """Step pods that only copy files or log metrics do not pay for importing TensorFlow."""
    code = "import sys, shardtrain.kubeflow.steps; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
