"""The end-to-end demo on the embedded default: local storage, no server, a few minutes.

It runs the main job the way a user would, as the Kubeflow pipeline ``csv_to_model`` run on
this machine with ``kfp.local`` (:func:`shardtrain.kubeflow.client.run_local`):

1. synthetic quest logs (with a few malformed rows) → ``WORKDIR/data/quest_logs.csv``;
2. two shard workers (``dsl.ParallelFor``) and ``finalize`` → TFRecord shards of columnar
   blocks (the default for tabular data: what the trainer reads fastest) with schema,
   statistics, a deterministic train/eval split and the rejects accounted for;
3. training on a local TFJob — a chief, one worker and a sidecar evaluator as processes with
   the ``TF_CONFIG`` the training operator would give their pods;
4. evaluation (metrics, ROC curve, confusion matrix, a Markdown report and an HTML report of
   pictures, ``WORKDIR/model/eval/report.html``) and the SavedModel published under
   ``WORKDIR/serving``. A second run compares its data with the published model's: the HTML
   report then overlays both distributions with the drift verdicts.

Everything lands in ``WORKDIR``; re-running reuses what is done (the CSV, committed shards,
a finished model, a published export).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from shardtrain import storage
from shardtrain.data import datagen
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.kubeflow import client

log = logging.getLogger(__name__)

#: Small enough for a few minutes on 2 cores, large enough for an eval AUC around 0.85.
DEMO_ROWS = 50_000
DEMO_TRAIN_STEPS = 400


@dataclass(frozen=True)
class DemoResult:
    """Where the demo put things.

    Attributes:
        csv: the generated quest logs.
        dataset: the sharded dataset.
        metadata: the dataset's ``metadata.json``.
        run: what the local pipeline run produced (model, export, metrics, report, logs).
        html_report: the evaluate step's HTML report (None: it could not be made).
    """

    csv: str
    dataset: str
    metadata: DatasetMetadata
    run: client.LocalRun
    html_report: str | None = None


def run_demo(
    workdir: str,
    *,
    rows: int = DEMO_ROWS,
    train_steps: int = DEMO_TRAIN_STEPS,
    seed: int = 7,
) -> DemoResult:
    """Generate quest logs in ``workdir`` and run the whole pipeline on them locally.

    Args:
        workdir: a local directory for all outputs.
        rows: quest attempts to generate.
        train_steps: global training steps.
        seed: generator seed.

    Returns:
        The paths of the CSV and the dataset, its metadata, and the pipeline run's outputs.
    """
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    csv = os.path.join(workdir, "data", "quest_logs.csv")
    if not storage.exists(csv):
        log.info("generating %d quest-log rows into %s", rows, csv)
        datagen.generate_quest_logs(csv, rows, seed=seed, bad_fraction=0.0005)
    dataset = os.path.join(workdir, "dataset")
    run = client.run_local(
        {
            "sources": [csv],
            "dataset_uri": dataset,
            "model_dir": os.path.join(workdir, "model"),
            "serving_uri": os.path.join(workdir, "serving"),
            "label": "cleared",
            "key": "attempt_id",
            "max_bad_fraction": 0.01,
            # ~2 MB per task: several tasks, so both shard workers have work.
            "task_mb": 2.0,
            "shard_workers": 2,
            "shard_cpu": "1",
            "tfjob_workers": 1,
            "evaluator": True,
            "train_steps": train_steps,
            "batch_size": 256,
            "checkpoint_every": 200,
            # Metrics per difficulty: the report's slices (the UI has no viewer for them).
            "slice_by": "difficulty",
            "secret_name": "",  # local files: no storage credentials
        },
        pipeline_root=os.path.join(workdir, "pipeline-runs"),
    )
    from shardtrain.htmlreport.build import REPORT_NAME

    html_report = storage.join(run.model_dir, "eval", REPORT_NAME)
    return DemoResult(
        csv=csv,
        dataset=dataset,
        metadata=DatasetMetadata.load(dataset),
        run=run,
        html_report=html_report if storage.exists(html_report) else None,
    )
