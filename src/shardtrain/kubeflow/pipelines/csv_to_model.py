"""The end-to-end pipeline ``csv_to_model``: CSV → TFRecord shards → TFJob → evaluation → export.

::

    plan_shards ──► shard × N (ParallelFor) ──► finalize_shards ──► train ──► evaluate ──► export

Only the graph is here; every step is one call into :mod:`shardtrain.kubeflow.steps`. What the
graph adds, and why:

* **Secrets by name only.** Every step pod that touches storage gets the storage Secret's keys
  as environment variables with ``kfp.kubernetes.use_secret_as_env`` (the name comes from the
  ``secret_name`` parameter; the compiled YAML holds names, never values). The training step
  passes the same name to the TFJob, whose pods reference it with ``secretKeyRef``.
* **GPUs on the TFJob, not on step pods.** The ``train`` step is a small launcher pod; the
  ``nvidia.com/gpu`` limits are in the TFJob's Chief and Worker replicas.
* **One image.** The ``image`` parameter is every step's image and the TFJob's.
* **Every sharding option.** The sharding parameters (``label`` … ``resize``) are the fields
  of :class:`~shardtrain.data.sharding.ShardConfig` under the names their specs give
  (``task_mb`` for ``task_bytes``…; ``''`` or ``0`` for "not set"), passed alike to
  ``plan_shards`` and to every ``shard`` worker, so both build the same configuration (the
  workers check the plan's fingerprint). ``tests/unit/test_options.py`` checks this signature
  and the components' against ShardConfig; ``shard_workers`` and ``shard_cpu`` set how the
  run is spread (``num_workers``, ``processes``).
* **No caching.** The steps write to external storage and resume by themselves (a re-run
  skips committed shards, a finished model, a published export), so KFP's cache, which would
  skip a step whose outputs were deleted since, is turned off.
"""

from typing import NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import ClassificationMetrics, Markdown, Metrics, Model

from shardtrain.kubeflow.components import IMAGE, STORAGE_SECRET_KEYS
from shardtrain.kubeflow.components.evaluate import evaluate
from shardtrain.kubeflow.components.export import export
from shardtrain.kubeflow.components.finalize_shards import finalize_shards
from shardtrain.kubeflow.components.plan_shards import plan_shards
from shardtrain.kubeflow.components.shard import shard
from shardtrain.kubeflow.components.train import train
from shardtrain.kubeflow.tfjob import JobConfig

#: Requests of the small steps (plan, finalize, train's launcher, evaluate, export).
SMALL_CPU, SMALL_MEMORY = "500m", "1Gi"
#: Memory request of a shard worker. The sharder's memory is bounded by design (well under
#: 1 GB per process); this covers 4-8 processes. A constant, not a parameter: KFP 2.17's
#: compiler does not pass a parameter used only in a resource setting into a ParallelFor.
SHARD_MEMORY = "4Gi"


class Outputs(NamedTuple):
    """What a run produces (also what ``kfp.local`` returns)."""

    model: Model
    metrics: Metrics
    classification: ClassificationMetrics
    report: Markdown
    served_model: Model


def _step(task: dsl.PipelineTask, image: str, secret_name: str, display: str) -> dsl.PipelineTask:
    """Image, storage Secret, display name and no caching: what every step gets."""
    task.set_container_image(image).set_display_name(display).set_caching_options(False)
    for optional in (False, True):
        keys = {key: key for key, opt in STORAGE_SECRET_KEYS if opt is optional}
        kubernetes.use_secret_as_env(
            task, secret_name=secret_name, secret_key_to_env=keys, optional=optional
        )
    return task


def _small(task: dsl.PipelineTask) -> dsl.PipelineTask:
    return task.set_cpu_request(SMALL_CPU).set_memory_request(SMALL_MEMORY)


@dsl.pipeline(
    name="csv-to-model",
    description="Shard CSV far larger than memory into TFRecords, train TensorFlow on a "
    "Kubeflow TFJob, show the evaluation and publish the SavedModel.",
)
def csv_to_model(
    sources: list[str],
    dataset_uri: str,
    model_dir: str,
    serving_uri: str,
    label: str = "cleared",
    key: str = "",
    splits: str = "train=0.9,eval=0.1",
    source_format: str = "auto",
    schema_file: str = "",
    delimiter: str = "",
    quote_char: str = '"',
    escape_char: str = "",
    encoding: str = "utf-8",
    no_header: bool = False,
    columns: str = "",
    null_values: str = "",
    skip_initial_space: bool = False,
    decimal: str = ".",
    infer_types: str = "all",
    compression: str = "auto",
    compression_level: int = 1,
    record_format: str = "example",
    num_shards: int = 0,
    target_shard_mb: float = 128.0,
    min_shards: int = 8,
    task_mb: float = 128.0,
    block_mb: float = 4.0,
    max_bad_fraction: float = 0.001,
    top_k: int = 100,
    images: bool = False,
    image_column: str = "",
    resize: str = "",
    shard_workers: int = 4,
    shard_cpu: str = "4",
    tfjob_workers: int = JobConfig.default("workers"),
    gpus_per_worker: int = JobConfig.default("gpus_per_worker"),
    evaluator: bool = JobConfig.default("evaluator"),
    worker_cpu: str = JobConfig.default("cpu"),
    worker_memory: str = JobConfig.default("memory"),
    train_steps: int = 20000,
    batch_size: int = 1024,
    checkpoint_every: int = 1000,
    train_flags: str = "",
    task: str = "auto",
    train_timeout: float = 86400.0,
    min_auc: float = 0.0,
    max_rmse: float = 0.0,
    image: str = IMAGE,
    secret_name: str = JobConfig.default("secret"),
    namespace: str = "",
    service_account: str = JobConfig.default("service_account"),
    queue: str = "",
    gang_scheduler: str = "",
    priority_class: str = "",
    local: bool = False,
) -> Outputs:
    """Shards CSV into TFRecords, trains on a TFJob, evaluates and publishes the model.

    Args:
        sources: CSV, Parquet or JSON-lines files or globs (s3://, gs://; local paths for
            local runs).
        dataset_uri: Where the TFRecord shards and metadata.json go.
        model_dir: Checkpoints, TensorBoard logs, eval metrics and the SavedModel export.
        serving_uri: Where the exported SavedModel is published (<uri>/<version>/).
        label: The label column (an image tree's is 'label').
        key: Column hashed for the train/eval split ('' hashes the whole row; images: '').
        splits: Named splits and fractions, e.g. train=0.9,eval=0.1.
        source_format: Format of tabular sources: auto (from their names: .parquet/.pq,
            .jsonl/.ndjson[.gz], else CSV), csv, parquet or jsonl.
        schema_file: YAML/JSON file (a URI) overriding inferred types and dropping columns
            (CSV only; '' infers them all).
        delimiter: CSV field delimiter: one character, or tab ('' detects it among , ; tab |).
        quote_char: CSV quote character ('' reads quotes as text).
        escape_char: CSV escape character, e.g. \\ ('' for none: quotes are doubled).
        encoding: Text encoding of the CSV files (utf-8, cp932, latin-1, utf-16...).
        no_header: The CSV files have no header line (name the columns with columns).
        columns: Column names of header-less CSV files, a,b,c ('' takes the schema file's).
        null_values: CSV values read as missing, V,V,... ('' for '', NA, N/A, NULL, null).
        skip_initial_space: Ignore spaces after each CSV delimiter.
        decimal: Decimal mark of CSV numbers: '.' or ',' (1,5; then fields are split by ;
            or another delimiter, and 1.5 is text).
        infer_types: CSV column types from every row (all: a fast pass over the data at
            planning) or from the first 4 MB only (sample).
        compression: Shard compression: auto (gzip for per-row Examples, none for columnar
            blocks), gzip or none.
        compression_level: gzip level: 1 is fastest (ISA-L); 2-9 are zlib's, smaller, slower.
        record_format: example (one tf.train.Example per row, any TensorFlow tool reads it) or
            columnar (an Example per block of rows: several times faster training input).
        num_shards: Shards per split (0 derives it from the data size).
        target_shard_mb: Shard size (MB) aimed at when num_shards is 0.
        min_shards: Never fewer shards per split.
        task_mb: Input MB per sharding task (the unit of parallelism and resume).
        block_mb: Input MB parsed at once; bounds the memory of each process.
        max_bad_fraction: Fail when more than this fraction of rows is rejected.
        top_k: Vocabulary entries kept per categorical column in the statistics.
        images: The sources are image directory trees ROOT/<class>/*.jpg|png (set label to
            'label' and leave key empty; train with e.g. train_flags '--image-size 128').
        image_column: The sources are manifests (CSV) whose column of this name holds image
            paths or URIs.
        resize: Re-encode images to WIDTHxHEIGHT, e.g. 224x224 ('' keeps the files as they
            are).
        shard_workers: Shard worker pods (at most one per task).
        shard_cpu: CPU request of each shard worker, also its process count.
        tfjob_workers: TFJob Worker replicas besides the chief.
        gpus_per_worker: nvidia.com/gpu of the chief and each worker (0 for CPU only).
        evaluator: Add a sidecar Evaluator replica to the TFJob.
        worker_cpu: CPU request of each TFJob replica.
        worker_memory: Memory of each TFJob replica.
        train_steps: Global training steps.
        batch_size: Global batch size, rounded to split evenly over the training replicas.
        checkpoint_every: Steps between checkpoints.
        train_flags: More `shardtrain train` flags, e.g. --learning-rate 0.003 --dropout 0.1.
        task: What the model learns from the label: auto (float or wide-ranging int labels:
            regression; others: classes), binary, multiclass or regression.
        train_timeout: Seconds the TFJob may take before the train step fails (time spent
            queued included).
        min_auc: Skip the export when a classifier's eval AUC is lower (0 disables the gate).
        max_rmse: Skip the export when a regression's eval RMSE (in the label's units) is
            higher (0 disables the gate).
        image: The project image of every step and of the TFJob.
        secret_name: Kubernetes Secret holding AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
            optionally AWS_ENDPOINT_URL, AWS_REGION (mounted as environment variables).
        namespace: The TFJob's namespace ('' is the namespace the run is in).
        service_account: Service account of the TFJob's pods.
        queue: Queue the TFJob waits in: a Kueue LocalQueue (the job is created suspended
            until admitted), or with gang_scheduler 'volcano' a Volcano queue ('' for none).
        gang_scheduler: 'volcano' starts all TFJob replicas together or none ('' for the
            default scheduler).
        priority_class: PriorityClass of the TFJob's pods ('' for none).
        local: Run the TFJob as local processes (kfp.local runs; never on a cluster).
    """
    # The sharding options (ShardConfig's fields, by their pipeline names): the plan and every
    # worker must build the same configuration.
    options = dict(
        sources=sources,
        dataset_uri=dataset_uri,
        label=label,
        key=key,
        splits=splits,
        source_format=source_format,
        schema_file=schema_file,
        delimiter=delimiter,
        quote_char=quote_char,
        escape_char=escape_char,
        encoding=encoding,
        no_header=no_header,
        columns=columns,
        null_values=null_values,
        skip_initial_space=skip_initial_space,
        decimal=decimal,
        infer_types=infer_types,
        compression=compression,
        compression_level=compression_level,
        record_format=record_format,
        num_shards=num_shards,
        target_shard_mb=target_shard_mb,
        min_shards=min_shards,
        task_mb=task_mb,
        block_mb=block_mb,
        max_bad_fraction=max_bad_fraction,
        top_k=top_k,
        images=images,
        image_column=image_column,
        resize=resize,
    )
    plan = plan_shards(**options, num_workers=shard_workers)
    # The plan step reads every CSV byte once when types come from every row (the default):
    # the CPU and memory of a shard worker, not a small step's.
    _step(plan, image, secret_name, "plan shards")
    plan.set_cpu_request(shard_cpu).set_memory_request(SHARD_MEMORY)

    with dsl.ParallelFor(plan.output, name="shard-workers") as worker_index:
        worker = shard(
            **options, worker_index=worker_index, num_workers=shard_workers, cpu=shard_cpu
        )
        _step(worker, image, secret_name, "shard")
        worker.set_cpu_request(shard_cpu).set_memory_request(SHARD_MEMORY)

    dataset = finalize_shards(dataset_uri=dataset_uri, worker_reports=dsl.Collected(worker.output))
    _small(_step(dataset, image, secret_name, "finalize shards"))

    trained = train(
        dataset=dataset.outputs["dataset"],
        model_dir=model_dir,
        local=local,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
        timeout=train_timeout,
        image=image,
        namespace=namespace,
        workers=tfjob_workers,
        gpus_per_worker=gpus_per_worker,
        evaluator=evaluator,
        secret=secret_name,
        service_account=service_account,
        cpu=worker_cpu,
        memory=worker_memory,
        train_steps=train_steps,
        batch_size=batch_size,
        checkpoint_every=checkpoint_every,
        train_flags=train_flags,
        task=task,
        queue=queue,
        gang_scheduler=gang_scheduler,
        priority_class=priority_class,
    )
    _small(_step(trained, image, secret_name, "train (TFJob)"))

    evaluation = evaluate(
        dataset=dataset.outputs["dataset"],
        model=trained.outputs["model"],
        min_auc=min_auc,
        max_rmse=max_rmse,
    )
    _small(_step(evaluation, image, secret_name, "evaluate"))

    published = export(model=trained.outputs["model"], serving_uri=serving_uri)
    _small(_step(published, image, secret_name, "export"))
    published.after(evaluation)  # the AUC / RMSE gate: no export when evaluate fails

    return Outputs(
        model=trained.outputs["model"],
        metrics=evaluation.outputs["metrics"],
        classification=evaluation.outputs["classification"],
        report=evaluation.outputs["report"],
        served_model=published.outputs["served_model"],
    )
