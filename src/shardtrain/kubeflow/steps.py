"""What each step of the Kubeflow pipeline ``csv_to_model`` runs.

The pipeline (:mod:`shardtrain.kubeflow.pipelines.csv_to_model`) is a thin graph of lightweight
components (:mod:`shardtrain.kubeflow.components`), and each component body is one call into a
``*_step`` function here:

=================  ======================  =================================================
component          library function        does
=================  ======================  =================================================
plan_shards        :func:`plan_step`       check every parameter of the run; choose the
                                           shard workers from the listing (at least one)
shard (x N)        :func:`shard_step`      one shard worker (``dsl.ParallelFor``)
settle_shards      :func:`settle_step`     decide what the workers checked; name the
                                           workers to run again (a second ``ParallelFor``,
                                           normally empty); when none, commit and check
                                           the dataset (as finalize would) and hand over
finalize_shards    :func:`finalize_step`   point the ``dataset`` output at it; commit
                                           ``metadata.json`` (``dsl.Collected``) and check
                                           it against the served model's training data
                                           when settle did not
train              :func:`train_step`      the TrainJob/TFJob: submit and wait, or run locally
evaluate           :func:`evaluate_step`   blessing, metrics, ROC, slices, Markdown report
export             :func:`export_step`     publish the SavedModel (when blessed)
deploy             :func:`deploy_step`     a KServe InferenceService of it (``deploy``)
=================  ======================  =================================================

* The sharding steps (:func:`plan_step`, :func:`shard_step`, :func:`settle_step`,
  :func:`finalize_step`) are in :mod:`shardtrain.kubeflow.shard_steps`, light to import, and
  re-exported here.
* :func:`plan_step` lists the sources and returns the shard workers that have work to do,
  one per task the file sizes promise (a missing file fails here, in one pod, not in N); it
  reads no data: each worker plans the run itself from a sample, in parallel, rather than
  waiting on one pod to do it first.
* :func:`settle_step` decides, once they are done, what the workers checked as they read
  (CSV types by all rows) and returns the workers to run again: none when the sample's types
  held, all of them when a column's type changed. When none, it commits the dataset and runs
  the data checks itself, and hands both over (its ``settled`` output), so that the finalize
  pod, on the critical path of every run, touches no storage.
* :func:`shard_step` runs worker ``i`` of ``n`` of :func:`shardtrain.data.sharding.shard`;
  :func:`finalize_step` merges the workers' tasks into ``metadata.json`` (unless settle
  did) and compares the dataset with the data the served model was trained on
  (:mod:`shardtrain.kubeflow.data_checks`: a drifted or reshaped dataset stops the run
  before training, or is reported, by parameter).
* :func:`train_step` renders the training job with the generators of ``shardtrain trainjob
  render`` (Kubeflow Trainer v2, where the cluster serves it: ``job_api=auto``) or ``shardtrain
  tfjob render`` and, on a cluster, submits it and waits (the step fails when the job fails or
  times out; a retried step attaches to its job); in local mode it runs the TFJob manifest's
  replicas as local processes, exactly like ``shardtrain run-local job.yaml``.
* :func:`evaluate_step` compares the trained model with the served one and blesses it or not
  (:mod:`shardtrain.train.blessing`: ``thresholds``, ``slice_by``), and turns
  ``MODEL_DIR/eval/metrics.json``, ``blessing.json`` and the dataset's metadata into what the
  Kubeflow Pipelines UI renders: ``dsl.Metrics`` scalars, a classifier's
  ``dsl.ClassificationMetrics`` ROC curve and confusion matrix (and per slice), and a
  ``dsl.Markdown`` report (:mod:`shardtrain.kubeflow.report`); it returns ``blessed``, and
  the export runs only then (``dsl.If``).
* :func:`export_step` copies the newest SavedModel to a serving location, publish-last, if
  the model it was blessed against is still the one served (:mod:`shardtrain.kubeflow.publish`).
* :func:`deploy_step` (only with the ``deploy`` parameter) renders the KServe InferenceService
  serving that location (:mod:`shardtrain.kubeflow.serving`), records it as an artifact and,
  on a cluster, applies it.

A component body runs its step under :func:`user_errors`: a user error (a
:class:`~shardtrain.errors.ShardtrainError`) ends the step's process with one line and the
error's exit code, as the ``shardtrain`` command does, never with a traceback in the log.

The logic lives here, not in the component bodies, because KFP embeds a body's source in the
compiled YAML: here it is plain Python, tested without KFP (the steps take any object with
the artifact attributes they use), and the same in every image that has ``shardtrain``.
Steps hand data to each other as pointers (:mod:`shardtrain.kubeflow.pointers`): the data
itself stays at the URIs the user chose.

Importing this module does not import TensorFlow: step pods that only shard, copy files or
log metrics do not pay for it (the train step's TFJob replicas are separate processes).

Secrets
-------
Credentials are never pipeline parameters. On a cluster the step pods get the storage Secret's
keys as environment variables through ``kfp.kubernetes.use_secret_as_env`` (the compiled YAML
holds only the Secret's *name* and its key names), and the TFJob's pods through the manifest's
``secretKeyRef`` (see :mod:`shardtrain.kubeflow.jobs.tfjob`). Locally every step inherits this
process's environment.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from shardtrain import storage
from shardtrain.data.metadata import DatasetMetadata
from shardtrain.errors import ConfigError, NotCommittedError, ShardtrainError
from shardtrain.kubeflow.jobs import tfjob, trainjob
from shardtrain.kubeflow.local import processes
from shardtrain.kubeflow.parameters import JOB_APIS as JOB_APIS  # re-exported
from shardtrain.kubeflow.pointers import read_pointer, write_pointer
from shardtrain.kubeflow.publish import check_still_served, publish_export
from shardtrain.kubeflow.report import fmt, render_report
from shardtrain.kubeflow.shard_steps import _setup_logging
from shardtrain.kubeflow.shard_steps import cpu_count as cpu_count  # re-exported: every step
from shardtrain.kubeflow.shard_steps import finalize_step as finalize_step
from shardtrain.kubeflow.shard_steps import plan_step as plan_step
from shardtrain.kubeflow.shard_steps import settle_step as settle_step
from shardtrain.kubeflow.shard_steps import shard_config as shard_config
from shardtrain.kubeflow.shard_steps import shard_step as shard_step
from shardtrain.kubeflow.shard_steps import user_errors as user_errors
from shardtrain.options import from_params
from shardtrain.train.blessing import EvaluateConfig, evaluate_model
from shardtrain.train.evaluation import headline_keys

# The trainer's modules are imported by the steps that use them.

log = logging.getLogger(__name__)

#: The file a Kubernetes pod finds its own namespace in.
_POD_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def tfjob_name(run_id: str) -> str:
    """A TFJob name (DNS-1035) unique to one pipeline run: ``shardtrain-<hash of run_id>``."""
    return f"shardtrain-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"


def current_namespace(default: str) -> str:
    """The namespace this pod runs in (Kubeflow profiles run pipelines in the user's), else
    ``default``."""
    try:
        with open(_POD_NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read().strip() or default
    except OSError:
        return default


def job_config(
    *,
    data: str,
    model_dir: str,
    run_id: str,
    image: str,
    namespace: str,
    workers: int,
    gpus_per_worker: int,
    evaluator: bool,
    secret: str,
    service_account: str,
    cpu: str,
    memory: str,
    train_steps: int,
    batch_size: int,
    checkpoint_every: int,
    train_flags: str = "",
    task: str = "auto",
    queue: str = "",
    gang_scheduler: str = "",
    priority_class: str = "",
) -> tfjob.JobConfig:
    """The TFJob settings of the pipeline's training step.

    Args:
        data: the dataset URI.
        model_dir: the model directory URI.
        run_id: the pipeline run's id (names the job, so every run gets its own TFJob).
        image: the project image of every replica.
        namespace: the job's namespace ('' → the namespace the step runs in).
        workers: Worker replicas besides the chief.
        gpus_per_worker: ``nvidia.com/gpu`` of the chief and each worker (never the evaluator).
        evaluator: add a sidecar evaluator replica.
        secret: the storage Secret's name ('' → none: GCS with Workload Identity).
        service_account: the replicas' service account.
        cpu: CPU request per replica.
        memory: memory per replica.
        train_steps: global steps.
        batch_size: global batch size, rounded to a multiple of the training replicas.
        checkpoint_every: steps between checkpoints.
        train_flags: more ``shardtrain train`` flags, shell-quoted (``--dropout 0.1``).
        task: ``auto``, ``binary``, ``multiclass`` or ``regression`` (``shardtrain train
            --task``).
        queue: the queue the job waits in ('' → none): a Kueue LocalQueue, or the Volcano
            queue with ``gang_scheduler='volcano'``.
        gang_scheduler: 'volcano' to gang-schedule the replicas ('' → the default scheduler).
        priority_class: the pods' PriorityClass ('' → none).

    Raises:
        ConfigError: a value the TFJob cannot take.
    """
    try:
        extra = shlex.split(train_flags or "")
    except ValueError as exc:
        raise ConfigError(f"train_flags: {exc}") from exc
    # A pipeline parameter cannot know how many replicas a run gets: the global batch is
    # rounded to split evenly over them (the CLI refuses instead, where a person can choose).
    replicas = tfjob.replicas_in_sync(int(workers), int(gpus_per_worker), extra)
    batch = tfjob.round_batch(int(batch_size), replicas)
    if batch != int(batch_size):
        log.warning(
            "batch_size %d does not split over the %d training replicas: using %d",
            int(batch_size),
            replicas,
            batch,
        )
    return tfjob.JobConfig(
        data=data,
        model_dir=model_dir,
        name=tfjob_name(run_id),
        namespace=namespace or current_namespace(tfjob.JobConfig.default("namespace")),
        image=image,
        workers=int(workers),
        gpus_per_worker=int(gpus_per_worker),
        evaluator=bool(evaluator),
        secret=secret or None,
        service_account=service_account,
        cpu=cpu,
        memory=memory,
        queue=queue or None,
        gang_scheduler=gang_scheduler or None,
        priority_class=priority_class or None,
        train_args=(
            "--train-steps",
            str(int(train_steps)),
            "--batch-size",
            str(batch),
            "--checkpoint-every",
            str(int(checkpoint_every)),
            *_task_args(task, extra),
            *extra,
        ),
    )


def _task_args(task: str, extra: list[str]) -> tuple[str, ...]:
    """``--task TASK`` for the replicas, unless it is ``auto`` (the trainer's default).

    Raises:
        ConfigError: ``train_flags`` sets ``--task`` too, to something else.
    """
    task = task or "auto"
    if task == "auto":
        return ()
    given = [a.partition("=")[2] or "" for a in extra if a.startswith("--task=")]
    given += [extra[i + 1] for i, a in enumerate(extra[:-1]) if a == "--task"]
    if any(g != task for g in given):
        raise ConfigError(f"task '{task}' and train_flags' --task {given[0]} disagree")
    return ("--task", task)


def resolve_job_api(job_api: str, runtime: str = trainjob.RUNTIME_NAME) -> str:
    """``trainjob`` or ``tfjob``: ``auto`` is the TrainJob where the cluster serves Kubeflow
    Trainer v2 (``trainer.kubeflow.org``) and has our ``runtime``, else the TFJob. Trainer v2
    without the runtime, where TFJobs are served too, is the TFJob with a warning saying how
    to install it.

    Raises:
        ConfigError: ``job_api`` is none of :data:`JOB_APIS`.
        ClusterError: ``auto`` could not ask the cluster, or found TrainJobs without the
            runtime and no TFJobs.
    """
    if job_api not in JOB_APIS:
        raise ConfigError(f"job_api '{job_api}' is not one of {', '.join(JOB_APIS)}")
    if job_api != "auto":
        return job_api
    if not trainjob.serves_trainjobs():
        return "tfjob"
    if trainjob.runtime_installed(runtime) is not False:
        return "trainjob"
    install = "kubectl apply --server-side -k k8s/trainer-v2"
    if trainjob.serves(tfjob.API_VERSION.split("/")[0], "v1", "tfjobs"):
        log.warning(
            "the cluster has Kubeflow Trainer v2 but not the runtime %s (%s): training on a "
            "TFJob instead",
            runtime,
            install,
        )
        return "tfjob"
    raise tfjob.ClusterError(
        f"the cluster has Kubeflow Trainer v2 but not the ClusterTrainingRuntime {runtime}: "
        f"install it ({install}) or set job_api"
    )


def trainjob_config(config: tfjob.JobConfig) -> trainjob.TrainJobConfig:
    """The TrainJob of the train step's settings: the chief and the workers become
    ``workers + 1`` nodes (node 0 the chief, which evaluates: a TrainJob has no evaluator
    replica); the rest carries over."""
    if config.evaluator:
        log.info("TrainJob: node 0 (the chief) evaluates; no separate evaluator replica")
    priority = config.priority_class
    if priority and (config.queue is None or config.gang_scheduler is not None):
        log.warning(
            "priority_class %s: a TrainJob's pods get their PriorityClass from the runtime; "
            "ignored without a Kueue queue",
            priority,
        )
        priority = None
    return trainjob.TrainJobConfig(
        **{**config.shared_settings(), "priority_class": priority},
        nodes=config.workers + 1,
        gpus_per_node=config.gpus_per_worker,
    )


def run_tfjob_locally(manifest: Mapping[str, Any], *, timeout: float | None = None) -> None:
    """Run a TFJob manifest's replicas as local processes: ``shardtrain run-local job.yaml``.

    Raises:
        ShardtrainError: the local job failed or timed out (the chief decides, as on a cluster).
    """
    result = processes.run_local(tfjob.local_replicas(manifest), timeout=timeout)
    if not result.succeeded:
        name = manifest.get("metadata", {}).get("name", "TFJob")
        raise ShardtrainError(f"local TFJob {name} failed: {result.reason}")


def trained_step(model_dir: str) -> int | None:
    """The step a finished training left in ``model_dir`` (None: none finished): see
    :func:`shardtrain.train.trainer.finished_step` (imported here: the trainer's modules
    import the compiled kernels, which the data steps' pods do without)."""
    from shardtrain.train.trainer import finished_step

    return finished_step(model_dir)


def train_step(
    *,
    dataset: Any,
    model: Any,
    model_dir: str,
    local: bool,
    run_id: str,
    timeout: float,
    job_api: str = "auto",
    **job: Any,
) -> dict[str, Any]:
    """Train on the dataset with a TrainJob or a TFJob and point ``model`` at the result.

    The job comes from :func:`job_config`: a Kubeflow Trainer v2 TrainJob
    (:func:`trainjob_config`, :func:`shardtrain.kubeflow.jobs.trainjob.build_trainjob`) or a
    TFJob (:func:`shardtrain.kubeflow.jobs.tfjob.build_tfjob`), as ``job_api`` says
    (:func:`resolve_job_api`). On a cluster (``local=False``) it is created in the namespace
    with the step's own service account, the chief's log is streamed into the step's log, and
    the step fails when the job Failed or has not ended within ``timeout`` seconds. A retried
    step finds its job (named after the run) already there and attaches to it. With
    ``local=True`` the TFJob manifest's replicas run as local processes (no cluster; GPU
    requests and Secrets do not apply, the replicas inherit this environment). When
    ``model_dir`` already holds the final export and metrics of ``train_steps``
    (:func:`trained_step`), no job is started at all.

    Args:
        dataset: the ``dsl.Dataset`` input (a pointer from :func:`finalize_step`).
        model: the ``dsl.Model`` output.
        model_dir: where checkpoints, logs, metrics and the export go.
        local: run the TFJob here instead of on the cluster.
        run_id: the pipeline run's id.
        timeout: seconds the job may take in total (time spent queued included).
        job_api: ``auto``, ``trainjob`` or ``tfjob`` (:func:`resolve_job_api`).
        **job: the other arguments of :func:`job_config`.

    Returns:
        The model pointer: ``uri`` (the model dir), ``export``, ``step``, ``tensorboard``.

    Raises:
        JobFailedError, JobTimeoutError, ClusterError: the cluster job did not succeed.
        ShardtrainError: the local job failed.
    """
    _setup_logging()
    data = read_pointer(dataset)["uri"]
    config = job_config(data=data, model_dir=model_dir, run_id=run_id, **job)
    job_model = tfjob.build_tfjob(config)
    done = trained_step(model_dir)
    where = f"local/{config.name}"
    if done is not None and done >= int(job["train_steps"]):
        # A re-run of a finished pipeline: no job, no pods (and no GPUs) for nothing to do.
        log.info("%s already holds step %d with its export and metrics: no TFJob", model_dir, done)
    elif local:
        log.info("running TFJob %s locally (the manifest's replicas as processes)", config.name)
        run_tfjob_locally(tfjob.to_manifest(job_model), timeout=timeout)
    else:
        runtime = trainjob.runtime_name(config.gang_scheduler)
        kind = resolve_job_api(job_api, runtime)
        if kind == "trainjob":
            job_manifest = trainjob.build_trainjob(trainjob_config(config))
            trainjob.submit_and_wait(job_manifest, wait_timeout=timeout, out=sys.stdout)
        else:
            tfjob.submit_and_wait(job_model, wait_timeout=timeout, out=sys.stdout)
        where = f"{'TrainJob' if kind == 'trainjob' else 'TFJob'} {config.namespace}/{config.name}"
    from shardtrain.train import export  # its feature code imports the compiled kernels

    latest = export.latest_export(model_dir)
    return write_pointer(
        model,
        model_dir,
        framework="tensorflow",
        export=latest["uri"],
        step=latest["step"],
        tensorboard=storage.join(model_dir, "logs"),
        job=where,
    )


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------

#: Scalars of ``metrics.json`` shown in the UI's metrics table besides the task's headline
#: metrics (:func:`~shardtrain.train.evaluation.headline_keys`).
METRIC_KEYS = ("num_examples", "step")
#: A regression's further scalars in the metrics table.
REGRESSION_KEYS = ("mean_error", "label_std")


def _finite(value: Any) -> bool:
    """A real, finite number: what KFP's metrics table can hold (no NaN, no bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def evaluate_step(
    *,
    dataset: Any,
    model: Any,
    metrics: Any,
    classification: Any,
    sliced: Any,
    report: Any,
    serving_uri: str = "",
    thresholds: str = "",
    slice_by: str = "",
    html_report: Any = None,
) -> bool:
    """Compare the trained model with the served one, bless it or not, and show it all in the UI.

    :func:`shardtrain.train.blessing.evaluate_model` scores the candidate and the model
    published at ``serving_uri`` on the dataset's eval split, checks ``thresholds`` and writes
    ``MODEL_DIR/eval/blessing.json`` (and, with ``slice_by``, the metrics per slice into
    ``metrics.json``). Then this step logs:

    * ``metrics`` (``dsl.Metrics``): the scalars auc, accuracy, log_loss (a classifier) or
      rmse, mae, r2, mean_error, label_std (a regression), and num_examples, step (the UI's
      metrics table; a value that is not finite, e.g. the AUC of a one-class eval split, is
      left out with a warning); ``blessed`` (1 or 0) and the baseline's headline metrics as
      ``baseline_<metric>`` when one was scored;
    * ``classification`` (``dsl.ClassificationMetrics``): a classifier's ROC curve and
      confusion matrix (the UI draws both; a regression has neither);
    * ``sliced`` (``dsl.SlicedClassificationMetrics``): a classifier's ROC curve and
      confusion matrix per slice (:func:`_log_slices`);
    * ``report`` (``dsl.Markdown``): :func:`render_report`, with the decision, both models'
      metrics, the thresholds and the slices, and a link to the HTML report;
    * ``html_report`` (``dsl.HTML``): the same as pictures (:mod:`shardtrain.htmlreport`):
      the data's distributions beside the served model's training data with the drift
      verdicts, the training curve, ROC, precision-recall, confusion and calibration (a
      regression's predicted against actual and residuals), the slices, the rejects. A copy
      goes to ``MODEL_DIR/eval/report.html``. A report that cannot be made is a warning and
      a page saying why, never the step's failure.

    A candidate that is not blessed is not an error: the step says why in one line and
    returns False, and the pipeline skips the export (``dsl.If``), so the run ends green with
    the decision in the UI.

    Args:
        dataset: the ``dsl.Dataset`` input.
        model: the ``dsl.Model`` input (from :func:`train_step`).
        metrics: the ``dsl.Metrics`` output.
        classification: the ``dsl.ClassificationMetrics`` output.
        sliced: the ``dsl.SlicedClassificationMetrics`` output.
        report: the ``dsl.Markdown`` output.
        html_report: the ``dsl.HTML`` output (None: no HTML report, outside KFP).
        serving_uri: where the served model is published ('' → no baseline).
        thresholds: the clauses of :mod:`shardtrain.train.thresholds` ('' → none).
        slice_by: categorical columns, comma-separated ('' → no slices).

    Returns:
        Whether the candidate is blessed (the export runs only then).

    Raises:
        NotCommittedError: the model directory has no metrics.
        ConfigError: a threshold or a slice column that does not fit the model or the data.
    """
    _setup_logging()
    model_pointer = read_pointer(model)
    dataset_uri = read_pointer(dataset)["uri"]
    model_dir = model_pointer["uri"]
    from shardtrain.train.evaluator import METRICS_NAME  # imports the compiled kernels

    target = storage.join(model_dir, "eval", METRICS_NAME)
    if not storage.exists(target):
        raise NotCommittedError(f"{model_dir}: no evaluation metrics (eval/{METRICS_NAME})")
    options = from_params(EvaluateConfig, {"thresholds": thresholds, "slice_by": slice_by})
    config = EvaluateConfig(
        model_dir=model_dir, data=dataset_uri, serving_uri=serving_uri or None, **options
    )
    blessing = evaluate_model(config)
    values = storage.read_json(target)
    meta = DatasetMetadata.load(dataset_uri)

    regression = values.get("task") == "regression"
    shown = (*headline_keys(values), *(REGRESSION_KEYS if regression else ()), *METRIC_KEYS)
    for key in shown:
        if _finite(values.get(key)):
            metrics.log_metric(key, values[key])
        else:
            log.warning("metric %s is %r: left out of the metrics table", key, values.get(key))
    metrics.log_metric("blessed", 1.0 if blessing.blessed else 0.0)
    baseline = blessing.baseline or {}
    for key in headline_keys(values):
        if _finite(baseline.get(key)):
            metrics.log_metric(f"baseline_{key}", baseline[key])
    _log_classification(classification, values)
    _log_slices(sliced, values.get("slices") or {})
    html_uri = _write_html_report(html_report, dataset_uri, model_dir, serving_uri)
    text = render_report(
        values,
        meta,
        dataset_uri=dataset_uri,
        model=model_pointer,
        blessing=blessing.to_dict(),
        html_report=html_uri,
    )
    os.makedirs(os.path.dirname(report.path) or ".", exist_ok=True)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(text)
    log.info(
        "eval at step %s: %s (%s examples)",
        fmt(values.get("step")),
        ", ".join(f"{k} {fmt(values.get(k))}" for k in headline_keys(values)),
        fmt(values.get("num_examples")),
    )
    if blessing.blessed:
        log.info("%s", blessing.summary())
    else:
        log.warning("%s; not exporting", blessing.summary())
    return blessing.blessed


def _write_html_report(
    html_report: Any, dataset_uri: str, model_dir: str, serving_uri: str
) -> str | None:
    """The HTML report into the ``dsl.HTML`` output and ``MODEL_DIR/eval/report.html``;
    returns the latter's URI (None: no output asked for, or not made: a page says why)."""
    if html_report is None:
        return None
    import html

    from shardtrain.errors import one_line
    from shardtrain.htmlreport.build import REPORT_NAME, make_report

    target = storage.join(model_dir, "eval", REPORT_NAME)
    try:
        text = make_report(dataset_uri, model_dir=model_dir, against=serving_uri or None)
        storage.write_text(target, text)
    except Exception as exc:  # the decision stands without its pictures
        log.warning("HTML report not made: %s", one_line(exc))
        why = html.escape(one_line(exc))
        text = f"<!DOCTYPE html><p>The HTML report could not be made: {why}</p>\n"
        target = ""
    os.makedirs(os.path.dirname(html_report.path) or ".", exist_ok=True)
    with open(html_report.path, "w", encoding="utf-8") as f:
        f.write(text)
    return target or None


def _log_classification(classification: Any, values: Mapping[str, Any]) -> None:
    """A classifier's ROC curve and confusion matrix into a ``dsl.ClassificationMetrics``."""
    roc = values.get("roc") or {}
    if roc.get("fpr"):
        classification.log_roc_curve(
            [float(x) for x in roc["fpr"]],
            [float(x) for x in roc["tpr"]],
            [float(x) for x in roc["thresholds"]],
        )
    cm = values.get("confusion_matrix") or {}
    if cm.get("labels"):
        classification.log_confusion_matrix(
            [str(c) for c in cm["labels"]], [[int(v) for v in row] for row in cm["matrix"]]
        )


def _log_slices(sliced: Any, slices: Mapping[str, Any]) -> None:
    """A classifier's per-slice ROC curves and confusion matrices (``column=value``) into a
    ``dsl.SlicedClassificationMetrics``, in the schema KFP defines for it
    (``evaluationSlices``).

    The metadata is written directly: kfp 2.17's own ``SlicedClassificationMetrics`` methods
    fail (its ``_sliced_metrics`` is never initialised, ``load_roc_readings`` calls a
    ``ClassificationMetrics`` method that does not exist, ``load_confusion_matrix`` passes the
    wrong arguments), so each slice is built with a ``ClassificationMetrics``, whose methods
    work.
    """
    from kfp import dsl

    entries = []
    for column, rows in slices.items():
        for row in rows:
            if not (row.get("roc") or row.get("confusion_matrix")):
                continue  # a regression's slice: scalars only (report and metrics.json)
            one = dsl.ClassificationMetrics(name="slice", metadata={})
            _log_classification(one, row)
            entries.append(
                {"slice": f"{column}={row['value']}", "sliceClassificationMetrics": one.metadata}
            )
    if entries:
        sliced.metadata["evaluationSlices"] = entries


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------


def export_step(*, model: Any, serving_uri: str, served_model: Any) -> str:
    """Publish the model's newest export at ``serving_uri``
    (:func:`shardtrain.kubeflow.publish.publish_export`), if the model it was blessed against
    is still the one served there.

    Args:
        model: the ``dsl.Model`` input (from :func:`train_step`).
        serving_uri: the serving base location.
        served_model: the ``dsl.Model`` output, pointing at the published version.

    Returns:
        The published version's URI.

    Raises:
        StaleDecisionError: the model served at ``serving_uri`` is no longer the one the
            evaluate step blessed this model against (another run published since), or
            ``blessing.json`` did not bless this export (:func:`check_still_served`).
    """
    _setup_logging()
    model_dir = read_pointer(model)["uri"]
    from shardtrain.train import export  # its feature code imports the compiled kernels

    latest = export.latest_export(model_dir)
    check_still_served(model_dir, serving_uri, latest["uri"])
    target = publish_export(latest["uri"], serving_uri, step=latest.get("step"))
    write_pointer(
        served_model, target, framework="tensorflow", step=latest.get("step"), source=latest["uri"]
    )
    return target


# --------------------------------------------------------------------------------------------
# Deploy
# --------------------------------------------------------------------------------------------


def deploy_step(
    *,
    served_model: Any,
    serving_uri: str,
    name: str,
    namespace: str,
    secret: str,
    local: bool,
    inference_service: Any,
) -> None:
    """Serve ``serving_uri`` with KServe: render, record, and on a cluster apply.

    Checks the base first (:func:`shardtrain.kubeflow.serving.check_published`: TensorFlow
    Serving will serve the version ``latest.json`` names), renders the ServiceAccount and the
    InferenceService (:func:`shardtrain.kubeflow.serving.render`), writes them as YAML to the
    ``inference_service`` artifact, and unless ``local`` applies them server-side.

    Args:
        served_model: the ``dsl.Model`` input (from :func:`export_step`).
        serving_uri: the serving base (``s3://`` or ``gs://``).
        name: the InferenceService's name.
        namespace: its namespace; '' for the namespace this pod runs in.
        secret: the storage Secret, listed for the storage initializer (``s3://`` only).
        local: a ``kfp.local`` run: render and record, apply nothing.
        inference_service: the output artifact the YAML is written to.

    Raises:
        ConfigError: ``serving_uri`` is a local path or a setting is invalid.
        ClusterError: the cluster refused the documents or is unreachable.
    """
    from shardtrain.kubeflow import serving

    _setup_logging()
    published_here = read_pointer(served_model)["uri"]
    config = serving.ServingConfig.from_overrides(
        serving_uri=serving_uri,
        name=name,
        namespace=namespace or current_namespace(serving.ServingConfig.default("namespace")),
        secret=(secret or "") if storage.scheme(serving_uri) == "s3" else None,
    )
    published = serving.check_published(serving_uri)
    if published.uri.rstrip("/") != published_here.rstrip("/"):
        log.warning("%s serves %s, published since this run's %s", serving_uri, published.uri,
                    published_here)  # fmt: skip
    documents = serving.render(config)
    os.makedirs(os.path.dirname(inference_service.path) or ".", exist_ok=True)
    with open(inference_service.path, "w", encoding="utf-8") as f:
        f.write(serving.to_yaml(documents))
    inference_service.metadata.update(
        {"name": config.name, "namespace": config.namespace, "storageUri": config.serving_uri,
         "version": published.version}
    )  # fmt: skip
    if local:
        log.info("local run: %s/%s rendered, not applied", config.namespace, config.name)
        return
    serving.apply(documents)
    log.info(
        "InferenceService %s/%s serves %s (version %d)",
        config.namespace, config.name, serving_uri, published.version,
    )  # fmt: skip
