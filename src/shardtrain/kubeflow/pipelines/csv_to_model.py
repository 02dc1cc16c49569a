"""The end-to-end pipeline ``csv_to_model``: CSV → TFRecord shards → TFJob → evaluation → export.

::

    plan_shards ──► shard × N ──► settle_shards ──► shard again × M ──► finalize_shards
        ──► train ──► evaluate ──► if blessed: export ──► [deploy]

(``shard again``: the workers whose tasks a wrong guess of the sample spoiled, usually none.)

Only the graph is here; every step is one call into :mod:`shardtrain.kubeflow.steps`. What the
graph adds, and why:

* **Secrets by name only.** Every step pod that touches storage gets the storage Secret's keys
  as environment variables with ``kfp.kubernetes.use_secret_as_env`` (the name comes from the
  ``secret_name`` parameter; the compiled YAML holds names, never values). The training step
  passes the same name to the TFJob, whose pods reference it with ``secretKeyRef``.
* **GPUs on the TFJob, not on step pods.** The ``train`` step is a small launcher pod; the
  ``nvidia.com/gpu`` limits are in the TFJob's Chief and Worker replicas.
* **One image.** The ``image`` parameter is every step's image and the TFJob's.
* **Parameters defined once.** The signature and the docstring (every parameter's and
  output's description, which the UI shows) are generated from
  :data:`shardtrain.kubeflow.parameters.PIPELINE`; the graph hands each component its
  parameters by the component's list there. The sharding parameters (``label`` … ``resize``)
  are the fields of :class:`~shardtrain.data.sharding.ShardConfig` under the names their
  options give (``task_mb`` for ``task_bytes``…; ``''`` or ``0`` for "not set"), passed alike
  to ``plan_shards``, every ``shard`` worker and ``settle_shards``, so all build the same
  configuration (each worker plans the run and checks the stored plan's fingerprint);
  ``shard_workers`` and ``shard_cpu`` set how the run is spread (``num_workers``, at most
  one per task the listing promises, the same count in every step; ``processes``).
* **Export only when blessed.** ``evaluate`` returns ``blessed`` (the trained model meets
  every threshold, against the served model too) and ``export`` runs under ``dsl.If`` on it:
  a model that is not blessed ends the run green, the export skipped and the reason in the
  evaluate step's log, metrics and report. (kfp.local runs ``dsl.If``; the published version
  is therefore not a pipeline output: KFP returns a conditional task's output only through
  ``dsl.OneOf``, which kfp.local 2.17 cannot resolve for artifacts.)
* **Deploy on request.** The ``deploy`` step (a KServe InferenceService of ``serving_uri``)
  runs only when the ``deploy`` parameter is true and the model was blessed and published
  (a ``dsl.If`` inside the blessed one), so its output is not one of the run's outputs either;
  the step's ``inference_service`` artifact holds the YAML it applied.
* **No caching.** The steps write to external storage and resume by themselves (a re-run
  skips committed shards, a finished model, a published export), so KFP's cache, which would
  skip a step whose outputs were deleted since, is turned off.
"""

from collections.abc import Mapping
from typing import Any, NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import (
    HTML,
    ClassificationMetrics,
    Markdown,
    Metrics,
    Model,
    SlicedClassificationMetrics,
)

from shardtrain.kubeflow.components import STORAGE_SECRET_KEYS
from shardtrain.kubeflow.components.deploy import deploy
from shardtrain.kubeflow.components.evaluate import evaluate
from shardtrain.kubeflow.components.export import export
from shardtrain.kubeflow.components.finalize_shards import finalize_shards
from shardtrain.kubeflow.components.plan_shards import plan_shards
from shardtrain.kubeflow.components.settle_shards import settle_shards
from shardtrain.kubeflow.components.shard import shard
from shardtrain.kubeflow.components.train import train
from shardtrain.kubeflow.parameters import (
    BLESSED,
    DEPLOY,
    EVALUATE,
    EXPORT,
    FINALIZE_SHARDS,
    PIPELINE,
    PLAN_SHARDS,
    SETTLE_SHARDS,
    SHARD,
    TRAIN,
    Param,
    arguments,
    define,
    docstring,
)

#: Requests of the small steps (plan, finalize, train's launcher, evaluate, export).
SMALL_CPU, SMALL_MEMORY = "500m", "1Gi"
#: Memory request of a shard worker. The sharder's memory is bounded by design (well under
#: 1 GB per process); this covers 4-8 processes. A constant, not a parameter: KFP 2.17's
#: compiler does not pass a parameter used only in a resource setting into a ParallelFor.
SHARD_MEMORY = "4Gi"
#: Memory request of the evaluate step (TensorFlow and two SavedModels scoring a batch).
EVALUATE_MEMORY = "2Gi"


class Outputs(NamedTuple):
    """What a run produces (also what ``kfp.local`` returns)."""

    model: Model
    metrics: Metrics
    classification: ClassificationMetrics
    sliced: SlicedClassificationMetrics
    report: Markdown
    html_report: HTML
    blessed: bool


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


def _graph(p: Mapping[str, Any]) -> Outputs:
    """The graph, from the pipeline's parameters by name (each component receives its own
    by the lists of :mod:`shardtrain.kubeflow.parameters`)."""
    image, secret = p["image"], p["secret_name"]
    # The sharding options go alike to the fan-out and to every worker: all must build the
    # same configuration.
    plan = plan_shards(**arguments(PLAN_SHARDS, p))
    # It lists the sources and reads no data (each worker plans the run): a small step.
    _small(_step(plan, image, secret, "plan shards"))

    with dsl.ParallelFor(plan.output, name="shard-workers") as worker_index:
        worker = shard(**arguments(SHARD, p), worker_index=worker_index)
        _step(worker, image, secret, "shard")
        worker.set_cpu_request(p["shard_cpu"]).set_memory_request(SHARD_MEMORY)

    settled = settle_shards(
        **arguments(SETTLE_SHARDS, p), worker_reports=dsl.Collected(worker.output)
    )
    _small(_step(settled, image, secret, "settle shards"))
    # The workers a wrong guess of planning spoiled run again (usually none: no pod runs).
    with dsl.ParallelFor(settled.outputs["Output"], name="shard-again") as again_index:
        again = shard(**arguments(SHARD, p), worker_index=again_index)
        _step(again, image, secret, "shard again")
        again.set_cpu_request(p["shard_cpu"]).set_memory_request(SHARD_MEMORY)

    # After the second fan-out by .after(): kfp.local 2.17 cannot collect an empty loop.
    # The settle step commits and checks the dataset when no worker runs again (the usual
    # case): it hands the outcome over, and finalize only writes its artifacts.
    dataset = finalize_shards(
        **arguments(FINALIZE_SHARDS, p),
        worker_reports=dsl.Collected(worker.output),
        settled=settled.outputs["settled"],
    ).after(again)
    _small(_step(dataset, image, secret, "finalize shards"))

    trained = train(
        **arguments(TRAIN, p),
        dataset=dataset.outputs["dataset"],
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
    )
    _small(_step(trained, image, secret, "train (TFJob)"))

    evaluation = evaluate(
        **arguments(EVALUATE, p), dataset=dataset.outputs["dataset"], model=trained.outputs["model"]
    )
    # It loads TensorFlow and two SavedModels to compare them: more memory than a small step.
    _small(_step(evaluation, image, secret, "evaluate")).set_memory_request(EVALUATE_MEMORY)

    with dsl.If(evaluation.outputs["Output"] == True, name="blessed"):  # noqa: E712 (KFP)
        published = export(**arguments(EXPORT, p), model=trained.outputs["model"])
        _small(_step(published, image, secret, "export"))
        with dsl.If(p["deploy"] == True, name="deploy-requested"):  # noqa: E712 (KFP)
            deployed = deploy(
                **arguments(DEPLOY, p), served_model=published.outputs["served_model"]
            )
            _small(_step(deployed, image, secret, "deploy (KServe)"))

    return Outputs(
        model=trained.outputs["model"],
        metrics=evaluation.outputs["metrics"],
        classification=evaluation.outputs["classification"],
        sliced=evaluation.outputs["sliced"],
        report=evaluation.outputs["report"],
        html_report=evaluation.outputs["html_report"],
        blessed=evaluation.outputs["Output"],
    )


def _output(params: tuple[Param, ...], name: str) -> Param:
    return next(p for p in params if p.name == name)


#: What a run produces, described as the components that produce it describe it.
OUTPUTS = (
    _output(TRAIN, "model"),
    _output(EVALUATE, "metrics"),
    _output(EVALUATE, "classification"),
    _output(EVALUATE, "sliced"),
    _output(EVALUATE, "report"),
    _output(EVALUATE, "html_report"),
    BLESSED,
)

csv_to_model = dsl.pipeline(
    name="csv-to-model",
    description="Shard CSV far larger than memory into TFRecords, train TensorFlow on a "
    "Kubeflow TFJob, compare it with the served model and publish it if it is blessed.",
)(
    define(
        "csv_to_model",
        PIPELINE,
        module=__name__,
        doc=docstring(
            "Shards CSV into TFRecords, trains on a TFJob, evaluates the model against the "
            "served one and publishes it if it is blessed.",
            PIPELINE,
            OUTPUTS,
        ),
        body="return graph(locals())",
        returns="Outputs",
        namespace={"graph": _graph, "Outputs": Outputs},
    )
)
